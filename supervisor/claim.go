package supervisor

// Claiming: a claim per pool when its free slots and reserve call for one,
// the claim goroutines, what a claim brought back, the hold that waits for
// a larger claim, the reconciliation after a claim whose reply was lost,
// the unknown-name claim, and the new-job subscription that wakes them,
// all on the loop goroutine unless said otherwise.

import (
	"context"
	"errors"
	"time"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/internal/maintenance"
)

// loopClaims is the loop's claim state.
type loopClaims struct {
	inFlight        int      // claim statements in flight
	unknownInFlight bool     // a --dead-letter-unknown claim is in flight
	unknownDue      bool     // the poll or a re-registration asks for one
	servedNames     []string // every job name a pool serves (the unknown claim excludes them)
	// A claim failed with an outcome the sidecar cannot know (the
	// connection broke after the statement was sent: it may have
	// committed). Before the next claim, the rows processing under this
	// worker that the loop does not hold are read and given back unstarted
	// (reconcile, onReconcileRead, onReconciled).
	reconcile      bool
	reconciling    bool      // the read or the return is in flight
	reconcileAfter time.Time // a failed read retries from then
}

// poolClaims is one pool's claim state.
type poolClaims struct {
	busy bool          // its claim is in flight
	reqs chan claimReq // to the pool's claimer; nil until its first claim
	more bool          // there may be runnable rows: claim when capacity allows
	// The last claim got every row it asked for; the next one waits for a
	// quarter of the budget to be free, from heldSince for at most
	// claimHoldMax (holdClaim).
	full      bool
	heldSince time.Time
	holdTimer *time.Timer
	// run --once: the last claim asked for every job name and came back
	// empty, issued when the writer had written drainedAt batches.
	drained   bool
	drainedAt int64
	// capped: the last claim with free slots left runnable rows queued
	// because of a fleet-wide cap, so a write that frees a slot of the
	// scope claims again (onWritten).
	capped bool
	// rateTimer claims again after a rate cap held rows back (retryRated).
	rateTimer *time.Timer
}

// serve records the job names of a pool, for the unknown-name claim.
func (l *loop) serve(pl *pool) {
	l.claim.servedNames = append(l.claim.servedNames, pl.allNames...)
}

func (l *loop) maybeClaim(pl *pool) {
	if l.shut.state != StateRunning || pl.claim.busy || !pl.claim.more || l.fatal != nil || l.rereg.active || l.claim.reconcile {
		return
	}
	free, syncFree, pendingSync, budget := 0, 0, 0, 0
	for _, p := range pl.procs { // the ready ones (not pl.ready(): no slice per call, per result)
		if p == nil || p.state != procReady {
			continue
		}
		if pl.isolated[p] != nil {
			continue // takes no other job while its suspect runs
		}
		free += p.free()
		syncFree += p.syncFree()
		budget += p.capacity()
	}
	queued := 0
	for _, t := range pl.pending {
		if t.suspect {
			continue // waits for an empty process, not for a slot of these
		}
		queued++
		if t.sync() {
			pendingSync++
		}
	}
	// The slots to fill, and the reserve: what waits beyond free slots,
	// topped up to its target once it falls to half.
	unfilled := free - queued
	ahead := pl.ahead.sizing.TopUp(time.Now(), max(-unfilled, 0), budget > 0)
	free = max(unfilled, 0)
	if pl.limit.all {
		ahead = 0 // limited rows are never reserved
	}
	if free+ahead <= 0 {
		return
	}
	names := pl.allNames
	if syncFree-pendingSync <= 0 {
		// No sync slot is free: claim only async jobs, so sync rows are not
		// held in the claimed-not-yet-running window for nothing.
		names = pl.asyncNames
	}
	if len(names) == 0 || (ahead == 0 && l.holdClaim(pl, free, budget)) {
		return
	}
	pl.claim.busy, pl.claim.more = true, false
	l.claim.inFlight++
	params := backends.ClaimParams{WorkerID: l.host.workerID, Queues: l.cfg.Settings.Queues, Names: names, Limit: free, Ahead: ahead,
		Limits: pl.limit.scopes}
	if pl.claim.reqs == nil {
		pl.claim.reqs = make(chan claimReq, 1)
		l.wg.Add(1)
		go func() { defer l.wg.Done(); l.claimer(pl) }()
	}
	// Never blocks: one claim of a pool is in flight at a time.
	pl.claim.reqs <- claimReq{params: params, allNames: len(names) == len(pl.allNames), writtenAt: l.writer.Written()}
}

