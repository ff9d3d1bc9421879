package integration

// `soniq-sidecar cancel ID` against real sidecars and real handlers: a
// running async job is cancelled by the sidecar that holds it (the handler
// sees reason user; the row ends cancelled, attempts unchanged, never
// retried; a late result is discarded), a running sync job is refused and
// runs on, queued, finished and unknown jobs are answered by the command
// alone. Over stdio, unix and attach; woken by the notification, or found
// by the poll behind PgBouncer in transaction mode.

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/backends/postgres/pgtest"
)

// cancelRun is one `soniq-sidecar cancel` run.
type cancelRun struct {
	code           int
	stdout, stderr string
	took           time.Duration
}

// runCancel runs the real binary's cancel command against url (a
// postgres:// URL ending in "#transaction" goes through a transaction-mode
// pooler: SONIQ_DATABASE_POOLER=transaction, as the docs ask).
func runCancel(t *testing.T, url, id string, extra ...string) cancelRun {
	t.Helper()
	cmd := exec.Command(sidecarBinary(t), append([]string{"cancel", id}, extra...)...)
	cmd.Env = []string{"GORACE=atexit_sleep_ms=0"}
	if u, ok := strings.CutSuffix(url, "#transaction"); ok {
		cmd.Env = append(cmd.Env, "SONIQ_DATABASE_URL="+u, "SONIQ_DATABASE_POOLER=transaction")
	} else {
		cmd.Env = append(cmd.Env, "SONIQ_DATABASE_URL="+url)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	r := cancelRun{stdout: out.String(), stderr: errb.String(), took: time.Since(start)}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else {
		require.NoError(t, err, "running soniq-sidecar cancel")
	}
	return r
}

// cancelEvents are the handler's cancelled-<reason> records of job id.
func (w *world) cancelEvents(id string) []string {
	var out []string
	for _, r := range w.recorded() {
		if r[1] == id && strings.HasPrefix(r[0], "cancelled") {
			out = append(out, r[0])
		}
	}
	return out
}

// checkCancels runs the command's cases against sc, which serves the test
// handlers: the running async job (the notification wakes sc: poll is its
// poll interval, and the command must finish well within it unless
// pollOnly), a late result, a sync job, queued, finished and unknown jobs.
func checkCancels(t *testing.T, w *world, sc *sidecar, url string, pollOnly bool) {
	ctx := context.Background()
	handler := w.handlerName()

	// A running async job: the handler gets cancel{reason: user}, the row
	// ends cancelled with its attempt, never retried.
	a := w.enqueue("t.await_cancel", `{"seconds": 60}`, 0)
	w.waitStarted(t, a)
	r := runCancel(t, url, a)
	t.Logf("cancel of a running async job took %s", r.took)
	require.Equal(t, 0, r.code, "stdout %s stderr %s\nsidecar log:\n%s", r.stdout, r.stderr, lastLines(sc.rawString(), 40))
	assert.Contains(t, r.stdout, "cancelled job "+a+" (t.await_cancel)")
	assert.Contains(t, r.stderr, "is running under worker "+sc.workerID(t))
	if !pollOnly {
		assert.Less(t, r.took, 5*time.Second, "woken by the notification, not a poll")
	}
	j := w.job(a)
	assert.Equal(t, backends.StatusCancelled, j.Status)
	assert.Equal(t, 1, j.Attempts, "attempts unchanged")
	assert.Nil(t, j.LastError)
	eventually(t, 10*time.Second, "the handler saw the cancel's reason", func() bool {
		return len(w.cancelEvents(a)) > 0
	})
	assert.Equal(t, []string{"cancelled-user"}, w.cancelEvents(a), "the handler was told reason user")
	req, err := w.backend.GetCancelRequest(ctx, a)
	require.NoError(t, err)
	assert.Equal(t, backends.CancelAcknowledged, req.Status)
	sc.waitLog(5*time.Second, "job cancelled", map[string]any{"job_id": a, "state": "running"})

	// A handler that finishes anyway: its late result never touches the row.
	s := w.enqueue("t.stubborn", `{"seconds": 60, "extra": 0.3}`, 0)
	w.waitStarted(t, s)
	r = runCancel(t, url, s)
	t.Logf("cancel of a stubborn job took %s", r.took)
	require.Equal(t, 0, r.code, "stdout %s stderr %s", r.stdout, r.stderr)
	sc.waitLog(10*time.Second, "late result discarded", map[string]any{"job_id": s, "abandoned_by": "user"})
	assert.Equal(t, backends.StatusCancelled, w.job(s).Status)
	assert.Nil(t, w.job(s).Result, "the late result is discarded")

	// A running sync job cannot be interrupted: refused, named, and it runs on.
	y := w.enqueue("t.sleep_sync", `{"seconds": 3}`, 0)
	w.waitStarted(t, y)
	r = runCancel(t, url, y)
	t.Logf("cancel of a sync job took %s", r.took)
	assert.Equal(t, 1, r.code, "stdout %s stderr %s", r.stdout, r.stderr)
	assert.Contains(t, r.stderr, "job "+y+" (t.sleep_sync) cannot be cancelled: handler "+handler+" runs it as a sync job (cancellable: false)")
	assert.Contains(t, r.stderr, "the job runs on")
	w.waitDone(t, sc, 20*time.Second, y)
	assert.Equal(t, 1, w.job(y).Attempts)
	assert.Empty(t, w.cancelEvents(y))

	// A finished job, a queued one (not due yet), an unknown id.
	r = runCancel(t, url, y)
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "has already finished: its status is done")
	later, err := w.backend.Enqueue(ctx, backends.EnqueueParams{Name: "t.record", Delay: time.Hour})
	require.NoError(t, err)
	r = runCancel(t, url, later.ID)
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "it was queued and will not run")
	assert.Equal(t, backends.StatusCancelled, w.job(later.ID).Status)
	missing := backends.NewID()
	r = runCancel(t, url, missing)
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "no job "+missing)

	// The sidecar goes on serving; nothing cancelled ran again.
	n := w.enqueue("t.record", `{}`, 0)
	w.waitDone(t, sc, 20*time.Second, n)
	for _, id := range []string{a, s, later.ID} {
		assert.Equal(t, backends.StatusCancelled, w.job(id).Status)
	}
	assert.Equal(t, 1, w.started(a))
	assert.Equal(t, 1, w.started(s))
	assert.Equal(t, 0, w.started(later.ID))
}

