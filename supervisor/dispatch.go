package supervisor

// Claiming and dispatch: claims per pool, the unknown-name claim, handing
// jobs to processes and their spans, all on the loop goroutine.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/internal/maintenance"
	"github.com/soniq-dev/soniq-sidecar/internal/transport"
	"github.com/soniq-dev/soniq-sidecar/protocol"
)

func (l *loop) maybeClaim(pl *pool) {
	if l.state != StateRunning || pl.claiming || !pl.more || l.fatal != nil || l.reregistering {
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
	free -= queued
	if free <= 0 {
		return
	}
	names := pl.allNames
	if syncFree-pendingSync <= 0 {
		// No sync slot is free: claim only async jobs, so sync rows are not
		// held in the claimed-not-yet-running window for nothing.
		names = pl.asyncNames
	}
	if len(names) == 0 || l.holdClaim(pl, free, budget) {
		return
	}
	pl.claiming, pl.more = true, false
	l.claims++
	params := backends.ClaimParams{WorkerID: l.host.workerID, Queues: l.cfg.Settings.Queues, Names: names, Limit: free}
	if pl.claimReqs == nil {
		pl.claimReqs = make(chan claimReq, 1)
		l.wg.Add(1)
		go func() { defer l.wg.Done(); l.claimer(pl) }()
	}
	// Never blocks: one claim of a pool is in flight at a time.
	pl.claimReqs <- claimReq{params: params, allNames: len(names) == len(pl.allNames), writtenAt: l.writer.Written()}
}

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
	for req := range pl.claimReqs {
		// Detached and never cancelled: a claim that committed must reach
		// the loop, or its rows would stay processing under a live worker.
		ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
		jobs, err := b.Claim(ctx, req.params)
		cancel()
		l.emit(claimedEvent{pool: pl, jobs: jobs, limit: req.params.Limit, err: err, allNames: req.allNames, writtenAt: req.writtenAt})
	}
}

// stopClaimers ends the pools' claim goroutines; no claim is in flight.
func (l *loop) stopClaimers() {
	for _, pl := range l.pools {
		if pl.claimReqs != nil {
			close(pl.claimReqs)
			pl.claimReqs = nil
		}
	}
}

// onWake: a new job was enqueued on queue q ("" for any).
func (l *loop) onWake(q string) {
	if !l.servesQueue(q) {
		return
	}
	for _, pl := range l.pools {
		pl.more = true
	}
}

// onPoll: the poll interval elapsed; every pool may claim, and the
// unknown-name claim runs.
func (l *loop) onPoll() {
	for _, pl := range l.pools {
		pl.more = true
	}
	l.unknownDue = true
}

func (l *loop) onClaimed(e claimedEvent) {
	pl, jobs, limit, err := e.pool, e.jobs, e.limit, e.err
	pl.drained, pl.drainedAt = err == nil && len(jobs) == 0 && e.allNames, e.writtenAt
	pl.claiming = false
	l.claims--
	if maintenance.WorkerRowLost(err) {
		l.onWorkerLost(err)
		return
	}
	if err != nil {
		l.log.Warn("claiming jobs failed; retrying at the next poll", "handler", pl.h.Name, "err", err)
		return
	}
	l.metrics.jobsClaimed(jobs)
	pl.full = len(jobs) == limit
	if pl.full {
		pl.more = true
	}
	for i := range jobs {
		j := &jobs[i]
		spec := pl.h.Job(j.Name)
		t := &task{job: j, pool: pl, spec: spec, state: taskPending}
		if o, nack, ok := claimedOutcome(*j, spec, l.cfg.MaxFrameBytes); nack {
			l.log.Error(o.line, "job_id", j.ID, "job_name", j.Name, "queue", j.Queue, "handler", pl.h.Name)
			l.writer.Nack(j.ID)
			continue
		} else if !ok {
			l.apply(t, o)
			continue
		}
		if l.state >= StateForceTimeoutPath && nackedAtForce(false, t.sync()) {
			l.nack(t, "shutdown_timeout")
			continue
		}
		if old := l.live[j.ID]; old != nil {
			// The row came back to us after another worker recovered it
			// while we still ran it: only this claim may write it now.
			l.abandonSuperseded(old)
		}
		l.hold(t)
		pl.pending = append(pl.pending, t)
	}
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
// it began, whichever comes first. After a short claim (the queue was
// drained) nothing is held: a wake-up or a poll with a free slot claims at
// once, so pickup latency at low rates is unchanged.
func (l *loop) holdClaim(pl *pool, free, budget int) bool {
	if pl.full && free*4 < budget {
		now := time.Now()
		if pl.heldSince.IsZero() {
			// The hold begins: its timer claims at the bound. (An event
			// of an earlier hold's timer arriving late only re-checks.)
			pl.heldSince = now
			if pl.holdTimer == nil {
				pl.holdTimer = time.AfterFunc(claimHoldMax, func() { l.emit(claimHoldEvent{pool: pl}) })
			} else {
				pl.holdTimer.Reset(claimHoldMax)
			}
		}
		if now.Sub(pl.heldSince) < claimHoldMax {
			return true
		}
	}
	if !pl.heldSince.IsZero() {
		pl.heldSince = time.Time{}
		pl.holdTimer.Stop()
	}
	return false
}

func (l *loop) maybeClaimUnknown() {
	if !l.cfg.DeadLetterUnknown || !l.unknownDue || l.unknownClaiming || l.state != StateRunning || l.reregistering {
		return
	}
	l.unknownClaiming, l.unknownDue = true, false
	params := backends.ClaimParams{WorkerID: l.host.workerID, Queues: l.cfg.Settings.Queues, ExcludeNames: l.servedNames, Limit: 100}
	b := l.cfg.Backend
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
		jobs, err := b.Claim(ctx, params)
		cancel()
		l.emit(unknownClaimedEvent{jobs: jobs, err: err})
	}()
}

