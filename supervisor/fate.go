package supervisor

// A row's fate: every decision about what is written to a job's row is
// made here, by pure functions tested table by table (fate_test.go). The
// loop only carries out what they return (apply, nack).

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/config"
	"github.com/soniq-dev/soniq-sidecar/protocol"
)

// outcome is what a handler's result, or a failure the sidecar saw, means for
// the job's row: the terminal write, and how it is reported.
type outcome struct {
	write  backends.Completion
	status string // the metric's and the span's status: done, snoozed, failed, timeout, crashed
	err    string // the failure as the handler or the sidecar described it; "" on success
	// line is the log line that says why ("" for a success: nothing to
	// say), at ERROR for a dead letter, at WARN for a retry.
	line string
}

// The log lines of failures.
const (
	lineRetry             = "job failed; will retry"
	lineDeadLetter        = "job failed and has no attempts left: dead-lettered"
	linePermanent         = "job failed permanently: dead-lettered"
	lineInvalidArgs       = "job args failed the handler's validation: dead-lettered"
	lineCrashedTooOften   = "job dead-lettered without running: attempts exceed max_attempts (it crashed repeatedly)"
	lineArgsNotObject     = "job dead-lettered: its args are not a JSON object"
	lineArgsUnsendable    = "job dead-lettered: its args cannot be sent to a handler"
	lineFrameNotSent      = "job dead-lettered: its job frame could not be sent to the handler"
	lineUnknownName       = "job not served by any handler: dead-lettered (--dead-letter-unknown)"
	lineNoHandlerForClaim = "claimed a job no handler of its pool serves (a sidecar bug; please report it): given back"
)

// resultOutcome decides what a handler's result means for the row of job j.
// rnd feeds the retry policy's jitter.
func resultOutcome(j backends.Job, spec *config.JobSpec, r *protocol.Result, resultTTL time.Duration, rnd func() float64) outcome {
	switch r.Status {
	case protocol.StatusDone:
		return outcome{status: "done", write: backends.Completion{JobID: j.ID, Outcome: backends.OutcomeDone, Result: r.Result, ResultTTL: resultTTL}}
	case protocol.StatusSnooze:
		reason := ""
		if r.Reason != nil {
			reason = *r.Reason
		}
		return outcome{status: "snoozed", write: backends.Completion{JobID: j.ID, Outcome: backends.OutcomeSnooze, Reason: reason,
			Delay: time.Duration(r.Seconds * float64(time.Second))}}
	case protocol.StatusFailed:
		e := r.Error
		if e.Reason == protocol.ErrorReasonInvalidArguments {
			// Retrying cannot fix the data, whatever the attempts left; the
			// message is last_error as is, as Soniq's worker writes it.
			return outcome{status: "failed", err: e.Message, line: lineInvalidArgs, write: backends.Completion{JobID: j.ID,
				Outcome: backends.OutcomeDeadLetter, Reason: backends.ReasonInvalidArguments, Error: e.Message}}
		}
		text := e.Type + ": " + e.Message
		if e.Traceback != nil && *e.Traceback != "" {
			text += "\n" + *e.Traceback
		}
		return failureOutcome(j, spec.Retry, text, e.Retryable, "failed", rnd)
	default: // cancelled without a cancel: the handler gave up on its own
		return failureOutcome(j, spec.Retry, "cancelled by the handler without a cancel request", true, "failed", rnd)
	}
}

// failureOutcome applies the retry policy to a failed attempt (the
// handler's failure, a timeout, a crash that counts): retry with the job's
// delay, or dead-letter when the error is permanent or the attempts are
// exhausted.
func failureOutcome(j backends.Job, retry config.RetryPolicy, text string, retryable bool, status string, rnd func() float64) outcome {
	o := outcome{status: status, err: text, write: backends.Completion{JobID: j.ID, Error: text}}
	switch {
	case !retryable:
		o.write.Outcome, o.write.Reason = backends.OutcomeDeadLetter, backends.ReasonPermanentFailure
		o.write.Error = permanentText(text)
		o.line = linePermanent
	case j.Attempts >= j.MaxAttempts:
		o.write.Outcome, o.write.Reason = backends.OutcomeDeadLetter, backends.ReasonMaxRetriesExceeded
		o.write.Error = "Max retries exceeded: " + text
		o.line = lineDeadLetter
	default:
		o.write.Outcome = backends.OutcomeRetry
		o.write.Delay = retry.Delay(j.Attempts, rnd)
		o.line = lineRetry
	}
	return o
}

