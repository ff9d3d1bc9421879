package supervisor

import (
	"time"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/config"
	"github.com/soniq-dev/soniq-sidecar/protocol"
)

// outcome is what a handler's result, or a failure the sidecar saw, means for
// the job's row: the terminal write, and how it is reported. Deciding it is
// pure (outcome_test.go checks it table by table); the loop applies it.
type outcome struct {
	write  backends.Completion
	status string // the metric's and the span's status: done, snoozed, failed, timeout, crashed
	err    string // the failure as the handler or the sidecar described it; "" on success
}

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
			return outcome{status: "failed", err: e.Message, write: backends.Completion{JobID: j.ID,
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

// failureOutcome applies the retry policy to a failed attempt: retry with the
// job's delay, or dead-letter when the error is permanent or the attempts
// are exhausted.
func failureOutcome(j backends.Job, retry config.RetryPolicy, text string, retryable bool, status string, rnd func() float64) outcome {
	o := outcome{status: status, err: text, write: backends.Completion{JobID: j.ID, Error: text}}
	switch {
	case !retryable:
		o.write.Outcome, o.write.Reason = backends.OutcomeDeadLetter, backends.ReasonPermanentFailure
		o.write.Error = permanentText(text)
	case j.Attempts >= j.MaxAttempts:
		o.write.Outcome, o.write.Reason = backends.OutcomeDeadLetter, backends.ReasonMaxRetriesExceeded
		o.write.Error = "Max retries exceeded: " + text
	default:
		o.write.Outcome = backends.OutcomeRetry
		o.write.Delay = retry.Delay(j.Attempts, rnd)
	}
	return o
}
