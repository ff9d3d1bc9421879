// Package reserve is the claim-ahead sizing policy: how many rows a pool
// keeps claimed beyond its free slots, from its measured completion rate.
// It is pure (the caller passes the time), so the supervisor and the
// bench's fleet simulation size reserves with the same code.
package reserve

import (
	"math"
	"time"
)

// rateWindow is how often the completion rate is folded into its average.
const rateWindow = 250 * time.Millisecond

// Sizing is one pool's claim-ahead sizing: its measured completion rate
// and the reserve that rate calls for. The zero value is off.
type Sizing struct {
	ahead   time.Duration // claim_ahead; 0 = no reserve
	maxRows int           // claim_ahead_max
	rate    float64       // completions per second, smoothed over windows
	n       int           // completions in the current window
	start   time.Time     // the current window's start; zero before the first completion
}

// New is the sizing of a pool with claim_ahead ahead and claim_ahead_max
// maxRows.
func New(ahead time.Duration, maxRows int) Sizing {
	return Sizing{ahead: ahead, maxRows: maxRows}
}

// On reports whether the pool claims ahead at all.
func (r *Sizing) On() bool { return r.ahead > 0 && r.maxRows > 0 }

// Completed counts one execution that ended at now.
func (r *Sizing) Completed(now time.Time) {
	if !r.On() {
		return
	}
	r.roll(now)
	r.n++
}

// roll folds the windows that ended by now into the rate: each halves
// the weight of what came before, so a rate that changes is followed
// within a few windows, and a pool gone quiet decays to nothing.
func (r *Sizing) roll(now time.Time) {
	if r.start.IsZero() {
		r.start = now
		return
	}
	for i := 0; now.Sub(r.start) >= rateWindow; i++ {
		if i == 16 { // quiet for 4 s: nothing of the old rate is left worth keeping
			r.rate, r.n, r.start = 0, 0, now
			return
		}
		r.rate = r.rate/2 + float64(r.n)/rateWindow.Seconds()/2
		r.n = 0
		r.start = r.start.Add(rateWindow)
	}
}

// Target is how many rows the reserve should hold at now: rate ×
// claim_ahead, at most claim_ahead_max, none when the pool has no ready
// process to start them.
func (r *Sizing) Target(now time.Time, ready bool) int {
	if !r.On() || !ready {
		return 0
	}
	r.roll(now)
	return min(r.maxRows, int(math.Ceil(r.rate*r.ahead.Seconds())))
}

// TopUp is how many rows a claim should add to a reserve holding held
// rows: none until it has fallen to half its target, then enough to fill
// it.
func (r *Sizing) TopUp(held, target int) int {
	if target <= 0 || held > target/2 {
		return 0
	}
	return target - held
}

// WaitBound is how long a reserved row may wait for a slot before it is
// given back: longer means the rate it was claimed for is gone (the jobs
// slowed down, the processes are busy with long ones), and another worker
// may have a free slot now.
func (r Sizing) WaitBound() time.Duration { return max(10*r.ahead, time.Second) }
