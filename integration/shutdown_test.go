package integration

// One black-box test per path of the shutdown diagram in docs/shutdown.md, for
// the Python and the Node SDK: the real binary, real Postgres, real handler
// processes, real signals; assertions on rows, frames and logs.

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// exitTolerance is what the async-forced exit may take beyond
// shutdown_timeout: the NACK write, stopping the handler processes (they
// were sent a cancel; 500 ms at most before they are signalled), process exit,
// and -race overhead on a loaded 2-core CI machine.
const exitTolerance = time.Second

// waitRunning waits until the handler has started the given jobs.
func (w *world) waitStarted(t *testing.T, ids ...string) {
	t.Helper()
	eventually(t, 20*time.Second, "jobs started in the handler", func() bool {
		started := map[string]bool{}
		for _, r := range w.recorded() {
			if r[0] == "start" || r[0] == "run" {
				started[r[1]] = true
			}
		}
		for _, id := range ids {
			if !started[id] {
				return false
			}
		}
		return true
	})
}

func cancelFrames(frames []map[string]any, id string) []string {
	var reasons []string
	for _, f := range frames {
		if f["type"] == "cancel" && f["id"] == id {
			reasons = append(reasons, f["reason"].(string))
		}
	}
	return reasons
}

// RUNNING → DRAINING → STOPPED: in-flight jobs finish, exit 0, rows done.
func TestShutdownDrainCompletes(t *testing.T) {
	t.Parallel()
	forEachSDK(t, func(t *testing.T, s sdk) {
		w := newWorld(t, s, manifestOpts{recordFrames: true})
		a := w.enqueue("t.sleep_async", `{"seconds":1.5}`, 0)
		b := w.enqueue("t.sleep_sync", `{"seconds":1.5}`, 0)
		sc := w.startSidecar(map[string]string{"SONIQ_SHUTDOWN_TIMEOUT": "10"})
		w.waitStarted(t, a, b)
		sent := sc.signal(syscall.SIGTERM)
		code, at := sc.wait(15 * time.Second)
		require.Equal(t, 0, code)
		assert.Less(t, at.Sub(sent), 10*time.Second, "drain must not wait for shutdown_timeout")
		for _, id := range []string{a, b} {
			j := w.job(id)
			assert.Equal(t, backends.StatusDone, j.Status, id)
			assert.Empty(t, cancelFrames(w.framesSent(), id), "no cancel is sent while draining")
		}
		sc.waitLog(time.Second, "state transition", map[string]any{"state": "DRAINING"})
		sc.waitLog(time.Second, "state transition", map[string]any{"state": "STOPPED", "from": "DRAINING"})
		assert.Empty(t, sc.logs("shutdown_nack"))
	})
}

// DRAINING → FORCE_TIMEOUT_PATH, async branch: cancel + nack_job, bounded.
func TestShutdownAsyncForced(t *testing.T) {
	// Serial: it bounds the exit past shutdown_timeout to exitTolerance (1 s), which
	// other tests' load on the machine would stretch.
	forEachSDK(t, func(t *testing.T, s sdk) {
		w := newWorld(t, s, manifestOpts{recordFrames: true})
		id := w.enqueue("t.sleep_async", `{"seconds":60}`, 5)
		sc := w.startSidecar(map[string]string{"SONIQ_SHUTDOWN_TIMEOUT": "1.5"})
		w.waitStarted(t, id)
		// A previous failure's last_error must survive the NACK untouched.
		_, err := w.db.Exec(context.Background(), `UPDATE soniq_jobs SET last_error = 'earlier failure' WHERE id = $1`, id)
		require.NoError(t, err)
		before := w.job(id)
		require.Equal(t, backends.StatusProcessing, before.Status)

		sent := sc.signal(syscall.SIGTERM)
		code, at := sc.wait(20 * time.Second)
		elapsed := at.Sub(sent)
		t.Logf("%s: SIGTERM → exit %s (shutdown_timeout 1.5s)", s.name, elapsed)
		require.Equal(t, 0, code)
		assert.GreaterOrEqual(t, elapsed, 1500*time.Millisecond, "the async job gets the whole shutdown_timeout")
		assert.Less(t, elapsed, 1500*time.Millisecond+exitTolerance, "exit is bounded by shutdown_timeout")

		j := w.job(id)
		assert.Equal(t, backends.StatusQueued, j.Status)
		assert.Equal(t, before.Attempts, j.Attempts, "attempts preserved")
		assert.Nil(t, j.WorkerID)
		require.NotNil(t, j.LastError)
		assert.Equal(t, "earlier failure", *j.LastError, "last_error untouched")
		require.NotNil(t, j.ScheduledAt)
		assert.Equal(t, []string{"shutdown_timeout"}, cancelFrames(w.framesSent(), id))
		nack := sc.waitLog(time.Second, "shutdown_nack", map[string]any{"job_id": id, "reason": "shutdown_timeout"})
		assert.Equal(t, "WARN", nack["level"])
		sc.waitLog(time.Second, "state transition", map[string]any{"state": "FORCE_TIMEOUT_PATH"})
	})
}

