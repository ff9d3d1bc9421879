package backendtest

import (
	"errors"
	"slices"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// claimRaceCases check that a Claim's answer and the rows it took agree
// when the worker's row changes under it: whatever Claim returns, the rows
// processing under the worker are exactly the jobs it returned. A Claim
// that returns an error must have taken nothing, because its caller drops
// nothing it was not given, and a row taken but not returned would stay
// processing under a live, heartbeating worker that nobody recovers.
func claimRaceCases() []testCase {
	return []testCase{
		{"claim/a re-registration racing a claim: rows taken are rows returned", func(s *suite) {
			w := s.worker()
			const name = "race.job"
			p := backends.ClaimParams{WorkerID: w, Names: []string{name}, Limit: 10}
			// The same claim, run before the race, so a backend that caches
			// statements per connection has this one ready (its preparation
			// would otherwise run before every statement of the claim).
			for range 3 {
				assert.Empty(s.t, s.claim(p))
			}
			// The worker is recovered as a silent one would be: its row stopped.
			require.NoError(s.t, s.h.BackdateHeartbeat(s.ctx, w, 10*time.Minute))
			workers, _, err := s.b.RecoverStaleWorkers(s.ctx, 5*time.Minute, "")
			require.NoError(s.t, err)
			require.Equal(s.t, 1, workers)
			a, b := s.enqueueNamed(name), s.enqueueNamed(name)

			type result struct {
				jobs []backends.Job
				err  error
			}
			done := make(chan result, 1)
			if s.h.StallClaim != nil {
				stalled, release, err := s.h.StallClaim(s.ctx)
				require.NoError(s.t, err, "stall the claim")
				go func() {
					jobs, err := s.b.Claim(s.ctx, p)
					done <- result{jobs, err}
				}()
				require.NoError(s.t, stalled(), "the claim never reached its stall")
				// Registering again while the claim is between its statements.
				s.registerAgain(w)
				require.NoError(s.t, release(), "release the claim")
			} else {
				go func() {
					jobs, err := s.b.Claim(s.ctx, p)
					done <- result{jobs, err}
				}()
				s.registerAgain(w)
			}
			var r result
			select {
			case r = <-done:
			case <-time.After(30 * time.Second):
				s.t.Fatal("the claim did not return within 30 s")
			}
			if r.err != nil {
				require.True(s.t, errors.Is(r.err, backends.ErrWorkerNotActive), "claim: %v", r.err)
			}
			var returned, processing []string
			for _, j := range r.jobs {
				returned = append(returned, j.ID)
			}
			for _, id := range []string{a.ID, b.ID} {
				j := s.get(id)
				if j.Status == backends.StatusProcessing {
					require.NotNil(s.t, j.WorkerID)
					assert.Equal(s.t, w, *j.WorkerID)
					processing = append(processing, id)
				}
			}
			slices.Sort(returned)
			slices.Sort(processing)
			assert.Equal(s.t, processing, returned,
				"the rows processing under the worker are exactly the jobs the claim returned (claim error: %v)", r.err)
		}},
	}
}
