package supervisor

// Results: a handler's answer, a timeout or a failure turned into the row's
// terminal write, all on the loop goroutine.

import (
	"strings"
	"time"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/protocol"
)

func (l *loop) onResult(p *process, r *protocol.Result) {
	t := p.tasks[r.ID]
	if t == nil {
		l.log.Warn("result for a job this process does not hold; discarded", "handler", p.pool.h.Name, "pid", p.pid, "job_id", r.ID, "status", string(r.Status))
		l.metrics.lateResult("", "unknown_id")
		return
	}
	delete(p.tasks, r.ID)
	if t.sync() {
		p.syncHeld--
	}
	if t.timer != nil {
		t.timer.Stop()
	}
	if t.state == taskAbandoned {
		// Late: the row was already failed (job_timeout) or NACKed
		// (shutdown_timeout). It never touches the row.
		l.log.Info("late result discarded", "job_id", t.job.ID, "job_name", t.job.Name, "queue", t.job.Queue,
			"status", string(r.Status), "abandoned_by", t.abandoned)
		l.metrics.lateResult(t.job.Name, t.abandoned)
	} else {
		delete(l.live, t.job.ID)
		l.record(t, r)
	}
	if p.state == procRetiring && len(p.tasks) == 0 {
		l.stopProcess(p, l.cfg.StopGrace)
	}
	l.tryDispatch(p.pool)
	l.maybeClaim(p.pool)
	l.checkDone()
}

// record turns a handler's result into the row's terminal write.
func (l *loop) record(t *task, r *protocol.Result) {
	j := t.job
	dur := time.Since(t.startedAt)
	switch r.Status {
	case protocol.StatusDone:
		t.endSpan("done", "")
		l.metrics.jobEnded(j.Queue, j.Name, "done", dur)
		l.writer.complete(backends.Completion{JobID: j.ID, Outcome: backends.OutcomeDone, Result: r.Result, ResultTTL: l.cfg.Settings.ResultTTL})
	case protocol.StatusSnooze:
		reason := ""
		if r.Reason != nil {
			reason = *r.Reason
		}
		t.endSpan("snoozed", "")
		l.metrics.jobEnded(j.Queue, j.Name, "snoozed", dur)
		l.writer.complete(backends.Completion{JobID: j.ID, Outcome: backends.OutcomeSnooze, Reason: reason,
			Delay: time.Duration(r.Seconds * float64(time.Second))})
	case protocol.StatusFailed:
		e := r.Error
		if e.Reason == protocol.ErrorReasonInvalidArguments {
			l.invalidArgs(t, e.Message)
			return
		}
		text := e.Type + ": " + e.Message
		if e.Traceback != nil && *e.Traceback != "" {
			text += "\n" + *e.Traceback
		}
		l.fail(t, text, e.Retryable, "failed")
	default: // cancelled without a cancel: the handler gave up on its own
		l.fail(t, "cancelled by the handler without a cancel request", true, "failed")
	}
}

// fail applies the retry policy: retry with the job's delay, or
// dead-letter when attempts are exhausted or the error is permanent.
func (l *loop) fail(t *task, text string, retryable bool, status string) {
	j := t.job
	delete(l.live, j.ID)
	if !t.startedAt.IsZero() {
		l.metrics.jobEnded(j.Queue, j.Name, status, time.Since(t.startedAt))
	}
	c := backends.Completion{JobID: j.ID, Error: text}
	t.endSpan(status, text)
	switch {
	case !retryable:
		c.Outcome, c.Reason = backends.OutcomeDeadLetter, backends.ReasonPermanentFailure
		c.Error = permanentText(text)
		l.log.Error("job failed permanently: dead-lettered", "job_id", j.ID, "job_name", j.Name, "queue", j.Queue, "attempt", j.Attempts, "error", firstLine(text))
	case j.Attempts >= j.MaxAttempts:
		c.Outcome, c.Reason = backends.OutcomeDeadLetter, backends.ReasonMaxRetriesExceeded
		c.Error = "Max retries exceeded: " + text
		l.log.Error("job failed and has no attempts left: dead-lettered", "job_id", j.ID, "job_name", j.Name, "queue", j.Queue, "attempt", j.Attempts, "error", firstLine(text))
	default:
		c.Outcome = backends.OutcomeRetry
		c.Delay = t.spec.Retry.Delay(j.Attempts, randFloat)
		l.log.Warn("job failed; will retry", "job_id", j.ID, "job_name", j.Name, "queue", j.Queue, "attempt", j.Attempts, "max_attempts", j.MaxAttempts, "retry_in", c.Delay, "error", firstLine(text))
	}
	l.writer.complete(c)
}

// invalidArgs dead-letters a job whose args the handler's validation
// refused: retrying cannot fix the data, whatever the attempts left. The
// message is the last_error as is ("Corrupted argument data: ..."), as
// Soniq's worker writes it for reason invalid_arguments.
func (l *loop) invalidArgs(t *task, message string) {
	j := t.job
	delete(l.live, j.ID)
	if !t.startedAt.IsZero() {
		l.metrics.jobEnded(j.Queue, j.Name, "failed", time.Since(t.startedAt))
	}
	t.endSpan("failed", message)
	l.log.Error("job args failed the handler's validation: dead-lettered", "job_id", j.ID, "job_name", j.Name, "queue", j.Queue, "attempt", j.Attempts, "error", firstLine(message))
	l.writer.complete(backends.Completion{JobID: j.ID, Outcome: backends.OutcomeDeadLetter,
		Reason: backends.ReasonInvalidArguments, Error: message})
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
			"job_id", t.job.ID, "job_name", t.job.Name, "queue", t.job.Queue, "timeout", timeout, "pid", t.proc.pid)
	} else {
		t.proc.send(&protocol.Cancel{ID: t.job.ID, Reason: protocol.ReasonJobTimeout})
		l.log.Warn("async job exceeded its timeout: cancelled, failed per policy",
			"job_id", t.job.ID, "job_name", t.job.Name, "queue", t.job.Queue, "timeout", timeout, "pid", t.proc.pid)
	}
	l.fail(t, timeoutText(timeout), true, "timeout")
	l.checkDone()
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