// claimedOutcome decides whether a row just claimed may run. ok is true
// when it may; otherwise the outcome is written without running it: a row
// repeated crashes pushed past max_attempts (as Soniq's worker does), args
// that are not a JSON object, or args that no handler could be sent (an
// oversize or too-deep frame breaks the process it reaches, and retrying
// cannot help). nack is set for a row no handler of the pool serves, which
// the claim never asks for: given back rather than guessed at.
func claimedOutcome(j backends.Job, spec *config.JobSpec, maxFrameBytes int) (o outcome, nack, ok bool) {
	dead := func(reason, text, line string) (outcome, bool, bool) {
		return outcome{status: "failed", err: text, line: line,
			write: backends.Completion{JobID: j.ID, Outcome: backends.OutcomeDeadLetter, Reason: reason, Error: text}}, false, false
	}
	switch {
	case spec == nil:
		return outcome{line: lineNoHandlerForClaim}, true, false
	case j.Attempts > j.MaxAttempts:
		return dead(backends.ReasonMaxRetriesExceeded, "Max attempts exceeded (job crashed repeatedly)", lineCrashedTooOften)
	case !protocol.IsJSONObject(j.Args):
		return dead(backends.ReasonInvalidArguments, "args must be a JSON object, got: "+truncate(string(j.Args), 200), lineArgsNotObject)
	}
	if why := protocol.ArgsUnsendable(j.Args, maxFrameBytes); why != "" {
		return dead(backends.ReasonInvalidArguments, why, lineArgsUnsendable)
	}
	return outcome{}, false, true
}

// unsendableOutcome: the transport could not encode the job's frame. The
// job never reached the handler and encoding the same args again cannot
// succeed: dead-lettered, whatever its attempts.
func unsendableOutcome(j backends.Job, err error) outcome {
	text := "job frame not sent: " + err.Error()
	return outcome{status: "failed", err: text, line: lineFrameNotSent,
		write: backends.Completion{JobID: j.ID, Outcome: backends.OutcomeDeadLetter, Reason: backends.ReasonInvalidArguments, Error: text}}
}

// unknownNameOutcome: a job of a name no handler here serves, claimed with
// --dead-letter-unknown, as Soniq's worker dead-letters it.
func unknownNameOutcome(j backends.Job) outcome {
	text := fmt.Sprintf("Job %s not registered.", j.Name)
	return outcome{status: "failed", err: text, line: lineUnknownName,
		write: backends.Completion{JobID: j.ID, Outcome: backends.OutcomeDeadLetter, Reason: backends.ReasonJobNotFound, Error: text}}
}

// cancelAction is what a cancel request (soniq-sidecar cancel) does to a
// job this sidecar holds.
type cancelAction int

const (
	// cancelUnstarted: claimed and not handed to a process yet; its row is
	// cancelled and it never runs.
	cancelUnstarted cancelAction = iota + 1
	// cancelRunning: an async job running in a process; its handler is
	// told (reason user), its row is cancelled at once and whatever the
	// handler answers later is discarded.
	cancelRunning
	// refuseSync: a sync job running in a process; nothing may interrupt
	// it, so the request is refused and the job runs on.
	refuseSync
)

// userCancelFate decides what a cancel request does to a job held in state.
func userCancelFate(state taskState, sync bool) cancelAction {
	switch {
	case state == taskPending:
		return cancelUnstarted
	case sync:
		return refuseSync
	}
	return cancelRunning
}

