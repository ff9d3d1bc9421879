package integration

import (
	"context"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/internal/netfault"
)

// dbAdmin is one session on a test's database that stays writable whatever
// the database's defaults say, to switch them.
type dbAdmin struct {
	t    *testing.T
	conn *pgx.Conn
	name string // the database
}

func newDBAdmin(t *testing.T, dbURL string) *dbAdmin {
	t.Helper()
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	conn, err := pgx.Connect(t.Context(), dbURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	// A session's own setting outlives the database default changing.
	_, err = conn.Exec(t.Context(), "SET default_transaction_read_only = off")
	require.NoError(t, err)
	return &dbAdmin{t: t, conn: conn, name: strings.TrimPrefix(u.Path, "/")}
}

// readOnly switches the database read-only (on) or writable (off) for the
// sessions that start from now on. Postgres applies a database's settings
// when a session starts, so a session opened during a read-only window
// stays read-only after it, as a session on a standby or a demoted primary
// does: the failover a client behind a VIP or a DNS name sees. (ALTER
// SYSTEM would switch the whole server, which the tests share.)
func (a *dbAdmin) readOnly(on bool) {
	a.t.Helper()
	stmt := "ALTER DATABASE " + pgx.Identifier{a.name}.Sanitize() + " RESET default_transaction_read_only"
	if on {
		stmt = "ALTER DATABASE " + pgx.Identifier{a.name}.Sanitize() + " SET default_transaction_read_only = on"
	}
	_, err := a.conn.Exec(context.Background(), stmt)
	require.NoError(a.t, err)
}

// terminate ends every other session on the database, as a failover does.
func (a *dbAdmin) terminate() int {
	a.t.Helper()
	var n int
	err := a.conn.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = $1 AND pid <> pg_backend_pid()`, a.name).Scan(&n)
	require.NoError(a.t, err)
	return n
}

// writableThrough reports whether a new session on url takes writes.
func writableThrough(url string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return false
	}
	defer conn.Close(context.Background())
	var ro string
	return conn.QueryRow(ctx, "SHOW transaction_read_only").Scan(&ro) == nil && ro == "off"
}

// status reads a job's status on the admin session (the test's own
// backend, like the sidecar's, refuses read-only sessions).
func (a *dbAdmin) status(id string) string {
	a.t.Helper()
	var st string
	err := a.conn.QueryRow(context.Background(), "SELECT status FROM soniq_jobs WHERE id = $1", id).Scan(&st)
	require.NoError(a.t, err)
	return st
}

// faultProxy puts a fault proxy between the test and its database, for the
// test's life, and returns it with the database URL through it.
func (w *world) faultProxy() (*netfault.Proxy, url.URL) {
	w.t.Helper()
	u, err := url.Parse(w.dbURL)
	require.NoError(w.t, err)
	proxy, err := netfault.Start(u.Host)
	require.NoError(w.t, err)
	w.t.Cleanup(func() { _ = proxy.Close() })
	via := *u
	via.Host = proxy.Addr()
	return proxy, via
}

// started returns the jobs a handler has started, in order, once each.
func started(recs [][]string) []string {
	var out []string
	seen := map[string]bool{}
	for _, r := range recs {
		if r[0] == "start" && !seen[r[1]] {
			seen[r[1]] = true
			out = append(out, r[1])
		}
	}
	return out
}

// A failover that leaves the sidecar on a read-only server for 8 s: every
// session is terminated and the new ones open read-only (SQLSTATE 25006 on
// every write). Once the database is writable again, the results the
// sidecar held across the window are written within a second, and no job
// runs twice. Before, the pool kept its read-only sessions (pgx drops a
// session only on a fatal error): nothing was written or beaten until the
// sessions aged out, and another sidecar's recovery re-ran jobs done here.
//
// Through PgBouncer in transaction mode the server sessions are PgBouncer's:
// the failover hook sends RECONNECT on its admin console once the primary
// is writable (docs/operations.md), and the sidecar, which drops its own
// connections that answered 25006, writes within a second of that.
func TestReadOnlyFailoverSessionsAreDroppedAndHeldResultsWritten(t *testing.T) {
	t.Parallel()
	t.Run("direct", func(t *testing.T) { t.Parallel(); readOnlyFailover(t, false) })
	t.Run("pgbouncer", func(t *testing.T) { t.Parallel(); readOnlyFailover(t, true) })
}

func readOnlyFailover(t *testing.T, throughPgBouncer bool) {
	w := newWorld(t, sdks[0], manifestOpts{})
	admin := newDBAdmin(t, w.dbURL)
	env := map[string]string{"SONIQ_HEARTBEAT_TIMEOUT": "10", "SONIQ_SHUTDOWN_TIMEOUT": "5"}
	var reconnect func()
	if throughPgBouncer {
		pgb := os.Getenv("SONIQ_TEST_PGBOUNCER_URL")
		require.NotEmpty(t, pgb, "SONIQ_TEST_PGBOUNCER_URL is not set: start PgBouncer in transaction mode in front of SONIQ_TEST_DATABASE_URL's server (make test does); never skipped")
		pu, err := url.Parse(pgb)
		require.NoError(t, err)
		du, err := url.Parse(w.dbURL)
		require.NoError(t, err)
		pooled := *du
		pooled.Host = pu.Host
		env["SONIQ_DATABASE_URL"] = pooled.String()
		env["SONIQ_DATABASE_POOLER"] = "transaction"
		env["SONIQ_DATABASE_LISTEN_URL"] = w.dbURL
		console := *pu
		console.Path = "/pgbouncer"
		console.RawQuery = "sslmode=disable&default_query_exec_mode=simple_protocol"
		probe := pooled
		q := probe.Query()
		q.Set("default_query_exec_mode", "simple_protocol")
		probe.RawQuery = q.Encode()
		reconnect = func() {
			conn, err := pgx.Connect(context.Background(), console.String())
			require.NoError(t, err, "PgBouncer's admin console")
			defer conn.Close(context.Background())
			_, err = conn.Exec(context.Background(), "RECONNECT "+admin.name)
			require.NoError(t, err)
			// Through the pooler the database is writable once PgBouncer
			// hands a new client a writable session. That is PgBouncer's
			// doing, not the sidecar's: a server login that fails meanwhile
			// (a connection slot taken by the other tests, say) holds every
			// new session back for server_login_retry, 1 s here. The bound
			// below is the sidecar's, so it counts from there.
			sent := time.Now()
			eventually(t, 5*time.Second, "PgBouncer hands out writable sessions", func() bool {
				return writableThrough(probe.String())
			})
			t.Logf("PgBouncer handed out a writable session %v after RECONNECT", time.Since(sent))
		}
	}
	a := w.startSidecar(env)
	b := w.startSidecar(env)
	a.waitReady(t, w.handlerName(), 1)
	b.waitReady(t, w.handlerName(), 1)
	ids := w.enqueueN("t.sleep_async", `{"seconds":2}`, 24)
	eventually(t, 20*time.Second, "jobs running on both sidecars", func() bool { return len(started(w.recorded())) >= 8 })

	admin.readOnly(true)
	windowStart := time.Now()
	admin.terminate()
	running := started(w.recorded())
	// The jobs running at the failover end during the window; their
	// results cannot be written.
	eventually(t, 8*time.Second, "the running jobs ended inside the window", func() bool {
		recs := w.recorded()
		for _, id := range running {
			if countEvents(recs, "end", id) == 0 {
				return false
			}
		}
		return true
	})
	ended := map[string]bool{}
	for _, r := range w.recorded() {
		if r[0] == "end" {
			ended[r[1]] = true
		}
	}
	var held []string
	for id := range ended {
		if admin.status(id) != backends.StatusDone {
			held = append(held, id)
		}
	}
	require.NotEmpty(t, held, "some results are held across the window")
	// The window lasts 8 s: the fault's length, not a wait for an event.
	time.Sleep(time.Until(windowStart.Add(8 * time.Second)))
	admin.readOnly(false)
	if reconnect != nil {
		reconnect()
	}
	writable := time.Now()

	eventually(t, 5*time.Second, "the held results written", func() bool {
		for _, id := range held {
			if admin.status(id) != backends.StatusDone {
				return false
			}
		}
		return true
	})
	took := time.Since(writable)
	t.Logf("%d results held across the read-only window written %v after the database was writable", len(held), took)
	assert.LessOrEqual(t, took, time.Second, "held results are written within a second of the primary being writable")

	eventually(t, 60*time.Second, "every job done", func() bool { return w.stats().Done == int64(len(ids)) })
	recs := w.recorded()
	for _, id := range ids {
		assert.Equal(t, 1, countEvents(recs, "start", id), "job %s ran once", id)
		assert.Equal(t, 1, w.job(id).Attempts, "job %s: no attempt lost to the failover", id)
	}
	for _, sc := range []*sidecar{a, b} {
		sc.signal(syscall.SIGTERM)
	}
	for _, sc := range []*sidecar{a, b} {
		code, _ := sc.wait(30 * time.Second)
		assert.Equal(t, 0, code)
	}
}

// A maintenance leader partitioned from the database mid-pass (a proxy in
// between keeps its TCP connections alive, so the server never sees it go)
// loses leadership on the database's side within backends.LeaderHoldLimit,
// and another sidecar then recovers a dead worker's rows. Before, the
// leader's session advisory lock stayed on a session Postgres still thought
// alive: the fleet's stale recovery stopped for good.
func TestPartitionedLeaderLosesLeadershipAndAnotherRecovers(t *testing.T) {
	t.Parallel()
	w := newWorld(t, sdks[0], manifestOpts{})
	admin := newDBAdmin(t, w.dbURL)
	ctx := context.Background()
	proxy, viaProxy := w.faultProxy()
	fast := map[string]string{"SONIQ_HEARTBEAT_TIMEOUT": "5", "SONIQ_CLEANUP_INTERVAL": "1", "SONIQ_SHUTDOWN_TIMEOUT": "5"}
	with := func(extra map[string]string) map[string]string {
		env := map[string]string{}
		for k, v := range fast {
			env[k] = v
		}
		for k, v := range extra {
			env[k] = v
		}
		return env
	}

	// C runs the jobs and will die holding them; it makes one pass at
	// start and no other, so it never leads once the row is locked.
	c := w.startSidecar(with(map[string]string{"SONIQ_CLEANUP_INTERVAL": "3600"}))
	c.waitReady(t, w.handlerName(), 1)
	cID := c.workerID(t)
	jobs := w.enqueueN("t.sleep_async", `{"seconds":120}`, 4)
	eventually(t, 20*time.Second, "C runs the jobs", func() bool { return len(started(w.recorded())) == len(jobs) })

	// An expired result whose row the test holds locked, so that the
	// leader's pass waits in its DELETE: a leader caught mid-pass.
	var expired string
	require.NoError(t, admin.conn.QueryRow(ctx, `INSERT INTO soniq_jobs (id, job_name, args, status, expires_at)
		VALUES (gen_random_uuid(), 't.noop', '{}', 'done', now() - interval '1 hour') RETURNING id::text`).Scan(&expired))

	// A, through the proxy, claims nothing here (another queue) and is the
	// only sidecar left that makes passes.
	locker, err := pgx.Connect(ctx, w.dbURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = locker.Close(context.Background()) })
	tx, err := locker.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT 1 FROM soniq_jobs WHERE id = $1 FOR UPDATE`, expired)
	require.NoError(t, err)
	a := w.startSidecar(with(map[string]string{"SONIQ_DATABASE_URL": viaProxy.String(), "SONIQ_QUEUES": "elsewhere"}))
	eventually(t, 20*time.Second, "A leads and its pass waits in its DELETE", func() bool {
		var n int
		require.NoError(t, admin.conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = $1 AND wait_event_type = 'Lock' AND query LIKE 'DELETE FROM soniq_jobs%'`, admin.name).Scan(&n))
		return n == 1 && len(a.logs("maintenance: leader")) > 0
	})

	proxy.Partition()
	partitioned := time.Now()
	c.signal(syscall.SIGKILL)
	// The pass's DELETE ends on the server; the leader's hold does not.
	require.NoError(t, tx.Commit(ctx))

	b := w.startSidecar(fast)
	bound := backends.LeaderHoldLimit + time.Second + 10*time.Second // + cleanup_interval + slack
	eventually(t, bound, "the dead worker's rows recovered by another sidecar", func() bool {
		var n int
		require.NoError(t, admin.conn.QueryRow(ctx, `SELECT count(*) FROM soniq_jobs
			WHERE worker_id = $1 AND status = 'processing'`, cID).Scan(&n))
		return n == 0
	})
	took := time.Since(partitioned)
	t.Logf("recovered %v after the leader was partitioned (bound %v + cleanup_interval)", took, backends.LeaderHoldLimit)
	// B logs the recovery once its statement has returned, which can be
	// just after the test sees the rows move: wait for the line.
	assert.NotNil(t, b.waitLog(5*time.Second, "maintenance: recovered stale workers", nil), "B ran the recovery")
	assert.LessOrEqual(t, took, backends.LeaderHoldLimit+time.Second+5*time.Second,
		"within the database's bound on leadership plus cleanup_interval (and a few seconds for the pass and the dead worker's heartbeat to age)")

	proxy.Heal()
	for _, sc := range []*sidecar{a, b} {
		sc.signal(syscall.SIGTERM)
	}
	for _, sc := range []*sidecar{a, b} {
		_, _ = sc.wait(30 * time.Second)
	}
}

// A sidecar that starts while its writes are refused as read-only (a
// session that passed the connect check and then saw the server switched
// read-only, as a reload of default_transaction_read_only does to every
// session at once) waits for the database as it waits for an outage, and
// registers once writes go through. Before, the first 25006 while
// registering ended the sidecar with exit status 1 (found by make chaos,
// seed 102, a restart inside a read-only window). The refusal is produced
// by a trigger raising SQLSTATE 25006 for three seconds: the window in which
// a real reload turns a validated session read-only is milliseconds wide.
func TestStartDuringReadOnlyWindowWaitsAndRegisters(t *testing.T) {
	t.Parallel()
	w := newWorld(t, sdks[0], manifestOpts{})
	admin := newDBAdmin(t, w.dbURL)
	ctx := context.Background()
	sidecarBinary(t) // built before the window opens
	_, err := admin.conn.Exec(ctx, `
CREATE TABLE read_only_until (until timestamptz NOT NULL);
INSERT INTO read_only_until VALUES (now() + interval '3 seconds');
CREATE FUNCTION refuse_while_read_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF now() < (SELECT until FROM read_only_until) THEN
		RAISE EXCEPTION 'cannot execute % in a read-only transaction', TG_OP USING ERRCODE = '25006';
	END IF;
	RETURN NEW;
END $$;
CREATE TRIGGER refuse_while_read_only BEFORE INSERT OR UPDATE ON soniq_workers
	FOR EACH ROW EXECUTE FUNCTION refuse_while_read_only();`)
	require.NoError(t, err)
	began := time.Now()
	sc := w.startSidecar(nil)
	sc.waitReady(t, w.handlerName(), 1)
	require.False(t, sc.exited(), "the sidecar waits out a read-only database instead of exiting")
	assert.NotEmpty(t, sc.logs("registering the worker row: the database is unreachable; retrying"))
	t.Logf("registered %v after starting into a 3 s read-only window", time.Since(began))
	id := w.enqueue("t.noop", `{}`, 0)
	w.waitDone(t, sc, 20*time.Second, id)
	sc.signal(syscall.SIGTERM)
	code, _ := sc.wait(30 * time.Second)
	assert.Equal(t, 0, code)
}

// A shutdown while the database is partitioned away (the proxy keeps the
// sockets open and moves nothing) is bounded by shutdown_timeout +
// shutdown_write_timeout, whatever the database does: the claim in flight
// is abandoned, the NACKs are cut at the write deadline and named in one
// ERROR line, the stop mark gets what is left. The rows stay processing
// for recovery, their attempts kept. Before, three 30 s bounds ran one
// after another: 93 s with shutdown_timeout 3 s.
func TestShutdownDuringAPartitionIsBounded(t *testing.T) {
	t.Parallel()
	w := newWorld(t, sdks[0], manifestOpts{})
	proxy, viaProxy := w.faultProxy()
	ids := w.enqueueN("t.sleep_async", `{"seconds":60}`, 3)
	sc := w.startSidecar(map[string]string{"SONIQ_DATABASE_URL": viaProxy.String(), "SONIQ_SHUTDOWN_TIMEOUT": "3",
		"SONIQ_SHUTDOWN_WRITE_TIMEOUT": "2", "SONIQ_POLL_INTERVAL": "0.1"})
	w.waitStarted(t, ids...)
	proxy.Partition()
	// A poll's claim goes out and hangs in the partition.
	time.Sleep(300 * time.Millisecond)
	sent := sc.signal(syscall.SIGTERM)
	code, at := sc.wait(60 * time.Second)
	took := at.Sub(sent)
	t.Logf("SIGTERM → exit %s with the database partitioned (shutdown_timeout 3 s, shutdown_write_timeout 2 s)", took)
	require.Equal(t, 0, code)
	assert.Less(t, took, 5*time.Second+exitTolerance, "bounded by shutdown_timeout + shutdown_write_timeout")
	lines := sc.logs("giving up on result writes at shutdown: these rows stay processing, and stale-worker recovery or a takeover requeues them with attempts preserved")
	require.Len(t, lines, 1, "one ERROR line names the rows not written")
	assert.ElementsMatch(t, ids, lines[0]["nacks"], "the NACKs that could not be written")
	proxy.Heal()
	for _, id := range ids {
		j := w.job(id)
		assert.Equal(t, backends.StatusProcessing, j.Status, "left for recovery")
		assert.Equal(t, 1, j.Attempts, "attempts kept")
	}
}

// A claim whose reply is lost after Postgres committed it (the proxy
// forwards the claim, drops the first bytes of the answer and resets the
// connection) took rows the sidecar does not know about. The sidecar reads
// its own processing rows before its next claim and gives those back
// unstarted, their attempt refunded, in one WARN line naming them; they are
// then claimed again and done once, at attempt 1. The self-audit, whose
// interval is left at its 60 s default here, has no part in it. Before, the
// rows stayed processing under the live sidecar until the self-audit
// released them as a defect (11–14 s at audit_interval 5, up to two minutes
// at the default).
func TestALostClaimReplyGivesItsRowsBackAtOnce(t *testing.T) {
	t.Parallel()
	w := newWorld(t, sdks[0], manifestOpts{})
	proxy, viaProxy := w.faultProxy()
	// The queue's name is in the claim's arguments and in no other
	// statement after registration, so the armed fault takes a claim.
	const queue = "lost-reply-queue"
	sc := w.startSidecar(map[string]string{"SONIQ_DATABASE_URL": viaProxy.String(), "SONIQ_QUEUES": queue,
		"SONIQ_POLL_INTERVAL": "0.2", "SONIQ_AUDIT_INTERVAL": "60"}, "--metrics-addr", "127.0.0.1:0")
	sc.waitReady(t, w.handlerName(), 1)
	addr := sc.httpAddr(t)

	// Hold the proxy while the jobs arrive, so the first claim to reach
	// the server after the fault is armed finds them: a poll's claim held
	// in the partition is forwarded at Heal, or the next poll's is.
	proxy.Partition()
	time.Sleep(500 * time.Millisecond)
	ids := make([]string, 4)
	for i := range ids {
		j, err := w.backend.Enqueue(t.Context(), backends.EnqueueParams{Name: "t.record", Queue: queue, Args: []byte(`{}`)})
		require.NoError(t, err)
		ids[i] = j.ID
	}
	fired := proxy.LoseReply(queue)
	healed := time.Now()
	proxy.Heal()
	select {
	case <-fired:
	case <-time.After(10 * time.Second):
		t.Fatal("no claim reached the proxy within 10 s of healing")
	}

	w.waitDone(t, sc, 20*time.Second, ids...)
	t.Logf("all %d jobs done %v after the claim's reply was lost", len(ids), time.Since(healed))
	line := sc.waitLog(5*time.Second, "a claim's reply was lost after it took rows", nil)
	require.NotNil(t, line, "one WARN line names the rows given back")
	assert.Equal(t, "WARN", line["level"])
	assert.EqualValues(t, len(ids), line["returned"], "every row the lost claim took was given back")
	assert.ElementsMatch(t, ids, line["job_ids"], "the line names each row")
	assert.Len(t, sc.logs("a claim's reply was lost after it took rows"), 1)
	assert.Empty(t, sc.logs("self-audit:"), "the self-audit has no part in it")
	assert.Equal(t, 1, proxy.Stats().LostReplies)
	for _, id := range ids {
		assert.Equal(t, 1, w.job(id).Attempts, "job %s: the lost claim's attempt was refunded", id)
	}
	runs := map[string]int{}
	for _, r := range w.recorded() {
		if r[0] == "run" {
			runs[r[1]]++
		}
	}
	for _, id := range ids {
		assert.Equal(t, 1, runs[id], "job %s ran once", id)
	}
	n, ok := obsScrape(t, addr).value("soniq_jobs_returned_total", map[string]string{"reason": "lost_reply"})
	assert.True(t, ok, "soniq_jobs_returned_total{reason=\"lost_reply\"} is exported")
	assert.EqualValues(t, len(ids), n)

	sc.signal(syscall.SIGTERM)
	code, _ := sc.wait(30 * time.Second)
	assert.Equal(t, 0, code)
}

// A completion whose write committed but whose reply was lost (the proxy
// forwards the write, drops the answer and resets the connection) is taken
// back by the result writer and written again. Meanwhile the job, retried
// at once, is queued, and the same sidecar's next claim takes it again at
// attempt 2, carrying the retried write of attempt 1 in the same
// transaction. Guarded by worker and status alone, that write requeued
// attempt 2 with attempt 1's error: attempt 2 was charged, its run's result
// discarded, and the job ran one attempt short (the chain of a chaos run's
// job dead-lettered with an attempt charged and never run). Each write now
// names the attempt it settles: the retried write is refused, and every
// attempt's own result is written. The poll is fast so that a claim goes
// out while the writer backs off after the lost reply.
func TestARetriedCompletionDoesNotLandOnTheSameWorkersLaterClaim(t *testing.T) {
	t.Parallel()
	w := newWorld(t, sdks[0], manifestOpts{recordFrames: true})
	proxy, viaProxy := w.faultProxy()
	sc := w.startSidecar(map[string]string{"SONIQ_DATABASE_URL": viaProxy.String(), "SONIQ_POLL_INTERVAL": "0.01"})
	sc.waitReady(t, w.handlerName(), 1)

	// Attempt 1's error is in the write's arguments; a claim's arguments
	// name the jobs the handler serves (t.noop among them), so the armed
	// fault takes the writer's own write, not a claim carrying it.
	// When a claim goes out first it carries attempt 1's result in its own
	// transaction (a loaded machine, the fast poll) and the fault is not
	// met: that job runs its course, and another tries again.
	fired := proxy.LoseReplyUnless("boom from attempt 1", "t.noop")
	var id string
	for try := 1; ; try++ {
		id = w.enqueue("t.fail", `{}`, 3)
		select {
		case <-fired:
		case <-time.After(10 * time.Second):
			require.Less(t, try, 4, "attempt 1's write never reached the proxy on its own, in %d jobs", try)
			w.waitDeadLetter(t, sc, 30*time.Second, id)
			t.Logf("job %s: attempt 1's result rode a claim; trying another job", id)
			continue
		}
		break
	}
	dl := w.waitDeadLetter(t, sc, 30*time.Second, id)
	assert.Equal(t, 3, dl.Attempts)
	require.NotNil(t, dl.LastError)
	assert.Contains(t, *dl.LastError, "boom from attempt 3", "the last attempt ran and its failure was written")
	assert.Equal(t, 1, proxy.Stats().LostReplies)

	var attempts []int
	for _, f := range w.framesSent() {
		if f["type"] == "job" && f["id"] == id {
			n, _ := f["attempt"].(float64)
			attempts = append(attempts, int(n))
		}
	}
	assert.Equal(t, []int{1, 2, 3}, attempts, "each attempt ran once")
	refused := 0
	for _, line := range sc.logs("result discarded") {
		if line["job_id"] == id {
			refused++
			assert.EqualValues(t, 1, line["attempt"], "only the retried copy of attempt 1's write is refused: %v", line)
		}
	}
	t.Logf("attempts run %v; %d copy of attempt 1's write refused", attempts, refused)
	sc.signal(syscall.SIGTERM)
	code, _ := sc.wait(30 * time.Second)
	assert.Equal(t, 0, code)
}
