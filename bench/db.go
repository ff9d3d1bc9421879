package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/soniq-dev/soniq-sidecar/internal/proc"
)

// database is the driver's own connection to the throw-away server: setup,
// bulk enqueues and observation. The measured code paths use their own.
type database struct {
	pool       *pgxpool.Pool
	postmaster int
}

func openDB(ctx context.Context, url string) (*database, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	// The driver's own queries avoid seq-scanning soniq_jobs, so the table's
	// seq_scan counter counts the statements of the code measured.
	cfg.ConnConfig.RuntimeParams["enable_seqscan"] = "off"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to %s: %w", redactURL(url), err)
	}
	d := &database{pool: pool}
	// The server's processes, for its CPU time: the postmaster is the parent
	// of the checkpointer (only when the server runs on this machine).
	var pid int
	if err := pool.QueryRow(ctx, `SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'`).Scan(&pid); err == nil {
		if st, err := proc.ReadStat(pid); err == nil {
			d.postmaster = st.PPID
		}
	}
	return d, nil
}

func (d *database) close() { d.pool.Close() }

func redactURL(u string) string {
	if i := strings.Index(u, "@"); i > 0 {
		if j := strings.Index(u, "://"); j > 0 && j < i {
			user := u[j+3 : i]
			if k := strings.Index(user, ":"); k >= 0 {
				return u[:j+3] + user[:k] + ":***" + u[i:]
			}
		}
	}
	return u
}

// setupSchema runs Soniq's own setup, then the sidecar's migrate (which
// adds the claim-order index), as a mixed deployment would.
func setupSchema(ctx context.Context, c *config, d *database) error {
	for _, argv := range [][]string{
		{c.soniq, "setup"},
		{c.sidecar, "migrate"},
	} {
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Env = append(os.Environ(), "SONIQ_DATABASE_URL="+c.dbURL)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v\n%s", strings.Join(argv, " "), err, out)
		}
	}
	return nil
}

// reset empties the jobs table between runs (and the worker rows of
// earlier runs) so every run starts from the same state. index says whether
// the claim-order index is there, as `soniq-sidecar migrate` leaves it (it
// is created again on the empty table, which is instant), or absent, as on
// a database set up by Soniq's own tools only.
func (d *database) reset(ctx context.Context, index bool) error {
	stmts := []string{`DROP INDEX IF EXISTS soniq_sidecar_claim_order`, `TRUNCATE soniq_jobs`,
		`DELETE FROM soniq_workers WHERE status <> 'active'`}
	if index {
		stmts = append(stmts, claimIndex)
	}
	for _, q := range append(stmts, `CHECKPOINT`) {
		if _, err := d.pool.Exec(ctx, q); err != nil {
			return fmt.Errorf("reset: %s: %w", q, err)
		}
	}
	return nil
}

