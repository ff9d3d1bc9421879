package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPlanCPU(t *testing.T) {
	p := CPUParams{Busy: 2, GapMin: 4 * time.Second, GapMax: 16 * time.Second, LenMin: 2 * time.Second, LenMax: 8 * time.Second}
	steps := PlanCPU(7, 240*time.Second, p)
	require.NotEmpty(t, steps)
	assert.Equal(t, steps, PlanCPU(7, 240*time.Second, p), "the same seed draws the same contention")
	assert.NotEqual(t, steps, PlanCPU(8, 240*time.Second, p))
	for _, s := range steps {
		assert.Equal(t, faultCPUHog, s.Kind)
		assert.Equal(t, "cpu", s.Target)
		assert.Less(t, s.At, 240*time.Second)
		assert.True(t, s.Dur >= p.LenMin && s.Dur < p.LenMax, "length %s", s.Dur)
		assert.True(t, s.Pick >= 1 && s.Pick <= p.Busy, "busy %d", s.Pick)
	}
	assert.Empty(t, PlanCPU(7, 240*time.Second, CPUParams{}), "Busy 0: off")
}

// Contention is drawn from a stream of its own: the other faults of a seed
// (and so the seeds kept as regressions) are the same with it or without.
func TestPlanCPULeavesTheFaultScheduleAlone(t *testing.T) {
	pp := PlanParams{Length: 240 * time.Second, GapMin: 2 * time.Second, GapMax: 6 * time.Second,
		StopMin: time.Second, StopMax: 12 * time.Second, PGDownMax: 2 * time.Second, Kinds: faultKinds()}
	plain := Plan(7, pp)
	merged := mergeSteps(plain, PlanCPU(7, pp.Length, CPUParams{Busy: 2, GapMin: 4 * time.Second, GapMax: 16 * time.Second, LenMin: 2 * time.Second, LenMax: 8 * time.Second}))
	var others []Step
	for _, s := range merged {
		if s.Kind != faultCPUHog {
			others = append(others, s)
		}
	}
	assert.Equal(t, plain, others)
	for i := 1; i < len(merged); i++ {
		assert.LessOrEqual(t, merged[i-1].At, merged[i].At, "merged by offset")
	}
}

// The reserve faults come from their own stream: a seed's schedule of the
// other faults is the same with them as without, and a seed draws the same
// reserve faults every time.
func TestPlanReserveLeavesTheOtherFaultsAsTheyWere(t *testing.T) {
	p := PlanParams{Length: 240 * time.Second, GapMin: time.Second, GapMax: 5 * time.Second, StopMax: time.Second, Kinds: faultKinds()}
	r := ReserveParams{GapMin: 20 * time.Second, GapMax: 60 * time.Second}
	a := PlanReserve(7, p.Length, r)
	assert.Equal(t, a, PlanReserve(7, p.Length, r))
	assert.NotEmpty(t, a)
	for _, s := range a {
		assert.Contains(t, []string{faultReserveKill, faultReserveDrain}, s.Kind)
		assert.Contains(t, sidecarNames(), s.Target)
	}
	merged := mergeSteps(Plan(7, p), a)
	var others []Step
	for _, s := range merged {
		if s.Kind != faultReserveKill && s.Kind != faultReserveDrain {
			others = append(others, s)
		}
	}
	assert.Equal(t, Plan(7, p), others)
	assert.Empty(t, PlanReserve(7, p.Length, ReserveParams{Off: true}))
}
