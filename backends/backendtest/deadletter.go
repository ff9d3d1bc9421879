package backendtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

func deadLetterCases() []testCase {
	return append(bulkDeadLetterCases(), []testCase{
		{"dead letter/list newest move first, limit", func(s *suite) {
			for i := range 3 {
				s.deadLetterJob(fmt.Sprintf("dlq.list.%d", i))
			}
			all := s.deadLetters()
			require.Len(s.t, all, 3)
			for i := 1; i < len(all); i++ {
				assert.False(s.t, all[i].MovedAt.After(all[i-1].MovedAt), "ordered by moved_to_dead_letter_at desc")
			}
			two, err := s.b.ListDeadLetter(s.ctx, 2)
			require.NoError(s.t, err)
			assert.Len(s.t, two, 2)
		}},
		{"dead letter/replay enqueues a fresh copy and keeps the audit row", func(s *suite) {
			// Soniq's DeadLetterService.replay (features/dead_letter.py)
			// inserts a new soniq_jobs row (fresh id, attempts 0, queued,
			// scheduled_at NOW()) and, in the same transaction, bumps the DLQ
			// row's resurrection_count and last_resurrection_at. The DLQ row
			// stays as the audit trail, so one row can be replayed again.
			w := s.worker()
			j := s.enqueue(backends.EnqueueParams{Name: "dlq.replay", Args: json.RawMessage(`{"to":"a@b"}`),
				Queue: "mail", Priority: intp(3), MaxAttempts: intp(4)})
			s.claimOne(w, "dlq.replay")
			s.complete(w, backends.Completion{JobID: j.ID, Outcome: backends.OutcomeDeadLetter,
				Error: "bad", Reason: backends.ReasonPermanentFailure})

			newID, err := s.b.ReplayDeadLetter(s.ctx, j.ID)
			require.NoError(s.t, err)
			assert.NotEqual(s.t, j.ID, newID, "a fresh id")
			assert.Regexp(s.t, uuidPattern, newID)
			got := s.get(newID)
			assert.Equal(s.t, backends.StatusQueued, got.Status)
			assert.Equal(s.t, 0, got.Attempts)
			assert.Equal(s.t, "dlq.replay", got.Name)
			assert.JSONEq(s.t, `{"to":"a@b"}`, string(got.Args))
			assert.Equal(s.t, "mail", got.Queue)
			assert.Equal(s.t, 3, got.Priority)
			assert.Equal(s.t, 4, got.MaxAttempts)
			assert.Nil(s.t, got.WorkerID)
			if got.ScheduledAt != nil {
				assert.False(s.t, got.ScheduledAt.After(time.Now().Add(tolerance)), "runnable at once")
			}

			d := s.deadLetter(j.ID)
			assert.Equal(s.t, 1, d.ResurrectionCount)
			approxNow(s.t, 0, d.LastResurrectionAt, "last_resurrection_at")
			assert.Equal(s.t, backends.Stats{Total: 2, Queued: 1, DeadLetter: 1}, s.stats())

			time.Sleep(10 * time.Millisecond) // the replayed row's scheduled_at must be in the past
			c := s.claimOne(w, "dlq.replay")
			assert.Equal(s.t, newID, c.ID)

			second, err := s.b.ReplayDeadLetter(s.ctx, j.ID)
			require.NoError(s.t, err)
			assert.NotEqual(s.t, newID, second)
			assert.Equal(s.t, 2, s.deadLetter(j.ID).ResurrectionCount)
		}},
		{"dead letter/replay of a missing row is ErrNotFound", func(s *suite) {
			_, err := s.b.ReplayDeadLetter(s.ctx, newUUID(s.t))
			require.ErrorIs(s.t, err, backends.ErrNotFound)
			assert.Equal(s.t, backends.Stats{}, s.stats())
		}},
		{"dead letter/purge", func(s *suite) {
			keep := s.deadLetterJob("dlq.keep")
			gone := s.deadLetterJob("dlq.gone")
			require.NoError(s.t, s.b.PurgeDeadLetter(s.ctx, gone.ID))
			dl := s.deadLetters()
			require.Len(s.t, dl, 1)
			assert.Equal(s.t, keep.ID, dl[0].ID)
			require.ErrorIs(s.t, s.b.PurgeDeadLetter(s.ctx, gone.ID), backends.ErrNotFound)
			require.ErrorIs(s.t, s.b.PurgeDeadLetter(s.ctx, newUUID(s.t)), backends.ErrNotFound)
			assert.Equal(s.t, backends.Stats{Total: 1, DeadLetter: 1}, s.stats())
		}},
	}...)
}

// dlRows is the fixture of the bulk cases: four dead-letter rows over
// three names and three queues, one of them moved two hours ago.
type dlRows struct{ xq1, yq1, xq2, oldZ backends.Job }