func TestCancelRunningJob(t *testing.T) {
	t.Parallel()
	forEachSDK(t, func(t *testing.T, s sdk) {
		w := newWorld(t, s, manifestOpts{})
		// A poll far away: only the notification can make the cancel quick.
		sc := w.startSidecar(map[string]string{"SONIQ_POLL_INTERVAL": "30"})
		sc.waitReady(t, w.handlerName(), 1)
		checkCancels(t, w, sc, w.dbURL, false)
	})
}

func TestCancelRunningJobAttached(t *testing.T) {
	t.Parallel()
	forEachPodSDK(t, func(t *testing.T, s sdk) {
		p := newPod(t, s, manifestOpts{})
		p.startHandler(t)
		sc := p.startSidecar(map[string]string{"SONIQ_POLL_INTERVAL": "30"})
		attachedTo(t, sc)
		checkCancels(t, p.world, sc, p.dbURL, false)
	})
}

// Behind PgBouncer in transaction mode: without a listen URL the holder
// polls (and finds the request at its next poll); with one, the
// notification comes over that direct connection. The command itself runs
// through the pooler too.
func TestCancelThroughPgBouncer(t *testing.T) {
	t.Parallel()
	for _, listen := range []bool{false, true} {
		t.Run(fmt.Sprintf("listen url %t", listen), func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, sdks[0], manifestOpts{})
			pooled := pgtest.ThroughPooler(t, w.dbURL)
			env := map[string]string{"SONIQ_DATABASE_URL": pooled, "SONIQ_DATABASE_POOLER": "transaction", "SONIQ_POLL_INTERVAL": "0.5"}
			if listen {
				env["SONIQ_DATABASE_LISTEN_URL"] = w.dbURL
				env["SONIQ_POLL_INTERVAL"] = "30"
			}
			sc := w.startSidecar(env)
			sc.waitReady(t, w.handlerName(), 1)
			if !listen {
				sc.waitLog(10*time.Second, "polling only", nil)
			}
			checkCancels(t, w, sc, pooled+"#transaction", !listen)
		})
	}
}

// The cancels are counted by reason.
func TestCancelMetric(t *testing.T) {
	t.Parallel()
	w := newWorld(t, sdks[0], manifestOpts{})
	sc := w.startSidecar(nil, "--metrics-addr", "127.0.0.1:0")
	sc.waitReady(t, w.handlerName(), 1)
	a := w.enqueue("t.await_cancel", `{"seconds": 60}`, 0)
	w.waitStarted(t, a)
	r := runCancel(t, w.dbURL, a)
	require.Equal(t, 0, r.code, r.stderr)
	addr := sc.httpAddr(t)
	v, ok := obsScrape(t, addr).value("soniq_jobs_cancelled_total", map[string]string{"reason": "user"})
	assert.True(t, ok, "the counter is exported")
	assert.Equal(t, 1.0, v)
}

// On SQLite the command and the sidecar are two processes sharing the
// file: no notification crosses between them, and the holder finds the
// request at its next poll. Queued, running async and running sync jobs.
func TestCancelOnSQLite(t *testing.T) {
	t.Parallel()
	w, db := sqliteWorld(t, sdks[0])
	sc := w.startSidecar(map[string]string{"SONIQ_POLL_INTERVAL": "0.5"})
	sc.waitReady(t, w.handlerName(), 1)
	status := func(id string) (s string, attempts int) {
		require.NoError(t, db.QueryRow(`SELECT status, attempts FROM soniq_jobs WHERE id = ?`, id).Scan(&s, &attempts))
		return s, attempts
	}

	a := sqliteInsert(t, db, "t.await_cancel", `{"seconds": 60}`)
	w.waitStarted(t, a)
	r := runCancel(t, w.dbURL, a)
	require.Equal(t, 0, r.code, "stdout %s stderr %s", r.stdout, r.stderr)
	assert.Contains(t, r.stdout, "cancelled job "+a+" (t.await_cancel)")
	st, n := status(a)
	assert.Equal(t, backends.StatusCancelled, st)
	assert.Equal(t, 1, n)
	eventually(t, 10*time.Second, "the handler saw the cancel's reason", func() bool { return len(w.cancelEvents(a)) > 0 })
	assert.Equal(t, []string{"cancelled-user"}, w.cancelEvents(a))

	y := sqliteInsert(t, db, "t.sleep_sync", `{"seconds": 2}`)
	w.waitStarted(t, y)
	r = runCancel(t, w.dbURL, y)
	assert.Equal(t, 1, r.code, r.stderr)
	assert.Contains(t, r.stderr, "cannot be cancelled: handler "+w.handlerName()+" runs it as a sync job")
	eventually(t, 20*time.Second, "the sync job ran on to done", func() bool { st, _ := status(y); return st == backends.StatusDone })

	sc.stop(t)
	q := sqliteInsert(t, db, "t.record", `{}`)
	r = runCancel(t, w.dbURL, q)
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "it was queued and will not run")
	st, _ = status(q)
	assert.Equal(t, backends.StatusCancelled, st)
}
