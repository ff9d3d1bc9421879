package integration

// Black-box tests of the supervisor: throughput, the
// retry policy, snooze, handler crashes and crash loops, manifest/hello
// agreement, unknown job names, several sidecars on one database, stale
// worker recovery and the rows dead-lettered at claim. The real binary,
// real Postgres, real Python and Node handler processes.

import (
	"context"
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

// 1,000 trivial jobs through two processes: all done. Throughput is logged,
// not asserted.
func TestSupervisorThroughputNoop(t *testing.T) {
	// Serial: the throughput it logs is the binary's alone, not shared with other tests.
	forEachSDK(t, func(t *testing.T, s sdk) {
		w := newWorld(t, s, manifestOpts{processes: 2, concurrency: 16})
		const n = 1000
		w.enqueueN("t.noop", `{}`, n)
		start := time.Now()
		sc := w.startSidecar(nil)
		sc.waitReady(t, w.handlerName(), 1)
		ready := time.Now()
		whileRunning(t, 90*time.Second, "1000 jobs done", func() bool { return w.stats().Done == n }, sc)
		end := time.Now()
		st := w.stats()
		assert.Equal(t, backends.Stats{Total: n, Done: n}, st)
		// Both processes start, even when the first one ran all the jobs
		// before the second was ready (a loaded machine).
		require.Len(t, sc.waitReady(t, w.handlerName(), 2), 2, "two processes")
		t.Logf("%s: %d t.noop jobs, 2 processes: %.0f jobs/s from the first process ready (%.2fs); sidecar start to first ready %.2fs; -race binary",
			s.name, n, n/end.Sub(ready).Seconds(), end.Sub(ready).Seconds(), ready.Sub(start).Seconds())
		sc.stop(t)
	})
}

// A job that always fails is retried up to max_attempts, then dead-lettered
// with the handler's traceback in last_error.
func TestSupervisorFailRetriedThenDeadLettered(t *testing.T) {
	t.Parallel()
	forEachSDK(t, func(t *testing.T, s sdk) {
		w := newWorld(t, s, manifestOpts{})
		id := w.enqueue("t.fail", `{}`, 3)
		sc := w.startSidecar(nil)
		dl := w.waitDeadLetter(t, sc, 30*time.Second, id)
		assert.Equal(t, backends.ReasonMaxRetriesExceeded, dl.Reason)
		assert.Equal(t, 3, dl.Attempts)
		assert.Equal(t, 3, dl.MaxAttempts)
		assert.Equal(t, "t.fail", dl.Name)
		require.NotNil(t, dl.LastError)
		assert.Contains(t, *dl.LastError, "boom from attempt 3")
		if s.name == "python" {
			assert.Contains(t, *dl.LastError, "Traceback")
		} else {
			assert.Contains(t, *dl.LastError, "at ", "the Node stack")
		}
		assert.True(t, w.jobGone(id), "the dead-lettered row left soniq_jobs")
		retries := 0
		for _, m := range sc.logs("job failed; will retry") {
			if m["job_id"] == id {
				retries++
			}
		}
		assert.Equal(t, 2, retries, "attempts 1 and 2 were retried")
		sc.waitLog(5*time.Second, "no attempts left: dead-lettered", map[string]any{"job_id": id})
		sc.stop(t)
	})
}

// Snooze gives the attempt back: the job runs twice and ends done with
// attempts 1.
func TestSupervisorSnooze(t *testing.T) {
	t.Parallel()
	forEachSDK(t, func(t *testing.T, s sdk) {
		w := newWorld(t, s, manifestOpts{recordFrames: true})
		id := w.enqueue("t.snooze", `{"seconds":0.5}`, 0)
		sc := w.startSidecar(nil)
		w.waitDone(t, sc, 30*time.Second, id)
		j := w.job(id)
		assert.Equal(t, 1, j.Attempts, "the snooze gave its attempt back")
		assert.JSONEq(t, `{"snoozed_before":true}`, string(j.Result))
		assert.Equal(t, 2, jobFrames(w.framesSent(), id), "the job was sent twice")
		_, err := os.Stat(w.record + ".snoozed-" + id)
		assert.NoError(t, err, "the first run snoozed")
		sc.stop(t)
	})
}

// kill -9 of a handler process mid-job. Jobs that shared the process are
// suspects: each re-runs alone in the replacement, attempt unchanged, and
// completes. A job alone in its process when it is killed is the culprit:
// the crash counts one attempt, or dead-letters it on its last attempt.
func TestSupervisorHandlerKilledMidJob(t *testing.T) {
	t.Parallel()
	forEachSDK(t, func(t *testing.T, s sdk) {
		w := newWorld(t, s, manifestOpts{})
		startPID := func(id string, attempt string) int {
			var pid int
			for _, r := range w.recorded() {
				if r[0] == "start" && r[1] == id && r[3] == attempt {
					pid, _ = strconv.Atoi(r[2])
				}
			}
			require.NotZero(t, pid, "job %s attempt %s started", id, attempt)
			return pid
		}
		a := w.enqueue("t.sleep_async", `{"seconds":2}`, 3)
		b := w.enqueue("t.sleep_async", `{"seconds":2}`, 1) // its only attempt
		sc := w.startSidecar(nil)
		w.waitStarted(t, a, b)
		victim := startPID(a, "1")
		require.Equal(t, victim, startPID(b, "1"), "both jobs run in the one process")
		require.Equal(t, []int{victim}, sc.readyPIDs(w.handlerName()), "the jobs run in the one ready process")
		require.NoError(t, syscall.Kill(victim, syscall.SIGKILL))

		w.waitDone(t, sc, 30*time.Second, a, b)
		warn := sc.waitLog(5*time.Second, "suspects", map[string]any{"pid": victim})
		assert.Equal(t, 2, intAttr(warn, "suspects"))
		rec := w.recorded()
		for _, id := range []string{a, b} {
			assert.Equal(t, 1, w.job(id).Attempts, "a suspect is not charged for the crash")
			var reruns []int
			for i, r := range rec {
				if r[0] == "start" && r[1] == id && r[2] != strconv.Itoa(victim) {
					reruns = append(reruns, i)
					assert.Equal(t, "1", r[3], "the isolated re-run keeps attempt 1")
					assert.True(t, ranAlone(rec, i), "the suspect re-ran alone in its process")
				}
			}
			assert.Len(t, reruns, 1, "one isolated re-run of %s", id)
		}
		pids := sc.readyPIDs(w.handlerName())
		require.Len(t, pids, 2, "one replacement process")
		assert.NotEqual(t, victim, pids[1], "the replacement is a new process")
		assert.False(t, pidAlive(victim), "the killed process is gone (reaped)")
		sc.waitLog(5*time.Second, "exited unexpectedly", map[string]any{"handler": w.handlerName()})

		// Alone in its process: the crash counts one attempt.
		lone := w.enqueue("t.sleep_async", `{"seconds":2}`, 3)
		w.waitStarted(t, lone)
		victim = startPID(lone, "1")
		require.NoError(t, syscall.Kill(victim, syscall.SIGKILL))
		w.waitDone(t, sc, 30*time.Second, lone)
		assert.Equal(t, 2, w.job(lone).Attempts, "the crash counted one attempt")
		assert.NotEqual(t, victim, startPID(lone, "2"), "the re-run is attempt 2, in the replacement")

		// Alone on its last attempt: dead-lettered with the exit status.
		last := w.enqueue("t.sleep_async", `{"seconds":2}`, 1)
		w.waitStarted(t, last)
		victim = startPID(last, "1")
		require.NoError(t, syscall.Kill(victim, syscall.SIGKILL))
		dl := w.waitDeadLetter(t, sc, 10*time.Second, last)
		assert.Equal(t, backends.ReasonMaxRetriesExceeded, dl.Reason)
		assert.Equal(t, 1, dl.Attempts)
		require.NotNil(t, dl.LastError)
		assert.Contains(t, *dl.LastError, "killed by signal")
		assert.Contains(t, *dl.LastError, strconv.Itoa(victim))
		t.Logf("%s: last_error of the job on its last attempt: %q", s.name, *dl.LastError)
		assert.Len(t, sc.logs("suspects"), 1, "only the crash with two jobs made suspects")
		sc.stop(t)
	})
}

// A handler that exits at start: restarts with backoff, ONE crash-loop line,
// its jobs stay queued and untouched, the other handler keeps working.
func TestSupervisorCrashLoop(t *testing.T) {
	t.Parallel()
	forEachSDK(t, func(t *testing.T, s sdk) {
		extra := `  - name: crasher
    command: ["python3", "-c", "import sys; sys.exit(3)"]
    processes: 1
    startup_timeout: 5s
    jobs:
      - name: t.never
        cancellable: true
`
		w := newWorld(t, s, manifestOpts{extraHandlers: extra})
		never := w.enqueue("t.never", `{}`, 0)
		sc := w.startSidecar(nil)
		start := time.Now()
		ids := w.enqueueN("t.record", `{}`, 20)
		w.waitDone(t, sc, 30*time.Second, ids...)
		loop := sc.waitLog(10*time.Second, "crash-looping", map[string]any{"handler": "crasher"})
		t.Logf("%s: crash loop reported after %s (failures=%v)", s.name, time.Since(start).Round(time.Millisecond), loop["failures"])
		assert.Contains(t, fmt.Sprint(loop["last_error"]), "exited with status 3")

		// Keep running to ~10 s: still exactly one crash-loop line.
		if d := 10*time.Second - time.Since(start); d > 0 {
			time.Sleep(d)
		}
		assert.Len(t, sc.logs("crash-looping"), 1, "one clear log line, not one per restart")
		// Durations are logged as Go duration strings ("100ms").
		var delays []time.Duration
		for _, m := range sc.logs("restarting with backoff") {
			if m["handler"] == "crasher" {
				d, err := time.ParseDuration(fmt.Sprint(m["retry_in"]))
				require.NoError(t, err, "retry_in %v", m["retry_in"])
				delays = append(delays, d)
			}
		}
		t.Logf("%s: restart delays before the crash loop: %v", s.name, delays)
		require.GreaterOrEqual(t, len(delays), 2, "backoff restarts are logged")
		assert.Equal(t, 100*time.Millisecond, delays[0], "backoff starts at 100 ms")
		for i := 1; i < len(delays); i++ {
			assert.Equal(t, 2*delays[i-1], delays[i], "backoff doubles")
		}

		// More work for the healthy handler while the crasher loops.
		more := w.enqueueN("t.record", `{}`, 5)
		w.waitDone(t, sc, 20*time.Second, more...)
		assert.Len(t, sc.readyPIDs(w.handlerName()), 1, "the healthy handler was never restarted")

		j := w.job(never)
		assert.Equal(t, backends.StatusQueued, j.Status)
		assert.Equal(t, 0, j.Attempts)
		assert.Nil(t, j.WorkerID)
		sc.stop(t)
	})
}

// The handler's hello must list exactly the declared jobs with the same
// cancellable value: `run` exits 2 naming the job, and so does
// `manifest check`; a good manifest checks ok.
func TestSupervisorManifestHelloMismatch(t *testing.T) {
	t.Parallel()
	forEachSDK(t, func(t *testing.T, s sdk) {
		w := newWorld(t, s, manifestOpts{})
		good := w.manifest
		undeclared := w.writeCustomManifest(t, "ghost.yaml", func(m string) string {
			return strings.Replace(m, "    jobs:\n", "    jobs:\n      - name: t.ghost\n        cancellable: true\n", 1)
		})
		wrongBranch := w.writeCustomManifest(t, "branch.yaml", func(m string) string {
			return strings.Replace(m, "- name: t.fail\n        cancellable: false", "- name: t.fail\n        cancellable: true", 1)
		})
		for _, c := range []struct{ path, job string }{{undeclared, "t.ghost"}, {wrongBranch, "t.fail"}} {
			w.manifest = c.path
			sc := w.startSidecar(nil)
			code, _ := sc.wait(30 * time.Second)
			assert.Equal(t, 2, code, "%s: run exits 2", filepath.Base(c.path))
			lines := strings.Split(strings.TrimSpace(sc.rawLog()), "\n")
			last := lines[len(lines)-1]
			assert.Contains(t, last, c.job, "the final stderr line names the job")
			t.Logf("%s: run → %d: %s", filepath.Base(c.path), code, last)
			assert.NotEmpty(t, sc.logs("hello disagrees with the manifest"))

			code, out := manifestCheck(t, c.path)
			assert.Equal(t, 2, code, "manifest check %s: %s", filepath.Base(c.path), out)
			assert.Contains(t, out, c.job)
			assert.Contains(t, out, "FAIL handler "+w.handlerName())
			t.Logf("%s: manifest check → %d:\n%s", filepath.Base(c.path), code, out)
		}
		code, out := manifestCheck(t, good)
		assert.Equal(t, 0, code, out)
		assert.Contains(t, out, "ok   handler "+w.handlerName())
	})
}

// Unknown job names are not claimed (the sidecar can share queues with
// Soniq's own workers); --dead-letter-unknown dead-letters them.
func TestSupervisorUnknownJobNames(t *testing.T) {
	t.Parallel()
	forEachSDK(t, func(t *testing.T, s sdk) {
		w := newWorld(t, s, manifestOpts{})
		unknown := w.enqueueN("t.unknown", `{}`, 3)
		known := w.enqueueN("t.noop", `{}`, 5)
		sc := w.startSidecar(nil)
		w.waitDone(t, sc, 30*time.Second, known...)
		// One more claim after those: it passes over the older unknown rows again.
		w.waitDone(t, sc, 30*time.Second, w.enqueue("t.noop", `{}`, 0))
		for _, id := range unknown {
			j := w.job(id)
			assert.Equal(t, backends.StatusQueued, j.Status)
			assert.Equal(t, 0, j.Attempts)
			assert.Nil(t, j.WorkerID)
			assert.Nil(t, j.LastError)
		}
		assert.Empty(t, sc.logs("not served by any handler"))
		sc.stop(t)

		sc = w.startSidecar(nil, "--dead-letter-unknown")
		more := w.enqueueN("t.noop", `{}`, 5)
		for _, id := range unknown {
			dl := w.waitDeadLetter(t, sc, 20*time.Second, id)
			assert.Equal(t, backends.ReasonJobNotFound, dl.Reason)
			assert.Equal(t, "t.unknown", dl.Name)
			assert.True(t, w.jobGone(id))
		}
		w.waitDone(t, sc, 20*time.Second, more...)
		sc.stop(t)
	})
}

// Two sidecars on one database: every job runs exactly once, both do work.
func TestSupervisorTwoSidecarsExactlyOnce(t *testing.T) {
	t.Parallel()
	forEachSDK(t, func(t *testing.T, s sdk) {
		w := newWorld(t, s, manifestOpts{concurrency: 16})
		a := w.startSidecar(nil)
		b := w.startSidecar(nil)
		wa, wb := a.workerID(t), b.workerID(t)
		require.NotEqual(t, wa, wb)
		pa := a.waitReady(t, w.handlerName(), 1)
		pb := b.waitReady(t, w.handlerName(), 1)

		// The whole backlog appears at once (one transaction, one
		// notification), so both sidecars race to claim the same rows.
		const n = 2000
		ids := w.enqueueBulk(t, "t.record", n)
		start := time.Now()
		whileRunning(t, 90*time.Second, "2000 jobs done", func() bool { return w.stats().Done == n }, a, b)
		took := time.Since(start)
		t.Logf("%s: %d t.record jobs by two sidecars (one process each, concurrency 16): %.2fs, %.0f jobs/s",
			s.name, n, took.Seconds(), n/took.Seconds())

		runs := map[string]int{}
		runsByPID := map[int]int{}
		for _, r := range w.recorded() {
			if r[0] == "run" {
				runs[r[1]]++
				pid, _ := strconv.Atoi(r[2])
				runsByPID[pid]++
			}
		}
		assert.Len(t, runs, n, "one run line per job id")
		for _, id := range ids {
			if runs[id] != 1 {
				t.Errorf("job %s ran %d times", id, runs[id])
			}
		}

		var byWorker = map[string]int{}
		rows, err := w.db.Query(context.Background(),
			`SELECT coalesce(worker_id::text, ''), count(*), max(attempts) FROM soniq_jobs GROUP BY 1`)
		require.NoError(t, err)
		for rows.Next() {
			var wid string
			var cnt, maxAttempts int
			require.NoError(t, rows.Scan(&wid, &cnt, &maxAttempts))
			byWorker[wid] = cnt
			assert.Equal(t, 1, maxAttempts, "no job was claimed twice")
		}
		require.NoError(t, rows.Err())
		t.Logf("%s: rows by worker: a=%d b=%d", s.name, byWorker[wa], byWorker[wb])
		assert.Equal(t, n, byWorker[wa]+byWorker[wb], "every done row names one of the two workers")
		assert.Positive(t, byWorker[wa], "sidecar a did some of the work")
		assert.Positive(t, byWorker[wb], "sidecar b did some of the work")

		// The same split seen from the handlers' side.
		sum := func(pids []int) int {
			total := 0
			for _, p := range pids {
				total += runsByPID[p]
			}
			return total
		}
		assert.Equal(t, byWorker[wa], sum(pa), "sidecar a's handler ran a's rows")
		assert.Equal(t, byWorker[wb], sum(pb), "sidecar b's handler ran b's rows")
		a.stop(t)
		b.stop(t)
	})
}

// SIGKILL of one of two sidecars mid-job: after the heartbeat timeout the
// other recovers its rows (attempts preserved) and completes them.
func TestSupervisorStaleWorkerRecovery(t *testing.T) {
	t.Parallel()
	forEachSDK(t, func(t *testing.T, s sdk) {
		w := newWorld(t, s, manifestOpts{concurrency: 4, syncConcurrency: 4})
		// A timeout of 15 beats: b, alive, never looks stale to a loaded machine.
		env := map[string]string{"SONIQ_HEARTBEAT_INTERVAL": "0.2", "SONIQ_HEARTBEAT_TIMEOUT": "3", "SONIQ_CLEANUP_INTERVAL": "0.5"}
		a := w.startSidecar(env)
		b := w.startSidecar(env)
		wa, wb := a.workerID(t), b.workerID(t)
		handlerA := a.waitReady(t, w.handlerName(), 1)[0]
		b.waitReady(t, w.handlerName(), 1)

		ids := w.enqueueN("t.sleep_sync", `{"seconds":3}`, 8)
		w.waitStarted(t, ids...)
		owner := map[string]string{}
		for _, id := range ids {
			j := w.job(id)
			require.Equal(t, backends.StatusProcessing, j.Status)
			require.NotNil(t, j.WorkerID)
			owner[id] = *j.WorkerID
		}
		var ofA []string
		for _, id := range ids {
			if owner[id] == wa {
				ofA = append(ofA, id)
			} else {
				require.Equal(t, wb, owner[id])
			}
		}
		require.Len(t, ofA, 4, "capacity 4 each: a holds 4 of the 8 jobs")

		killed := a.signal(syscall.SIGKILL)
		code, _ := a.wait(10 * time.Second)
		require.Equal(t, -int(syscall.SIGKILL), code)
		eventually(t, 5*time.Second, "a's handler process killed with its sidecar (parent-death signal)", func() bool {
			return !pidAlive(handlerA)
		})

		w.waitDone(t, b, 40*time.Second, ids...)
		t.Logf("%s: a's jobs recovered and done %.2fs after SIGKILL (heartbeat timeout 3s, jobs 3s)", s.name, time.Since(killed).Seconds())
		for _, id := range ids {
			j := w.job(id)
			require.NotNil(t, j.WorkerID)
			if owner[id] == wa {
				assert.Equal(t, 2, j.Attempts, "recovered job %s: attempts preserved, the re-run counts one", id)
				assert.Equal(t, wb, *j.WorkerID, "recovered job %s completed by b", id)
				for _, r := range w.recorded() {
					if r[0] == "end" && r[1] == id {
						assert.NotEqual(t, strconv.Itoa(handlerA), r[2], "a's handler never finished job %s after its sidecar died", id)
					}
				}
			} else {
				assert.Equal(t, 1, j.Attempts, "b's own job %s ran once", id)
			}
		}
		b.waitLog(5*time.Second, "recovered stale workers", nil)
		var status string
		require.NoError(t, w.db.QueryRow(context.Background(),
			`SELECT status FROM soniq_workers WHERE id = $1::uuid`, wa).Scan(&status))
		assert.Equal(t, "stopped", status, "the killed worker is marked stopped")
		b.stop(t)
	})
}

// Rows that cannot run are dead-lettered at claim without running: args
// that are not a JSON object (invalid_arguments), attempts beyond
// max_attempts (max_retries_exceeded).
func TestSupervisorDeadLetterAtClaim(t *testing.T) {
	t.Parallel()
	forEachSDK(t, func(t *testing.T, s sdk) {
		w := newWorld(t, s, manifestOpts{})
		ctx := context.Background()
		badArgs := w.enqueue("t.record", `{}`, 0)
		_, err := w.db.Exec(ctx, `UPDATE soniq_jobs SET args = '[1,2]' WHERE id = $1::uuid`, badArgs)
		require.NoError(t, err)
		// Beyond the maximum in the row, and at the maximum (a crash of the
		// last attempt requeued by recovery): the claim's +1 exceeds it.
		crashed := w.enqueue("t.record", `{}`, 2)
		_, err = w.db.Exec(ctx, `UPDATE soniq_jobs SET attempts = 3 WHERE id = $1::uuid`, crashed)
		require.NoError(t, err)
		crashedLast := w.enqueue("t.record", `{}`, 2)
		_, err = w.db.Exec(ctx, `UPDATE soniq_jobs SET attempts = 2 WHERE id = $1::uuid`, crashedLast)
		require.NoError(t, err)
		ok := w.enqueue("t.record", `{}`, 0)

		sc := w.startSidecar(nil)
		w.waitDone(t, sc, 30*time.Second, ok)
		dl := w.waitDeadLetter(t, sc, 10*time.Second, badArgs)
		assert.Equal(t, backends.ReasonInvalidArguments, dl.Reason)
		assert.JSONEq(t, `[1,2]`, string(dl.Args))
		for _, id := range []string{crashed, crashedLast} {
			dl = w.waitDeadLetter(t, sc, 10*time.Second, id)
			assert.Equal(t, backends.ReasonMaxRetriesExceeded, dl.Reason)
			assert.Greater(t, dl.Attempts, dl.MaxAttempts)
		}
		for _, id := range []string{badArgs, crashed, crashedLast} {
			assert.True(t, w.jobGone(id))
			assert.Zero(t, countEvents(w.recorded(), "run", id), "job %s never ran", id)
		}
		assert.Equal(t, 1, countEvents(w.recorded(), "run", ok))
		sc.stop(t)
	})
}
