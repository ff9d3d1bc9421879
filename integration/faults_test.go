package integration

// Faults of a bad day in a pod, produced for real against the binary: signals
// from a terminal or a reload, settings that would recover live workers.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
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

// SIGHUP (a closed terminal, a supervisor's reload) drains like SIGTERM:
// the running sync job finishes, its row is done, exit 0.
func TestFaultSighupDrains(t *testing.T) {
	t.Parallel()
	w := newWorld(t, sdks[0], manifestOpts{})
	id := w.enqueue("t.sleep_sync", `{"seconds":1}`, 0)
	sc := w.startSidecar(nil)
	w.waitStarted(t, id)
	sc.signal(syscall.SIGHUP)
	code, _ := sc.wait(15 * time.Second)
	require.Equal(t, 0, code, "SIGHUP must drain and exit 0, not kill the sidecar")
	assert.Equal(t, backends.StatusDone, w.job(id).Status)
	sc.waitLog(time.Second, "signal received", map[string]any{"signal": "hangup"})
	sc.waitLog(time.Second, "state transition", map[string]any{"state": "STOPPED", "from": "DRAINING"})
}

// A heartbeat timeout a live Soniq worker could miss is refused at start
// (exit 2, naming the setting and the rule) before anything is claimed.
func TestFaultShortHeartbeatTimeoutRefused(t *testing.T) {
	t.Parallel()
	w := newWorld(t, sdks[0], manifestOpts{})
	id := w.enqueue("t.noop", `{}`, 0)
	cmd := exec.Command(sidecarBinary(t), "run", "--manifest", w.manifest, "--metrics-addr", "")
	cmd.Dir = w.dir
	cmd.Env = []string{"SONIQ_DATABASE_URL=" + w.dbURL, "SONIQ_HEARTBEAT_TIMEOUT=3", "SONIQ_HEARTBEAT_INTERVAL=1"}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "%s", out)
	assert.Equal(t, 2, ee.ExitCode(), "%s", out)
	assert.Contains(t, string(out), `heartbeat_timeout="3s": (from SONIQ_HEARTBEAT_TIMEOUT) must be at least 1m0s`)
	assert.Equal(t, backends.StatusQueued, w.job(id).Status, "nothing was claimed")
}

