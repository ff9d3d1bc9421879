package main

import (
	"context"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/backends/sqlite"
)

// deadLetter claims a job and dead-letters it through the backend, as the
// supervisor would after its last attempt.
func deadLetter(t *testing.T, path, id string) {
	t.Helper()
	ctx := context.Background()
	b, err := sqlite.Open(ctx, path)
	require.NoError(t, err)
	defer b.Close()
	worker := backends.NewID()
	require.NoError(t, b.RegisterWorker(ctx, backends.Worker{ID: worker, Hostname: "test", PID: 1,
		Metadata: []byte(`{"kind":"cmd-test","instance":"dead-letter"}`)}))
	jobs, err := b.Claim(ctx, backends.ClaimParams{WorkerID: worker, Limit: 10})
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	require.Equal(t, id, jobs[0].ID)
	applied, err := b.Complete(ctx, worker, []backends.Completion{{JobID: id, Outcome: backends.OutcomeDeadLetter,
		Reason: backends.ReasonMaxRetriesExceeded, Error: "boom"}})
	require.NoError(t, err)
	require.Equal(t, []string{id}, applied)
}

// The in-memory backend exists for unit tests; the binary must not link it
// (no database URL could reach it, and it would hold jobs nowhere durable).
func TestBinaryDoesNotLinkTestOnlyPackages(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, pkg := range []string{"internal/memory", "internal/logtest", "internal/otlptest", "backends/backendtest"} {
		assert.NotContains(t, string(out), "soniq-sidecar/"+pkg+"\n", "the binary links %s", pkg)
	}
}
