package integration

import (
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/soniq-dev/soniq-sidecar/internal/session"
	"github.com/soniq-dev/soniq-sidecar/protocol"
)

// Black-box tests of the Python SDK's attach mode: the example handler
// started by hand with --listen, driven through internal/session.

// TestSessionPythonJobs: hello, a job that succeeds, one that fails,
// ping/pong.
func TestSessionPythonJobs(t *testing.T) {
	t.Parallel()
	testSessionJobs(t, pythonAttach)
}

func testSessionJobs(t *testing.T, sdk attachSDK) {
	sock := attachPath(t)
	startListening(t, sdk, sock)
	p := mustOpen(t, sock)
	h := p.s.Hello()
	require.Equal(t, 1, h.Protocol)
	require.GreaterOrEqual(t, len(h.Jobs), 4)
	require.Empty(t, h.Running, "a fresh process runs nothing")

	p.send(sessionJob("ok-1", "examples.add", `{"a": 2, "b": 3}`))
	r := p.result(10 * time.Second)
	require.Equal(t, "ok-1", r.ID)
	require.Equal(t, protocol.StatusDone, r.Status)
	require.JSONEq(t, `{"sum": 5}`, string(r.Result))

	p.send(sessionJob("fail-1", "examples.fail", `{}`))
	r = p.result(10 * time.Second)
	require.Equal(t, "fail-1", r.ID)
	require.Equal(t, protocol.StatusFailed, r.Status)
	require.Equal(t, sdk.failType, r.Error.Type)
	require.Equal(t, "boom", r.Error.Message)
	require.True(t, r.Error.Retryable)

	p.send(&protocol.Ping{Seq: 41})
	pong, ok := p.next(10 * time.Second).(*protocol.Pong)
	require.True(t, ok)
	require.Equal(t, int64(41), pong.Seq)
}

// TestSessionPythonCancel: a cancel of a cancellable job answers cancelled
// well before the job would have ended.
func TestSessionPythonCancel(t *testing.T) {
	t.Parallel()
	testSessionCancel(t, pythonAttach)
}

func testSessionCancel(t *testing.T, sdk attachSDK) {
	sock := attachPath(t)
	a := startListening(t, sdk, sock)
	p := mustOpen(t, sock)
	p.send(sessionJob("slow-1", "examples.sleep_async", `{"seconds": 60}`))
	p.send(&protocol.Ping{Seq: 1}) // the job has been taken once the pong is back
	_, ok := p.next(10 * time.Second).(*protocol.Pong)
	require.True(t, ok)
	p.send(&protocol.Cancel{ID: "unknown-id", Reason: protocol.ReasonJobTimeout}) // ignored
	start := time.Now()
	p.send(&protocol.Cancel{ID: "slow-1", Reason: protocol.ReasonJobTimeout})
	r := p.result(10 * time.Second)
	require.Equal(t, "slow-1", r.ID)
	require.Equal(t, protocol.StatusCancelled, r.Status)
	// The job would sleep 60 s; a cancel takes milliseconds (10 s: a loaded machine).
	require.Less(t, time.Since(start), 10*time.Second)
	require.True(t, a.running())
}

// TestSessionPythonShutdown: shutdown ends the session (the handler closes
// the stream cleanly) but not the process, which takes the next session.
func TestSessionPythonShutdown(t *testing.T) {
	t.Parallel()
	testSessionShutdown(t, pythonAttach)
}

func testSessionShutdown(t *testing.T, sdk attachSDK) {
	sock := attachPath(t)
	a := startListening(t, sdk, sock)
	p := mustOpen(t, sock)
	p.send(sessionJob("before-shutdown", "examples.sleep_async", `{"seconds": 0.3}`))
	p.send(&protocol.Shutdown{})
	// The session ends only once its job has reported.
	r := p.result(10 * time.Second)
	require.Equal(t, "before-shutdown", r.ID)
	require.Equal(t, protocol.StatusDone, r.Status)
	require.ErrorIs(t, p.ended(10*time.Second), io.EOF)
	require.True(t, a.running(), "shutdown ends the session, not the process")

	q := mustOpen(t, sock)
	q.send(sessionJob("after", "examples.add", `{"a": 1, "b": 1}`))
	require.Equal(t, protocol.StatusDone, q.result(10*time.Second).Status)
}

