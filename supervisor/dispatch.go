package supervisor

// Dispatch: the pending jobs of each pool (claimed, not yet started) in the
// order they start in, handing them to processes, and their spans, all on
// the loop goroutine.

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/soniq-dev/soniq-sidecar/internal/transport"
	"github.com/soniq-dev/soniq-sidecar/protocol"
)

// loopDispatch is the dispatch under way.
type loopDispatch struct {
	procs []*process // the processes given jobs by it (sendJobs)
}

// queueSuspect puts a suspect's run ahead of every job that is not one.
func (l *loop) queueSuspect(t *task) {
	pl := t.pool
	at := slices.IndexFunc(pl.pending, func(x *task) bool { return !x.suspect })
	if at < 0 {
		at = len(pl.pending)
	}
	pl.pending = slices.Insert(pl.pending, at, t)
}

// unqueue takes t out of its pool's pending jobs.
func (l *loop) unqueue(t *task) {
	pl := t.pool
	pl.pending = slices.DeleteFunc(pl.pending, func(p *task) bool { return p == t })
}

// queueClaimed puts a claimed job at the end of its pool's pending jobs.
func (l *loop) queueClaimed(t *task) { t.pool.pending = append(t.pool.pending, t) }

// reorderPending puts pl's pending jobs in the order they start in.
func (l *loop) reorderPending(pl *pool) { slices.SortStableFunc(pl.pending, claimOrder) }

// takePending empties a pool's pending jobs and returns them.
func (l *loop) takePending(pl *pool) []*task {
	ts := pl.pending
	pl.pending = nil
	return ts
}

// claimOrder is the order pending jobs start in: suspects first, then the
// claim's order (priority, scheduled_at nulls first, created_at).
func claimOrder(a, b *task) int {
	if a.suspect != b.suspect {
		if a.suspect {
			return -1
		}
		return 1
	}
	x, y := a.job, b.job
	if c := cmp.Compare(x.Priority, y.Priority); c != 0 {
		return c
	}
	switch {
	case x.ScheduledAt == nil && y.ScheduledAt != nil:
		return -1
	case x.ScheduledAt != nil && y.ScheduledAt == nil:
		return 1
	case x.ScheduledAt != nil:
		if c := x.ScheduledAt.Compare(*y.ScheduledAt); c != 0 {
			return c
		}
	}
	return x.CreatedAt.Compare(y.CreatedAt)
}

// tryDispatch hands pending jobs to processes with a free slot; suspects,
// first in line, each to a process of its own.
func (l *loop) tryDispatch(pl *pool) {
	l.releaseIsolated(pl)
	if len(pl.pending) == 0 || l.shut.state >= StateForceTimeoutPath {
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
	for i, p := range l.dispatch.procs {
		l.dispatch.procs[i] = nil
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
	l.dispatch.procs = l.dispatch.procs[:0]
}

func (l *loop) start(t *task, p *process) {
	if !t.queuedAt.IsZero() && p.pool.ahead.sizing.On() {
		l.metrics.reserveWaited(p.pool.h.Name, time.Since(t.queuedAt))
	}
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
		l.dispatch.procs = append(l.dispatch.procs, p)
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