// FORCE_TIMEOUT_PATH, sync branch, thread returns within grace: no cancel,
// no NACK, the real result is recorded, exit 0.
func TestShutdownSyncReturnsInsideGrace(t *testing.T) {
	t.Parallel()
	forEachSDK(t, func(t *testing.T, s sdk) {
		w := newWorld(t, s, manifestOpts{recordFrames: true})
		id := w.enqueue("t.sleep_sync", `{"seconds":2.5}`, 0)
		sc := w.startSidecar(map[string]string{"SONIQ_SHUTDOWN_TIMEOUT": "1", "SONIQ_SYNC_HANDLER_GRACE_SECONDS": "10"})
		w.waitStarted(t, id)
		sc.signal(syscall.SIGTERM)
		code, _ := sc.wait(20 * time.Second)
		require.Equal(t, 0, code)
		j := w.job(id)
		assert.Equal(t, backends.StatusDone, j.Status)
		assert.Empty(t, cancelFrames(w.framesSent(), id), "a sync job is never sent a cancel")
		assert.Empty(t, sc.logs("shutdown_nack"))
		sc.waitLog(time.Second, "state transition", map[string]any{"state": "FORCE_TIMEOUT_PATH"})
		assert.Empty(t, sc.logs("WAIT_FOR_THREAD"), "the job returned inside the grace")
		for _, l := range sc.logs("state transition") {
			assert.NotEqual(t, "WAIT_FOR_THREAD", l["state"])
		}
	})
}

// FORCE_TIMEOUT_PATH, sync branch, grace expires → WAIT_FOR_THREAD: the
// sidecar and the handler stay alive, the row stays processing, and
// last_heartbeat keeps advancing in every state (DRAINING,
// FORCE_TIMEOUT_PATH, WAIT_FOR_THREAD: Soniq's own worker stops beating
// once it drains, the contract says not to); when the job returns it is
// done and the exit is 0.
func TestShutdownSyncBeyondGrace(t *testing.T) {
	t.Parallel()
	forEachSDK(t, func(t *testing.T, s sdk) {
		w := newWorld(t, s, manifestOpts{recordFrames: true})
		id := w.enqueue("t.sleep_sync", `{"seconds":8}`, 0)
		// Every state lasts 2 s or more: ten beats each.
		sc := w.startSidecar(map[string]string{"SONIQ_SHUTDOWN_TIMEOUT": "2", "SONIQ_SYNC_HANDLER_GRACE_SECONDS": "2",
			"SONIQ_HEARTBEAT_INTERVAL": "0.2"})
		worker := sc.workerID(t)
		w.waitStarted(t, id)
		sc.signal(syscall.SIGTERM)

		// A beat written inside each state: after the state's transition
		// line and before the next one, by the timestamps (the database and
		// the sidecar share this machine's clock).
		states := []string{"DRAINING", "FORCE_TIMEOUT_PATH", "WAIT_FOR_THREAD"}
		beats := map[string]time.Time{}
		for _, st := range states {
			entered := logTime(t, sc.waitLog(10*time.Second, "state transition", map[string]any{"state": st}))
			eventually(t, 5*time.Second, "a heartbeat written in "+st, func() bool {
				beats[st] = w.workerHeartbeat(t, worker)
				return beats[st].After(entered)
			})
			require.False(t, sc.exited(), "the sidecar must not exit while a sync job runs")
		}
		assert.Equal(t, backends.StatusProcessing, w.job(id).Status, "no NACK on the sync branch")
		assert.Equal(t, 0, countEvents(w.recorded(), "end", id), "the handler is still running the job")

		code, _ := sc.wait(20 * time.Second)
		require.Equal(t, 0, code)
		states = append(states, "STOPPED")
		for i, st := range states[:len(states)-1] {
			left := logTime(t, sc.waitLog(time.Second, "state transition", map[string]any{"state": states[i+1]}))
			assert.True(t, beats[st].Before(left), "the %s heartbeat (%s) was written before %s (%s)",
				st, beats[st].Format(time.RFC3339Nano), states[i+1], left.Format(time.RFC3339Nano))
		}
		assert.Equal(t, backends.StatusDone, w.job(id).Status)
		assert.Empty(t, cancelFrames(w.framesSent(), id))
		assert.Empty(t, sc.logs("shutdown_nack"))
	})
}

