package supervisor

// Claim-ahead. A pool that claimed only its free slots made one statement
// per few rows, and every sidecar added to a fleet shrank every claim. So a
// pool may claim more than its free slots: the surplus waits in its
// reserve (the pending jobs beyond its free slots, in claim order) and goes
// to the handlers as slots free up. The reserve is sized by Little's law
// from the pool's own completion rate: it holds at most claim_ahead of
// work, at most claim_ahead_max rows, and is topped up when it falls to
// half. A pool of slow jobs therefore holds almost nothing, a fleet holds
// about claim_ahead of work in all whatever its size, and claim_ahead 0
// claims only free slots.
//
// A reserved row is processing under this worker with its attempt charged,
// like every claimed row. It never reached a handler, so when it is given
// back (at DRAINING, when its pool has no ready process, when it waited
// longer than waitBound) its attempt is refunded (Backend.ReturnJobs). A
// row on its last attempt is never reserved (ClaimParams.Ahead): a crash
// may cost a reserved job one retry, never its last.

import (
	"math"
	"time"
)

// rateWindow is how often the completion rate is folded into its average.
const rateWindow = 250 * time.Millisecond

// reserve is one pool's claim-ahead sizing: its measured completion rate
// and the reserve that rate calls for.
type reserve struct {
	ahead   time.Duration // claim_ahead; 0 = no reserve
	maxRows int           // claim_ahead_max
	rate    float64       // completions per second, smoothed over windows
	n       int           // completions in the current window
	start   time.Time     // the current window's start; zero before the first completion
}

func newReserve(ahead time.Duration, maxRows int) reserve {
	return reserve{ahead: ahead, maxRows: maxRows}
}

// on reports whether the pool claims ahead at all.
func (r *reserve) on() bool { return r.ahead > 0 && r.maxRows > 0 }

// completed counts one execution that ended at now.
func (r *reserve) completed(now time.Time) {
	if !r.on() {
		return
	}
	r.roll(now)
	r.n++
}

// roll folds the windows that ended by now into the rate: each halves
// the weight of what came before, so a rate that changes is followed
// within a few windows, and a pool gone quiet decays to nothing.
func (r *reserve) roll(now time.Time) {
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

// target is how many rows the reserve should hold at now: rate ×
// claim_ahead, at most claim_ahead_max, none when the pool has no ready
// process to start them.
func (r *reserve) target(now time.Time, ready bool) int {
	if !r.on() || !ready {
		return 0
	}
	r.roll(now)
	return min(r.maxRows, int(math.Ceil(r.rate*r.ahead.Seconds())))
}

// ahead is how many rows a claim should add to a reserve holding held
// rows: none until it has fallen to half its target, then enough to fill
// it.
func (r *reserve) topUp(held, target int) int {
	if target <= 0 || held > target/2 {
		return 0
	}
	return target - held
}

// waitBound is how long a reserved row may wait for a slot before it is
// given back: longer means the rate it was claimed for is gone (the jobs
// slowed down, the processes are busy with long ones), and another worker
// may have a free slot now.
func (r reserve) waitBound() time.Duration { return max(10*r.ahead, time.Second) }
