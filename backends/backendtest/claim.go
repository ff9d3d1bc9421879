package backendtest

import (
	"fmt"
	"sync"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

func claimCases() []testCase {
	return []testCase{
		{"claim/sets processing, attempts+1, worker_id, updated_at", func(s *suite) {
			j := s.enqueueNamed("claim.basic")
			untouched := s.enqueueNamed("claim.other")
			w := s.worker()
			before := s.get(j.ID)
			c := s.claimOne(w, "claim.basic")
			assert.Equal(s.t, j.ID, c.ID)
			assert.Equal(s.t, backends.StatusProcessing, c.Status)
			assert.Equal(s.t, 1, c.Attempts)
			require.NotNil(s.t, c.WorkerID)
			assert.Equal(s.t, w, *c.WorkerID)
			assert.False(s.t, c.UpdatedAt.Before(before.UpdatedAt), "updated_at went back")
			assert.WithinDuration(s.t, time.Now(), c.UpdatedAt, tolerance)
			assert.Equal(s.t, "claim.basic", c.Name)
			assert.Equal(s.t, snapshot(c), snapshot(s.get(j.ID)), "Claim returns the rows as updated")
			assert.Equal(s.t, backends.StatusQueued, s.get(untouched.ID).Status)
			assert.Empty(s.t, s.claim(backends.ClaimParams{WorkerID: w, Names: []string{"claim.basic"}, Limit: 1}),
				"a processing row is not claimed again")
		}},
		{"claim/ahead takes the rows after the slots', none on its last attempt", func(s *suite) {
			const name = "claim.ahead"
			w := s.worker()
			rows := make([]backends.Job, 6)
			for i := range rows {
				rows[i] = s.enqueue(backends.EnqueueParams{Name: name, MaxAttempts: intp(3)})
				require.NoError(s.t, s.h.BackdateCreated(s.ctx, rows[i].ID, time.Duration(10-i)*time.Minute))
			}
			// rows[0] and rows[1] were tried twice: their next run is their last.
			require.NoError(s.t, s.h.SetRawAttempts(s.ctx, rows[0].ID, 2))
			require.NoError(s.t, s.h.SetRawAttempts(s.ctx, rows[1].ID, 2))
			got := s.claim(backends.ClaimParams{WorkerID: w, Names: []string{name}, Limit: 1, Ahead: 3})
			assert.Equal(s.t, []string{rows[0].ID, rows[2].ID, rows[3].ID}, ids(got),
				"the slot's row whatever its attempts, then the next three less the one on its last attempt, in claim order")
			assert.Equal(s.t, 3, s.get(rows[0].ID).Attempts)
			assert.Equal(s.t, backends.StatusQueued, s.get(rows[1].ID).Status, "a row on its last attempt is not reserved")
			assert.Equal(s.t, 2, s.get(rows[1].ID).Attempts)

			got = s.claim(backends.ClaimParams{WorkerID: w, Names: []string{name}, Ahead: 2})
			assert.Equal(s.t, []string{rows[4].ID}, ids(got), "a reserve-only claim skips the last-attempt row")
			got = s.claim(backends.ClaimParams{WorkerID: w, Names: []string{name}, Limit: 1})
			assert.Equal(s.t, []string{rows[1].ID}, ids(got), "into a free slot it is claimed")
			_, err := s.b.Claim(s.ctx, backends.ClaimParams{WorkerID: w, Names: []string{name}})
			assert.Error(s.t, err, "a claim of nothing is refused")
		}},
		{"claim/order priority, scheduled_at nulls first, created_at", func(s *suite) {
			w := s.worker()
			const name = "claim.order"
			oldest := s.enqueueNamed(name)
			middle := s.enqueueNamed(name)
			newest := s.enqueueNamed(name)
			urgent := s.enqueue(backends.EnqueueParams{Name: name, Priority: intp(10)})
			lazy := s.enqueue(backends.EnqueueParams{Name: name, Priority: intp(200)})
			require.NoError(s.t, s.h.BackdateCreated(s.ctx, oldest.ID, 3*time.Hour))
			require.NoError(s.t, s.h.BackdateCreated(s.ctx, middle.ID, 2*time.Hour))
			require.NoError(s.t, s.h.BackdateCreated(s.ctx, newest.ID, time.Hour))

			// A NACKed row has scheduled_at = now (not NULL): it sorts after the
			// NULL rows of its priority although it was created first. Claim
			// (urgent, by priority; nacked, by created_at) and NACK both.
			nacked := s.enqueueNamed(name)
			require.NoError(s.t, s.h.BackdateCreated(s.ctx, nacked.ID, 4*time.Hour))
			tmp := s.worker()
			got := s.claim(backends.ClaimParams{WorkerID: tmp, Names: []string{name}, Limit: 2})
			require.Len(s.t, got, 2)
			ids := []string{got[0].ID, got[1].ID}
			require.ElementsMatch(s.t, []string{urgent.ID, nacked.ID}, ids)
			n, err := s.nack(tmp, ids...)
			require.NoError(s.t, err)
			require.ElementsMatch(s.t, ids, n)
			time.Sleep(10 * time.Millisecond) // scheduled_at = now must be in the past

			var order []string
			for {
				got := s.claim(backends.ClaimParams{WorkerID: w, Names: []string{name}, Limit: 1})
				if len(got) == 0 {
					break
				}
				require.Len(s.t, got, 1, "limit 1")
				order = append(order, got[0].ID)
			}
			assert.Equal(s.t, []string{urgent.ID, oldest.ID, middle.ID, newest.ID, nacked.ID, lazy.ID}, order)
		}},
		{"claim/future scheduled_at is not claimed", func(s *suite) {
			w := s.worker()
			s.enqueue(backends.EnqueueParams{Name: "claim.future", Delay: time.Hour})
			assert.Empty(s.t, s.claim(backends.ClaimParams{WorkerID: w, Limit: 10}))
			assert.Equal(s.t, int64(1), s.stats().Queued)
		}},
		{"claim/names, queues, exclusions and limit", func(s *suite) {
			w := s.worker()
			aQ1 := s.enqueue(backends.EnqueueParams{Name: "a", Queue: "q1"})
			bQ1 := s.enqueue(backends.EnqueueParams{Name: "b", Queue: "q1"})
			aQ2 := s.enqueue(backends.EnqueueParams{Name: "a", Queue: "q2"})
			cQ3 := s.enqueue(backends.EnqueueParams{Name: "c", Queue: "q3"})
			dDef := s.enqueue(backends.EnqueueParams{Name: "d"})

			got := s.claim(backends.ClaimParams{WorkerID: w, Names: []string{"a"}, Queues: []string{"q1"}, Limit: 10})
			assert.Equal(s.t, []string{aQ1.ID}, ids(got), "name a in q1")
			got = s.claim(backends.ClaimParams{WorkerID: w, Queues: []string{"q2", "q3"}, ExcludeNames: []string{"c"}, Limit: 10})
			assert.Equal(s.t, []string{aQ2.ID}, ids(got), "q2/q3 excluding c")
			got = s.claim(backends.ClaimParams{WorkerID: w, Names: []string{"c", "d"}, Limit: 1})
			assert.Len(s.t, got, 1, "limit 1 across all queues")
			got2 := s.claim(backends.ClaimParams{WorkerID: w, Names: []string{"c", "d"}, Limit: 10})
			assert.ElementsMatch(s.t, []string{cQ3.ID, dDef.ID}, append(ids(got), ids(got2)...), "empty queues = every queue")
			assert.Equal(s.t, backends.StatusQueued, s.get(bQ1.ID).Status)
			got = s.claim(backends.ClaimParams{WorkerID: w, Limit: 10})
			assert.Equal(s.t, []string{bQ1.ID}, ids(got))
		}},
		{"claim/limit", func(s *suite) {
			w := s.worker()
			for range 5 {
				s.enqueueNamed("claim.limit")
			}
			assert.Len(s.t, s.claim(backends.ClaimParams{WorkerID: w, Limit: 2}), 2)
			assert.Len(s.t, s.claim(backends.ClaimParams{WorkerID: w, Limit: 2}), 2)
			assert.Len(s.t, s.claim(backends.ClaimParams{WorkerID: w, Limit: 2}), 1)
			assert.Empty(s.t, s.claim(backends.ClaimParams{WorkerID: w, Limit: 2}))
		}},
		{"claim/attempts beyond max_attempts are returned like any other", func(s *suite) {
			// Soniq's processor (core/processor.py) checks attempts >
			// max_attempts right after the claim and dead-letters the row
			// without running it (max_retries_exceeded): repeated crashes.
			// Claim itself therefore filters nothing; the caller decides.
			crashed := s.worker()
			j := s.enqueue(backends.EnqueueParams{Name: "claim.crashy", MaxAttempts: intp(1)})
			s.claimOne(crashed, "claim.crashy")
			require.NoError(s.t, s.h.BackdateHeartbeat(s.ctx, crashed, time.Hour))
			_, jobs, err := s.b.RecoverStaleWorkers(s.ctx, time.Minute, "")
			require.NoError(s.t, err)
			require.Equal(s.t, 1, jobs)
			assert.Equal(s.t, 1, s.get(j.ID).Attempts, "recovery preserves attempts")

			c := s.claimOne(s.worker(), "claim.crashy")
			assert.Equal(s.t, j.ID, c.ID)
			assert.Equal(s.t, 2, c.Attempts)
			assert.Equal(s.t, 1, c.MaxAttempts)
		}},
		{"claim/concurrent claimers claim every row exactly once", func(s *suite) {
			const rows, claimers, batch = 1000, 8, 25
			want := make(map[string]bool, rows)
			for i := range rows {
				want[s.enqueue(backends.EnqueueParams{Name: fmt.Sprintf("claim.many.%d", i%7)}).ID] = true
			}
			workers := make([]string, claimers)
			for i := range workers {
				workers[i] = s.worker()
			}

			var (
				mu      sync.Mutex
				claimed = map[string]int{}
				errs    []error
				wg      sync.WaitGroup
			)
			for _, w := range workers {
				wg.Go(func() {
					for {
						jobs, err := s.b.Claim(s.ctx, backends.ClaimParams{WorkerID: w, Limit: batch})
						if err != nil {
							mu.Lock()
							errs = append(errs, err)
							mu.Unlock()
							return
						}
						if len(jobs) == 0 {
							return
						}
						mu.Lock()
						for _, j := range jobs {
							claimed[j.ID]++
						}
						mu.Unlock()
						if len(jobs) > batch {
							mu.Lock()
							errs = append(errs, fmt.Errorf("claimed %d rows with limit %d", len(jobs), batch))
							mu.Unlock()
						}
					}
				})
			}
			wg.Wait()
			require.Empty(s.t, errs)
			for id, n := range claimed {
				assert.Equal(s.t, 1, n, "job %s claimed %d times", id, n)
				assert.True(s.t, want[id], "claimed unknown job %s", id)
			}
			assert.Len(s.t, claimed, rows, "every row claimed")
			assert.Equal(s.t, backends.Stats{Total: rows, Processing: rows}, s.stats())
		}},
	}
}

func ids(jobs []backends.Job) []string {
	out := make([]string, 0, len(jobs))
	for _, j := range jobs {
		out = append(out, j.ID)
	}
	return out
}