// WAIT_FOR_THREAD then SIGKILL from the supervisor: the row stays
// processing; a second sidecar's stale-worker recovery requeues it and the
// job runs again (the documented duplicate-execution risk).
func TestShutdownSigkillDuringWaitForThread(t *testing.T) {
	t.Parallel()
	forEachSDK(t, func(t *testing.T, s sdk) {
		w := newWorld(t, s, manifestOpts{})
		id := w.enqueue("t.sleep_sync", `{"seconds":4}`, 0)
		// A timeout of 15 beats: a live sidecar under -race on a loaded
		// machine never looks stale.
		// The second is the first restarted (the same instance): it takes
		// the dead row over and requeues its job without waiting for the
		// heartbeat timeout; its handler processes died with it.
		env := map[string]string{"SONIQ_SHUTDOWN_TIMEOUT": "0.5", "SONIQ_SYNC_HANDLER_GRACE_SECONDS": "0.5",
			"SONIQ_HEARTBEAT_INTERVAL": "0.2", "SONIQ_HEARTBEAT_TIMEOUT": "3", "SONIQ_INSTANCE": "restarted"}
		first := w.startSidecar(env)
		w.waitStarted(t, id)
		first.signal(syscall.SIGTERM)
		first.waitLog(10*time.Second, "state transition", map[string]any{"state": "WAIT_FOR_THREAD"})
		first.signal(syscall.SIGKILL)
		code, _ := first.wait(10 * time.Second)
		require.Equal(t, -int(syscall.SIGKILL), code)
		j := w.job(id)
		assert.Equal(t, backends.StatusProcessing, j.Status, "SIGKILL leaves the row processing")
		assert.Equal(t, 1, j.Attempts)

		second := w.startSidecar(env)
		eventually(t, 30*time.Second, "the job done by the second sidecar", func() bool {
			return w.job(id).Status == backends.StatusDone
		})
		second.waitLog(time.Second, "took over the worker row of this sidecar's dead predecessor", nil)
		second.waitLog(time.Second, "gave back the predecessor's jobs that no attached handler here serves", map[string]any{"job_ids": []any{id}})
		assert.Equal(t, 2, w.job(id).Attempts, "recovery preserves attempts; the re-run counts one")
		assert.Equal(t, 2, countEvents(w.recorded(), "start", id), "the handler ran twice")
		second.signal(syscall.SIGTERM)
		code, _ = second.wait(20 * time.Second)
		assert.Equal(t, 0, code)
	})
}