// A frozen sidecar (SIGSTOP: a paused VM, a long GC, a partition) is
// recovered by another; when it resumes, its late results must not touch
// the rows the other one now runs, it must notice its row is no longer
// active and register again before claiming, and rows it holds afterwards
// must be recoverable when it then dies for good.
func TestFaultFrozenSidecarRegistersAgain(t *testing.T) {
	t.Parallel()
	w := newWorld(t, sdks[0], manifestOpts{concurrency: 8})
	// A timeout of 15 beats: a live sidecar never looks stale to a loaded machine.
	fast := map[string]string{"SONIQ_HEARTBEAT_INTERVAL": "0.2", "SONIQ_HEARTBEAT_TIMEOUT": "3", "SONIQ_CLEANUP_INTERVAL": "0.5"}
	// a makes its maintenance pass at start and no other, so the SIGSTOP
	// never catches it leading mid-pass: a leader frozen mid-pass keeps
	// leadership for backends.LeaderHoldLimit (45 s), longer than this
	// test waits for b's recovery, and that case has a test of its own
	// (TestPartitionedLeaderLosesLeadershipAndAnotherRecovers). Before, a loaded
	// machine sometimes froze a inside a pass, and b never led in time.
	a := w.startSidecar(map[string]string{"SONIQ_HEARTBEAT_INTERVAL": "0.2", "SONIQ_HEARTBEAT_TIMEOUT": "3", "SONIQ_CLEANUP_INTERVAL": "3600"})
	wa := a.workerID(t)
	a.waitReady(t, w.handlerName(), 1)
	ids := w.enqueueN("t.sleep_async", `{"seconds":4,"pid":true}`, 8)
	w.waitStarted(t, ids...)
	pidsOfA := map[string]bool{}
	for _, r := range w.recorded() {
		pidsOfA[r[2]] = true
	}

	a.signal(syscall.SIGSTOP)
	stopped := true
	t.Cleanup(func() {
		if stopped {
			_ = a.cmd.Process.Signal(syscall.SIGCONT)
		}
	})
	b := w.startSidecar(fast)
	wb := b.workerID(t)
	// b recovers a's rows after 3 s of silence and runs them again.
	eventually(t, 20*time.Second, "b holds every row a held", func() bool {
		for _, id := range ids {
			j := w.job(id)
			if j.WorkerID == nil || *j.WorkerID != wb {
				return false
			}
		}
		return true
	})
	// a's handler has finished its copies by now (4 s); its results wait
	// in the pipe of the frozen sidecar.
	a.signal(syscall.SIGCONT)
	stopped = false
	resumed := time.Now()
	line := a.waitLog(10*time.Second, "worker row was lost", map[string]any{"level": "WARN", "worker_id": wa})
	t.Logf("a registered again %.2fs after SIGCONT: %v", time.Since(resumed).Seconds(), line)
	var status string
	require.NoError(t, w.db.QueryRow(context.Background(), `SELECT status FROM soniq_workers WHERE id = $1::uuid`, wa).Scan(&status))
	assert.Equal(t, backends.WorkerActive, status, "a's row is active again")

	w.waitDone(t, b, 30*time.Second, ids...)
	for _, id := range ids {
		j := w.job(id)
		var res struct{ PID int }
		require.NoError(t, json.Unmarshal(j.Result, &res), "job %s result %s", id, j.Result)
		assert.False(t, pidsOfA[strconv.Itoa(res.PID)], "job %s: the row holds b's result, not a's late one", id)
		assert.Equal(t, 2, j.Attempts, "job %s: claimed by a, then by b", id)
	}
	b.stop(t)

	// a is alone now: it claims rows, then dies for good. Its rows must be
	// recovered (before the fix a's row stayed 'stopped', so no recovery
	// ever looked at it and the rows stayed processing forever).
	held := w.enqueueN("t.sleep_async", `{"seconds":60}`, 4)
	w.waitStarted(t, held...)
	for _, id := range held {
		require.Equal(t, wa, *w.job(id).WorkerID)
	}
	a.signal(syscall.SIGKILL)
	a.wait(10 * time.Second)
	killed := time.Now()
	c := w.startSidecar(map[string]string{"SONIQ_HEARTBEAT_INTERVAL": "0.2", "SONIQ_HEARTBEAT_TIMEOUT": "3", "SONIQ_CLEANUP_INTERVAL": "0.5", "SONIQ_SHUTDOWN_TIMEOUT": "0.5"})
	eventually(t, 20*time.Second, "the dead sidecar's rows recovered", func() bool {
		for _, id := range held {
			if j := w.job(id); j.WorkerID != nil && *j.WorkerID == wa {
				return false
			}
		}
		return true
	})
	t.Logf("rows of the killed sidecar recovered %.2fs after SIGKILL (heartbeat timeout 3 s)", time.Since(killed).Seconds())
	c.stop(t)
}

