package main

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPlanNet(t *testing.T) {
	p := NetParams{GapMin: 6 * time.Second, GapMax: 20 * time.Second, PartMin: time.Second, PartMax: 16 * time.Second, ReadOnlyMax: 6 * time.Second}
	steps := PlanNet(7, 240*time.Second, p)
	require.NotEmpty(t, steps)
	assert.Equal(t, steps, PlanNet(7, 240*time.Second, p), "the same seed draws the same network faults")
	assert.NotEqual(t, steps, PlanNet(8, 240*time.Second, p))
	kinds := map[string]bool{}
	for _, s := range steps {
		kinds[s.Kind] = true
		assert.Less(t, s.At, 240*time.Second)
		switch s.Kind {
		case faultNetPartition:
			assert.True(t, s.Dur >= p.PartMin && s.Dur < p.PartMax, "partition %s", s.Dur)
		case faultDBReadOnly:
			assert.Equal(t, "postgres", s.Target)
			assert.True(t, s.Dur >= time.Second && s.Dur < p.ReadOnlyMax, "read-only %s", s.Dur)
		case faultNetLatency, faultNetResets:
			assert.Positive(t, s.Pick)
		}
		if s.Kind != faultDBReadOnly {
			assert.True(t, slices.Contains([]string{"net-py", "net-node", "net-attach"}, s.Target), s.Target)
		}
	}
	assert.Len(t, kinds, len(netKinds()), "240 s draws every kind")
	assert.Empty(t, PlanNet(7, 240*time.Second, NetParams{Off: true}), "off")
}

// Network faults come from a stream of their own: a seed's other faults
// (and so the regression seeds) are the same with them or without.
func TestPlanNetLeavesTheFaultScheduleAlone(t *testing.T) {
	pp := PlanParams{Length: 240 * time.Second, GapMin: 2 * time.Second, GapMax: 6 * time.Second,
		StopMin: time.Second, StopMax: 12 * time.Second, PGDownMax: 2 * time.Second, Kinds: faultKinds()}
	plain := Plan(7, pp)
	merged := mergeSteps(plain, PlanNet(7, pp.Length, NetParams{GapMin: 6 * time.Second, GapMax: 20 * time.Second, PartMin: time.Second, PartMax: 16 * time.Second, ReadOnlyMax: 6 * time.Second}))
	var others []Step
	for _, s := range merged {
		if !slices.Contains(netKinds(), s.Kind) {
			others = append(others, s)
		}
	}
	assert.Equal(t, plain, others)
}