// onWritten: a batch of results was written. A pool whose last claim left
// rows queued at a cap claims again: the rows just written may have freed
// the slots the cap counts (a claim made as the result arrived, before its
// write, still counted them).
func (l *loop) onWritten() {
	for _, pl := range l.pools {
		if pl.claim.capped {
			pl.claim.more = true
		}
	}
}

// retryRated claims again for pl soon after a rate cap held rows back: a
// rate's window slides with time, not with a result written, and waiting
// for the poll would drain a backlog far under the rate.
func (l *loop) retryRated(pl *pool) {
	d := rateRetry(pl.limit.scopes)
	if pl.claim.rateTimer == nil {
		pl.claim.rateTimer = time.AfterFunc(d, func() { l.emit(rateRetryEvent{pool: pl}) })
	} else {
		pl.claim.rateTimer.Reset(d)
	}
}

// onRateRetry: a rate-capped pool's window may have moved on.
func (l *loop) onRateRetry(pl *pool) { pl.claim.more = true }

// claimReq is one claim for a pool's claimer.
type claimReq struct {
	params    backends.ClaimParams
	allNames  bool
	writtenAt int64
}

// claimer is a pool's claim goroutine, from its first claim until the loop
// returns (stopClaimers). One goroutine for all of a pool's claims, rather
// than one per claim: a new goroutine's stack grew through pgx's call depth
// on every claim, a few percent of the sidecar's CPU at full load.
func (l *loop) claimer(pl *pool) {
	b := l.cfg.Backend
	cc, carries := b.(backends.CompleteClaimer)
	for req := range pl.claim.reqs {
		// Never cancelled before the shutdown's write deadline: a claim
		// that committed must reach the loop, or its rows would stay
		// processing under a live worker. Past it the claim is abandoned.
		ctx, cancel := context.WithTimeout(l.shut.cut, writeTimeout)
		sentAt := time.Now()
		capped, rated := false, false
		if len(req.params.Limits) > 0 {
			req.params.Report = func(ds []backends.Deferral) {
				capped = true
				for _, d := range ds {
					rated = rated || d.Limit == "rate"
				}
				l.metrics.limitDeferred(ds)
			}
		}
		var jobs []backends.Job
		var err error
		var cs []backends.Completion
		if carries {
			cs = l.writer.Lend(maxCarried)
		}
		if len(cs) > 0 {
			// The results waiting to be written ride in the claim's
			// transaction: one round trip instead of two.
			var applied []string
			var failed error
			applied, jobs, err, failed = cc.CompleteAndClaim(ctx, req.params.WorkerID, cs, req.params)
			l.writer.Lent(cs, applied, failed == nil)
			if failed != nil {
				err = failed
			}
		} else {
			jobs, err = b.Claim(ctx, req.params)
		}
		cancel()
		l.emit(claimedEvent{pool: pl, jobs: jobs, limit: req.params.Limit, ahead: req.params.Ahead, err: err, allNames: req.allNames, writtenAt: req.writtenAt, sentAt: sentAt, capped: capped, rated: rated})
	}
}

// maxCarried bounds the completions one claim carries.
const maxCarried = 500

// stopClaimers ends the pools' claim goroutines; no claim is in flight.
func (l *loop) stopClaimers() {
	for _, pl := range l.pools {
		l.stopReserveTimer(pl)
		if pl.claim.rateTimer != nil {
			pl.claim.rateTimer.Stop()
		}
		if pl.claim.reqs != nil {
			close(pl.claim.reqs)
			pl.claim.reqs = nil
		}
	}
}

// onWake: a new job was enqueued on queue q ("" for any).
func (l *loop) onWake(q string) {
	if !l.servesQueue(q) {
		return
	}
	for _, pl := range l.pools {
		pl.claim.more = true
	}
}

