package main

import (
	"context"
	"os/exec"
	"strings"
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
	applied, err := b.Complete(ctx, worker, []backends.Completion{{JobID: id, Attempts: jobs[0].Attempts, Outcome: backends.OutcomeDeadLetter,
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

// Dependencies point one way: cmd -> supervisor -> {config, protocol,
// backends, internal/...}. No package below the engine imports it, the
// services know neither the engine nor the transports, and the public
// config and protocol packages import nothing of the module but their
// own generated code.
func TestPackagesDependOneWay(t *testing.T) {
	const mod = "github.com/soniq-dev/soniq-sidecar/"
	tests := []struct {
		pkg         string
		forbidden   []string // module packages it must not depend on, even through another
		notImported []string // module packages it must not import itself
		only        []string // when set: the only module packages it may depend on
	}{
		{pkg: "config", only: []string{}},
		{pkg: "protocol", only: []string{}},
		{pkg: "internal/config", only: []string{"config", "internal/schedule"}},
		{pkg: "internal/schedule", only: []string{}},
		{pkg: "internal/scheduler", only: []string{"backends", "internal/schedule"}},
		{pkg: "internal/completer", only: []string{"backends"}},
		{pkg: "internal/maintenance", only: []string{"backends"}},
		{pkg: "internal/session", only: []string{"protocol", "protocol/handlerpb"}},
		{pkg: "internal/transport", forbidden: []string{"supervisor", "backends", "internal/completer", "internal/maintenance"}},
		{pkg: "backends/postgres", forbidden: []string{"supervisor", "config", "internal/config"}},
		{pkg: "backends/sqlite", forbidden: []string{"supervisor", "config", "internal/config"}},
		{pkg: "supervisor", forbidden: []string{"cmd/soniq-sidecar", "backends/connect", "backends/postgres", "backends/sqlite"},
			notImported: []string{"internal/session"}},
	}
	list := func(t *testing.T, pkg string, args ...string) []string {
		out, err := exec.Command("go", append(append([]string{"list"}, args...), "../../"+pkg)...).CombinedOutput()
		require.NoError(t, err, "%s", out)
		var pkgs []string
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if p, ok := strings.CutPrefix(line, mod); ok && p != pkg {
				pkgs = append(pkgs, p)
			}
		}
		return pkgs
	}
	for _, tt := range tests {
		t.Run(tt.pkg, func(t *testing.T) {
			deps := list(t, tt.pkg, "-deps")
			for _, f := range tt.forbidden {
				assert.NotContains(t, deps, f, "%s depends on %s", tt.pkg, f)
			}
			if tt.notImported != nil {
				imports := list(t, tt.pkg, "-f", `{{join .Imports "\n"}}`)
				for _, f := range tt.notImported {
					assert.NotContains(t, imports, f, "%s imports %s", tt.pkg, f)
				}
			}
			if tt.only != nil {
				for _, d := range deps {
					assert.Contains(t, tt.only, d, "%s depends on %s", tt.pkg, d)
				}
			}
		})
	}
}
