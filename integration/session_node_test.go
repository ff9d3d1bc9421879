package integration

import (
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Black-box tests of the Node SDK's attach mode: the example handler
// (examples/node/examples.js) started by hand with --listen, driven through
// internal/session; the same tests as the Python SDK's.

var nodeAttach = attachSDK{
	name: "node",
	command: func(root, sock string) []string {
		return []string{"node", filepath.Join(root, "examples/node/examples.js"), "--listen", sock}
	},
	probe: func(root, sock string) []string {
		return []string{"node", filepath.Join(root, "sdk/node/probe.js"), sock}
	},
	env:      func(string) map[string]string { return nil },
	failType: "Error",
}

// TestSessionNodeJobs: hello, a job that succeeds, one that fails, ping/pong.
func TestSessionNodeJobs(t *testing.T) {
	t.Parallel()
	testSessionJobs(t, nodeAttach)
}

// TestSessionNodeCancel: a cancel of a cancellable job answers cancelled.
func TestSessionNodeCancel(t *testing.T) {
	t.Parallel()
	testSessionCancel(t, nodeAttach)
}

// TestSessionNodeShutdown: shutdown ends the session, not the process.
func TestSessionNodeShutdown(t *testing.T) {
	t.Parallel()
	testSessionShutdown(t, nodeAttach)
}

// TestSessionNodeSecondSessionRefused: one session at a time.
func TestSessionNodeSecondSessionRefused(t *testing.T) {
	t.Parallel()
	testSessionSecondRefused(t, nodeAttach)
}

// TestSessionNodeBrokenSessionSyncJob: a sync job outlives its broken
// session; the next hello lists it and gets its result.
func TestSessionNodeBrokenSessionSyncJob(t *testing.T) {
	t.Parallel()
	testSessionBrokenSyncJob(t, nodeAttach)
}

// TestSessionNodeSIGTERM: SIGTERM drains and exits 0 once idle.
func TestSessionNodeSIGTERM(t *testing.T) {
	t.Parallel()
	testSessionSIGTERM(t, nodeAttach)
}

// TestSessionNodeSIGTERMIdle: an idle handler exits 0 at once on SIGTERM.
func TestSessionNodeSIGTERMIdle(t *testing.T) {
	t.Parallel()
	sock := attachPath(t)
	a := startListening(t, nodeAttach, sock)
	start := time.Now()
	a.signal(syscall.SIGTERM)
	require.Equal(t, 0, a.wait(10*time.Second))
	require.Less(t, time.Since(start), 5*time.Second)
}

// TestSessionNodeSocket: mode 0660, stale replaced, live / non-socket /
// missing directory refused with exit 2.
func TestSessionNodeSocket(t *testing.T) {
	t.Parallel()
	testSessionSocket(t, nodeAttach)
}
