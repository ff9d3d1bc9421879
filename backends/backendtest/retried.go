package backendtest

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// retriedWriteCases: every write a worker makes to a row it holds names the
// attempt it settles, so a write meant for an earlier claim of the row never
// lands on a later claim by the same worker. Two ways lead there: a write
// retried after its first try committed and its reply was lost (a retry or
// a NACK puts the row back, and the worker claims it again before the retry
// goes out), and a write held up while stale recovery gave the row back and
// the worker, registered again under the same id, claimed it again. Guarded
// by status and worker alone, either lands on the later claim: a retry
// charges an attempt that never runs, a done or dead-letter write ends a
// job whose run has not happened.
func retriedWriteCases() []testCase {
	const name = "retried.write"
	// again claims the row once more for w and checks it is the later
	// attempt.
	again := func(s *suite, w string, id string, attempts int) backends.Job {
		s.t.Helper()
		time.Sleep(10 * time.Millisecond) // scheduled_at = now must be in the past
		j := s.claimOne(w, name)
		require.Equal(s.t, id, j.ID)
		require.Equal(s.t, attempts, j.Attempts, "claimed again at the later attempt")
		return j
	}
	// untouched checks the later claim is as it was.
	untouched := func(s *suite, w string, before backends.Job) {
		s.t.Helper()
		got := s.get(before.ID)
		assert.Equal(s.t, snapshot(before), snapshot(got), "the later claim is untouched")
		assert.Equal(s.t, backends.StatusProcessing, got.Status)
		require.NotNil(s.t, got.WorkerID)
		assert.Equal(s.t, w, *got.WorkerID)
	}

	cases := []testCase{
		{"retried write/a retry whose first try committed does not land on the same worker's later claim", func(s *suite) {
			w := s.worker()
			s.enqueueNamed(name)
			first := s.claimOne(w, name)
			write := backends.Completion{JobID: first.ID, Attempts: first.Attempts, Outcome: backends.OutcomeRetry, Error: "attempt 1 failed"}
			require.Equal(s.t, []string{first.ID}, s.complete(w, write), "the first try commits; its reply is lost")
			later := again(s, w, first.ID, 2)
			before := s.get(later.ID)

			assert.Empty(s.t, s.complete(w, write), "the retried write names attempt 1")
			untouched(s, w, before)
			// The later claim's own write still lands.
			assert.Equal(s.t, []string{first.ID}, s.complete(w, backends.Completion{JobID: first.ID, Attempts: later.Attempts,
				Outcome: backends.OutcomeRetry, Error: "attempt 2 failed"}))
			assert.Equal(s.t, 2, s.get(first.ID).Attempts)
		}},
		{"retried write/a NACK whose first try committed does not land on the same worker's later claim", func(s *suite) {
			w := s.worker()
			s.enqueueNamed(name)
			first := s.claimOne(w, name)
			nacked, err := s.b.Nack(s.ctx, w, []backends.Job{first})
			require.NoError(s.t, err)
			require.Equal(s.t, []string{first.ID}, nacked, "the first try commits; its reply is lost")
			later := again(s, w, first.ID, 2)
			before := s.get(later.ID)

			nacked, err = s.b.Nack(s.ctx, w, []backends.Job{first})
			require.NoError(s.t, err)
			assert.Empty(s.t, nacked, "the retried NACK names attempt 1")
			untouched(s, w, before)
			nacked, err = s.b.Nack(s.ctx, w, []backends.Job{later})
			require.NoError(s.t, err)
			assert.Equal(s.t, []string{first.ID}, nacked, "the later claim's own NACK lands")
		}},
		{"retried write/complete and claim: a batch retried after its first try committed does not land on the claim it made", func(s *suite) {
			cc := s.completeClaimer()
			w := s.worker()
			s.enqueueNamed(name)
			first := s.claimOne(w, name)
			write := []backends.Completion{{JobID: first.ID, Attempts: first.Attempts, Outcome: backends.OutcomeRetry, Error: "attempt 1 failed"}}
			params := backends.ClaimParams{WorkerID: w, Names: []string{name}, Limit: 1}
			applied, _, claimErr, err := cc.CompleteAndClaim(s.ctx, w, write, params)
			require.NoError(s.t, err)
			require.NoError(s.t, claimErr)
			require.Equal(s.t, []string{first.ID}, applied, "the first try commits; its reply is lost")
			later := again(s, w, first.ID, 2)
			before := s.get(later.ID)

			// The writer takes the completion back and it rides in the
			// next claim.
			applied, jobs, claimErr, err := cc.CompleteAndClaim(s.ctx, w, write, params)
			require.NoError(s.t, err)
			require.NoError(s.t, claimErr)
			assert.Empty(s.t, applied, "the retried completion names attempt 1")
			assert.Empty(s.t, jobs)
			untouched(s, w, before)
		}},
	}

	cases = append(cases, testCase{"retried write/one batch holding the retried write of attempt 1 and attempt 2's own writes attempt 2's", func(s *suite) {
		// The writer took the lost write back while attempt 2 ran and
		// failed: both go in its next batch, the earlier first.
		w := s.worker()
		s.enqueueNamed(name)
		first := s.claimOne(w, name)
		retried := backends.Completion{JobID: first.ID, Attempts: first.Attempts, Outcome: backends.OutcomeRetry, Error: "attempt 1 failed"}
		require.Equal(s.t, []string{first.ID}, s.complete(w, retried))
		later := again(s, w, first.ID, 2)
		own := backends.Completion{JobID: first.ID, Attempts: later.Attempts, Outcome: backends.OutcomeRetry, Error: "attempt 2 failed"}
		assert.Equal(s.t, []string{first.ID}, s.complete(w, retried, own), "attempt 2's retry lands")
		got := s.get(first.ID)
		assert.Equal(s.t, backends.StatusQueued, got.Status)
		require.NotNil(s.t, got.LastError)
		assert.Equal(s.t, "attempt 2 failed", *got.LastError)
		assert.Equal(s.t, 2, got.Attempts)

		third := again(s, w, first.ID, 3)
		own = backends.Completion{JobID: first.ID, Attempts: third.Attempts, Outcome: backends.OutcomeDone, ResultTTL: time.Hour}
		assert.Equal(s.t, []string{first.ID}, s.complete(w, own, own, retried), "attempt 3's done lands, once")
		assert.Equal(s.t, backends.StatusDone, s.get(first.ID).Status)
	}})
	cases = append(cases, testCase{"retried write/one NACK holding attempt 1 and attempt 2 of a row NACKs attempt 2", func(s *suite) {
		w := s.worker()
		s.enqueueNamed(name)
		first := s.claimOne(w, name)
		nacked, err := s.b.Nack(s.ctx, w, []backends.Job{first})
		require.NoError(s.t, err)
		require.Equal(s.t, []string{first.ID}, nacked)
		later := again(s, w, first.ID, 2)
		nacked, err = s.b.Nack(s.ctx, w, []backends.Job{first, later})
		require.NoError(s.t, err)
		assert.Equal(s.t, []string{first.ID}, nacked)
		got := s.get(first.ID)
		assert.Equal(s.t, backends.StatusQueued, got.Status)
		assert.Equal(s.t, 2, got.Attempts)
	}})

	// A write held up while the row was recovered and claimed again by
	// the same worker, registered again: one clause per write.
	late := []struct {
		what  string
		write func(s *suite, w string, held backends.Job) []string
	}{
		{"NACK", func(s *suite, w string, held backends.Job) []string {
			nacked, err := s.b.Nack(s.ctx, w, []backends.Job{held})
			require.NoError(s.t, err)
			return nacked
		}},
	}
	for _, oc := range []backends.Completion{
		{Outcome: backends.OutcomeDone, Result: json.RawMessage(`{"attempt":1}`), ResultTTL: time.Hour},
		{Outcome: backends.OutcomeDone}, // ttl 0 deletes
		{Outcome: backends.OutcomeRetry, Error: "attempt 1 failed"},
		{Outcome: backends.OutcomeDeadLetter, Error: "attempt 1 failed", Reason: backends.ReasonPermanentFailure},
		{Outcome: backends.OutcomeSnooze, Reason: "attempt 1"},
		{Outcome: backends.OutcomeCancelled},
	} {
		what := oc.Outcome.String()
		if oc.Outcome == backends.OutcomeDone && oc.ResultTTL == 0 {
			what += " with ttl 0"
		}
		late = append(late, struct {
			what  string
			write func(s *suite, w string, held backends.Job) []string
		}{what, func(s *suite, w string, held backends.Job) []string {
			c := oc
			c.JobID, c.Attempts = held.ID, held.Attempts
			applied, err := s.b.Complete(s.ctx, w, []backends.Completion{c})
			require.NoError(s.t, err)
			return applied
		}})
	}
	for _, l := range late {
		cases = append(cases, testCase{fmt.Sprintf("retried write/a late %s for an earlier attempt does not land on the same worker's later claim after a recovery", l.what), func(s *suite) {
			w := s.worker()
			s.enqueueNamed(name)
			first := s.claimOne(w, name)
			require.NoError(s.t, s.h.BackdateHeartbeat(s.ctx, w, time.Hour))
			_, jobs, err := s.b.RecoverStaleWorkers(s.ctx, time.Minute, "")
			require.NoError(s.t, err)
			require.Equal(s.t, 1, jobs)
			s.registerAgain(w)
			later := again(s, w, first.ID, 2)
			before := s.get(later.ID)

			assert.Empty(s.t, l.write(s, w, first), "the write names attempt 1")
			untouched(s, w, before)
			assert.Equal(s.t, []string{first.ID}, l.write(s, w, later), "the later claim's own write lands")
		}})
	}
	cases = append(cases, testCase{"retried write/a completion or a NACK that names no attempt is refused, naming the job", func(s *suite) {
		w := s.worker()
		j := s.enqueueNamed(name)
		s.claimOne(w, name)
		_, err := s.b.Complete(s.ctx, w, []backends.Completion{{JobID: j.ID, Outcome: backends.OutcomeDone, ResultTTL: time.Hour}})
		require.ErrorIs(s.t, err, backends.ErrNoAttempt)
		assert.Contains(s.t, err.Error(), j.ID)
		_, err = s.b.Nack(s.ctx, w, []backends.Job{{ID: j.ID}})
		require.ErrorIs(s.t, err, backends.ErrNoAttempt)
		assert.Contains(s.t, err.Error(), j.ID)
		got := s.get(j.ID)
		assert.Equal(s.t, backends.StatusProcessing, got.Status, "nothing written")
	}})
	return cases
}
