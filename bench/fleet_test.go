package main

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
)

// A size over its rounds: the median Postgres CPU, the counts summed, a
// failed round listed and left out; the goal's ratio is the largest fleet
// measured over one sidecar, none without both.
func TestFleetRoundsAndRatio(t *testing.T) {
	one := combineFleet([]*fleetPoint{
		{Sidecars: 1, Jobs: 100, Seconds: 1, PostgresCPU10k: 0.5, Claims: 2, RowsPerClaim: 50},
		{Sidecars: 1, Jobs: 300, Seconds: 1, PostgresCPU10k: 0.7, Claims: 1, RowsPerClaim: 200},
	})
	assert.InDelta(t, 0.6, one.PostgresCPU10k, 1e-9)
	assert.Equal(t, []float64{0.5, 0.7}, one.Runs)
	assert.Equal(t, int64(400), one.Jobs)
	assert.InDelta(t, 200, one.JobsPerS, 1e-9)
	assert.InDelta(t, 100, one.RowsPerClaim, 1e-9, "300 rows over 3 claims")

	many := combineFleet([]*fleetPoint{{Sidecars: 128, Error: "too many clients"}, {Sidecars: 128, Jobs: 100, Seconds: 1, PostgresCPU10k: 0.9, Claims: 1, RowsPerClaim: 100}})
	assert.Equal(t, []string{"too many clients"}, many.Errors)
	assert.Empty(t, many.Error)
	failed := combineFleet([]*fleetPoint{{Sidecars: 64, Error: "deadlock"}})
	assert.Equal(t, "deadlock", failed.Error)

	for _, tc := range []struct {
		name   string
		points []*fleetPoint
		want   float64
	}{
		{"128 over 1", []*fleetPoint{one, failed, many}, 1.5},
		{"no one-sidecar row", []*fleetPoint{many}, math.NaN()},
		{"one sidecar only", []*fleetPoint{one}, math.NaN()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x, _, _ := (&fleetResult{Points: tc.points}).ratio()
			if math.IsNaN(tc.want) {
				assert.True(t, math.IsNaN(x), "got %v", x)
				return
			}
			assert.InDelta(t, tc.want, x, 1e-9)
		})
	}
	var none *fleetResult
	x, _, _ := none.ratio()
	assert.True(t, math.IsNaN(x), "no fleet section")
}

// A point that ran below 95 % of the fleet's rate is named beside the
// ratio; points that kept up, or are missing, are not.
func TestFleetBehindNamesPointsThatFellBehind(t *testing.T) {
	f := &fleetResult{Rate: 4000}
	kept := &fleetPoint{Sidecars: 1, JobsPerS: 3813}
	slow := &fleetPoint{Sidecars: 128, JobsPerS: 3513}
	assert.Empty(t, f.behind(kept, nil))
	got := f.behind(slow, kept)
	assert.Contains(t, got, "the 128-sidecar point ran 3513 of 4000 jobs/s")
	assert.NotContains(t, got, "1-sidecar")
}