// TestSessionPythonSecondSessionRefused: a second session while one is open
// is refused with a message naming the open one; the handler logs a WARN.
func TestSessionPythonSecondSessionRefused(t *testing.T) {
	t.Parallel()
	testSessionSecondRefused(t, pythonAttach)
}

func testSessionSecondRefused(t *testing.T, sdk attachSDK) {
	sock := attachPath(t)
	a := startListening(t, sdk, sock)
	p := mustOpen(t, sock)
	_, err := openSession(t, sock)
	require.ErrorIs(t, err, session.ErrRefused)
	require.NotErrorIs(t, err, session.ErrBroken)
	var re *session.RefusedError
	require.True(t, errors.As(err, &re))
	require.Contains(t, re.Message, "already open")
	require.Contains(t, re.Message, "opened at")
	line := a.waitStderr(10*time.Second, "refused")
	require.Contains(t, line, "WARN")
	// The first session is unharmed.
	p.send(&protocol.Ping{Seq: 2})
	_, ok := p.next(10 * time.Second).(*protocol.Pong)
	require.True(t, ok)
}

// TestSessionPythonBrokenSessionSyncJob: a session that breaks while a sync
// job runs; the job runs on, the next session's hello lists it, and its
// result arrives on that session.
func TestSessionPythonBrokenSessionSyncJob(t *testing.T) {
	t.Parallel()
	testSessionBrokenSyncJob(t, pythonAttach)
}

func testSessionBrokenSyncJob(t *testing.T, sdk attachSDK) {
	sock := attachPath(t)
	a := startListening(t, sdk, sock)
	p := mustOpen(t, sock)
	p.send(sessionJob("sync-1", "examples.sleep_sync", `{"seconds": 3}`))
	p.send(&protocol.Ping{Seq: 1})
	_, ok := p.next(10 * time.Second).(*protocol.Pong)
	require.True(t, ok)
	p.close() // the stream breaks (cancelled), as when a sidecar dies

	// The handler may not have seen the break yet: a refusal is retried.
	var q *peer
	eventually(t, 10*time.Second, "a second session accepted", func() bool {
		var err error
		q, err = openSession(t, sock)
		if errors.Is(err, session.ErrRefused) {
			return false
		}
		require.NoError(t, err)
		return true
	})
	require.Equal(t, []session.RunningJob{{ID: "sync-1", Name: "examples.sleep_sync"}}, q.s.Hello().Running)
	r := q.result(15 * time.Second)
	require.Equal(t, "sync-1", r.ID)
	require.Equal(t, protocol.StatusDone, r.Status)
	require.JSONEq(t, `{"slept": 3}`, string(r.Result))
	require.True(t, a.running())
}

// TestSessionPythonSIGTERM: SIGTERM drains: NOT_SERVING at once, a
// draining message, a new job snoozed for 0 s, the held job's result still
// delivered, then exit 0 with the socket removed.
func TestSessionPythonSIGTERM(t *testing.T) {
	t.Parallel()
	testSessionSIGTERM(t, pythonAttach)
}

