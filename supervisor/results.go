package supervisor

// Results: a handler's answer, a timeout or a failure turned into the row's
// terminal write, all on the loop goroutine.

import (
	"strings"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/protocol"
)

func (l *loop) onResult(p *process, r *protocol.Result) {
	t := p.tasks[r.ID]
	if t == nil && p.attach.foreign != nil {
		t = l.orphanResult(p, r)
	}
	if t == nil {
		l.log.Warn("result for a job this process does not hold; discarded", "handler", p.pool.h.Name, p.who(), "job_id", r.ID, "status", string(r.Status))
		l.metrics.lateResult("", "unknown_id")
		l.ackNow(p, r.ID)
		return
	}
	l.unbind(t)
	if t.state == taskAbandoned {
		// Late: the row was already failed (job_timeout) or NACKed
		// (shutdown_timeout). It never touches the row.
		l.log.Info("late result discarded", "job_id", t.job.ID, "job_name", t.job.Name, "queue", t.job.Queue,
			"status", string(r.Status), "abandoned_by", t.abandoned)
		l.metrics.lateResult(t.job.Name, t.abandoned)
		l.ackNow(p, r.ID)
	} else {
		l.completed(t.pool)
		l.record(t, r)
		l.ackLater(p, r.ID)
	}
}

// record turns a handler's result into the row's terminal write, with the
// children its execution made.
func (l *loop) record(t *task, r *protocol.Result) {
	o := resultOutcome(*t.job, t.spec, r, l.cfg.Settings.ResultTTL, randFloat)
	l.apply(t, childrenOutcome(o, *t.job, t.spec.Retry, t.kids.deferred, t.kids.refused, randFloat))
}

// fail applies the retry policy to a failure the sidecar saw (a timeout, a
// crash) or the handler reported.
func (l *loop) fail(t *task, text string, retryable bool, status string) {
	l.apply(t, failureOutcome(*t.job, t.spec.Retry, text, retryable, status, randFloat))
}

// apply carries out an outcome (fate.go): the row is no longer held, the
// execution's metrics, span and log line report it, and its write is
// queued. extra adds to the log line.
func (l *loop) apply(t *task, o outcome, extra ...any) {
	j := t.job
	l.drop(t)
	if !t.startedAt.IsZero() {
		l.metrics.jobEnded(t, o.status)
	}
	t.endSpan(o.status, o.err)
	c := o.write
	// The write settles this claim of the row and no later one: a write
	// retried after its first try committed (the reply lost) must not land
	// on the row claimed again by this worker.
	c.Attempts = j.Attempts
	if o.line != "" {
		attrs := append([]any{"job_id", j.ID, "job_name", j.Name, "queue", j.Queue, "attempt", j.Attempts, "max_attempts", j.MaxAttempts}, extra...)
		if c.Outcome == backends.OutcomeRetry {
			l.log.Warn(o.line, append(attrs, "retry_in", c.Delay, "error", firstLine(o.err))...)
		} else {
			l.log.Error(o.line, append(attrs, "reason", c.Reason, "error", firstLine(o.err))...)
		}
	}
	l.writer.Complete(c)
}

func (l *loop) onJobTimeout(t *task) {
	if t.state != taskRunning || l.live[t.job.ID] != t {
		return
	}
	timeout := t.spec.EffectiveTimeout(l.cfg.Settings)
	t.state, t.abandoned = taskAbandoned, "job_timeout"
	if t.sync() {
		// The handler cannot be interrupted: the row fails per policy, the
		// process keeps running and keeps its sync slot until it returns
		// (its late result is discarded).
		l.log.Warn("sync job exceeded its timeout: row failed per policy; the handler keeps running and keeps its sync slot",
			"job_id", t.job.ID, "job_name", t.job.Name, "queue", t.job.Queue, "timeout", timeout, t.proc.who())
	} else {
		l.sendCancel(t, protocol.ReasonJobTimeout)
		l.log.Warn("async job exceeded its timeout: cancelled, failed per policy",
			"job_id", t.job.ID, "job_name", t.job.Name, "queue", t.job.Queue, "timeout", timeout, t.proc.who())
	}
	l.fail(t, timeoutText(timeout), true, "timeout")
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return truncate(line, 300)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
