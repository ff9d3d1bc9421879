package integration

// The harness's helpers the tests share: reading a sidecar's log and
// state, waiting for handlers, jobs and dead-letter rows, enqueueing many
// jobs, and writing and checking manifests.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// rawLog is everything the sidecar wrote on stderr so far (JSON log lines
// and the final non-JSON error line, if any).
func (s *sidecar) rawLog() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.raw.String()
}

// intAttr reads an integer log attribute (JSON numbers decode as float64).
func intAttr(m map[string]any, key string) int {
	switch v := m[key].(type) {
	case float64:
		return int(v)
	case string:
		n, _ := strconv.Atoi(v)
		return n
	}
	return 0
}

// workerID is this sidecar's soniq_workers id, from its "worker registered" line.
func (s *sidecar) workerID(t *testing.T) string {
	t.Helper()
	m := s.waitLog(20*time.Second, "worker registered", nil)
	id, _ := m["worker_id"].(string)
	require.NotEmpty(t, id, "worker registered line without worker_id: %v", m)
	return id
}

// readyPIDs are the pids of the handler processes that said hello, in log
// order, for the handler named handler ("" = any).
func (s *sidecar) readyPIDs(handler string) []int {
	var pids []int
	for _, m := range s.logs("handler process ready") {
		if handler == "" || m["handler"] == handler {
			pids = append(pids, intAttr(m, "pid"))
		}
	}
	return pids
}

// waitReady waits until n handler processes of handler said hello.
func (s *sidecar) waitReady(t *testing.T, handler string, n int) []int {
	t.Helper()
	whileRunning(t, 30*time.Second, fmt.Sprintf("%d ready processes of %s", n, handler), func() bool {
		return len(s.readyPIDs(handler)) >= n
	}, s)
	return s.readyPIDs(handler)
}

// stop sends SIGTERM and requires a clean exit.
func (s *sidecar) stop(t *testing.T) {
	t.Helper()
	s.signal(syscall.SIGTERM)
	code, _ := s.wait(30 * time.Second)
	require.Equal(t, 0, code, "clean exit after SIGTERM")
}

func (w *world) handlerName() string { return w.sdk.name + "-tests" }

// deadLetter returns the dead-letter row of a job, if any.
func (w *world) deadLetter(id string) (backends.DeadLetterJob, bool) {
	w.t.Helper()
	rows, err := w.backend.ListDeadLetter(context.Background(), 0)
	require.NoError(w.t, err)
	for _, r := range rows {
		if r.ID == id {
			return r, true
		}
	}
	return backends.DeadLetterJob{}, false
}

// whileRunning is eventually, failing at once when one of the sidecars
// that should do the work has exited.
func whileRunning(t *testing.T, timeout time.Duration, what string, cond func() bool, scs ...*sidecar) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		for _, sc := range scs {
			if sc.exited() {
				sc.mu.Lock()
				code := sc.exit
				sc.mu.Unlock()
				t.Fatalf("waiting for %s: the sidecar exited with %d:\n%s", what, code, lastLines(sc.rawLog(), 5))
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("timed out after %s waiting for: %s", timeout, what)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func (w *world) waitDeadLetter(t *testing.T, sc *sidecar, timeout time.Duration, id string) backends.DeadLetterJob {
	t.Helper()
	var dl backends.DeadLetterJob
	whileRunning(t, timeout, "job "+id+" dead-lettered", func() bool {
		var ok bool
		dl, ok = w.deadLetter(id)
		return ok
	}, sc)
	return dl
}

// jobGone reports whether the job's row left soniq_jobs.
func (w *world) jobGone(id string) bool {
	w.t.Helper()
	var n int
	require.NoError(w.t, w.db.QueryRow(context.Background(),
		`SELECT count(*) FROM soniq_jobs WHERE id = $1::uuid`, id).Scan(&n))
	return n == 0
}

func (w *world) waitDone(t *testing.T, sc *sidecar, timeout time.Duration, ids ...string) {
	t.Helper()
	whileRunning(t, timeout, fmt.Sprintf("%d jobs done", len(ids)), func() bool {
		for _, id := range ids {
			if w.job(id).Status != backends.StatusDone {
				return false
			}
		}
		return true
	}, sc)
}

func (w *world) enqueueN(name, args string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = w.enqueue(name, args, 0)
	}
	return ids
}

// enqueueBulk inserts n jobs in one transaction and notifies once, as a
// Soniq producer's batch enqueue would, so they become visible together.
func (w *world) enqueueBulk(t *testing.T, name string, n int) []string {
	t.Helper()
	ctx := context.Background()
	tx, err := w.db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	rows, err := tx.Query(ctx, `INSERT INTO soniq_jobs (id, job_name, args)
	SELECT gen_random_uuid(), $1, '{}'::jsonb FROM generate_series(1, $2::int)
	RETURNING id::text`, name, n)
	require.NoError(t, err)
	var ids []string
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	_, err = tx.Exec(ctx, `SELECT pg_notify('soniq_new_job', 'default')`)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	require.Len(t, ids, n)
	return ids
}

// pidAlive reports whether a process exists and is not a zombie (an
// orphan whose reaper has not collected it yet has exited all the same).
func pidAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	if err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		// pid (comm) state ...: comm may hold spaces and parentheses.
		if i := strings.LastIndexByte(string(stat), ')'); i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			return false
		}
	}
	return true
}

// jobFrames counts the job frames the sidecar sent for id (recordFrames).
func jobFrames(frames []map[string]any, id string) int {
	n := 0
	for _, f := range frames {
		if f["type"] == "job" && f["id"] == id {
			n++
		}
	}
	return n
}

// writeCustomManifest writes the generated manifest with edit applied to
// its text, under another name in the test's directory.
func (w *world) writeCustomManifest(t *testing.T, name string, edit func(string) string) string {
	t.Helper()
	base, err := os.ReadFile(w.manifest)
	require.NoError(t, err)
	text := edit(string(base))
	require.NotEqual(t, string(base), text, "the edit changed nothing")
	path := filepath.Join(w.dir, name)
	require.NoError(t, os.WriteFile(path, []byte(text), 0o644))
	return path
}

// manifestCheck runs `soniq-sidecar manifest check FILE`.
func manifestCheck(t *testing.T, path string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, sidecarBinary(t), "manifest", "check", path)
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		require.NoError(t, err)
	}
	return cmd.ProcessState.ExitCode(), string(out)
}
