package reserve

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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

// A sidecar sizing its reserve by its own rate tops it up once it has
// fallen to half. One sized for a fleet tops it up at a quarter, so its
// claims are three quarters of it, not half; never lower than half of what
// the sidecar alone would hold (4,000 jobs/s each below: a quarter of
// claim_ahead_max would be 125 rows, 31 ms of its work).
func TestReserveTopsUpAtItsLowWaterMarkAndOffIsOff(t *testing.T) {
	for _, tc := range []struct {
		name      string
		fleet     int
		perSecond int // its rate: a target of about 100, 400, 200 and 500 rows below
		held      int
		topsUp    bool
	}{
		{"alone: under half", 1, 1000, 45, true},
		{"alone: over half", 1, 1000, 55, false},
		{"alone: more than its target", 1, 1000, 300, false},
		{"8 sidecars: under a quarter", 8, 500, 90, true},
		{"8 sidecars: over a quarter", 8, 500, 110, false},
		{"128 sidecars: under a quarter", 128, 40, 45, true},
		{"128 sidecars: over a quarter", 128, 40, 60, false},
		{"2 sidecars: under half of its own reserve", 2, 4000, 190, true},
		{"2 sidecars: over half of its own reserve", 2, 4000, 210, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := New(100*time.Millisecond, 500)
				r.SetFleet(tc.fleet)
				rateOf(&r, tc.perSecond)
				target := r.Target(time.Now(), true)
				want := 0
				if tc.topsUp {
					want = target - tc.held
				}
				assert.Equal(t, want, r.TopUp(time.Now(), tc.held, true), "held %d of %d", tc.held, target)
				assert.Zero(t, r.TopUp(time.Now(), 0, false), "no ready process: nothing to top up")
			})
		})
	}
	off := New(0, 500)
	off.Completed(time.Now())
	assert.False(t, off.On())
	assert.Zero(t, off.Target(time.Now(), true))
	assert.Zero(t, off.TopUp(time.Now(), 0, true))
	assert.Equal(t, time.Second, New(20*time.Millisecond, 1).WaitBound(), "at least 1 s")
	assert.Equal(t, 5*time.Second, New(500*time.Millisecond, 1).WaitBound())
}

// rateOf feeds r completions at perSecond for 2 s of the fake clock: the
// rate has settled.
func rateOf(r *Sizing, perSecond int) {
	for range 40 {
		for range perSecond / 20 {
			r.Completed(time.Now())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The fleet's size reaches each sidecar's sizing: N sidecars sharing a
// rate each keep a reserve of the fleet's rate × claim_ahead, so the
// fleet's claims stay as large as one sidecar's (the rate split evenly;
// perSecond a multiple of 20), within claim_ahead_max
// and maxHeld of the sidecar's own work; the wait bound covers what the
// reserve holds.
func TestReserveTheFleetsSizeReachesEachPoolsSizing(t *testing.T) {
	for _, tc := range []struct {
		name      string
		fleet     int // SetFleet; 0 = never told
		perSecond int // this sidecar's rate: a total of 4,000 jobs/s shared
		maxRows   int
		want      int
		wait      time.Duration
	}{
		{"alone, never told", 0, 4000, 500, 400, time.Second},
		{"alone", 1, 4000, 500, 400, time.Second},
		{"8 sidecars", 8, 500, 500, 400, 1600 * time.Millisecond},
		{"8 sidecars, claim_ahead_max", 8, 500, 300, 300, 1600 * time.Millisecond},
		{"32 sidecars", 32, 120, 500, 384, 6400 * time.Millisecond},
		{"64 sidecars: at most 5 s of its own work", 64, 60, 500, 5 * 60, 10 * time.Second},
		{"128 sidecars", 128, 40, 500, 5 * 40, 10 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := New(100*time.Millisecond, tc.maxRows)
				if tc.fleet > 0 {
					r.SetFleet(tc.fleet)
				}
				rateOf(&r, tc.perSecond)
				assert.InDelta(t, min(tc.want, tc.maxRows), r.Target(time.Now(), true), float64(tc.want)/20+1)
				assert.Equal(t, tc.wait, r.WaitBound())
				assert.Zero(t, r.Target(time.Now(), false), "no ready process: no reserve, whatever the fleet")
			})
		})
	}
}

