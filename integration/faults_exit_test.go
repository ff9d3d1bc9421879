package integration

// Black-box tests of a handler process that dies (or goes deaf) while
// something still holds its pipes: it closes its stdout and keeps running,
// or it exits while a helper it started with setsid holds its stdout and
// stderr. The sidecar must see the exit itself, promptly, fail the jobs it
// held through the retry policy with the real cause, and still stop on
// SIGTERM. Sync jobs are used throughout: a process holding one is never
// pinged, so nothing else would ever notice.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// The sidecar's own bounds (supervisor: stdoutEOFGrace and exitDrain, both
// 1 s) plus faultTolerance for the kill, the reap, the row write, log
// polling and -race on a loaded 2-core machine. The 30 s ping timeout, the
// only other way such a process could be noticed, is far above.
const (
	stdoutEOFGrace = time.Second
	exitDrain      = time.Second
	faultTolerance = 4 * time.Second
)

// faultHandler is one way to run the misbehaving handlers.
type faultHandler struct {
	name      string
	transport string
	script    string   // under integration/testdata/handlers
	jobs      []string // exactly what its hello lists, all sync
}

var (
	ndjsonStdio = faultHandler{"ndjson/stdio", "stdio", "exit_faults_ndjson.py", []string{"x.close_stdout", "x.orphan_exit"}}
	sdkStdio    = faultHandler{"sdk/stdio", "stdio", "exit_faults_sdk.py", []string{"x.orphan_exit"}}
	sdkUnix     = faultHandler{"sdk/unix", "unix", "exit_faults_sdk.py", []string{"x.orphan_exit"}}
)

