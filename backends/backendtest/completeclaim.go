package backendtest

import (
	"encoding/json"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// completeClaimCases check CompleteAndClaim where a backend offers it: the
// same rows change as Complete then Claim would change them.
func completeClaimCases() []testCase {
	return []testCase{
		{"complete and claim/writes the completions and claims in one call", func(s *suite) {
			cc := s.completeClaimer()
			w := s.worker()
			a, b, c := s.enqueueNamed("cc.job"), s.enqueueNamed("cc.job"), s.enqueueNamed("cc.job")
			held := s.claim(backends.ClaimParams{WorkerID: w, Names: []string{"cc.job"}, Limit: 2})
			require.Len(s.t, held, 2)
			var other backends.Job
			for _, j := range []backends.Job{a, b, c} {
				if j.ID != held[0].ID && j.ID != held[1].ID {
					other = j
				}
			}
			cs := []backends.Completion{
				{JobID: held[0].ID, Attempts: 1, Outcome: backends.OutcomeDone, Result: json.RawMessage(`{"n":1}`), ResultTTL: time.Hour},
				{JobID: held[1].ID, Attempts: 1, Outcome: backends.OutcomeRetry, Error: "boom", Delay: time.Minute},
			}
			applied, jobs, claimErr, err := cc.CompleteAndClaim(s.ctx, w, cs, backends.ClaimParams{WorkerID: w, Names: []string{"cc.job"}, Limit: 5})
			require.NoError(s.t, err)
			require.NoError(s.t, claimErr)
			assert.Equal(s.t, []string{held[0].ID, held[1].ID}, applied)
			require.Len(s.t, jobs, 1, "the retried row waits for its delay")
			assert.Equal(s.t, other.ID, jobs[0].ID)
			assert.Equal(s.t, backends.StatusProcessing, jobs[0].Status)
			assert.Equal(s.t, 1, jobs[0].Attempts)
			done := s.get(held[0].ID)
			assert.Equal(s.t, backends.StatusDone, done.Status)
			assert.JSONEq(s.t, `{"n":1}`, string(done.Result))
			retried := s.get(held[1].ID)
			assert.Equal(s.t, backends.StatusQueued, retried.Status)
			require.NotNil(s.t, retried.LastError)
			assert.Equal(s.t, "boom", *retried.LastError)
		}},
		{"complete and claim/with no completions it is the claim alone", func(s *suite) {
			cc := s.completeClaimer()
			w := s.worker()
			a := s.enqueueNamed("cc.alone")
			applied, jobs, claimErr, err := cc.CompleteAndClaim(s.ctx, w, nil, backends.ClaimParams{WorkerID: w, Names: []string{"cc.alone"}, Limit: 5})
			require.NoError(s.t, err)
			require.NoError(s.t, claimErr)
			assert.Empty(s.t, applied)
			require.Len(s.t, jobs, 1)
			assert.Equal(s.t, a.ID, jobs[0].ID)
			assert.Equal(s.t, backends.StatusProcessing, s.get(a.ID).Status)
		}},
		{"complete and claim/the guards hold: a row another worker took is not written, the claim still runs", func(s *suite) {
			cc := s.completeClaimer()
			w, other := s.worker(), s.worker()
			theirs := s.enqueueNamed("cc.theirs")
			s.claimOne(other, "cc.theirs")
			next := s.enqueueNamed("cc.next")
			applied, jobs, claimErr, err := cc.CompleteAndClaim(s.ctx, w,
				[]backends.Completion{{JobID: theirs.ID, Attempts: 1, Outcome: backends.OutcomeDone}},
				backends.ClaimParams{WorkerID: w, Names: []string{"cc.next"}, Limit: 1})
			require.NoError(s.t, err)
			require.NoError(s.t, claimErr)
			assert.Empty(s.t, applied)
			got := s.get(theirs.ID)
			assert.Equal(s.t, backends.StatusProcessing, got.Status, "another worker's row is untouched")
			require.NotNil(s.t, got.WorkerID)
			assert.Equal(s.t, other, *got.WorkerID)
			require.Len(s.t, jobs, 1)
			assert.Equal(s.t, next.ID, jobs[0].ID)
		}},
		{"complete and claim/a worker whose row was recovered claims nothing, and its completions are written as Complete writes them", func(s *suite) {
			cc := s.completeClaimer()
			w := s.worker()
			mine := s.enqueueNamed("cc.mine")
			s.claimOne(w, "cc.mine")
			waiting := s.enqueueNamed("cc.waiting")
			// The worker's row is stopped while it still holds this job:
			// the claim refuses; the completion is guarded by the job's
			// row alone, as Complete's is.
			require.NoError(s.t, s.b.SetWorkerStatus(s.ctx, w, backends.WorkerStopped))
			applied, jobs, claimErr, err := cc.CompleteAndClaim(s.ctx, w,
				[]backends.Completion{{JobID: mine.ID, Attempts: 1, Outcome: backends.OutcomeDone, ResultTTL: time.Hour}},
				backends.ClaimParams{WorkerID: w, Names: []string{"cc.waiting"}, Limit: 1})
			require.NoError(s.t, err)
			assert.ErrorIs(s.t, claimErr, backends.ErrWorkerNotActive)
			assert.Empty(s.t, jobs)
			assert.Equal(s.t, []string{mine.ID}, applied, "as Complete: guarded by the row, not by the worker's status")
			assert.Equal(s.t, backends.StatusDone, s.get(mine.ID).Status)
			assert.Equal(s.t, backends.StatusQueued, s.get(waiting.ID).Status)
			assert.Equal(s.t, 0, s.get(waiting.ID).Attempts)
		}},
		{"complete and claim/bad input is refused before anything is sent", func(s *suite) {
			cc := s.completeClaimer()
			w := s.worker()
			j := s.enqueueNamed("cc.bad")
			_, _, _, err := cc.CompleteAndClaim(s.ctx, w, nil, backends.ClaimParams{WorkerID: w, Limit: 0})
			assert.Error(s.t, err, "a claim of nothing")
			_, _, _, err = cc.CompleteAndClaim(s.ctx, w, nil, backends.ClaimParams{WorkerID: s.worker(), Limit: 1})
			assert.Error(s.t, err, "the completions and the claim of two workers")
			assert.Equal(s.t, backends.StatusQueued, s.get(j.ID).Status)
		}},
	}
}

// completeClaimer is the backend as a CompleteClaimer, or skips the clause
// (with its reason) for a backend that writes and claims in two calls.
func (s *suite) completeClaimer() backends.CompleteClaimer {
	s.t.Helper()
	cc, ok := s.b.(backends.CompleteClaimer)
	if !ok {
		s.t.Skip("this backend writes completions and claims in two calls (no CompleteAndClaim)")
	}
	return cc
}