// A claim that comes back short (the queue is nearly drained) sizes the
// reserve by the sidecar's own rate again, so a drained queue's last rows
// are not held by a few sidecars while the others idle; a full claim
// sizes it for the fleet again. The wait bound stays the fleet's, for the
// rows claimed while the queue was deep.
func TestReserveShortClaimFallsBackToTheSidecarsOwnRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := New(100*time.Millisecond, 500)
		r.SetFleet(8)
		rateOf(&r, 500)
		for _, step := range []struct {
			asked, got int
			want       int
		}{
			{asked: 400, got: 400, want: 400},
			{asked: 400, got: 399, want: 50},
			{asked: 10, got: 0, want: 50},
			{asked: 60, got: 60, want: 400},
		} {
			r.Claimed(step.asked, step.got)
			assert.InDelta(t, step.want, r.Target(time.Now(), true), float64(step.want)/20+1, "after a claim of %d that got %d", step.asked, step.got)
			assert.Equal(t, 1600*time.Millisecond, r.WaitBound())
		}
	})
}

// Before its first window has ended a pool sizes its reserve by what that
// window has counted so far, once it holds enough completions to stand for
// a rate: a pool starting on a full queue reserves within milliseconds,
// not a whole window later; a few completions size nothing yet.
func TestReserveFirstWindowSizesByItsCountSoFar(t *testing.T) {
	for _, tc := range []struct {
		name   string
		n      int           // completions, evenly over
		over   time.Duration // from the first
		fleet  int
		want   int
		spread float64
	}{
		{"too few to stand for a rate", firstSample - 1, 10 * time.Millisecond, 1, 0, 0},
		{"1,000 jobs/s over 100 ms", 100, 99 * time.Millisecond, 1, 100, 5},
		{"a burst is read over at least 25 ms", 50, time.Millisecond, 1, 200, 5},
		{"the fleet's size applies from the first window", 100, 99 * time.Millisecond, 4, 400, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := New(100*time.Millisecond, 500)
				r.SetFleet(tc.fleet)
				step := tc.over / time.Duration(max(tc.n-1, 1))
				for i := range tc.n {
					if i > 0 {
						time.Sleep(step)
					}
					r.Completed(time.Now())
				}
				assert.InDelta(t, tc.want, r.Target(time.Now(), true), tc.spread)
			})
		})
	}
}