// In a pod every container shares the hostname and each main process is
// pid 1, so a Soniq worker and the sidecar have the same (hostname, pid),
// on which Soniq's soniq_workers is unique. The sidecar's row is named
// INSTANCE@HOSTNAME: registering never touches the Soniq worker's row or
// its job. And when Soniq's own register_worker takes the sidecar's exact
// (hostname, pid) (re-keying its row), the sidecar registers again within a
// heartbeat instead of failing every claim on the foreign key forever.
func TestFaultPodIdentityWithSoniqWorker(t *testing.T) {
	t.Parallel()
	py := soniqPython(t)
	w := newWorld(t, sdks[0], manifestOpts{})
	py.run(t, "setup", w.dbURL, nil, nil)
	host, err := os.Hostname()
	require.NoError(t, err)

	gate := make(chan struct{})
	sc := w.startSidecarGated(nil, gate)
	pid := sc.cmd.Process.Pid // the shell's, which becomes the sidecar's

	// The Soniq worker "in the next container": same hostname, same pid,
	// holding a job of its own queue.
	soniqWorker := backends.NewID()
	py.run(t, "register_worker", w.dbURL, map[string]any{"worker_id": soniqWorker, "hostname": host, "pid": pid,
		"queues": []string{"soniq-only"}}, nil)
	theirs, err := w.backend.Enqueue(context.Background(), backends.EnqueueParams{Name: "soniq.job", Queue: "soniq-only"})
	require.NoError(t, err)
	var claimed struct{ ID string }
	py.run(t, "claim", w.dbURL, map[string]any{"worker_id": soniqWorker, "queues": []string{"soniq-only"}}, &claimed)
	require.Equal(t, theirs.ID, claimed.ID)
	before := w.job(theirs.ID)

	close(gate)
	ours := sc.workerID(t)
	sc.waitReady(t, w.handlerName(), 1)

	after := w.job(theirs.ID)
	assert.Equal(t, backends.StatusProcessing, after.Status, "the Soniq worker's job was not released")
	require.NotNil(t, after.WorkerID)
	assert.Equal(t, soniqWorker, *after.WorkerID)
	assert.Equal(t, before.Attempts, after.Attempts)
	rows := w.workers(t)
	assert.Equal(t, workerRow{host, pid, backends.WorkerActive}, rows[soniqWorker], "the Soniq worker's row is untouched")
	assert.Equal(t, workerRow{"soniq-sidecar@" + host, pid, backends.WorkerActive}, rows[ours])

	// Soniq's register_worker upsert on the sidecar's own (hostname, pid)
	// takes its row (the new id wins). Postgres allows that only while no
	// job row references the sidecar's id, so it happens before any job.
	rekeyed := time.Now()
	thief := backends.NewID()
	py.run(t, "register_worker", w.dbURL, map[string]any{"worker_id": thief, "hostname": "soniq-sidecar@" + host, "pid": pid}, nil)
	sc.waitLog(10*time.Second, "worker row was lost", map[string]any{"level": "WARN", "worker_id": ours})
	t.Logf("the sidecar registered again %.2fs after its row was re-keyed (heartbeat interval 0.5 s)", time.Since(rekeyed).Seconds())
	first := w.enqueue("t.noop", `{}`, 0)
	w.waitDone(t, sc, 20*time.Second, first)
	require.NotNil(t, w.job(first).WorkerID)
	assert.Equal(t, ours, *w.job(first).WorkerID, "claimed under the sidecar's own id")
	rows = w.workers(t)
	assert.Equal(t, workerRow{"soniq-sidecar@" + host, pid, backends.WorkerActive}, rows[thief], "the other program keeps the row it took")
	assert.Equal(t, workerRow{"soniq-sidecar@" + host + "#" + ours[:8], pid, backends.WorkerActive}, rows[ours],
		"the sidecar registered under a hostname made unique by its id")
	assert.Empty(t, sc.logs("claiming jobs failed"), "no claim failed on the foreign key")
	sc.stop(t)
	assert.Equal(t, backends.StatusProcessing, w.job(theirs.ID).Status, "the Soniq worker's job is still its own")
}

type workerRow struct {
	Hostname string
	PID      int
	Status   string
}

// workers reads soniq_workers by id.
func (w *world) workers(t *testing.T) map[string]workerRow {
	t.Helper()
	rows, err := w.db.Query(context.Background(), `SELECT id::text, hostname, pid, status FROM soniq_workers`)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]workerRow{}
	for rows.Next() {
		var id string
		var r workerRow
		require.NoError(t, rows.Scan(&id, &r.Hostname, &r.PID, &r.Status))
		out[id] = r
	}
	require.NoError(t, rows.Err())
	return out
}

