package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The pid in PgBouncer's pid file is signalled only while it is that
// PgBouncer: after a kill the file stays, and its pid may come round to
// another process (this test stands in for one with a sleep).
func TestPgBouncerPIDIsOnlyThisClustersPgBouncer(t *testing.T) {
	dir := t.TempDir()
	c := &cluster{pgbDir: filepath.Join(dir, "pgbouncer")}
	require.NoError(t, os.MkdirAll(c.pgbDir, 0o755))
	ini := filepath.Join(c.pgbDir, "pgbouncer.ini")
	start := func(args ...string) int {
		cmd := exec.Command("sh", append([]string{"-c", "sleep 60"}, args...)...)
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd.Process.Pid
	}
	writePID := func(pid int) {
		require.NoError(t, os.WriteFile(filepath.Join(c.pgbDir, "pgbouncer.pid"), []byte(strconv.Itoa(pid)+"\n"), 0o644))
	}

	assert.Zero(t, c.pgbouncerPID(), "no pid file")
	other := start("not-a-pgbouncer")
	writePID(other)
	assert.Zero(t, c.pgbouncerPID(), "a stale pid now another process's")
	ours := start(ini) // its command line names this cluster's configuration
	writePID(ours)
	assert.Equal(t, ours, c.pgbouncerPID())
	writePID(999999999)
	assert.Zero(t, c.pgbouncerPID(), "no such process")
}