// onPoll: the poll interval elapsed.
func (l *loop) onPoll() { l.claimEverything(); l.readCancels(); l.readOverrides() }

// claimEverything: every pool may claim again, and the unknown-name claim
// runs (the poll, a registration again).
func (l *loop) claimEverything() {
	for _, pl := range l.pools {
		pl.claim.more = true
	}
	l.claim.unknownDue = true
}

func (l *loop) onClaimed(e claimedEvent) {
	pl, jobs, limit, err := e.pool, e.jobs, e.limit, e.err
	pl.claim.drained, pl.claim.drainedAt = err == nil && len(jobs) == 0 && e.allNames, e.writtenAt
	pl.claim.busy = false
	l.claim.inFlight--
	if maintenance.WorkerRowLost(err) {
		l.onWorkerLost(err)
		return
	}
	if err != nil {
		l.log.Warn("claiming jobs failed; retrying at the next poll, after checking whether the failed claim took rows", "handler", pl.h.Name, "err", err)
		l.claim.reconcile = true
		return
	}
	l.metrics.jobsClaimed(jobs)
	l.metrics.claimRows(pl.h.Name, len(jobs))
	// A claim that got fewer rows than it asked for found the queue
	// nearly drained: the reserve stops sizing for the fleet.
	pl.ahead.sizing.Claimed(limit+e.ahead, len(jobs))
	if limit > 0 {
		// A claim with no free slot asks no cap anything: what the last
		// one with slots found still holds.
		pl.claim.capped = e.capped
		if e.capped && l.writer.Written() > e.writtenAt {
			// A write that landed while it was in flight may have freed a
			// slot it counted as taken, and onWritten, which claims again
			// for a capped scope, ran before the scope was known capped.
			pl.claim.more = true
		}
	}
	if e.rated {
		l.retryRated(pl)
	}
	if e.ahead > 0 {
		// A reserve claim is never held back; it ran dry when it found
		// nothing (rows on their last attempt may have been skipped). A
		// wake-up that came while it was in flight stands: its statement
		// may have run before that job's commit.
		pl.claim.full = false
		pl.claim.more = pl.claim.more || len(jobs) > 0
	} else {
		pl.claim.full = len(jobs) == limit
		if pl.claim.full {
			pl.claim.more = true
		}
	}
	now := time.Now()
	if late := now.Sub(e.sentAt); len(jobs) > 0 && l.claimStale(late) {
		l.giveBackLateClaim(pl, jobs, late)
		return
	}
	for i := range jobs {
		j := &jobs[i]
		spec := pl.h.Job(j.Name)
		t := &task{job: j, pool: pl, spec: spec, state: taskPending}
		if o, nack, ok := claimedOutcome(*j, spec, l.cfg.MaxFrameBytes); nack {
			l.log.Error(o.line, "job_id", j.ID, "job_name", j.Name, "queue", j.Queue, "handler", pl.h.Name)
			l.writer.Nack(*j)
			continue
		} else if !ok {
			l.apply(t, o)
			continue
		}
		if old := l.live[j.ID]; old != nil {
			// The row came back to us after another worker recovered it
			// while we still ran it: only this claim may write it now.
			l.abandonSuperseded(old)
		}
		if l.shut.state >= StateForceTimeoutPath && nackedAtForce(false, t.sync()) {
			if pl.ahead.sizing.On() {
				l.giveBack([]*task{t}, "shutdown")
			} else {
				l.nack(t, "shutdown_timeout")
			}
			continue
		}
		l.hold(t)
		t.queuedAt = now
		l.queueClaimed(t)
	}
	if pl.ahead.sizing.On() && len(jobs) > 0 {
		// New work goes where the claim order puts it: a job of a better
		// priority than the reserve's worst row does not wait behind it.
		l.reorderPending(pl)
	}
}

// claimStale reports whether a claim whose answer reached the loop late
// after it was sent may have had its rows recovered meanwhile: the claim
// proved this worker alive when it ran, no earlier than it was sent, and
// another worker recovers it only once heartbeat_timeout has passed since
// its last proof of life. A beat's worth of margin covers the clocks.
func (l *loop) claimStale(late time.Duration) bool {
	s := l.cfg.Settings
	return s.HeartbeatTimeout > 0 && late > s.HeartbeatTimeout-s.HeartbeatInterval
}

