package supervisor

// Claim hysteresis on the fake clock (holdClaim in claim.go): after a
// claim that came back full, freed slots wait for a quarter of the budget
// (half in a pool of limited jobs) or for claimHoldMax; after a short one
// they are claimed at once.

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/internal/config"
)

// fakeClaim is one claim statement of a handler's jobs, with its instant.
type fakeClaim struct {
	at          time.Time
	limit, rows int
}

// Claim records every claim of named jobs (the --dead-letter-unknown claim
// names none) before the memory backend serves it.
func (r beatRecorder) Claim(ctx context.Context, p backends.ClaimParams) ([]backends.Job, error) {
	jobs, err := r.Backend.Claim(ctx, p)
	if err == nil && len(p.Names) > 0 {
		r.w.mu.Lock()
		r.w.claims = append(r.w.claims, fakeClaim{at: time.Now(), limit: p.Limit, rows: len(jobs)})
		r.w.mu.Unlock()
	}
	return jobs, err
}

func (w *fakeWorld) claimLog() []fakeClaim {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.claims)
}

func TestClaimHysteresis(t *testing.T) {
	const long = 1000.0 // seconds: holds its slot for the whole test
	// One process, concurrency 16: a quarter of the budget is 4 slots.
	type claim struct {
		after time.Duration // from the first claim
		limit int
		rows  int
	}
	cases := []struct {
		name    string
		limited bool      // every job of the pool limited (a cap it never reaches)
		jobs    []float64 // durations of the jobs queued at the start, in claim order
		later   int       // jobs enqueued 1 s after the first claim (a NOTIFY wake-up)
		want    []claim   // the claims after the first, which takes 16
	}{
		{
			// One slot frees at 1 s and more rows are queued: it waits,
			// but only for the time bound.
			name: "full claim, less than a quarter free: claims at the time bound",
			jobs: slices.Concat([]float64{1}, slices.Repeat([]float64{long}, 15+10)),
			want: []claim{{after: time.Second + claimHoldMax, limit: 1, rows: 1}},
		},
		{
			// The bound runs from the first held slot: a second slot
			// freeing later joins the same claim and does not extend it.
			name: "full claim, slots freeing during the hold: one claim at the bound",
			jobs: slices.Concat([]float64{1, 1.002}, slices.Repeat([]float64{long}, 14+10)),
			want: []claim{{after: time.Second + claimHoldMax, limit: 2, rows: 2}},
		},
		{
			// Four slots free at the same instant: one claim of 4 at
			// once, not a claim for the first and another for the rest.
			name: "full claim, a quarter free: claims at once",
			jobs: slices.Concat(slices.Repeat([]float64{1}, 4), slices.Repeat([]float64{long}, 12+10)),
			want: []claim{{after: time.Second, limit: 4, rows: 4}},
		},
		{
			// A pool of limited jobs reserves nothing: it waits for half
			// the budget (8 slots) or the bound, so a quarter free waits.
			name:    "limited pool, full claim, a quarter free: claims at the time bound",
			limited: true,
			jobs:    slices.Concat(slices.Repeat([]float64{1}, 4), slices.Repeat([]float64{long}, 12+10)),
			want:    []claim{{after: time.Second + claimHoldMax, limit: 4, rows: 4}},
		},
		{
			name:    "limited pool, full claim, half free: claims at once",
			limited: true,
			jobs:    slices.Concat(slices.Repeat([]float64{1}, 8), slices.Repeat([]float64{long}, 8+10)),
			want:    []claim{{after: time.Second, limit: 8, rows: 8}},
		},
		{
			// The queue was drained (14 of 16): a job enqueued later is
			// claimed at its wake-up although only 2 slots are free.
			name:  "short claim: claims at once",
			jobs:  slices.Repeat([]float64{long}, 14),
			later: 1,
			want:  []claim{{after: time.Second, limit: 2, rows: 1}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := fakeSettings(30*time.Second, time.Minute)
				s.PollInterval = time.Hour // only results and wake-ups trigger claims
				w := newFakeWorld(t, s, 16, 4, nil)
				if tc.limited {
					for i := range w.sup.cfg.Manifest.Handlers[0].Jobs {
						j := &w.sup.cfg.Manifest.Handlers[0].Jobs[i]
						j.Limit = &config.Limit{Scope: "all", Concurrency: 1000, Line: 1}
					}
				}
				for _, d := range tc.jobs {
					w.enqueue("async.sleep", d)
				}
				ended := false
				defer w.stopIfRunning(&ended)
				w.launch()
				w.waitFor(time.Second, "the first claim", func() bool { return len(w.claimLog()) > 0 })
				first := w.claimLog()[0]
				assert.Equal(t, fakeClaim{at: first.at, limit: 16, rows: min(16, len(tc.jobs))}, first, "the first claim fills every slot")
				if tc.later > 0 {
					time.Sleep(time.Until(first.at.Add(time.Second)))
					for range tc.later {
						w.enqueue("async.sleep", long)
					}
				}
				time.Sleep(time.Until(first.at.Add(3 * time.Second)))
				synctest.Wait()
				var got []claim
				for _, c := range w.claimLog()[1:] {
					got = append(got, claim{after: c.at.Sub(first.at), limit: c.limit, rows: c.rows})
				}
				assert.Equal(t, tc.want, got, "claims after the first")
				w.sup.Shutdown()
				ended = true
				require.NoError(t, <-w.runErr)
			})
		})
	}
}
