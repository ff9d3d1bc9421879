package integration

// Faults of a bad day in a pod, produced for real against the binary: signals
// from a terminal or a reload, settings that would recover live workers.

import (
	"context"
	"encoding/json"
	"os/exec"
	"strconv"
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
	w := newWorld(t, sdks[0], manifestOpts{concurrency: 8})
	fast := map[string]string{"SONIQ_HEARTBEAT_TIMEOUT": "3", "SONIQ_CLEANUP_INTERVAL": "0.5"}
	a := w.startSidecar(fast)
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
	c := w.startSidecar(map[string]string{"SONIQ_HEARTBEAT_TIMEOUT": "3", "SONIQ_CLEANUP_INTERVAL": "0.5", "SONIQ_SHUTDOWN_TIMEOUT": "0.5"})
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
