package supervisor

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/internal/config"
	"github.com/soniq-dev/soniq-sidecar/protocol"
)

func TestResultOutcome(t *testing.T) {
	str := func(s string) *string { return &s }
	job := func(attempts, max int) backends.Job {
		return backends.Job{ID: "j1", Name: "t.job", Queue: "default", Attempts: attempts, MaxAttempts: max}
	}
	spec := &config.JobSpec{Name: "t.job", Retry: config.RetryPolicy{Delays: []time.Duration{5 * time.Second}}}
	tests := []struct {
		name string
		job  backends.Job
		r    protocol.Result
		want outcome
	}{
		{"done keeps its result for result_ttl", job(1, 3),
			protocol.Result{ID: "j1", Status: protocol.StatusDone, Result: json.RawMessage(`{"ok":1}`)},
			outcome{status: "done", write: backends.Completion{JobID: "j1", Outcome: backends.OutcomeDone, Result: json.RawMessage(`{"ok":1}`), ResultTTL: time.Minute}}},
		{"snooze with a reason", job(1, 3),
			protocol.Result{ID: "j1", Status: protocol.StatusSnooze, Seconds: 1.5, Reason: str("busy")},
			outcome{status: "snoozed", write: backends.Completion{JobID: "j1", Outcome: backends.OutcomeSnooze, Reason: "busy", Delay: 1500 * time.Millisecond}}},
		{"snooze without a reason", job(1, 3),
			protocol.Result{ID: "j1", Status: protocol.StatusSnooze, Seconds: 2},
			outcome{status: "snoozed", write: backends.Completion{JobID: "j1", Outcome: backends.OutcomeSnooze, Delay: 2 * time.Second}}},
		{"a retryable failure with attempts left retries after the job's delay", job(1, 3),
			protocol.Result{ID: "j1", Status: protocol.StatusFailed, Error: &protocol.ResultError{Type: "ValueError", Message: "bad", Retryable: true}},
			outcome{status: "failed", err: "ValueError: bad", write: backends.Completion{JobID: "j1", Outcome: backends.OutcomeRetry, Error: "ValueError: bad", Delay: 5 * time.Second}}},
		{"the traceback follows the message", job(1, 3),
			protocol.Result{ID: "j1", Status: protocol.StatusFailed, Error: &protocol.ResultError{Type: "E", Message: "m", Traceback: str("tb"), Retryable: true}},
			outcome{status: "failed", err: "E: m\ntb", write: backends.Completion{JobID: "j1", Outcome: backends.OutcomeRetry, Error: "E: m\ntb", Delay: 5 * time.Second}}},
		{"the last attempt dead-letters: max retries exceeded", job(3, 3),
			protocol.Result{ID: "j1", Status: protocol.StatusFailed, Error: &protocol.ResultError{Type: "E", Message: "m", Retryable: true}},
			outcome{status: "failed", err: "E: m", write: backends.Completion{JobID: "j1", Outcome: backends.OutcomeDeadLetter, Reason: backends.ReasonMaxRetriesExceeded, Error: "Max retries exceeded: E: m"}}},
		{"retryable false dead-letters at once: permanent failure", job(1, 3),
			protocol.Result{ID: "j1", Status: protocol.StatusFailed, Error: &protocol.ResultError{Type: "E", Message: "m", Retryable: false}},
			outcome{status: "failed", err: "E: m", write: backends.Completion{JobID: "j1", Outcome: backends.OutcomeDeadLetter, Reason: backends.ReasonPermanentFailure, Error: "Retry policy declined: E: m"}}},
		{"invalid arguments dead-letter at once with the message as is", job(1, 3),
			protocol.Result{ID: "j1", Status: protocol.StatusFailed, Error: &protocol.ResultError{Type: "E", Message: "Corrupted argument data: x", Retryable: true, Reason: protocol.ErrorReasonInvalidArguments}},
			outcome{status: "failed", err: "Corrupted argument data: x", write: backends.Completion{JobID: "j1", Outcome: backends.OutcomeDeadLetter, Reason: backends.ReasonInvalidArguments, Error: "Corrupted argument data: x"}}},
		{"cancelled without a cancel request is a retryable failure", job(1, 3),
			protocol.Result{ID: "j1", Status: protocol.StatusCancelled},
			outcome{status: "failed", err: "cancelled by the handler without a cancel request", write: backends.Completion{JobID: "j1", Outcome: backends.OutcomeRetry, Error: "cancelled by the handler without a cancel request", Delay: 5 * time.Second}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.r
			got := resultOutcome(tt.job, spec, &r, time.Minute, func() float64 { return 0 })
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestFailureOutcome(t *testing.T) {
	backoff := config.RetryPolicy{Delays: []time.Duration{2 * time.Second}, Backoff: true, Jitter: true}
	tests := []struct {
		name      string
		attempts  int
		retryable bool
		status    string
		rnd       float64
		want      backends.Completion
	}{
		{"a timeout with attempts left retries with backoff and jitter", 2, true, "timeout", 0.5,
			backends.Completion{JobID: "j1", Outcome: backends.OutcomeRetry, Error: "Job timed out after 1.0s", Delay: 3 * time.Second}},
		{"a timeout on the last attempt dead-letters", 3, true, "timeout", 0,
			backends.Completion{JobID: "j1", Outcome: backends.OutcomeDeadLetter, Reason: backends.ReasonMaxRetriesExceeded, Error: "Max retries exceeded: Job timed out after 1.0s"}},
		{"a crash with attempts left retries", 1, true, "crashed", 0,
			backends.Completion{JobID: "j1", Outcome: backends.OutcomeRetry, Error: "Job timed out after 1.0s", Delay: time.Second}},
		{"not retryable dead-letters even with attempts left", 1, false, "failed", 0,
			backends.Completion{JobID: "j1", Outcome: backends.OutcomeDeadLetter, Reason: backends.ReasonPermanentFailure, Error: "Retry policy declined: Job timed out after 1.0s"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := backends.Job{ID: "j1", Attempts: tt.attempts, MaxAttempts: 3}
			got := failureOutcome(j, backoff, timeoutText(time.Second), tt.retryable, tt.status, func() float64 { return tt.rnd })
			assert.Equal(t, outcome{status: tt.status, err: "Job timed out after 1.0s", write: tt.want}, got)
		})
	}
}
