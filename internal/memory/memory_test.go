package memory_test

import (
	"testing"

	"github.com/soniq-dev/soniq-sidecar/backends/backendtest"
	"github.com/soniq-dev/soniq-sidecar/internal/memory"
)

func TestContract(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) backendtest.Harness {
		b := memory.New()
		t.Cleanup(func() { _ = b.Close() })
		return backendtest.Harness{
			Backend:               b,
			SetRawStatus:          b.SetRawStatus,
			InsertRawStatus:       b.InsertRawStatus,
			BackdateHeartbeat:     b.BackdateHeartbeat,
			BackdateExpiry:        b.BackdateExpiry,
			BackdateCreated:       b.BackdateCreated,
			BackdateDeadLetter:    b.BackdateDeadLetter,
			TaskRegistry:          b.TaskRegistry,
			OrphanJob:             b.OrphanJob,
			SetRawAttempts:        b.SetRawAttempts,
			BackdateCancelRequest: b.BackdateCancelRequest,
		}
	})
}