func testSessionSIGTERM(t *testing.T, sdk attachSDK) {
	sock := attachPath(t)
	a := startListening(t, sdk, sock)
	require.Equal(t, healthpb.HealthCheckResponse_SERVING, a.health("plugin"))
	require.Equal(t, healthpb.HealthCheckResponse_SERVING, a.health(""))
	code, out := a.probe()
	require.Equal(t, 0, code, out)

	p := mustOpen(t, sock)
	// Held through the checks below: the probe they run is a Python process
	// of its own, seconds on a loaded machine; a job that ended first would
	// let the handler exit before the late job is sent.
	p.send(sessionJob("held", "examples.sleep_sync", `{"seconds": 6}`))
	p.send(&protocol.Ping{Seq: 1})
	_, ok := p.next(10 * time.Second).(*protocol.Pong)
	require.True(t, ok)

	a.signal(syscall.SIGTERM)
	_, ok = p.next(10 * time.Second).(*session.Draining)
	require.True(t, ok, "draining message after SIGTERM")
	require.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, a.health("plugin"))
	require.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, a.health(""))
	code, out = a.probe()
	require.NotEqual(t, 0, code)
	require.Contains(t, out, "NOT_SERVING")

	p.send(sessionJob("late", "examples.add", `{"a": 1, "b": 2}`))
	r := p.result(10 * time.Second)
	require.Equal(t, "late", r.ID)
	require.Equal(t, protocol.StatusSnooze, r.Status)
	require.Equal(t, 0.0, r.Seconds)
	require.NotNil(t, r.Reason)
	require.Equal(t, "handler draining", *r.Reason)
	require.True(t, a.running(), "a job is still held")

	r = p.result(15 * time.Second)
	require.Equal(t, "held", r.ID)
	require.Equal(t, protocol.StatusDone, r.Status)
	done := time.Now()
	require.Equal(t, 0, a.wait(15*time.Second))
	// "As soon as it holds no job": well within the 2 s stop grace plus start-up slack.
	require.Less(t, time.Since(done), 5*time.Second)
	require.ErrorIs(t, p.ended(5*time.Second), io.EOF, "the handler closes the session cleanly")
	_, err := os.Lstat(sock)
	require.True(t, os.IsNotExist(err), "socket removed on a clean exit: %v", err)
}

// TestSessionPythonSIGTERMIdle: an idle handler exits 0 at once on SIGTERM.
func TestSessionPythonSIGTERMIdle(t *testing.T) {
	t.Parallel()
	sock := attachPath(t)
	a := startListening(t, pythonAttach, sock)
	start := time.Now()
	a.signal(syscall.SIGTERM)
	require.Equal(t, 0, a.wait(10*time.Second))
	require.Less(t, time.Since(start), 5*time.Second)
}

// TestSessionPythonSocket: the socket file's mode, a stale socket replaced,
// a live one, a non-socket and a missing directory refused with exit 2.
func TestSessionPythonSocket(t *testing.T) {
	t.Parallel()
	testSessionSocket(t, pythonAttach)
}

func testSessionSocket(t *testing.T, sdk attachSDK) {
	t.Run("mode 0660", func(t *testing.T) {
		sock := attachPath(t)
		startListening(t, sdk, sock)
		st, err := os.Lstat(sock)
		require.NoError(t, err)
		require.Equal(t, os.ModeSocket, st.Mode().Type())
		require.Equal(t, os.FileMode(0o660), st.Mode().Perm())
	})
	t.Run("stale socket replaced", func(t *testing.T) {
		sock := attachPath(t)
		l, err := net.Listen("unix", sock)
		require.NoError(t, err)
		l.(*net.UnixListener).SetUnlinkOnClose(false)
		require.NoError(t, l.Close()) // the file stays; nobody answers on it
		a := startListening(t, sdk, sock)
		require.Contains(t, strings.Join(a.stderr(), "\n"), "stale")
		p := mustOpen(t, sock)
		p.send(&protocol.Ping{Seq: 1})
		_, ok := p.next(10 * time.Second).(*protocol.Pong)
		require.True(t, ok)
	})
	t.Run("live socket refused", func(t *testing.T) {
		sock := attachPath(t)
		l, err := net.Listen("unix", sock)
		require.NoError(t, err)
		t.Cleanup(func() { _ = l.Close() })
		a := startAttached(t, sdk, sock)
		require.Equal(t, 2, a.wait(20*time.Second))
		require.Contains(t, strings.Join(a.stderr(), "\n"), "another process is serving")
		_, err = os.Lstat(sock)
		require.NoError(t, err, "the live socket is left alone")
	})
	t.Run("not a socket", func(t *testing.T) {
		sock := attachPath(t)
		require.NoError(t, os.WriteFile(sock, []byte("data"), 0o600))
		a := startAttached(t, sdk, sock)
		require.Equal(t, 2, a.wait(20*time.Second))
		require.Contains(t, strings.Join(a.stderr(), "\n"), "not a socket")
		b, err := os.ReadFile(sock)
		require.NoError(t, err)
		require.Equal(t, "data", string(b))
	})
	t.Run("missing directory", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "missing")
		a := startAttached(t, sdk, filepath.Join(dir, "h.sock"))
		require.Equal(t, 2, a.wait(20*time.Second))
		require.Contains(t, strings.Join(a.stderr(), "\n"), dir)
	})
}
