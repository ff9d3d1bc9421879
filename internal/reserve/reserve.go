// Package reserve is the claim-ahead sizing policy: how many rows a pool
// keeps claimed beyond its free slots, from its measured completion rate
// and the size of the fleet it shares its queues with. It is pure (the
// caller passes the time), so the supervisor and the bench's fleet
// simulation size reserves with the same code.
//
// Postgres' cost per job is mostly paid per claim statement. Sized by its
// own rate alone, each of N sidecars sharing a total rate claims 1/N of
// what one sidecar would, and the fleet makes N times the statements for
// the same jobs. So while the queue is deep (the last claim got every row
// it asked for), a sidecar sizes its reserve by the fleet's rate, its own
// times the fleet's size: the fleet's claims stay as large, and as far
// apart in all, as one sidecar's. A job of better priority is taken by the
// next claim of any sidecar, which still comes about every claim_ahead/2
// (3/4 of claim_ahead once the reserve is topped up at a quarter, below).
// Once a claim comes back short (the queue is nearly drained) the reserve
// falls back to the sidecar's own rate, so a drained queue's rows are not
// held by a few sidecars while others idle. What one sidecar holds stays
// bounded: at most claim_ahead_max rows and at most maxHeld of its own
// work, and its rows are given back past WaitBound.
package reserve

import (
	"math"
	"time"
)

// rateWindow is how often the completion rate is folded into its average.
const rateWindow = 250 * time.Millisecond

// maxHeld bounds the work one sidecar's reserve holds, whatever the fleet:
// its rows wait at most about this long for a slot.
const maxHeld = 5 * time.Second

// Sizing is one pool's claim-ahead sizing: its measured completion rate
// and the reserve that rate calls for. The zero value is off.
type Sizing struct {
	ahead   time.Duration // claim_ahead; 0 = no reserve
	maxRows int           // claim_ahead_max
	rate    float64       // completions per second, smoothed over windows
	busy    float64       // rate as of the last window with completions; 0 new or forgotten
	quiet   int           // windows without completions since the last with some
	n       int           // completions in the current window
	start   time.Time     // the current window's start; zero before the first completion
	fleet   int           // sidecars sharing the queues, this one included; 0 = unknown
	slots   int           // jobs the pool runs at once; 0 = unknown
	shallow bool          // the last claim got fewer rows than it asked for
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
	if r.n == 0 && r.resuming() {
		// The window restarts with the first completion after the spell, as
		// a new pool's first does: its count so far is then read over the
		// time the pool has been back, not over the quiet part of it.
		r.start = now
	}
	r.n++
}

// roll folds the windows that ended by now into the rate: each halves
// the weight of what came before, so a rate that changes is followed
// within a few windows, and a pool gone quiet decays to nothing. Two
// windows with enough completions to stand for a rate are taken whole
// instead: a new pool's first (its count is all it has), and the first
// one after a quiet spell, up to the rate the pool had before it (a pool
// back at work is most likely as fast as it was; one that is slower now
// shows it in that window's count), or whole when it counted more
// completions than the pool has slots (see beyondWave).
func (r *Sizing) roll(now time.Time) {
	if r.start.IsZero() {
		r.start = now
		return
	}
	for i := 0; now.Sub(r.start) >= rateWindow; i++ {
		if i == 16 { // quiet for 4 s: nothing of the old rate is left worth keeping
			r.rate, r.busy, r.quiet, r.n, r.start = 0, 0, 0, 0, now
			return
		}
		counted := float64(r.n) / rateWindow.Seconds()
		smoothed := r.rate/2 + counted/2
		switch {
		case r.n == 0:
			r.rate = smoothed
			r.quiet++
		case r.n < firstSample: // too few to stand for a rate alone
			r.rate = smoothed
		case r.busy == 0: // the first window of a new pool stands for its rate
			r.rate = counted
		case r.resuming() && r.beyondWave():
			r.rate = max(smoothed, counted)
		case r.resuming(): // back to the old rate at most, at once
			r.rate = max(smoothed, min(counted, r.busy))
		default:
			r.rate = smoothed
		}
		if r.n > 0 {
			r.busy, r.quiet = r.rate, 0
		}
		r.n = 0
		r.start = r.start.Add(rateWindow)
	}
}

// Target is how many rows the reserve should hold at now: rate ×
// claim_ahead, times the fleet's size while the queue is deep (at most
// maxHeld of this sidecar's work), at most claim_ahead_max, none when the
// pool has no ready process to start them.
func (r *Sizing) Target(now time.Time, ready bool) int {
	if !r.On() || !ready {
		return 0
	}
	r.roll(now)
	return min(r.maxRows, int(math.Ceil(r.current(now)*r.held().Seconds())))
}