// An async job whose job_timeout fires during DRAINING takes the normal
// failure path (attempt counted, retried per policy), not a NACK.
func TestShutdownAsyncJobTimeoutDuringDraining(t *testing.T) {
	t.Parallel()
	forEachSDK(t, func(t *testing.T, s sdk) {
		w := newWorld(t, s, manifestOpts{recordFrames: true, jobTimeout: map[string]string{"t.sleep_async": "2s"}})
		id := w.enqueue("t.sleep_async", `{"seconds":60}`, 3)
		sc := w.startSidecar(map[string]string{"SONIQ_SHUTDOWN_TIMEOUT": "20"})
		w.waitStarted(t, id)
		sent := sc.signal(syscall.SIGTERM)
		code, at := sc.wait(20 * time.Second)
		require.Equal(t, 0, code)
		assert.Less(t, at.Sub(sent), 10*time.Second, "the job timeout, not shutdown_timeout, ended the wait")
		j := w.job(id)
		assert.Equal(t, backends.StatusQueued, j.Status, "retried per policy")
		assert.Equal(t, 1, j.Attempts, "the attempt is counted")
		require.NotNil(t, j.LastError)
		assert.Equal(t, "Job timed out after 2.0s", *j.LastError, "Soniq's text for a timeout")
		assert.Equal(t, []string{"job_timeout"}, cancelFrames(w.framesSent(), id))
		assert.Empty(t, sc.logs("shutdown_nack"))
	})
}

// Claimed-not-yet-running jobs are the async branch: NACKed at
// FORCE_TIMEOUT_PATH while the running sync job gets its grace.
func TestShutdownClaimedNotYetRunningNacked(t *testing.T) {
	t.Parallel()
	forEachSDK(t, func(t *testing.T, s sdk) {
		// One sync slot, two general slots: the second sync job is claimed
		// but waits for the slot.
		w := newWorld(t, s, manifestOpts{concurrency: 2, syncConcurrency: 1, recordFrames: true})
		a := w.enqueue("t.sleep_sync", `{"seconds":3}`, 0)
		b := w.enqueue("t.sleep_sync", `{"seconds":3}`, 0)
		sc := w.startSidecar(map[string]string{"SONIQ_SHUTDOWN_TIMEOUT": "1", "SONIQ_SYNC_HANDLER_GRACE_SECONDS": "10"})
		eventually(t, 20*time.Second, "both jobs claimed", func() bool {
			return w.job(a).Status == backends.StatusProcessing && w.job(b).Status == backends.StatusProcessing
		})
		w.waitStarted(t, a)
		sc.signal(syscall.SIGTERM)
		code, _ := sc.wait(20 * time.Second)
		require.Equal(t, 0, code)
		ja, jb := w.job(a), w.job(b)
		assert.Equal(t, backends.StatusDone, ja.Status, "the running sync job finished in its grace")
		assert.Equal(t, backends.StatusQueued, jb.Status, "the claimed-not-yet-running job was NACKed")
		assert.Equal(t, 1, jb.Attempts, "attempts preserved")
		assert.Nil(t, jb.WorkerID)
		assert.Zero(t, countEvents(w.recorded(), "start", b), "it never ran")
		sc.waitLog(time.Second, "shutdown_nack", map[string]any{"job_id": b})
	})
}

// A result that arrives after its job was NACKed never touches the row.
func TestShutdownLateResultAfterNackDiscarded(t *testing.T) {
	t.Parallel()
	forEachSDK(t, func(t *testing.T, s sdk) {
		w := newWorld(t, s, manifestOpts{recordFrames: true})
		id := w.enqueue("t.stubborn", `{"seconds":60,"extra":0.2}`, 0)
		sc := w.startSidecar(map[string]string{"SONIQ_SHUTDOWN_TIMEOUT": "1"})
		w.waitStarted(t, id)
		sc.signal(syscall.SIGTERM)
		code, _ := sc.wait(20 * time.Second)
		require.Equal(t, 0, code)
		assert.Equal(t, 1, countEvents(w.recorded(), "cancelled", id), "the handler saw the cancel and answered late")
		sc.waitLog(time.Second, "late result discarded", map[string]any{"job_id": id, "abandoned_by": "shutdown_timeout"})
		j := w.job(id)
		assert.Equal(t, backends.StatusQueued, j.Status, "the late done result did not overwrite the NACK")
		assert.Nil(t, j.Result)
	})
}

