package reserve

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
)

// Little's law: at a steady rate the reserve holds rate × claim_ahead rows,
// capped at claim_ahead_max, and nothing without a ready process.
func TestReserveTargetFollowsTheCompletionRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := New(100*time.Millisecond, 500)
		assert.Zero(t, r.Target(time.Now(), true), "no rate measured yet")
		for range 40 { // 2 s at 1,000 jobs/s
			for range 50 {
				r.Completed(time.Now())
			}
			time.Sleep(50 * time.Millisecond)
		}
		got := r.Target(time.Now(), true)
		assert.InDelta(t, 100, got, 5, "1,000 jobs/s × 100 ms")
		assert.Zero(t, r.Target(time.Now(), false), "no ready process: no reserve")

		capped := New(time.Second, 30)
		for range 20 {
			for range 50 {
				capped.Completed(time.Now())
			}
			time.Sleep(50 * time.Millisecond)
		}
		assert.Equal(t, 30, capped.Target(time.Now(), true), "claim_ahead_max caps it")
	})
}

// A pool gone quiet (or of slow jobs) holds almost nothing.
func TestReserveDecaysWhenCompletionsStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := New(100*time.Millisecond, 500)
		for range 20 {
			for range 50 {
				r.Completed(time.Now())
			}
			time.Sleep(50 * time.Millisecond)
		}
		assert.Positive(t, r.Target(time.Now(), true))
		time.Sleep(time.Second)
		assert.LessOrEqual(t, r.Target(time.Now(), true), 7, "a second without completions: four windows, each halving the rate")
		time.Sleep(5 * time.Second)
		assert.Zero(t, r.Target(time.Now(), true))

		slow := New(100*time.Millisecond, 500)
		for range 10 { // one job every 2 s
			slow.Completed(time.Now())
			time.Sleep(2 * time.Second)
		}
		assert.LessOrEqual(t, slow.Target(time.Now(), true), 1)
	})
}

func TestReserveTopsUpAtHalfAndOffIsOff(t *testing.T) {
	r := New(100*time.Millisecond, 500)
	for _, tc := range []struct{ held, target, want int }{
		{0, 100, 100}, {50, 100, 50}, {51, 100, 0}, {100, 100, 0}, {0, 0, 0}, {3, 1, 0},
	} {
		assert.Equal(t, tc.want, r.TopUp(tc.held, tc.target), "held %d target %d", tc.held, tc.target)
	}
	off := New(0, 500)
	off.Completed(time.Now())
	assert.False(t, off.On())
	assert.Zero(t, off.Target(time.Now(), true))
	assert.Equal(t, time.Second, New(20*time.Millisecond, 1).WaitBound(), "at least 1 s")
	assert.Equal(t, 5*time.Second, New(500*time.Millisecond, 1).WaitBound())
}