func (l *loop) onUnknownClaimed(jobs []backends.Job, err error) {
	l.unknownClaiming = false
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

// tryDispatch hands pending jobs to processes with a free slot; suspects,
// first in line, each to a process of its own.
func (l *loop) tryDispatch(pl *pool) {
	l.releaseIsolated(pl)
	if len(pl.pending) == 0 || l.state >= StateForceTimeoutPath {
		return
	}
	kept := pl.pending[:0]
	for _, t := range pl.pending {
		if l.adoptForeign(pl, t) {
			continue
		}
		var p *process
		if t.suspect {
			p = pl.pickEmpty(t.sync())
		} else {
			p = pl.pick(t)
		}
		if p == nil {
			kept = append(kept, t)
			continue
		}
		if t.suspect {
			l.isolate(t, p)
		}
		l.start(t, p)
	}
	clear(pl.pending[len(kept):])
	pl.pending = kept
	l.sendJobs()
}

// sendJobs queues each process's jobs of this dispatch as one message: the
// transport then writes them in one system call (stdio) or one stream
// message, where a message per job cost a wake-up of its writer and a
// write each.
func (l *loop) sendJobs() {
	for i, p := range l.dispatched {
		l.dispatched[i] = nil
		jobs := p.jobsOut
		p.jobsOut = nil
		var m protocol.Message = &transport.Jobs{Jobs: jobs}
		if len(jobs) == 1 {
			m = jobs[0]
		}
		if p.state == procDead || p.brokenCause != "" {
			continue // its jobs fail with it
		}
		if !p.send(m) {
			l.breakProcess(p, "unresponsive", fmt.Sprintf("handler %s process %d stopped reading its stdin", p.pool.h.Name, p.pid))
		}
	}
	l.dispatched = l.dispatched[:0]
}

func (l *loop) start(t *task, p *process) {
	l.bind(t, p)
	p.jobsRun++
	frame := newJobFrame(t.job, l.host.workerID)
	if l.spans {
		frame.Traceparent = l.startSpan(t)
	}
	if timeout := t.spec.EffectiveTimeout(l.cfg.Settings); timeout > 0 {
		dl := t.startedAt.Add(timeout).UnixMilli()
		frame.Deadline = &dl
	}
	l.metrics.jobStarted(t)
	if len(p.jobsOut) == 0 {
		l.dispatched = append(l.dispatched, p)
	}
	p.jobsOut = append(p.jobsOut, frame)
	if p.maxJobs > 0 && p.jobsRun >= p.maxJobs {
		l.log.Info("handler process reached max_jobs; recycling it when idle", "handler", p.pool.h.Name, p.who(), "jobs", p.jobsRun)
		l.retire(p)
	}
}

// startSpan opens the execution's span (OTel messaging conventions) and
// returns its W3C traceparent for the job frame, or nil when tracing is off.
func (l *loop) startSpan(t *task) *string {
	_, span := l.tracer.Start(context.Background(), "process "+t.job.Name,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithTimestamp(t.startedAt))
	// The attributes are built only for a span that records: with tracing
	// off (the no-op tracer) they were most of this function's cost, per
	// job. No sampler the sidecar can be configured with reads them.
	if span.IsRecording() {
		span.SetAttributes(
			attribute.String("messaging.system", "soniq"),
			attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.operation.name", "process"),
			attribute.String("messaging.destination.name", t.job.Queue),
			attribute.String("messaging.message.id", t.job.ID),
			attribute.String("soniq.job.name", t.job.Name),
			attribute.Int("soniq.job.attempt", t.job.Attempts),
			attribute.String("soniq.handler", t.pool.h.Name),
			attribute.Int("soniq.handler.pid", t.proc.pid),
		)
	}
	t.span = span
	sc := span.SpanContext()
	if !sc.IsValid() {
		return nil
	}
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), sc), carrier)
	if tp := carrier.Get("traceparent"); tp != "" {
		return &tp
	}
	return nil
}

// subscribe forwards new-job notifications to the loop as wake-ups.
func (s *Supervisor) subscribe(ctx context.Context) {
	ch, err := s.cfg.Backend.Subscribe(ctx)
	if errors.Is(err, backends.ErrNoWakeups) {
		s.log.Info("polling only: no new-job notifications", "poll_interval", s.cfg.Settings.PollInterval, "reason", err)
		return
	}
	if err != nil {
		s.log.Warn("new-job notifications unavailable; polling only", "poll_interval", s.cfg.Settings.PollInterval, "err", err)
		return
	}
	for q := range ch {
		s.emit(wakeEvent{queue: q})
	}
}