func (s *suite) bulkFixture() dlRows {
	s.t.Helper()
	w := s.worker()
	dead := func(name, queue string) backends.Job {
		j := s.enqueue(backends.EnqueueParams{Name: name, Queue: queue, Args: json.RawMessage(`{"n":"` + name + queue + `"}`),
			Priority: intp(7), MaxAttempts: intp(5)})
		s.claimOne(w, name)
		require.Equal(s.t, []string{j.ID}, s.complete(w, backends.Completion{JobID: j.ID, Outcome: backends.OutcomeDeadLetter,
			Error: "boom", Reason: backends.ReasonMaxRetriesExceeded}))
		return j
	}
	r := dlRows{xq1: dead("dlb.x", "q1"), yq1: dead("dlb.y", "q1"), xq2: dead("dlb.x", "q2"), oldZ: dead("dlb.z", "q3")}
	require.NotNil(s.t, s.h.BackdateDeadLetter, "the harness must provide BackdateDeadLetter")
	require.NoError(s.t, s.h.BackdateDeadLetter(s.ctx, r.oldZ.ID, 2*time.Hour))
	return r
}

// each collects the ids EachDeadLetter yields, in order.
func (s *suite) each(f backends.DeadLetterFilter, limit int) []string {
	s.t.Helper()
	var ids []string
	require.NoError(s.t, s.b.EachDeadLetter(s.ctx, f, limit, func(d backends.DeadLetterJob) error {
		ids = append(ids, d.ID)
		return nil
	}))
	return ids
}