// A second SIGTERM during DRAINING moves to FORCE_TIMEOUT_PATH at once.
func TestShutdownSecondSignal(t *testing.T) {
	t.Parallel()
	forEachSDK(t, func(t *testing.T, s sdk) {
		w := newWorld(t, s, manifestOpts{recordFrames: true})
		id := w.enqueue("t.sleep_async", `{"seconds":60}`, 0)
		sc := w.startSidecar(map[string]string{"SONIQ_SHUTDOWN_TIMEOUT": "60"})
		w.waitStarted(t, id)
		sc.signal(syscall.SIGTERM)
		sc.waitLog(5*time.Second, "state transition", map[string]any{"state": "DRAINING"})
		second := sc.signal(syscall.SIGINT)
		code, at := sc.wait(20 * time.Second)
		require.Equal(t, 0, code)
		assert.Less(t, at.Sub(second), 5*time.Second, "FORCE_TIMEOUT_PATH at once, not after 60 s")
		force := sc.waitLog(time.Second, "state transition", map[string]any{"state": "FORCE_TIMEOUT_PATH"})
		assert.Equal(t, "second shutdown request", force["reason"])
		assert.Equal(t, backends.StatusQueued, w.job(id).Status)
		assert.Equal(t, []string{"shutdown_timeout"}, cancelFrames(w.framesSent(), id))
	})
}

// Async and sync in flight at once: the async job is NACKed at
// shutdown_timeout, the sync job finishes in its grace, exit 0.
func TestShutdownMixedAsyncAndSync(t *testing.T) {
	t.Parallel()
	forEachSDK(t, func(t *testing.T, s sdk) {
		w := newWorld(t, s, manifestOpts{recordFrames: true})
		a := w.enqueue("t.sleep_async", `{"seconds":60}`, 0)
		y := w.enqueue("t.sleep_sync", `{"seconds":3}`, 0)
		sc := w.startSidecar(map[string]string{"SONIQ_SHUTDOWN_TIMEOUT": "1", "SONIQ_SYNC_HANDLER_GRACE_SECONDS": "10"})
		w.waitStarted(t, a, y)
		sc.signal(syscall.SIGTERM)
		nack := sc.waitLog(10*time.Second, "shutdown_nack", map[string]any{"job_id": a})
		require.NotNil(t, nack)
		// The async NACK is written while the sync job still runs.
		eventually(t, 5*time.Second, "async row queued", func() bool { return w.job(a).Status == backends.StatusQueued })
		assert.Equal(t, backends.StatusProcessing, w.job(y).Status)
		code, _ := sc.wait(20 * time.Second)
		require.Equal(t, 0, code)
		assert.Equal(t, backends.StatusDone, w.job(y).Status)
		assert.Equal(t, []string{"shutdown_timeout"}, cancelFrames(w.framesSent(), a))
		assert.Empty(t, cancelFrames(w.framesSent(), y))
	})
}

func countEvents(recs [][]string, event, id string) int {
	n := 0
	for _, r := range recs {
		if r[0] == event && r[1] == id {
			n++
		}
	}
	return n
}

// workerHeartbeat reads a worker row's last_heartbeat.
func (w *world) workerHeartbeat(t *testing.T, workerID string) time.Time {
	t.Helper()
	var hb time.Time
	err := w.db.QueryRow(context.Background(),
		`SELECT last_heartbeat FROM soniq_workers WHERE id = $1`, workerID).Scan(&hb)
	require.NoError(t, err)
	return hb
}

// logTime is the time a JSON log line was written.
func logTime(t *testing.T, m map[string]any) time.Time {
	t.Helper()
	at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(m["time"]))
	require.NoError(t, err, "log line time %v", m["time"])
	return at
}