// giveBackLateClaim gives back unstarted the rows of a claim whose answer
// came after the sidecar was frozen (SIGSTOP, a paused VM) or cut off
// longer than claimStale allows: another worker may have recovered them
// and run them, even cancelled them, by now. The guarded return leaves a
// row another worker holds alone; a row nobody took goes back to the queue
// with its attempt refunded. Dispatched, such a row ran again here (make
// chaos: a claim answered as its sidecar was stopped, its rows started on
// resume after another sidecar had recovered and cancelled one).
func (l *loop) giveBackLateClaim(pl *pool, jobs []backends.Job, late time.Duration) {
	ts := make([]*task, len(jobs))
	for i := range jobs {
		ts[i] = &task{job: &jobs[i], pool: pl, state: taskPending}
	}
	l.log.Warn("a claim's answer came too late to trust its rows (the sidecar was frozen or cut off meanwhile): another worker may have recovered them; gave them back unstarted",
		"handler", pl.h.Name, "took", late.Round(time.Millisecond), "heartbeat_timeout", l.cfg.Settings.HeartbeatTimeout, "jobs", len(jobs))
	l.giveBack(ts, "waited")
}

// claimHoldMax bounds how long freed slots wait for a larger claim: about
// one claim round trip on a busy machine (a median of 4.4 ms on 2 saturated
// cores while draining a queue). A queued job never waits longer than this
// behind a partly free budget, so a few long-running jobs cannot stall it,
// and the wait is small beside any job that runs long enough to hold a slot.
const claimHoldMax = 5 * time.Millisecond

// holdClaim reports whether pl's claim should wait for more free slots:
// while the previous claim came back full (the queue holds more rows) and
// less than a quarter of the budget is free, claiming every slot as it
// frees would cost a statement, with its fixed cost in the database, for a
// row or two. The hold ends when a quarter is free or claimHoldMax after
// it began, whichever comes first. A pool whose jobs are all limited waits
// for half: it reserves nothing, so every one of its rows comes through
// such a claim, and a limited claim's fixed cost is larger (a walk of the
// keys, their locks, six statements); claims of a quarter alternated with
// claims of three quarters, and every other one read its walk again.
// After a short claim (the queue was drained) nothing is held: a wake-up
// or a poll with a free slot claims at once, so pickup latency at low
// rates is unchanged.
func (l *loop) holdClaim(pl *pool, free, budget int) bool {
	part := 4 // a quarter
	if pl.limit.all {
		part = 2
	}
	if pl.claim.full && free*part < budget {
		now := time.Now()
		if pl.claim.heldSince.IsZero() {
			// The hold begins: its timer claims at the bound. (An event
			// of an earlier hold's timer arriving late only re-checks.)
			pl.claim.heldSince = now
			if pl.claim.holdTimer == nil {
				pl.claim.holdTimer = time.AfterFunc(claimHoldMax, func() { l.emit(claimHoldEvent{pool: pl}) })
			} else {
				pl.claim.holdTimer.Reset(claimHoldMax)
			}
		}
		if now.Sub(pl.claim.heldSince) < claimHoldMax {
			return true
		}
	}
	if !pl.claim.heldSince.IsZero() {
		pl.claim.heldSince = time.Time{}
		pl.claim.holdTimer.Stop()
	}
	return false
}

// reconcile reads, once no claim is in flight, the rows processing under
// this worker, so that rows a failed claim took (its reply was lost) go
// back to the queue at once instead of waiting for the self-audit.
func (l *loop) reconcile() {
	if !l.claim.reconcile || l.claim.reconciling || l.claim.inFlight > 0 || l.claim.unknownInFlight ||
		l.shut.state != StateRunning || l.rereg.active || time.Now().Before(l.claim.reconcileAfter) {
		return
	}
	l.claim.reconciling = true
	b, workerID, cut, emit := l.cfg.Backend, l.host.workerID, l.shut.cut, l.emit
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		ctx, cancel := context.WithTimeout(cut, writeTimeout)
		defer cancel()
		rows, err := b.ProcessingJobs(ctx, workerID)
		emit(reconcileReadEvent{rows: rows, err: err})
	}()
}