func httpGet(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// A database that comes up after the sidecar (a pod whose Postgres starts
// beside it): run retries with backoff, alive but not ready meanwhile, and
// serves jobs once it is reachable. One that never comes up fails the run
// after --database-wait (exit 1), not at once into a crash loop.
func TestFaultDatabaseLateAtStart(t *testing.T) {
	t.Parallel()
	t.Run("comes up", func(t *testing.T) {
		w := newWorld(t, sdks[0], manifestOpts{})
		id := w.enqueue("t.noop", `{}`, 0)
		u, err := url.Parse(w.dbURL)
		require.NoError(t, err)
		proxy := newCutProxy(t, u.Host)
		proxy.cut()
		u.Host = proxy.ln.Addr().String()
		started := time.Now()
		sc := w.startSidecar(map[string]string{"SONIQ_DATABASE_URL": u.String(), "SONIQ_DATABASE_WAIT": "60"}, "--metrics-addr", "127.0.0.1:0")
		addr := sc.httpAddr(t)
		sc.waitLog(20*time.Second, "database unreachable; retrying", map[string]any{"level": "WARN"})
		eventually(t, 10*time.Second, "/healthz alive and /readyz saying why it is not ready", func() bool {
			hc, hb := httpGet("http://" + addr + "/healthz")
			rc, rb := httpGet("http://" + addr + "/readyz")
			return hc == 200 && strings.HasPrefix(hb, "ok") && rc == 503 && strings.Contains(rb, "database unreachable")
		})
		assert.False(t, sc.exited(), "still waiting for the database")
		proxy.restore()
		w.waitDone(t, sc, 30*time.Second, id)
		t.Logf("database reachable after %.1fs; job done", time.Since(started).Seconds())
		eventually(t, 10*time.Second, "/readyz ready", func() bool {
			c, _ := httpGet("http://" + addr + "/readyz")
			return c == 200
		})
		sc.stop(t)
	})
	t.Run("never comes up", func(t *testing.T) {
		w := newWorld(t, sdks[0], manifestOpts{})
		u, err := url.Parse(w.dbURL)
		require.NoError(t, err)
		proxy := newCutProxy(t, u.Host)
		proxy.cut()
		u.Host = proxy.ln.Addr().String()
		sc := w.startSidecar(map[string]string{"SONIQ_DATABASE_URL": u.String(), "SONIQ_DATABASE_WAIT": "2"})
		code, at := sc.wait(30 * time.Second)
		assert.Equal(t, 1, code)
		elapsed := at.Sub(sc.started)
		assert.GreaterOrEqual(t, elapsed, 2*time.Second, "retried for the whole wait")
		sc.waitLog(time.Second, "database unreachable; retrying", nil)
		assert.Contains(t, sc.raw.String(), "the database stayed unreachable for 2s")
		t.Logf("gave up after %.2fs (SONIQ_DATABASE_WAIT=2)", elapsed.Seconds())
	})
}

// A handler command that can never start is a configuration error at the
// first start: exit 2 naming the handler and the command, instead of
// restarting it with backoff forever.
func TestFaultHandlerCommandCannotStart(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, command string }{
		{"missing path", `["/nonexistent/soniq-handler"]`},
		{"not on PATH", `["soniq-no-such-handler"]`},
		{"not executable", `["/etc/hostname"]`},
	} {
		for _, transport := range []string{"stdio", "unix"} {
			t.Run(tc.name+"/"+transport, func(t *testing.T) {
				w := newWorld(t, sdks[0], manifestOpts{})
				id := w.enqueue("t.noop", `{}`, 0)
				manifest := filepath.Join(w.dir, "broken.yaml")
				require.NoError(t, os.WriteFile(manifest, []byte("version: 1\nhandlers:\n  - name: broken\n    command: "+tc.command+
					"\n    transport: "+transport+"\n    jobs:\n      - name: t.noop\n        cancellable: true\n"), 0o644))
				cmd := exec.Command(sidecarBinary(t), "run", "--manifest", manifest, "--metrics-addr", "", "--log-format", "json")
				cmd.Dir = w.dir
				cmd.Env = []string{"SONIQ_DATABASE_URL=" + w.dbURL, "PATH=" + os.Getenv("PATH")}
				start := time.Now()
				out, err := cmd.CombinedOutput()
				var ee *exec.ExitError
				require.ErrorAs(t, err, &ee, "%s", out)
				assert.Equal(t, 2, ee.ExitCode(), "%s", out)
				assert.Contains(t, string(out), "handler broken: command")
				assert.Contains(t, string(out), "cannot be started")
				assert.Less(t, time.Since(start), 20*time.Second)
				assert.Equal(t, backends.StatusQueued, w.job(id).Status, "nothing was claimed")
			})
		}
	}
}

