package backendtest

import (
	"context"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// returnCases check ReturnJobs: rows a worker claimed ahead of its free
// slots and gives back unstarted go back exactly as they were before the
// claim, and only while they are still the worker's, at the claim it holds.
func returnCases() []testCase {
	return []testCase{
		{"return/the row is as before the claim: attempt refunded, scheduled_at and last_error kept", func(s *suite) {
			w := s.worker()
			const name = "ret.fields"
			j := s.enqueue(backends.EnqueueParams{Name: name, Queue: "mail", Priority: intp(7), MaxAttempts: intp(5)})
			// An earlier run failed: attempts 1, a last_error, and a
			// scheduled_at that is set (the retry's delay) and past.
			s.claimOne(w, name)
			s.complete(w, backends.Completion{JobID: j.ID, Outcome: backends.OutcomeRetry,
				Error: "earlier failure", Delay: time.Millisecond})
			time.Sleep(20 * time.Millisecond)
			before := s.get(j.ID)
			require.NotNil(s.t, before.ScheduledAt)
			require.Equal(s.t, 1, before.Attempts)

			held := s.claimOne(w, name)
			require.Equal(s.t, 2, held.Attempts)
			returned, err := s.b.ReturnJobs(s.ctx, w, []backends.Job{held})
			require.NoError(s.t, err)
			assert.Equal(s.t, []string{j.ID}, returned)

			got := s.get(j.ID)
			assert.Equal(s.t, backends.StatusQueued, got.Status)
			assert.Nil(s.t, got.WorkerID)
			assert.Equal(s.t, before.Attempts, got.Attempts, "the claim's attempt refunded")
			require.NotNil(s.t, got.ScheduledAt)
			assert.Equal(s.t, before.ScheduledAt.UTC(), got.ScheduledAt.UTC(), "scheduled_at kept")
			require.NotNil(s.t, got.LastError)
			assert.Equal(s.t, "earlier failure", *got.LastError, "last_error kept")
			assert.False(s.t, got.UpdatedAt.Before(held.UpdatedAt), "updated_at went back")
			assert.WithinDuration(s.t, time.Now(), got.UpdatedAt, tolerance, "updated_at")
			// Everything else is the row as it was before the claim.
			got.UpdatedAt, before.UpdatedAt = time.Time{}, time.Time{}
			assert.Equal(s.t, snapshot(before), snapshot(got))
			assert.Equal(s.t, before.CreatedAt.UTC(), got.CreatedAt.UTC())
			assert.Equal(s.t, []any{before.Name, before.Queue, before.Priority, before.MaxAttempts},
				[]any{got.Name, got.Queue, got.Priority, got.MaxAttempts})
			assert.Equal(s.t, backends.Stats{Total: 1, Queued: 1}, s.stats())
		}},
		{"return/NULL scheduled_at stays NULL", func(s *suite) {
			w := s.worker()
			j := s.enqueueNamed("ret.null")
			require.Nil(s.t, s.get(j.ID).ScheduledAt)
			held := s.claimOne(w, "ret.null")
			returned, err := s.b.ReturnJobs(s.ctx, w, []backends.Job{held})
			require.NoError(s.t, err)
			require.Equal(s.t, []string{j.ID}, returned)
			got := s.get(j.ID)
			assert.Nil(s.t, got.ScheduledAt)
			assert.Equal(s.t, 0, got.Attempts)
			assert.Nil(s.t, got.LastError)
		}},
		{"return/returned rows keep their place: the next claim takes them first", func(s *suite) {
			w := s.worker()
			const name = "ret.order"
			a, b, c := s.enqueueNamed(name), s.enqueueNamed(name), s.enqueueNamed(name)
			require.NoError(s.t, s.h.BackdateCreated(s.ctx, a.ID, 3*time.Hour))
			require.NoError(s.t, s.h.BackdateCreated(s.ctx, b.ID, 2*time.Hour))
			require.NoError(s.t, s.h.BackdateCreated(s.ctx, c.ID, time.Hour))
			held := s.claim(backends.ClaimParams{WorkerID: w, Names: []string{name}, Limit: 3})
			require.ElementsMatch(s.t, []string{a.ID, b.ID, c.ID}, ids(held))
			// Queued while they were held: these came later, so they wait.
			later := s.enqueueNamed(name)
			scheduled := s.enqueue(backends.EnqueueParams{Name: name, Delay: time.Millisecond})
			require.NoError(s.t, s.h.BackdateCreated(s.ctx, scheduled.ID, 4*time.Hour))
			time.Sleep(20 * time.Millisecond)

			// b and c go back (in that reverse order); a runs.
			returned, err := s.b.ReturnJobs(s.ctx, w, []backends.Job{byID(held, c.ID), byID(held, b.ID)})
			require.NoError(s.t, err)
			assert.Equal(s.t, []string{c.ID, b.ID}, returned, "held's order")

			var order []string
			for {
				got := s.claim(backends.ClaimParams{WorkerID: w, Names: []string{name}, Limit: 1})
				if len(got) == 0 {
					break
				}
				order = append(order, got[0].ID)
				if got[0].ID == b.ID || got[0].ID == c.ID {
					assert.Equal(s.t, 1, got[0].Attempts, "claimed again: charged once, not twice")
				}
			}
			// A NACKed or released row (scheduled_at now) would sort after
			// later; a returned one sorts where it always did.
			assert.Equal(s.t, []string{b.ID, c.ID, later.ID, scheduled.ID}, order)
		}},
		{"return/a second return changes nothing", func(s *suite) {
			w := s.worker()
			j := s.enqueueNamed("ret.twice")
			held := s.claimOne(w, "ret.twice")
			first, err := s.b.ReturnJobs(s.ctx, w, []backends.Job{held})
			require.NoError(s.t, err)
			require.Equal(s.t, []string{j.ID}, first)
			after := snapshot(s.get(j.ID))

			again, err := s.b.ReturnJobs(s.ctx, w, []backends.Job{held, held})
			require.NoError(s.t, err)
			assert.Empty(s.t, again)
			assert.Equal(s.t, after, snapshot(s.get(j.ID)), "row unchanged")
			assert.Equal(s.t, 0, s.get(j.ID).Attempts, "refunded once")
			none, err := s.b.ReturnJobs(s.ctx, w, nil)
			require.NoError(s.t, err)
			assert.Empty(s.t, none)
		}},
		{"return/a row held twice in one call is returned once", func(s *suite) {
			w := s.worker()
			j := s.enqueueNamed("ret.dup")
			held := s.claimOne(w, "ret.dup")
			returned, err := s.b.ReturnJobs(s.ctx, w, []backends.Job{held, held})
			require.NoError(s.t, err)
			assert.Equal(s.t, []string{j.ID}, returned)
			assert.Equal(s.t, 0, s.get(j.ID).Attempts, "refunded once")
		}},
		{"return/another worker's row, an unknown id and a queued row are left alone", func(s *suite) {
			w1, w2 := s.worker(), s.worker()
			theirs := s.enqueueNamed("ret.theirs")
			queued := s.enqueueNamed("ret.queued")
			held := s.claimOne(w1, "ret.theirs")
			mine := s.enqueueNamed("ret.mine")
			mineHeld := s.claimOne(w2, "ret.mine")
			theirsBefore, queuedBefore := snapshot(s.get(theirs.ID)), snapshot(s.get(queued.ID))
			queuedRow := s.get(queued.ID)

			unknown := held
			unknown.ID = newUUID(s.t)
			returned, err := s.b.ReturnJobs(s.ctx, w2, []backends.Job{held, unknown, queuedRow, mineHeld})
			require.NoError(s.t, err)
			assert.Equal(s.t, []string{mine.ID}, returned, "only w2's own row")
			assert.Equal(s.t, theirsBefore, snapshot(s.get(theirs.ID)), "w1's row unchanged")
			assert.Equal(s.t, queuedBefore, snapshot(s.get(queued.ID)), "queued row unchanged")
			assert.Equal(s.t, backends.Stats{Total: 3, Queued: 2, Processing: 1}, s.stats())
		}},
		{"return/after a stale-worker recovery requeued the row: nothing changes", func(s *suite) {
			w := s.worker()
			j := s.enqueueNamed("ret.recovered")
			held := s.claimOne(w, "ret.recovered")
			require.NoError(s.t, s.h.BackdateHeartbeat(s.ctx, w, time.Hour))
			_, jobs, err := s.b.RecoverStaleWorkers(s.ctx, time.Minute, "")
			require.NoError(s.t, err)
			require.Equal(s.t, 1, jobs)
			before := s.get(j.ID)
			require.Equal(s.t, 1, before.Attempts, "recovery keeps the attempt")

			returned, err := s.b.ReturnJobs(s.ctx, w, []backends.Job{held})
			require.NoError(s.t, err)
			assert.Empty(s.t, returned)
			assert.Equal(s.t, snapshot(before), snapshot(s.get(j.ID)), "row unchanged: no second refund")
		}},
		{"return/before a stale-worker recovery: the recovery finds nothing", func(s *suite) {
			w := s.worker()
			j := s.enqueueNamed("ret.first")
			held := s.claimOne(w, "ret.first")
			returned, err := s.b.ReturnJobs(s.ctx, w, []backends.Job{held})
			require.NoError(s.t, err)
			require.Equal(s.t, []string{j.ID}, returned)
			after := snapshot(s.get(j.ID))

			require.NoError(s.t, s.h.BackdateHeartbeat(s.ctx, w, time.Hour))
			_, jobs, err := s.b.RecoverStaleWorkers(s.ctx, time.Minute, "")
			require.NoError(s.t, err)
			assert.Zero(s.t, jobs, "no row left to recover")
			assert.Equal(s.t, after, snapshot(s.get(j.ID)), "row as returned")
		}},
		{"return/racing a stale-worker recovery: exactly one of them takes the row", func(s *suite) {
			for _, returnFirst := range []bool{true, false} {
				w := s.worker()
				j := s.enqueueNamed("ret.race")
				held := s.claimOne(w, "ret.race")
				require.NoError(s.t, s.h.BackdateHeartbeat(s.ctx, w, time.Hour))

				var waiting func(int) error
				release := func() error { return nil }
				if s.h.HoldJob != nil {
					var err error
					waiting, release, err = s.h.HoldJob(s.ctx, j.ID)
					require.NoError(s.t, err, "hold the row")
				}
				type result struct {
					n   int
					err error
				}
				returnDone, recoverDone := make(chan result, 1), make(chan result, 1)
				doReturn := func() {
					ids, err := s.b.ReturnJobs(s.ctx, w, []backends.Job{held})
					returnDone <- result{len(ids), err}
				}
				doRecover := func() {
					_, jobs, err := s.b.RecoverStaleWorkers(s.ctx, time.Minute, "")
					recoverDone <- result{jobs, err}
				}
				first, second := doReturn, doRecover
				if !returnFirst {
					first, second = doRecover, doReturn
				}
				// Both wait on the held row, in this order, then run one
				// after the other, the second re-reading what the first
				// wrote.
				go first()
				if waiting != nil {
					require.NoError(s.t, waiting(1), "the first write never waited for the row")
				}
				go second()
				if waiting != nil {
					require.NoError(s.t, waiting(2), "the second write never waited for the row")
				}
				require.NoError(s.t, release(), "release the row")
				ret, rec := wait(s, returnDone), wait(s, recoverDone)
				require.NoError(s.t, ret.err, "return")
				require.NoError(s.t, rec.err, "recover")

				assert.Equal(s.t, 1, ret.n+rec.n, "returned %d, recovered %d (return first: %v)", ret.n, rec.n, returnFirst)
				got := s.get(j.ID)
				assert.Equal(s.t, backends.StatusQueued, got.Status)
				assert.Nil(s.t, got.WorkerID)
				// Refunded only if the return took it; a recovery keeps the
				// attempt, and a return after it must not refund it too.
				assert.Equal(s.t, 1-ret.n, got.Attempts, "return first: %v", returnFirst)
				if s.h.HoldJob != nil {
					// Writes waiting on a row lock run in the order they queued.
					assert.Equal(s.t, returnFirst, ret.n == 1, "the first to wait wins")
				}
				// Out of the way of the next round's claim.
				_, err := s.b.Cancel(s.ctx, j.ID)
				require.NoError(s.t, err)
			}
		}},
		{"return/a row recovered and claimed again by the same worker id is left alone", func(s *suite) {
			w := s.worker()
			const name = "ret.reclaimed"
			j := s.enqueueNamed(name)
			stale := s.claimOne(w, name)
			require.NoError(s.t, s.h.BackdateHeartbeat(s.ctx, w, time.Hour))
			_, jobs, err := s.b.RecoverStaleWorkers(s.ctx, time.Minute, "")
			require.NoError(s.t, err)
			require.Equal(s.t, 1, jobs)
			s.registerAgain(w)
			current := s.claimOne(w, name)
			require.Equal(s.t, 2, current.Attempts)
			before := snapshot(s.get(j.ID))

			returned, err := s.b.ReturnJobs(s.ctx, w, []backends.Job{stale})
			require.NoError(s.t, err)
			assert.Empty(s.t, returned, "held at attempt 1, claimed again at 2")
			assert.Equal(s.t, before, snapshot(s.get(j.ID)), "row unchanged")

			// The claim the worker does hold can be returned.
			returned, err = s.b.ReturnJobs(s.ctx, w, []backends.Job{current})
			require.NoError(s.t, err)
			assert.Equal(s.t, []string{j.ID}, returned)
			assert.Equal(s.t, 1, s.get(j.ID).Attempts, "only the second claim refunded")
		}},
		{"return/a row finished meanwhile is left alone", func(s *suite) {
			w := s.worker()
			done := s.enqueueNamed("ret.done")
			doneHeld := s.claimOne(w, "ret.done")
			retried := s.enqueueNamed("ret.retried")
			retriedHeld := s.claimOne(w, "ret.retried")
			dead := s.enqueueNamed("ret.dead")
			deadHeld := s.claimOne(w, "ret.dead")
			applied := s.complete(w,
				backends.Completion{JobID: done.ID, Outcome: backends.OutcomeDone, ResultTTL: time.Hour},
				backends.Completion{JobID: retried.ID, Outcome: backends.OutcomeRetry, Error: "failed", Delay: time.Hour},
				backends.Completion{JobID: dead.ID, Outcome: backends.OutcomeDeadLetter, Error: "bad"})
			require.Len(s.t, applied, 3)
			doneBefore, retriedBefore := snapshot(s.get(done.ID)), snapshot(s.get(retried.ID))

			returned, err := s.b.ReturnJobs(s.ctx, w, []backends.Job{doneHeld, retriedHeld, deadHeld})
			require.NoError(s.t, err)
			assert.Empty(s.t, returned)
			assert.Equal(s.t, doneBefore, snapshot(s.get(done.ID)), "done row unchanged")
			assert.Equal(s.t, retriedBefore, snapshot(s.get(retried.ID)), "retried row unchanged")
			s.requireGone(dead.ID)
			assert.Len(s.t, s.deadLetters(), 1)
		}},
		{"return/attempts never go below 0", func(s *suite) {
			w := s.worker()
			j := s.enqueueNamed("ret.floor")
			held := s.claimOne(w, "ret.floor")
			require.NoError(s.t, s.h.SetRawAttempts(s.ctx, j.ID, 0))
			held.Attempts = 0
			returned, err := s.b.ReturnJobs(s.ctx, w, []backends.Job{held})
			require.NoError(s.t, err)
			require.Equal(s.t, []string{j.ID}, returned)
			got := s.get(j.ID)
			assert.Equal(s.t, 0, got.Attempts)
			assert.Equal(s.t, backends.StatusQueued, got.Status)
		}},
		{"return/wakes subscribers with the row's queue", func(s *suite) {
			w := s.worker()
			j := s.enqueue(backends.EnqueueParams{Name: "ret.wake", Queue: "returned"})
			held := s.claimOne(w, "ret.wake")
			// Subscribed after the enqueue: only the return can announce it.
			ctx, cancel := context.WithCancel(s.ctx)
			defer cancel()
			ch, err := s.b.Subscribe(ctx)
			require.NoError(s.t, err)
			returned, err := s.b.ReturnJobs(s.ctx, w, []backends.Job{held})
			require.NoError(s.t, err)
			require.Equal(s.t, []string{j.ID}, returned)

			deadline := time.After(5 * time.Second)
			for {
				select {
				case q, ok := <-ch:
					require.True(s.t, ok, "channel closed before delivery")
					if q == "returned" {
						return
					}
				case <-deadline:
					require.FailNow(s.t, "no notification within 5 s of the return")
				}
			}
		}},
	}
}

// wait receives one result, failing the test after 30 s.
func wait[T any](s *suite, ch <-chan T) T {
	s.t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		s.t.Fatal("no result within 30 s")
	}
	var zero T
	return zero
}

func byID(jobs []backends.Job, id string) backends.Job {
	for _, j := range jobs {
		if j.ID == id {
			return j
		}
	}
	return backends.Job{ID: id}
}