// A pool back at work after a quiet spell (half a second or more without a
// completion, less than the 4 s that forget its rate) sizes its reserve by
// what it counts again, up to the rate it had, within milliseconds, and
// takes its first window back whole; a bursty pool's single empty windows
// are averaged as before, and a pool slower than it was sizes by its new
// rate.
func TestReserveResumingAfterAQuietSpellSizesByItsCountAgain(t *testing.T) {
	const ahead = 100 * time.Millisecond
	// run completes perSecond jobs a second, 5 ms apart, for d.
	run := func(r *Sizing, perSecond int, d time.Duration) {
		for end := time.Now().Add(d); time.Now().Before(end); {
			for range perSecond / 200 {
				r.Completed(time.Now())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	for _, tc := range []struct {
		name       string
		quiet      time.Duration
		again      int           // jobs a second after the spell
		after      time.Duration // of that, before Target is read
		want, diff int
	}{
		// 1,000 jobs/s × 100 ms: 100 rows before the spell.
		{"a second quiet: 30 ms back", time.Second, 1000, 30 * time.Millisecond, 100, 20},
		{"a second quiet: its first window taken whole", time.Second, 1000, 300 * time.Millisecond, 100, 10},
		{"three seconds quiet: 30 ms back", 3 * time.Second, 1000, 30 * time.Millisecond, 100, 20},
		{"slower than before: its new rate", time.Second, 200, 300 * time.Millisecond, 20, 5},
		{"faster than before: no more than it had, at first", time.Second, 4000, 30 * time.Millisecond, 100, 20},
		// A pool of 64 slots: 120 completions in 30 ms are more than one
		// of each, so jobs started after the spell ended too.
		{"faster than before, past a wave of its slots: its count", time.Second, 4000, 30 * time.Millisecond, 400, 60},
		{"faster than before, past a wave of its slots: its first window whole", time.Second, 4000, 300 * time.Millisecond, 400, 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := New(ahead, 500)
				if strings.Contains(tc.name, "wave") {
					r.SetSlots(64)
				}
				run(&r, 1000, 2*time.Second)
				assert.InDelta(t, 100, r.Target(time.Now(), true), 10, "before the spell")
				time.Sleep(tc.quiet)
				run(&r, tc.again, tc.after)
				assert.InDelta(t, tc.want, r.Target(time.Now(), true), float64(tc.diff))
			})
		})
	}

	// Long jobs that started together end together: a wave of as many
	// completions as the pool has slots, within a millisecond, says nothing
	// of the rate to come, and the reserve stays at the rate the pool had.
	synctest.Test(t, func(t *testing.T) {
		r := New(ahead, 500)
		r.SetSlots(64)
		run(&r, 1000, 2*time.Second)
		time.Sleep(time.Second)
		for range 64 {
			r.Completed(time.Now())
		}
		time.Sleep(time.Millisecond)
		assert.InDelta(t, 100, r.Target(time.Now(), true), 10, "a wave of its 64 slots")
		time.Sleep(rateWindow)
		assert.LessOrEqual(t, r.Target(time.Now(), true), 110, "its window rolled: the old rate at most")
	})

	// One empty window at a time is a bursty pool's gap, not a spell: 40
	// jobs every other window (80 jobs/s on average) size about 8 rows,
	// never the 16 of a busy window's count.
	synctest.Test(t, func(t *testing.T) {
		r := New(ahead, 500)
		most := 0
		for i := range 40 {
			for range 40 {
				r.Completed(time.Now())
			}
			time.Sleep(rateWindow / 2)
			if i >= 4 { // past the first windows, which a burst sizes alone (read over 25 ms)
				most = max(most, r.Target(time.Now(), true))
			}
			time.Sleep(3 * rateWindow / 2)
		}
		assert.LessOrEqual(t, most, 12, "the smoothed rate, not the busy windows' count")
	})
}

// A pool that trickled and now drains a queue (a backlog filled at once
// behind a few jobs a second) sizes its reserve by its count as soon as it
// has completed more jobs in the window than it has slots, with no quiet
// spell between: sized by the trickle's rate, it claimed little more than
// its free slots for the rest of the window, a quarter of a second.
func TestReserveRisesWithinAWindowPastAWaveOfItsSlots(t *testing.T) {
	for _, tc := range []struct {
		name  string
		slots int
		want  int
		diff  float64
	}{
		{"past a wave of its 64 slots: its count", 64, 400, 60},
		{"slots unknown: the trickle's rate until the window ends", 0, 5, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := New(100*time.Millisecond, 500)
				r.SetSlots(tc.slots)
				for range 100 { // 50 jobs a second for 2 s
					r.Completed(time.Now())
					time.Sleep(20 * time.Millisecond)
				}
				require.InDelta(t, 5, r.Target(time.Now(), true), 2, "the trickle")
				for range 6 { // then 4,000 a second: 20 every 5 ms
					for range 20 {
						r.Completed(time.Now())
					}
					time.Sleep(5 * time.Millisecond)
				}
				assert.InDelta(t, tc.want, r.Target(time.Now(), true), tc.diff)
			})
		})
	}
}
