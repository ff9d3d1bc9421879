package supervisor

import (
	"context"
	"encoding/json"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/internal/transport"
	"github.com/soniq-dev/soniq-sidecar/protocol"
)

// failingTransport answers a job whose args hold "fail" at once with a
// failed result carrying that error (as an SDK reports a handler's or a
// validation's failure).
func (w *fakeWorld) failingTransport(te transport.Env, spec transport.Spec) (transport.Conn, error) {
	return w.interceptTransport(te, spec, func(j *protocol.Job) bool {
		var args struct{ Fail *protocol.ResultError }
		if json.Unmarshal(j.Args, &args) != nil || args.Fail == nil {
			return false
		}
		spec.Events.Frame(&protocol.Result{ID: j.ID, Status: protocol.StatusFailed, Error: args.Fail})
		return true
	})
}

// A failed result's row: invalid_arguments dead-letters at once with the
// message as is, whatever the attempts left; retryable false is Soniq's
// permanent_failure; anything else is retried until its attempts run out.
func TestFailedResultOutcome(t *testing.T) {
	cases := []struct {
		name       string
		err        protocol.ResultError
		wantReason string
		wantError  string
		attempts   int // the row's attempts when dead-lettered
	}{
		{"invalid arguments", protocol.ResultError{Type: "ValueError", Message: "Corrupted argument data: n must be a number",
			Reason: protocol.ErrorReasonInvalidArguments},
			backends.ReasonInvalidArguments, "Corrupted argument data: n must be a number", 1},
		{"invalid arguments even if retryable", protocol.ResultError{Type: "TypeError", Message: "Corrupted argument data: x",
			Retryable: true, Reason: protocol.ErrorReasonInvalidArguments},
			backends.ReasonInvalidArguments, "Corrupted argument data: x", 1},
		{"not retryable", protocol.ResultError{Type: "PermanentError", Message: "never"},
			backends.ReasonPermanentFailure, "Retry policy declined: PermanentError: never", 1},
		{"retryable", protocol.ResultError{Type: "Error", Message: "boom", Retryable: true},
			backends.ReasonMaxRetriesExceeded, "Max retries exceeded: Error: boom", 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newFakeWorld(t, fakeSettings(30*time.Second, time.Minute), 1, 1, nil)
				w.sup.cfg.startTransport = w.failingTransport
				args, err := json.Marshal(map[string]any{"fail": tc.err})
				require.NoError(t, err)
				maxAttempts := 3
				j, err := w.mem.Enqueue(context.Background(), backends.EnqueueParams{Name: "sync.sleep", Args: args, MaxAttempts: &maxAttempts})
				require.NoError(t, err)
				ended := false
				w.launch()
				defer w.stopIfRunning(&ended)
				w.waitFor(10*time.Minute, "the job dead-lettered", func() bool {
					_, dead := w.deadLetter(j.ID)
					return dead
				})
				dl, _ := w.deadLetter(j.ID)
				assert.Equal(t, tc.wantReason, dl.Reason)
				require.NotNil(t, dl.LastError)
				assert.Equal(t, tc.wantError, *dl.LastError)
				assert.Equal(t, tc.attempts, dl.Attempts)
				w.sup.Shutdown()
				<-w.runErr
				ended = true
			})
		})
	}
}