// cancelledOutcome: a job's row cancelled on request: status cancelled,
// attempts as they are, never retried (the write acknowledges the request).
func cancelledOutcome(j backends.Job) outcome {
	return outcome{status: "cancelled", write: backends.Completion{JobID: j.ID, Outcome: backends.OutcomeCancelled}}
}

// crashCounts decides whether a process's death counts against the jobs
// it ran: only a job alone in its process is the culprit. Jobs that shared
// it are suspects, each re-run alone with its attempt unchanged (suspect.go);
// a job that timed out but still ran there counts as a neighbour too.
func crashCounts(held int) bool { return held <= 1 }

// nackedAtForce decides what FORCE_TIMEOUT_PATH does with a job the sidecar
// holds: a sync job running in a process is waited for (its grace, then
// without end; never killed); every other one, an async job running or any
// job claimed and not yet running, is NACKed: queued again, attempts kept.
func nackedAtForce(running, sync bool) bool { return !(running && sync) }

// childFate decides whether the sidecar takes a child job a handler asked
// for (an enqueue frame): "" when it does, else the refusal's code and
// why. held: the parent is a job the process holds and has not answered;
// made: the children its execution made so far; limit:
// max_children_per_job.
func childFate(e *protocol.Enqueue, held bool, made, limit, maxFrameBytes int) (protocol.EnqueueErrorCode, string) {
	switch {
	case !held:
		return protocol.EnqueueParent, fmt.Sprintf("job %s is not running in this process (answered, timed out, cancelled or never given)", e.Parent)
	case made >= limit:
		return protocol.EnqueueCap, fmt.Sprintf("job %s has made %d child jobs, the most max_children_per_job allows", e.Parent, limit)
	case e.Priority != nil && (*e.Priority < math.MinInt32 || *e.Priority > math.MaxInt32):
		return protocol.EnqueueInvalid, fmt.Sprintf("priority %d is outside the column's 32-bit range", *e.Priority)
	case e.MaxAttempts != nil && *e.MaxAttempts > math.MaxInt32:
		return protocol.EnqueueInvalid, fmt.Sprintf("max_attempts %d is outside the column's 32-bit range", *e.MaxAttempts)
	case e.Delay != nil && *e.Delay > maxChildDelay.Seconds():
		return protocol.EnqueueInvalid, fmt.Sprintf("delay %g s is more than %g s", *e.Delay, maxChildDelay.Seconds())
	case hasNUL(e.Name, e.Queue, e.DedupKey):
		// A text column cannot hold it, and a deferred child's failed
		// write would fail its parent's whole batch.
		return protocol.EnqueueInvalid, "name, queue and dedup_key cannot hold a NUL character"
	}
	if why := protocol.ArgsUnsendable(e.Args, maxFrameBytes); why != "" {
		// It would be dead-lettered at its claim: refused now, where the
		// handler can see why.
		return protocol.EnqueueInvalid, why
	}
	return "", ""
}

// hasNUL reports whether s or a set optional value holds a NUL character.
func hasNUL(s string, opt ...*string) bool {
	if strings.IndexByte(s, 0) >= 0 {
		return true
	}
	for _, o := range opt {
		if o != nil && strings.IndexByte(*o, 0) >= 0 {
			return true
		}
	}
	return false
}

// maxChildDelay bounds a child's delay: a hundred years, well within a
// time.Duration.
const maxChildDelay = 100 * 365 * 24 * time.Hour

// childrenOutcome adds an execution's deferred children to its done write.
// A done whose execution had a deferred child refused is written as a
// failure instead (ChildJobRefused, through the retry policy), with no
// child: the parent's work is not complete without it. Any other outcome
// writes none of them.
func childrenOutcome(o outcome, j backends.Job, retry config.RetryPolicy, deferred []backends.EnqueueParams, refused string, rnd func() float64) outcome {
	if o.write.Outcome != backends.OutcomeDone {
		return o
	}
	if refused != "" {
		return failureOutcome(j, retry, "ChildJobRefused: "+refused, true, "failed", rnd)
	}
	o.write.Children = deferred
	return o
}