// onReconcileRead: the rows processing under this worker that the loop
// does not hold were taken by a claim whose reply never came: no handler
// ever saw them, so they are returned with their attempt refunded.
func (l *loop) onReconcileRead(rows []backends.Job, err error) {
	if err != nil {
		l.claim.reconciling = false
		l.claim.reconcileAfter = time.Now().Add(l.cfg.Settings.PollInterval)
		l.log.Warn("checking whether a failed claim took rows failed; claiming waits and retries at the next poll", "err", err)
		return
	}
	var lost []backends.Job
	for _, j := range rows {
		if !l.knows(j.ID) {
			lost = append(lost, j)
		}
	}
	if len(lost) == 0 {
		l.claim.reconcile, l.claim.reconciling = false, false
		return
	}
	b, workerID, cut, emit := l.cfg.Backend, l.host.workerID, l.shut.cut, l.emit
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		ctx, cancel := context.WithTimeout(cut, writeTimeout)
		defer cancel()
		returned, err := b.ReturnJobs(ctx, workerID, lost)
		emit(reconciledEvent{held: lost, returned: returned, err: err})
	}()
}

// onReconciled: the lost claim's rows are back in the queue; claiming
// resumes.
func (l *loop) onReconciled(held []backends.Job, returned []string, err error) {
	l.claim.reconciling = false
	if err != nil {
		l.claim.reconcileAfter = time.Now().Add(l.cfg.Settings.PollInterval)
		l.log.Warn("giving back the rows a failed claim took failed; claiming waits and retries at the next poll", "jobs", len(held), "err", err)
		return
	}
	l.claim.reconcile = false
	ids := make([]string, len(held))
	for i, j := range held {
		ids[i] = j.ID
	}
	l.log.Warn("a claim's reply was lost after it took rows (the connection broke mid-statement); gave them back unstarted, their attempt refunded",
		"worker_id", l.host.workerID, "job_ids", ids, "returned", len(returned))
	l.metrics.jobsReturned("lost_reply", len(returned))
	l.claimEverything()
}

func (l *loop) maybeClaimUnknown() {
	if !l.cfg.DeadLetterUnknown || !l.claim.unknownDue || l.claim.unknownInFlight || l.shut.state != StateRunning || l.rereg.active {
		return
	}
	l.claim.unknownInFlight, l.claim.unknownDue = true, false
	params := backends.ClaimParams{WorkerID: l.host.workerID, Queues: l.cfg.Settings.Queues, ExcludeNames: l.claim.servedNames, Limit: 100}
	b, cut := l.cfg.Backend, l.shut.cut
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		ctx, cancel := context.WithTimeout(cut, writeTimeout)
		jobs, err := b.Claim(ctx, params)
		cancel()
		l.emit(unknownClaimedEvent{jobs: jobs, err: err})
	}()
}

func (l *loop) onUnknownClaimed(jobs []backends.Job, err error) {
	l.claim.unknownInFlight = false
	if maintenance.WorkerRowLost(err) {
		l.onWorkerLost(err)
		return
	}
	if err != nil {
		l.log.Warn("claiming unknown job names failed", "err", err)
		return
	}
	for i := range jobs {
		j := &jobs[i]
		l.apply(&task{job: j}, unknownNameOutcome(*j))
	}
}

// forwardWakeups forwards the subscription's new-job notifications and cancel
// requests to the loop as events.
func (s *Supervisor) forwardWakeups(ch <-chan backends.Wakeup, err error) {
	if errors.Is(err, backends.ErrNoWakeups) {
		s.log.Info("polling only: no new-job notifications", "poll_interval", s.cfg.Settings.PollInterval, "reason", err)
		return
	}
	if err != nil {
		s.log.Warn("new-job notifications unavailable; polling only", "poll_interval", s.cfg.Settings.PollInterval, "err", err)
		return
	}
	for w := range ch {
		if w.CancelJobID != "" {
			s.emit(cancelWakeEvent{jobID: w.CancelJobID})
			continue
		}
		s.emit(wakeEvent{queue: w.Queue})
	}
}
