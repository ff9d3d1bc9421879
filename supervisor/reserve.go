package supervisor

// Claim-ahead. A pool that claimed only its free slots made one statement
// per few rows, and every sidecar added to a fleet shrank every claim. So a
// pool may claim more than its free slots: the surplus waits in its
// reserve (the pending jobs beyond its free slots, in claim order) and goes
// to the handlers as slots free up. The reserve is sized by Little's law
// (internal/reserve): from the pool's own completion rate, times the
// number of sidecars sharing its queues while the queue is deep, it holds
// at most claim_ahead of the fleet's work, at most claim_ahead_max rows,
// and is topped up when it falls to half. A pool of slow jobs therefore
// holds almost nothing, a fleet's claims stay as large as one sidecar's,
// and claim_ahead 0 claims only free slots.
//
// A reserved row is processing under this worker with its attempt charged,
// like every claimed row. It never reached a handler, so when it is given
// back (at DRAINING, when its pool has no ready process, when it waited
// longer than waitBound) its attempt is refunded (Backend.ReturnJobs). A
// row on its last attempt is never reserved (ClaimParams.Ahead): a crash
// may cost a reserved job one retry, never its last.

import (
	"time"

	"github.com/soniq-dev/soniq-sidecar/internal/reserve"
)

// poolReserve is one pool's reserve: its sizing, the timer that gives
// back reserved rows that waited too long, and the size last recorded in
// the metrics.
type poolReserve struct {
	sizing    reserve.Sizing
	waitTimer *time.Timer
	shown     [2]int
}

// stopReserveTimer stops pl's wait timer; the loop is returning.
func (l *loop) stopReserveTimer(pl *pool) {
	if pl.ahead.waitTimer != nil {
		pl.ahead.waitTimer.Stop()
	}
}

// onFleetSize: the sidecars sharing this one's queues were counted; every
// pool's reserve is sized for them.
func (l *loop) onFleetSize(n int) {
	for _, pl := range l.pools {
		pl.ahead.sizing.SetFleet(n)
	}
}

// completed counts an execution of pl that ended, for its reserve's rate.
func (l *loop) completed(pl *pool) { pl.ahead.sizing.Completed(time.Now()) }

// giveBackStale gives back, before anything is dispatched, the pending
// rows that waited more than twice the reserve's bound. The wait timer
// gives rows back at the bound, so such a row means the loop did not run
// meanwhile: the sidecar was frozen (SIGSTOP, a paused VM). Its first
// event after that may be a result that frees a slot, and the rows it
// still holds may have been recovered and run, even cancelled, by another
// worker; dispatched, such a row ran again here (make chaos, seed 7).
// Given back, the guarded write leaves a row another worker holds alone.
func (l *loop) giveBackStale(pl *pool) {
	r := &pl.ahead.sizing
	// Draining keeps its own rule (settleReserve): what free slots will
	// take stays, and is NACKed at FORCE_TIMEOUT_PATH if it never starts.
	if !r.On() || len(pl.pending) == 0 || l.shut.state != StateRunning {
		return
	}
	now := time.Now()
	var stale []*task
	for _, t := range pl.pending {
		if !t.suspect && now.Sub(t.queuedAt) >= 2*r.WaitBound() {
			stale = append(stale, t)
		}
	}
	if len(stale) > 0 {
		l.giveBack(stale, "waited")
	}
}

// settleReserve gives back the reserved rows that will not start here
// soon: all of them once the sidecar drains (a reserved row is not
// in-flight work: another worker can start it now) or when the pool has no
// ready process, and those that waited longer than the reserve's bound.
// Given back means queued again with the attempt their claim charged
// refunded, in their place in line. Then the reserve's size is shown.
func (l *loop) settleReserve(pl *pool) {
	r := &pl.ahead.sizing
	if !r.On() {
		if pl.ahead.shown != [2]int{} {
			pl.ahead.shown = [2]int{}
			l.metrics.reserveSize(pl.h.Name, 0, 0) // exported, at 0, when claim-ahead is off
		}
		return
	}
	if len(pl.pending) > 0 {
		// What the free slots will take is claimed-not-yet-running work,
		// as without a reserve; what waits beyond them is the reserve.
		var why string
		slots := 0
		switch {
		case !pl.hasReady():
			why = "no_process"
		case l.shut.state >= StateDraining:
			why = "draining"
			slots = l.freeSlots(pl)
		}
		now := time.Now()
		var back []*task
		var oldest time.Time
		for _, t := range pl.pending {
			switch {
			case t.suspect:
				// Its row is kept for its run alone (suspect.go).
			case why != "" && slots > 0:
				slots--
			case why != "" || now.Sub(t.queuedAt) >= r.WaitBound():
				back = append(back, t)
			case oldest.IsZero() || t.queuedAt.Before(oldest):
				oldest = t.queuedAt
			}
		}
		if len(back) > 0 {
			if why == "" {
				why = "waited"
			}
			l.giveBack(back, why)
		}
		if !oldest.IsZero() {
			// Wake when the oldest left reaches the bound.
			d := oldest.Add(r.WaitBound()).Sub(now)
			if pl.ahead.waitTimer == nil {
				pl.ahead.waitTimer = time.AfterFunc(d, func() { l.emit(reserveWaitEvent{pool: pl}) })
			} else {
				pl.ahead.waitTimer.Reset(d)
			}
		}
	}
	held := 0
	for _, t := range pl.pending {
		if !t.suspect {
			held++
		}
	}
	if shown := [2]int{held, r.Target(time.Now(), pl.hasReady())}; shown != pl.ahead.shown {
		pl.ahead.shown = shown
		l.metrics.reserveSize(pl.h.Name, shown[0], shown[1])
	}
}

// freeSlots is the slots of pl's ready processes not running a job.
func (l *loop) freeSlots(pl *pool) int {
	free := 0
	for _, p := range pl.procs {
		if p != nil && p.state == procReady && pl.isolated[p] == nil {
			free += max(p.free(), 0)
		}
	}
	return free
}

// giveBack returns claimed rows that never reached a handler: queued
// again, attempts refunded, their place in line kept.
func (l *loop) giveBack(ts []*task, why string) {
	ids := make([]string, len(ts))
	for i, t := range ts {
		ids[i] = t.job.ID
		l.drop(t)
		if t.state == taskPending {
			l.unqueue(t)
		}
		l.writer.Return(*t.job)
	}
	l.metrics.jobsReturned(why, len(ts))
	l.log.Info("gave back reserved jobs unstarted: queued again in their place, their attempt refunded",
		"handler", ts[0].pool.h.Name, "reason", why, "jobs", len(ids), "job_ids", ids)
}