// A handler command given as a bare interpreter name (`python3`) is found on
// the sidecar's PATH, as from an activated virtualenv, and must run inside
// that virtualenv: it is started by its resolved path, so Python finds its
// pyvenv.cfg and the venv's packages, with no PYTHONPATH in the manifest.
func TestHandlerInterpreterFromAVirtualenv(t *testing.T) {
	t.Parallel()
	w := newWorld(t, sdks[0], manifestOpts{})
	venv := filepath.Join(t.TempDir(), "venv")
	out, err := exec.Command("python3", "-m", "venv", "--without-pip", venv).CombinedOutput()
	require.NoError(t, err, "%s", out)
	purelib, err := exec.Command(filepath.Join(venv, "bin", "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").Output()
	require.NoError(t, err)
	// A module importable inside the venv only (as after `pip install`):
	// the handler imports it first, then runs the test handlers.
	pkgs := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(pkgs, "soniq_venv_marker.py"), []byte("IN_VENV = True\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(strings.TrimSpace(string(purelib)), "soniq_test_paths.pth"),
		[]byte(pkgs+"\n"+filepath.Join(w.root, "sdk/python")+"\n"), 0o644))
	out, err = exec.Command("/bin/sh", "-c", `PATH=/usr/bin:/bin python3 -c "import soniq_venv_marker"`).CombinedOutput()
	require.Error(t, err, "outside the venv the marker is not importable: %s", out)
	wrapper := filepath.Join(pkgs, "handler.py")
	require.NoError(t, os.WriteFile(wrapper, []byte("import runpy, soniq_venv_marker\nrunpy.run_path("+
		strconv.Quote(filepath.Join(w.root, "integration/testdata/handlers/test_handlers.py"))+", run_name='__main__')\n"), 0o644))

	var jobs strings.Builder
	for _, j := range testJobs {
		fmt.Fprintf(&jobs, "      - {name: %s, cancellable: %t}\n", j.name, j.cancellable)
	}
	manifest := filepath.Join(w.dir, "venv.yaml")
	require.NoError(t, os.WriteFile(manifest, []byte("version: 1\nhandlers:\n  - name: venv\n"+
		"    command: [python3, -u, "+wrapper+"]\n"+
		"    jobs:\n"+jobs.String()), 0o644))
	id := w.enqueue("t.record", `{}`, 0)
	sc := w.startSidecar(map[string]string{"PATH": filepath.Join(venv, "bin") + ":" + os.Getenv("PATH")}, "--manifest", manifest)
	w.waitDone(t, sc, 30*time.Second, id)
	sc.stop(t)
}

// A Soniq worker on a queue the sidecar serves takes the sidecar's jobs and
// dead-letters them (Soniq's claim has no name filter): the sidecar warns,
// naming the worker and the queue, and exports a gauge; a Soniq worker on
// another queue is fine.
func TestFleetWarnsOfASoniqWorkerOnASharedQueue(t *testing.T) {
	t.Parallel()
	py := soniqPython(t)
	w := newWorld(t, sdks[0], manifestOpts{})
	py.run(t, "setup", w.dbURL, nil, nil)
	shared, elsewhere := backends.NewID(), backends.NewID()
	py.run(t, "register_worker", w.dbURL, map[string]any{"worker_id": shared, "hostname": "soniq-host", "pid": 4242, "queues": []string{"default"}}, nil)
	py.run(t, "register_worker", w.dbURL, map[string]any{"worker_id": elsewhere, "hostname": "soniq-host", "pid": 4243, "queues": []string{"reports"}}, nil)
	sc := w.startSidecar(nil, "--queues", "default,billing", "--metrics-addr", "127.0.0.1:0")
	addr := sc.httpAddr(t)
	line := sc.waitLog(20*time.Second, "claims from a queue this sidecar serves", map[string]any{"level": "WARN", "worker_id": shared})
	assert.Equal(t, "default", line["shared_queues"])
	assert.Equal(t, "soniq-host", line["hostname"])
	eventually(t, 10*time.Second, "the gauge counts one foreign worker", func() bool {
		_, body := httpGet("http://" + addr + "/metrics")
		return strings.Contains(body, "soniq_foreign_workers_sharing_queues 1\n") ||
			strings.Contains(body, "soniq_foreign_workers_sharing_queues{") && strings.Contains(body, "} 1\n")
	})
	assert.Empty(t, sc.logs("claims from a queue this sidecar serves")[1:], "one line for one worker, not one per check")
	for _, m := range sc.logs("claims from a queue this sidecar serves") {
		assert.NotEqual(t, elsewhere, m["worker_id"], "a Soniq worker on another queue is fine")
	}
	sc.stop(t)
}

// run --once runs what is due, retries included, and exits 0 (for cron and
// CI); a job scheduled for later stays queued.
func TestRunOnce(t *testing.T) {
	t.Parallel()
	w := newWorld(t, sdks[0], manifestOpts{})
	done := w.enqueueN("t.noop", `{}`, 5)
	failing := w.enqueue("t.fail", `{}`, 2)
	later, err := w.backend.Enqueue(context.Background(), backends.EnqueueParams{Name: "t.noop", Args: json.RawMessage(`{}`), Delay: time.Hour})
	require.NoError(t, err)
	sc := w.startSidecar(map[string]string{"SONIQ_POLL_INTERVAL": "30"}, "--once")
	code, at := sc.wait(60 * time.Second)
	require.Equal(t, 0, code)
	t.Logf("run --once exited %.2fs after start (poll interval 30 s)", at.Sub(sc.started).Seconds())
	assert.Less(t, at.Sub(sc.started), 30*time.Second, "it does not wait for a poll to notice it is done")
	for _, id := range done {
		assert.Equal(t, backends.StatusDone, w.job(id).Status)
	}
	dl, ok := w.deadLetter(failing)
	require.True(t, ok, "the failing job ran both attempts (the retry was due at once)")
	assert.Equal(t, 2, dl.Attempts)
	assert.Equal(t, backends.StatusQueued, w.job(later.ID).Status, "a job scheduled for later is not due")
	sc.waitLog(time.Second, "run --once: nothing left that is due", nil)
}