func bulkDeadLetterCases() []testCase {
	return []testCase{
		{"dead letter/filters select by name, queue and age; count and each agree", func(s *suite) {
			r := s.bulkFixture()
			cases := []struct {
				name string
				f    backends.DeadLetterFilter
				want []string
			}{
				{"all", backends.DeadLetterFilter{}, []string{r.xq1.ID, r.yq1.ID, r.xq2.ID, r.oldZ.ID}},
				{"one name", backends.DeadLetterFilter{JobNames: []string{"dlb.x"}}, []string{r.xq1.ID, r.xq2.ID}},
				{"two names", backends.DeadLetterFilter{JobNames: []string{"dlb.x", "dlb.z"}}, []string{r.xq1.ID, r.xq2.ID, r.oldZ.ID}},
				{"queue", backends.DeadLetterFilter{Queues: []string{"q1"}}, []string{r.xq1.ID, r.yq1.ID}},
				{"name and queue", backends.DeadLetterFilter{JobNames: []string{"dlb.x"}, Queues: []string{"q2"}}, []string{r.xq2.ID}},
				{"since", backends.DeadLetterFilter{Since: time.Hour}, []string{r.xq1.ID, r.yq1.ID, r.xq2.ID}},
				{"older than", backends.DeadLetterFilter{OlderThan: time.Hour}, []string{r.oldZ.ID}},
				{"window", backends.DeadLetterFilter{Since: 3 * time.Hour, OlderThan: time.Hour}, []string{r.oldZ.ID}},
				{"no match", backends.DeadLetterFilter{JobNames: []string{"dlb.none"}}, nil},
				{"contradiction", backends.DeadLetterFilter{JobNames: []string{"dlb.z"}, Since: time.Hour}, nil},
			}
			for _, tc := range cases {
				n, err := s.b.CountDeadLetters(s.ctx, tc.f)
				require.NoError(s.t, err, tc.name)
				assert.Equal(s.t, int64(len(tc.want)), n, "count: %s", tc.name)
				assert.ElementsMatch(s.t, tc.want, s.each(tc.f, 0), "each: %s", tc.name)
			}
		}},
		{"dead letter/each streams newest move first, honours limit, stops on fn's error", func(s *suite) {
			r := s.bulkFixture()
			got := s.each(backends.DeadLetterFilter{}, 0)
			require.Len(s.t, got, 4)
			assert.Equal(s.t, r.oldZ.ID, got[3], "the row moved two hours ago comes last")
			var want []string
			for _, d := range s.deadLetters() {
				want = append(want, d.ID)
			}
			assert.Equal(s.t, want, got, "the same order as ListDeadLetter")
			assert.Equal(s.t, got[:2], s.each(backends.DeadLetterFilter{}, 2), "limit")

			stop := errors.New("stop here")
			calls := 0
			err := s.b.EachDeadLetter(s.ctx, backends.DeadLetterFilter{}, 0, func(d backends.DeadLetterJob) error {
				calls++
				if assert.NotNil(s.t, d.LastError, "whole rows are yielded") {
					assert.Equal(s.t, "boom", *d.LastError)
				}
				assert.Equal(s.t, backends.ReasonMaxRetriesExceeded, d.Reason)
				return stop
			})
			require.ErrorIs(s.t, err, stop)
			assert.Equal(s.t, 1, calls, "nothing is read after fn fails")
			require.Error(s.t, s.b.EachDeadLetter(s.ctx, backends.DeadLetterFilter{}, -1, func(backends.DeadLetterJob) error { return nil }))
		}},
		{"dead letter/bulk replay copies each selected row once and counts its resurrection", func(s *suite) {
			r := s.bulkFixture()
			sub, err := s.b.Subscribe(s.ctx)
			if errors.Is(err, backends.ErrNoWakeups) {
				sub = nil
			} else {
				require.NoError(s.t, err)
			}
			n, err := s.b.ReplayDeadLetters(s.ctx, backends.DeadLetterFilter{JobNames: []string{"dlb.x"}})
			require.NoError(s.t, err)
			assert.Equal(s.t, int64(2), n)
			assert.Equal(s.t, backends.Stats{Total: 6, Queued: 2, DeadLetter: 4}, s.stats())

			// Each replayed row is what ReplayDeadLetter makes of it.
			w := s.worker()
			time.Sleep(10 * time.Millisecond) // scheduled_at = now() must be in the past
			claimed, err := s.b.Claim(s.ctx, backends.ClaimParams{WorkerID: w, Limit: 10})
			require.NoError(s.t, err)
			require.Len(s.t, claimed, 2)
			queues := map[string]bool{}
			for _, c := range claimed {
				assert.Equal(s.t, "dlb.x", c.Name)
				assert.NotContains(s.t, []string{r.xq1.ID, r.xq2.ID}, c.ID, "a fresh id")
				assert.Regexp(s.t, uuidPattern, c.ID)
				assert.Equal(s.t, 1, c.Attempts, "attempts were reset to 0 (this claim made 1)")
				assert.Equal(s.t, 7, c.Priority)
				assert.Equal(s.t, 5, c.MaxAttempts)
				assert.JSONEq(s.t, `{"n":"dlb.x`+c.Queue+`"}`, string(c.Args))
				queues[c.Queue] = true
			}
			assert.Equal(s.t, map[string]bool{"q1": true, "q2": true}, queues)
			for id, want := range map[string]int{r.xq1.ID: 1, r.xq2.ID: 1, r.yq1.ID: 0, r.oldZ.ID: 0} {
				d := s.deadLetter(id)
				assert.Equal(s.t, want, d.ResurrectionCount, "resurrection_count of %s", d.Name)
				if want > 0 {
					approxNow(s.t, 0, d.LastResurrectionAt, "last_resurrection_at")
				} else {
					assert.Nil(s.t, d.LastResurrectionAt)
				}
			}
			if sub != nil {
				woken := map[string]bool{}
				deadline := time.After(10 * time.Second)
				for !(woken["q1"] && woken["q2"]) {
					select {
					case q := <-sub:
						woken[q.Queue] = true
					case <-deadline:
						s.t.Fatalf("replayed queues not all woken: %v", woken)
					}
				}
			}

			n, err = s.b.ReplayDeadLetters(s.ctx, backends.DeadLetterFilter{OlderThan: time.Hour})
			require.NoError(s.t, err)
			assert.Equal(s.t, int64(1), n)
			assert.Equal(s.t, 1, s.deadLetter(r.oldZ.ID).ResurrectionCount)
			n, err = s.b.ReplayDeadLetters(s.ctx, backends.DeadLetterFilter{JobNames: []string{"dlb.none"}})
			require.NoError(s.t, err)
			assert.Zero(s.t, n)
			n, err = s.b.ReplayDeadLetters(s.ctx, backends.DeadLetterFilter{})
			require.NoError(s.t, err)
			assert.Equal(s.t, int64(4), n)
			assert.Equal(s.t, 2, s.deadLetter(r.xq1.ID).ResurrectionCount)
			assert.Equal(s.t, backends.Stats{Total: 11, Queued: 5, Processing: 2, DeadLetter: 4}, s.stats())
		}},
		{"dead letter/bulk purge deletes the selected rows only", func(s *suite) {
			r := s.bulkFixture()
			n, err := s.b.PurgeDeadLetters(s.ctx, backends.DeadLetterFilter{OlderThan: time.Hour})
			require.NoError(s.t, err)
			assert.Equal(s.t, int64(1), n)
			assert.ElementsMatch(s.t, []string{r.xq1.ID, r.yq1.ID, r.xq2.ID}, s.each(backends.DeadLetterFilter{}, 0))
			n, err = s.b.PurgeDeadLetters(s.ctx, backends.DeadLetterFilter{Queues: []string{"q1"}, JobNames: []string{"dlb.y", "dlb.x"}})
			require.NoError(s.t, err)
			assert.Equal(s.t, int64(2), n)
			assert.Equal(s.t, []string{r.xq2.ID}, s.each(backends.DeadLetterFilter{}, 0))
			n, err = s.b.PurgeDeadLetters(s.ctx, backends.DeadLetterFilter{Since: time.Hour, JobNames: []string{"dlb.none"}})
			require.NoError(s.t, err)
			assert.Zero(s.t, n)
			n, err = s.b.PurgeDeadLetters(s.ctx, backends.DeadLetterFilter{})
			require.NoError(s.t, err)
			assert.Equal(s.t, int64(1), n)
			assert.Equal(s.t, backends.Stats{}, s.stats())
		}},
	}
}