// awaitAutovacuum waits, at most bound, until no autovacuum worker runs,
// and returns how long it waited in seconds.
func (d *database) awaitAutovacuum(ctx context.Context, bound time.Duration) float64 {
	t0 := time.Now()
	for time.Since(t0) < bound {
		var n int
		if err := d.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'autovacuum worker'`).Scan(&n); err != nil || n == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return time.Since(t0).Seconds()
		case <-time.After(50 * time.Millisecond):
		}
	}
	if w := time.Since(t0); w > 50*time.Millisecond {
		return w.Seconds()
	}
	return 0
}

// dropLimitIndexes drops the indexes a limited sidecar builds on
// soniq_jobs at its start: left behind, every later section's enqueues and
// claims would maintain them, which no database without limits does.
func (d *database) dropLimitIndexes(ctx context.Context) error {
	rows, err := d.pool.Query(ctx, `SELECT indexname FROM pg_indexes
	WHERE tablename = 'soniq_jobs' AND indexname LIKE 'soniq\_sidecar\_limit\_%'`)
	if err != nil {
		return fmt.Errorf("list the limits' indexes: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("list the limits' indexes: %w", err)
	}
	for _, n := range names {
		if _, err := d.pool.Exec(ctx, `DROP INDEX IF EXISTS `+pgx.Identifier{n}.Sanitize()); err != nil {
			return fmt.Errorf("drop the limits' index %s: %w", n, err)
		}
	}
	return nil
}

// enqueueBulk inserts n queued jobs as Soniq's producer would write them,
// and notifies, all in one transaction: they become visible at once.
func (d *database) enqueueBulk(ctx context.Context, name string, args any, n int) error {
	a, err := json.Marshal(args)
	if err != nil {
		return err
	}
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `INSERT INTO soniq_jobs
	(id, job_name, args, status, attempts, max_attempts, priority, queue, unique_job, scheduled_at)
	SELECT gen_random_uuid(), $1, $2::text::jsonb, 'queued', 0, 3, 100, 'default', false, NULL
	FROM generate_series(1, $3)`, name, string(a), n); err != nil {
		return fmt.Errorf("bulk enqueue: %w", err)
	}
	if _, err := tx.Exec(ctx, `SELECT pg_notify('soniq_new_job', 'default')`); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// counts returns how many rows are queued or processing, and done.
func (d *database) counts(ctx context.Context) (open, processing, done int, err error) {
	err = d.pool.QueryRow(ctx, `SELECT
	count(*) FILTER (WHERE status IN ('queued', 'processing')),
	count(*) FILTER (WHERE status = 'processing'),
	count(*) FILTER (WHERE status = 'done')
	FROM soniq_jobs`).Scan(&open, &processing, &done)
	return
}

// waitDrained polls until no job is queued or processing.
func (d *database) waitDrained(ctx context.Context, ws *workers, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		// EXISTS through idx_soniq_jobs_queue_status: cheap enough to poll
		// without loading the server it measures.
		var open bool
		if err := d.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM soniq_jobs
		WHERE queue = 'default' AND status IN ('queued', 'processing'))`).Scan(&open); err != nil {
			return err
		}
		if !open {
			return nil
		}
		if ws != nil {
			for _, w := range ws.procs {
				if w.Exited() {
					return fmt.Errorf("pid %d exited during the run (%v); log tail:\n%s", w.PID, w.Err(), proc.Tail(w.Log, 3000))
				}
			}
		}
		if time.Now().After(deadline) {
			n, _, _, _ := d.counts(ctx)
			return fmt.Errorf("%d jobs still open after %s", n, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// lastDone is the time of the last completion (the database's clock, which
// is this machine's) and how many jobs are done.
func (d *database) lastDone(ctx context.Context) (time.Time, int, error) {
	var t *time.Time
	var n int
	err := d.pool.QueryRow(ctx, `SELECT max(updated_at), count(*) FROM soniq_jobs WHERE status = 'done'`).Scan(&t, &n)
	if err != nil || t == nil {
		return time.Time{}, n, err
	}
	return *t, n, nil
}

// waitSoniqWorkers waits until every Soniq worker registered its row (it
// does so after its LISTEN is set up, just before its claim loops start).
func (d *database) waitSoniqWorkers(ctx context.Context, ws []*proc.Proc, timeout time.Duration) error {
	pids := make([]int32, len(ws))
	for i, w := range ws {
		pids[i] = int32(w.PID)
	}
	return waitRegistered(ctx, ws, timeout, func() (int, error) {
		var n int
		err := d.pool.QueryRow(ctx, `SELECT count(*) FROM soniq_workers WHERE pid = ANY($1) AND status = 'active'`, pids).Scan(&n)
		return n, err
	})
}

// waitRegistered polls registered (how many of ws have their active worker
// row) until it counts them all, failing early when a worker exits.
func waitRegistered(ctx context.Context, ws []*proc.Proc, timeout time.Duration, registered func() (int, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		n, err := registered()
		if err != nil {
			return err
		}
		if n == len(ws) {
			return nil
		}
		for _, w := range ws {
			if w.Exited() {
				return fmt.Errorf("soniq worker pid %d exited (%v); log tail:\n%s", w.PID, w.Err(), proc.Tail(w.Log, 3000))
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("soniq workers not registered within %s; log tail:\n%s", timeout, proc.Tail(ws[0].Log, 3000))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// serverCPU is the CPU seconds of the Postgres server's processes so far.
func (d *database) serverCPU() float64 {
	if d.postmaster == 0 {
		return 0
	}
	own, ch := proc.TreeCPU(d.postmaster)
	return own + ch
}

func (d *database) setting(ctx context.Context, name string) string {
	var v string
	if err := d.pool.QueryRow(ctx, `SELECT current_setting($1)`, name).Scan(&v); err != nil {
		return "unknown"
	}
	return v
}

// seqScans reads soniq_jobs' seq_scan counter: statements that read the
// whole table. Backends flush their counters at exit or within about a
// second of going idle.
// workerRowUpdates counts the updates of soniq_workers rows so far. Every
// claim of the sidecar (and of the ceiling) updates its worker row once, as
// its proof of life; heartbeats add one every heartbeat interval. Read once
// the workers have disconnected, when their statistics have been flushed,
// the delta over a drain is its number of claims, within a few heartbeats.
func (d *database) workerRowUpdates(ctx context.Context) (int64, error) {
	var n int64
	err := d.pool.QueryRow(ctx, `SELECT n_tup_upd FROM pg_stat_user_tables WHERE relname = 'soniq_workers'`).Scan(&n)
	return n, err
}

func (d *database) seqScans(ctx context.Context) (int64, error) {
	var n int64
	err := d.pool.QueryRow(ctx, `SELECT seq_scan FROM pg_stat_user_tables WHERE relname = 'soniq_jobs'`).Scan(&n)
	return n, err
}

// meteredConn is a connection of the pool with its server process's CPU
// read from when it was acquired: the driver's own statements (an ANALYZE,
// the drain polls) are then left out of what a row is charged.
type meteredConn struct {
	*pgxpool.Conn
	pid  int
	cpu0 float64
	on   bool // the server is on this machine
}

// metered acquires a meteredConn; release it when done.
func (d *database) metered(ctx context.Context) (*meteredConn, error) {
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	m := &meteredConn{Conn: conn, on: d.postmaster != 0}
	if err := conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&m.pid); err != nil {
		conn.Release()
		return nil, err
	}
	m.cpu0 = proc.CPU(m.pid)
	return m, nil
}

// spent is the CPU seconds its server process used since it was acquired
// (0 when the server is not on this machine).
func (m *meteredConn) spent() float64 {
	if !m.on {
		return 0
	}
	return proc.CPU(m.pid) - m.cpu0
}
