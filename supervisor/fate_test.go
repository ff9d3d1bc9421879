package supervisor

import (
	"encoding/json"
	"errors"
	"strings"
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
			outcome{line: lineRetry, status: "failed", err: "ValueError: bad", write: backends.Completion{JobID: "j1", Outcome: backends.OutcomeRetry, Error: "ValueError: bad", Delay: 5 * time.Second}}},
		{"the traceback follows the message", job(1, 3),
			protocol.Result{ID: "j1", Status: protocol.StatusFailed, Error: &protocol.ResultError{Type: "E", Message: "m", Traceback: str("tb"), Retryable: true}},
			outcome{line: lineRetry, status: "failed", err: "E: m\ntb", write: backends.Completion{JobID: "j1", Outcome: backends.OutcomeRetry, Error: "E: m\ntb", Delay: 5 * time.Second}}},
		{"the last attempt dead-letters: max retries exceeded", job(3, 3),
			protocol.Result{ID: "j1", Status: protocol.StatusFailed, Error: &protocol.ResultError{Type: "E", Message: "m", Retryable: true}},
			outcome{line: lineDeadLetter, status: "failed", err: "E: m", write: backends.Completion{JobID: "j1", Outcome: backends.OutcomeDeadLetter, Reason: backends.ReasonMaxRetriesExceeded, Error: "Max retries exceeded: E: m"}}},
		{"retryable false dead-letters at once: permanent failure", job(1, 3),
			protocol.Result{ID: "j1", Status: protocol.StatusFailed, Error: &protocol.ResultError{Type: "E", Message: "m", Retryable: false}},
			outcome{line: linePermanent, status: "failed", err: "E: m", write: backends.Completion{JobID: "j1", Outcome: backends.OutcomeDeadLetter, Reason: backends.ReasonPermanentFailure, Error: "Retry policy declined: E: m"}}},
		{"invalid arguments dead-letter at once with the message as is", job(1, 3),
			protocol.Result{ID: "j1", Status: protocol.StatusFailed, Error: &protocol.ResultError{Type: "E", Message: "Corrupted argument data: x", Retryable: true, Reason: protocol.ErrorReasonInvalidArguments}},
			outcome{line: lineInvalidArgs, status: "failed", err: "Corrupted argument data: x", write: backends.Completion{JobID: "j1", Outcome: backends.OutcomeDeadLetter, Reason: backends.ReasonInvalidArguments, Error: "Corrupted argument data: x"}}},
		{"cancelled without a cancel request is a retryable failure", job(1, 3),
			protocol.Result{ID: "j1", Status: protocol.StatusCancelled},
			outcome{line: lineRetry, status: "failed", err: "cancelled by the handler without a cancel request", write: backends.Completion{JobID: "j1", Outcome: backends.OutcomeRetry, Error: "cancelled by the handler without a cancel request", Delay: 5 * time.Second}}},
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
		line      string
	}{
		{"a timeout with attempts left retries with backoff and jitter", 2, true, "timeout", 0.5,
			backends.Completion{JobID: "j1", Outcome: backends.OutcomeRetry, Error: "Job timed out after 1.0s", Delay: 3 * time.Second}, lineRetry},
		{"a timeout on the last attempt dead-letters", 3, true, "timeout", 0,
			backends.Completion{JobID: "j1", Outcome: backends.OutcomeDeadLetter, Reason: backends.ReasonMaxRetriesExceeded, Error: "Max retries exceeded: Job timed out after 1.0s"}, lineDeadLetter},
		{"a crash with attempts left retries", 1, true, "crashed", 0,
			backends.Completion{JobID: "j1", Outcome: backends.OutcomeRetry, Error: "Job timed out after 1.0s", Delay: time.Second}, lineRetry},
		{"not retryable dead-letters even with attempts left", 1, false, "failed", 0,
			backends.Completion{JobID: "j1", Outcome: backends.OutcomeDeadLetter, Reason: backends.ReasonPermanentFailure, Error: "Retry policy declined: Job timed out after 1.0s"}, linePermanent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := backends.Job{ID: "j1", Attempts: tt.attempts, MaxAttempts: 3}
			got := failureOutcome(j, backoff, timeoutText(time.Second), tt.retryable, tt.status, func() float64 { return tt.rnd })
			assert.Equal(t, outcome{status: tt.status, err: "Job timed out after 1.0s", write: tt.want, line: tt.line}, got)
		})
	}
}