// An operator deletes the sidecar's worker row while it runs a job: the
// foreign key leaves the job processing with no worker, which no recovery
// would ever requeue. The sidecar registers again, takes the job back, and
// writes its result.
func TestFaultWorkerRowDeleted(t *testing.T) {
	t.Parallel()
	w := newWorld(t, sdks[0], manifestOpts{})
	id := w.enqueue("t.sleep_async", `{"seconds":3}`, 0)
	sc := w.startSidecar(nil)
	ours := sc.workerID(t)
	w.waitStarted(t, id)
	_, err := w.db.Exec(context.Background(), `DELETE FROM soniq_workers WHERE id = $1::uuid`, ours)
	require.NoError(t, err)
	require.Nil(t, w.job(id).WorkerID, "the foreign key detached the job")
	sc.waitLog(10*time.Second, "took back jobs left with no worker", map[string]any{"worker_id": ours})
	w.waitDone(t, sc, 20*time.Second, id)
	j := w.job(id)
	require.NotNil(t, j.WorkerID)
	assert.Equal(t, ours, *j.WorkerID)
	assert.Equal(t, 1, j.Attempts)
	sc.stop(t)
}

// After an outage longer than heartbeat_timeout a sidecar's row is stopped
// and its jobs requeued. The sidecar must not claim under that row until it
// has registered again: every maintenance pass (its own included) requeues
// the processing rows of a stopped, silent worker, so rows claimed under it
// would run twice, and a job could be dead-lettered "crashed repeatedly"
// without ever failing. Heartbeats are 30 s apart here, so only the claim
// itself can notice in time.
func TestFaultRecoveredWorkerClaimsNothingUntilRegisteredAgain(t *testing.T) {
	t.Parallel()
	w := newWorld(t, sdks[0], manifestOpts{concurrency: 8})
	env := map[string]string{"SONIQ_HEARTBEAT_INTERVAL": "30", "SONIQ_HEARTBEAT_TIMEOUT": "60", "SONIQ_CLEANUP_INTERVAL": "1"}
	a := w.startSidecar(env)
	wa := a.workerID(t)
	a.waitReady(t, w.handlerName(), 1)
	b := w.startSidecar(env)
	b.workerID(t)
	b.waitReady(t, w.handlerName(), 1)

	// What another sidecar's recovery leaves after a's long outage.
	_, err := w.db.Exec(context.Background(), `UPDATE soniq_workers
		SET status = 'stopped', last_heartbeat = now() - interval '10 minutes' WHERE id = $1::uuid`, wa)
	require.NoError(t, err)
	ids := w.enqueueN("t.sleep_async", `{"seconds":3}`, 40)

	a.waitLog(10*time.Second, "worker row was lost", map[string]any{"level": "WARN", "worker_id": wa})
	w.waitDone(t, b, 60*time.Second, ids...)
	starts := map[string]int{}
	for _, r := range w.recorded() {
		if r[0] == "start" {
			starts[r[1]]++
		}
	}
	var twice []string
	for _, id := range ids {
		if starts[id] != 1 {
			twice = append(twice, fmt.Sprintf("%s ran %d times", id, starts[id]))
		}
		assert.Equal(t, 1, w.job(id).Attempts, "job %s claimed once", id)
	}
	assert.Empty(t, twice, "every job runs exactly once")
	assert.Zero(t, w.stats().DeadLetter, "nothing dead-lettered")
	var status string
	require.NoError(t, w.db.QueryRow(context.Background(), `SELECT status FROM soniq_workers WHERE id = $1::uuid`, wa).Scan(&status))
	assert.Equal(t, backends.WorkerActive, status, "a registered again")
	a.stop(t)
	b.stop(t)
}