// faultWorld is a world whose manifest has the one fault handler, and
// whose helpers (the setsid ones the sidecar does not own) are killed at
// the end of the test.
func faultWorld(t *testing.T, fh faultHandler) *world {
	t.Helper()
	w := newWorld(t, sdks[0], manifestOpts{})
	cmd, _ := json.Marshal([]string{"python3", "-u", filepath.Join(w.root, "integration/testdata/handlers", fh.script)})
	env, _ := json.Marshal(map[string]string{"TEST_RECORD": w.record, "PYTHONPATH": filepath.Join(w.root, "sdk/python")})
	var b strings.Builder
	fmt.Fprintf(&b, "version: 1\nhandlers:\n  - name: faults\n    command: %s\n    transport: %s\n", cmd, fh.transport)
	fmt.Fprintf(&b, "    processes: 1\n    concurrency: 2\n    sync_concurrency: 2\n    startup_timeout: 20s\n    env: %s\n    jobs:\n", env)
	for _, j := range fh.jobs {
		fmt.Fprintf(&b, "      - name: %s\n        cancellable: false\n", j)
	}
	w.manifest = filepath.Join(w.dir, "faults.yaml")
	require.NoError(t, os.WriteFile(w.manifest, []byte(b.String()), 0o644))
	t.Cleanup(func() {
		for _, pid := range w.helpers() {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return w
}

// helpers are the pids of the setsid helpers the handlers started.
func (w *world) helpers() []int {
	b, err := os.ReadFile(w.record + ".helpers")
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// waitAttempt waits until the handler recorded the start of the job's
// attempt and returns the pid that runs it and when the test saw it.
func (w *world) waitAttempt(t *testing.T, sc *sidecar, id string, attempt int) (int, time.Time) {
	t.Helper()
	pid := 0
	whileRunning(t, 30*time.Second, fmt.Sprintf("attempt %d of %s started", attempt, id), func() bool {
		for _, r := range w.recorded() {
			if len(r) == 4 && r[0] == "start" && r[1] == id && r[3] == strconv.Itoa(attempt) {
				pid, _ = strconv.Atoi(r[2])
				return true
			}
		}
		return false
	}, sc)
	return pid, time.Now()
}

// (a) A handler that closes its stdout while holding a sync job and keeps
// running is a crash: killed after the grace, the job retried on a new
// process, last_error saying the stdout was closed.
func TestFaultExitStdoutClosedWhileRunning(t *testing.T) {
	t.Parallel()
	w := faultWorld(t, ndjsonStdio)
	id := w.enqueue("x.close_stdout", `{}`, 3)
	sc := w.startSidecar(nil)
	pid1, started := w.waitAttempt(t, sc, id, 1)

	broken := sc.waitLog(20*time.Second, "handler process is broken", map[string]any{"pid": pid1})
	seen := time.Since(started)
	assert.Contains(t, fmt.Sprint(broken["err"]), "closed its stdout while still running")
	sc.waitLog(20*time.Second, "job failed; will retry", map[string]any{"job_id": id})
	failed := time.Since(started)
	t.Logf("stdout closed: broken after %s, row failed after %s (bound %s)", seen.Round(time.Millisecond), failed.Round(time.Millisecond), stdoutEOFGrace+faultTolerance)
	assert.Less(t, failed, stdoutEOFGrace+faultTolerance, "the crash is seen within the grace plus tolerance")

	pid2, _ := w.waitAttempt(t, sc, id, 2)
	assert.NotEqual(t, pid1, pid2, "the retry runs in a replacement process")
	w.waitDone(t, sc, 20*time.Second, id)
	j := w.job(id)
	assert.Equal(t, 2, j.Attempts, "the crash counted one attempt")
	require.NotNil(t, j.LastError)
	assert.Contains(t, *j.LastError, fmt.Sprintf("process %d closed its stdout while still running", pid1))
	eventually(t, 5*time.Second, "the deaf process killed and reaped", func() bool { return !pidAlive(pid1) })
	t.Logf("last_error: %q", *j.LastError)
	sc.stop(t)
}

// (b) A handler that exits (status 3) while holding a sync job and while a
// setsid helper it started still holds its pipes: the exit is seen after
// the bounded drain, the job is retried on a new process and done, and
// SIGTERM afterwards stops the sidecar normally.
func TestFaultExitWithOrphanHoldingPipes(t *testing.T) {
	t.Parallel()
	for _, fh := range []faultHandler{ndjsonStdio, sdkStdio, sdkUnix} {
		t.Run(fh.name, func(t *testing.T) {
			t.Parallel()
			w := faultWorld(t, fh)
			id := w.enqueue("x.orphan_exit", `{}`, 3)
			sc := w.startSidecar(nil)
			pid1, started := w.waitAttempt(t, sc, id, 1)

			sc.waitLog(20*time.Second, "job failed; will retry", map[string]any{"job_id": id})
			failed := time.Since(started)
			t.Logf("exit with a setsid helper holding the pipes: row failed after %s (bound %s)", failed.Round(time.Millisecond), exitDrain+faultTolerance)
			assert.Less(t, failed, exitDrain+faultTolerance, "the exit is seen within the drain plus tolerance")
			helpers := w.helpers()
			require.NotEmpty(t, helpers, "the handler started its helper")
			assert.True(t, pidAlive(helpers[0]), "the setsid helper still runs (and holds the pipes)")

			pid2, _ := w.waitAttempt(t, sc, id, 2)
			assert.NotEqual(t, pid1, pid2, "the retry runs in a replacement process")
			w.waitDone(t, sc, 20*time.Second, id)
			j := w.job(id)
			assert.Equal(t, 2, j.Attempts)
			require.NotNil(t, j.LastError)
			assert.Contains(t, *j.LastError, fmt.Sprintf("process %d exited with status 3", pid1))
			assert.NotContains(t, *j.LastError, "did not answer a ping")
			t.Logf("last_error: %q", *j.LastError)

			stopAt := sc.signal(syscall.SIGTERM)
			code, exitAt := sc.wait(30 * time.Second)
			require.Equal(t, 0, code, "clean exit after SIGTERM")
			t.Logf("SIGTERM to exit: %s", exitAt.Sub(stopAt).Round(time.Millisecond))
		})
	}
}

// A handler that exits while the sidecar waits for its sync job in
// WAIT_FOR_THREAD, a setsid helper holding its pipes: the job's row is
// failed per the retry policy as for any crash and the shutdown completes.
func TestFaultExitInWaitForThread(t *testing.T) {
	t.Parallel()
	for _, fh := range []faultHandler{ndjsonStdio, sdkUnix} {
		t.Run(fh.name, func(t *testing.T) {
			t.Parallel()
			w := faultWorld(t, fh)
			trigger := filepath.Join(w.dir, "exit-now")
			args, _ := json.Marshal(map[string]string{"trigger": trigger})
			id := w.enqueue("x.orphan_exit", string(args), 3)
			sc := w.startSidecar(map[string]string{"SONIQ_SHUTDOWN_TIMEOUT": "0.5", "SONIQ_SYNC_HANDLER_GRACE_SECONDS": "0.5"})
			pid1, _ := w.waitAttempt(t, sc, id, 1)
			sc.signal(syscall.SIGTERM)
			sc.waitLog(10*time.Second, "state transition", map[string]any{"state": "WAIT_FOR_THREAD"})

			require.NoError(t, os.WriteFile(trigger, nil, 0o644))
			exitNow := time.Now()
			code, exitAt := sc.wait(exitDrain + faultTolerance + 10*time.Second)
			require.Equal(t, 0, code, "clean exit once the process is gone")
			took := exitAt.Sub(exitNow)
			t.Logf("handler exit in WAIT_FOR_THREAD to sidecar exit: %s (bound %s)", took.Round(time.Millisecond), exitDrain+faultTolerance)
			assert.Less(t, took, exitDrain+faultTolerance)
			helpers := w.helpers()
			require.NotEmpty(t, helpers, "the handler started its helper")
			assert.True(t, pidAlive(helpers[0]), "the setsid helper still runs (and holds the pipes)")

			j := w.job(id)
			assert.Equal(t, backends.StatusQueued, j.Status, "failed per the retry policy: queued for attempt 2")
			assert.Equal(t, 1, j.Attempts)
			require.NotNil(t, j.LastError)
			assert.Contains(t, *j.LastError, fmt.Sprintf("process %d exited with status 3", pid1))
			t.Logf("last_error: %q", *j.LastError)
		})
	}
}