func TestClaimedOutcome(t *testing.T) {
	spec := &config.JobSpec{Name: "t.job"}
	job := func(attempts, max int, args string) backends.Job {
		return backends.Job{ID: "j1", Name: "t.job", Attempts: attempts, MaxAttempts: max, Args: json.RawMessage(args)}
	}
	big := `{"a":"` + strings.Repeat("x", 1<<20) + `"}`
	dead := func(reason, text, line string) outcome {
		return outcome{status: "failed", err: text, line: line,
			write: backends.Completion{JobID: "j1", Outcome: backends.OutcomeDeadLetter, Reason: reason, Error: text}}
	}
	tests := []struct {
		name     string
		job      backends.Job
		spec     *config.JobSpec
		want     outcome
		nack, ok bool
	}{
		{"a row within its attempts runs", job(3, 3, `{"a":1}`), spec, outcome{}, false, true},
		{"a row crashes pushed past max_attempts is dead-lettered without running", job(4, 3, `{}`), spec,
			dead(backends.ReasonMaxRetriesExceeded, "Max attempts exceeded (job crashed repeatedly)", lineCrashedTooOften), false, false},
		{"args that are not an object are dead-lettered", job(1, 3, `[1]`), spec,
			dead(backends.ReasonInvalidArguments, "args must be a JSON object, got: [1]", lineArgsNotObject), false, false},
		{"args over the frame limit are dead-lettered", job(1, 3, big), spec,
			dead(backends.ReasonInvalidArguments, "args of 1048584 bytes do not fit the protocol frame limit of 1048576 bytes", lineArgsUnsendable), false, false},
		{"a row no handler of the pool serves is given back", job(1, 3, `{}`), nil, outcome{line: lineNoHandlerForClaim}, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, nack, ok := claimedOutcome(tt.job, tt.spec, 1<<20)
			assert.Equal(t, tt.want, o)
			assert.Equal(t, tt.nack, nack, "nack")
			assert.Equal(t, tt.ok, ok, "ok")
		})
	}
}

func TestUnsendableAndUnknownNameOutcomes(t *testing.T) {
	j := backends.Job{ID: "j1", Name: "t.nobody", Attempts: 1, MaxAttempts: 3}
	assert.Equal(t, outcome{status: "failed", err: "job frame not sent: boom", line: lineFrameNotSent,
		write: backends.Completion{JobID: "j1", Outcome: backends.OutcomeDeadLetter, Reason: backends.ReasonInvalidArguments, Error: "job frame not sent: boom"}},
		unsendableOutcome(j, errors.New("boom")))
	assert.Equal(t, outcome{status: "failed", err: "Job t.nobody not registered.", line: lineUnknownName,
		write: backends.Completion{JobID: "j1", Outcome: backends.OutcomeDeadLetter, Reason: backends.ReasonJobNotFound, Error: "Job t.nobody not registered."}},
		unknownNameOutcome(j))
}

func TestCrashCountsOnlyAgainstAJobAloneInItsProcess(t *testing.T) {
	for held, want := range map[int]bool{0: true, 1: true, 2: false, 5: false} {
		assert.Equal(t, want, crashCounts(held), "held %d", held)
	}
}

func TestNackedAtForce(t *testing.T) {
	tests := []struct {
		running, sync, nacked bool
	}{
		{running: true, sync: false, nacked: true},  // async running: cancelled and NACKed
		{running: true, sync: true, nacked: false},  // sync running: grace, then waited for
		{running: false, sync: false, nacked: true}, // claimed, not yet running
		{running: false, sync: true, nacked: true},  // claimed sync, not yet running
	}
	for _, tt := range tests {
		assert.Equal(t, tt.nacked, nackedAtForce(tt.running, tt.sync), "running %v sync %v", tt.running, tt.sync)
	}
}