// firstSample is how many completions the first window needs before its
// partial count stands for the rate.
const firstSample = 16

// current is the rate to size by at now: the smoothed rate, or, before
// the first window has ended, what it has counted so far. A pool that
// starts on a full queue would otherwise claim only its free slots for a
// whole window, and a fleet of small pools many times over. A pool
// resuming after a quiet spell (its rate decaying, not yet forgotten)
// likewise sizes by its count so far, up to the rate it had before the
// spell: a burst a second after the last one would otherwise claim in
// small batches for several windows, and the count, read over as little
// as 25 ms, never overstates a bursty pool's rate beyond what its windows
// measured. Past one wave of its slots (beyondWave) a count above the rate
// is taken as it is, spell or not: a pool that trickled at 50 jobs a
// second and now drains a queue of thousands would otherwise claim in
// small batches for the rest of the window.
func (r *Sizing) current(now time.Time) float64 {
	if r.n < firstSample {
		return r.rate
	}
	counted := float64(r.n) / max(now.Sub(r.start), rateWindow/10).Seconds()
	switch {
	case r.rate == 0:
		return counted
	case r.beyondWave():
		return max(r.rate, counted)
	case r.resuming():
		return max(r.rate, min(counted, r.busy))
	default:
		return r.rate
	}
}

// quietSpell is how many windows without a completion make a pool that
// completes again one resuming: fewer are a bursty pool's gaps, which its
// smoothed rate already averages.
const quietSpell = 2

// resuming reports whether the current window follows a quiet spell.
func (r *Sizing) resuming() bool { return r.quiet >= quietSpell && r.busy > 0 }

// beyondWave reports whether the pool has completed more jobs in the
// current window than it has slots. Up to one per slot, the completions
// may be a wave: long jobs started together ending together, whose count
// over a few milliseconds says nothing of the rate to come (reserved for
// it, rows would wait out their bound and go back). More than that, jobs
// started within the window have ended too: the pool runs jobs as fast as
// it counts them, and sizing it by a slower past would claim it in small
// batches for a whole window.
func (r *Sizing) beyondWave() bool { return r.slots > 0 && r.n > r.slots }

// held is the work the reserve is sized to hold: claim_ahead, times the
// fleet's size while the queue is deep, at most maxHeld (never less than
// claim_ahead).
func (r *Sizing) held() time.Duration {
	f := max(r.fleet, 1)
	if r.shallow {
		f = 1
	}
	return max(r.ahead, min(r.ahead*time.Duration(f), maxHeld))
}

// Claimed records what a claim asked for (free slots and reserve) and how
// many rows it got: fewer means the queue is nearly drained.
func (r *Sizing) Claimed(asked, got int) { r.shallow = got < asked }

// TopUp is how many rows a claim at now should add to a reserve holding
// held rows: none until it has fallen to its low-water mark, then enough
// to fill it to its Target.
func (r *Sizing) TopUp(now time.Time, held int, ready bool) int {
	target := r.Target(now, ready)
	if target <= 0 || held > r.lowWater(now, target) {
		return 0
	}
	return target - held
}

// lowWater is the reserve's level at which it is topped up: half its
// target for a sidecar that sizes it by its own rate. A reserve sized for
// a fleet holds many times the sidecar's own claim_ahead of work, and
// topping it up at half made every claim half of it, so at 128 sidecars
// the claims were as small as the 5 s bound made them. It is topped up
// at a quarter instead, or at half of what the sidecar alone would hold
// when that is more, so it never runs lower than a lone sidecar's reserve
// does before its claim returns.
func (r *Sizing) lowWater(now time.Time, target int) int {
	own := int(math.Ceil(r.current(now) * r.ahead.Seconds()))
	return max(target/4, min(own/2, target/2))
}

// WaitBound is how long a reserved row may wait for a slot before it is
// given back: longer means the rate it was claimed for is gone (the jobs
// slowed down, the processes are busy with long ones), and another worker
// may have a free slot now. Ten times claim_ahead, at least 1 s, and at
// least twice what a fleet-sized reserve holds, so a row is not given
// back only for waiting its turn.
// A queue turned shallow keeps the fleet's bound for the rows claimed
// while it was deep.
func (r Sizing) WaitBound() time.Duration {
	r.shallow = false
	return max(10*r.ahead, time.Second, 2*r.held())
}

// SetSlots tells the sizing how many jobs the pool runs at once (every
// process's concurrency). 0 (unknown) never lets a window's count outrun
// the rate before the window ends, but for a new pool's first.
func (r *Sizing) SetSlots(n int) { r.slots = max(n, 0) }

// SetFleet tells the sizing how many sidecars (this one included) share
// the pool's queues; 0 or 1 sizes by the sidecar's own rate.
func (r *Sizing) SetFleet(n int) { r.fleet = max(n, 1) }
