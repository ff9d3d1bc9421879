// Package sqlite is the Backend on an embedded SQLite file, through the
// cgo-free modernc.org/sqlite driver. It shares the file with Soniq's own
// SQLite backend: same tables, same columns, TEXT timestamps in the format
// Soniq writes, TEXT JSON.
//
// SQLite allows one writer at a time. Every write therefore goes through a
// single connection opened with BEGIN IMMEDIATE transactions, so writers in
// this process queue on that connection instead of failing with SQLITE_BUSY,
// and writers in other processes wait on the file lock (busy_timeout) before
// reading anything they will update: two processes cannot claim the same row.
// Reads use a separate pool; WAL lets them run beside the writer.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"strings"
	"sync"
	"time"

	// Also registers the "sqlite" database/sql driver.
	msqlite "modernc.org/sqlite"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

const (
	driverName = "sqlite"
	// busyTimeoutMS bounds how long a writer waits for another process's
	// write lock on the same file before SQLite reports SQLITE_BUSY.
	busyTimeoutMS = 5000
	// readPoolSize is the number of read connections; WAL readers never
	// block the writer nor each other.
	readPoolSize = 4
	// subscriberBuffer is each Subscribe channel's capacity. Sends never
	// block, so a slow reader only loses (coalesces) wake-ups.
	subscriberBuffer = 64
	// sqliteBusy is SQLITE_BUSY, the primary result code.
	sqliteBusy = 5
)

// Backend is the SQLite implementation of backends.Backend.
type Backend struct {
	// write is the one write connection (MaxOpenConns 1, BEGIN IMMEDIATE).
	write *sql.DB
	// read is the read pool; for ":memory:" it is the write connection,
	// since a private in-memory database is not shared between connections.
	read *sql.DB

	backends.LocalLeader // TryLeader: single-host, see LocalLeader

	subsMu sync.Mutex
	subs   map[*subscriber]struct{}
	closed bool
}

var _ backends.Backend = (*Backend)(nil)

// Open opens (creating if needed) the SQLite database at path. It does not
// create tables; call Migrate. path is a file name; ":memory:" gives a
// private in-memory database (tests only).
func Open(ctx context.Context, path string) (*Backend, error) {
	if path == "" {
		return nil, errors.New("opening sqlite database: empty path")
	}
	if strings.ContainsRune(path, '?') {
		// The driver splits its DSN at the first '?'.
		return nil, fmt.Errorf("opening sqlite database %q: path must not contain '?'", path)
	}
	memory := path == ":memory:"

	// synchronous stays at SQLite's default (FULL), as Soniq leaves it: an
	// acknowledged enqueue or result must survive a power cut.
	writeDSN := fmt.Sprintf("%s?_txlock=immediate&_pragma=busy_timeout(%d)&_pragma=journal_mode(WAL)", path, busyTimeoutMS)
	write, err := sql.Open(driverName, writeDSN)
	if err != nil {
		return nil, fmt.Errorf("opening sqlite database %q for writing: %w", path, err)
	}
	write.SetMaxOpenConns(1)
	write.SetMaxIdleConns(1)
	write.SetConnMaxLifetime(0)
	write.SetConnMaxIdleTime(0)
	// Open the writer first so WAL is on before any reader connects.
	if err := write.PingContext(ctx); err != nil {
		_ = write.Close()
		return nil, fmt.Errorf("opening sqlite database %q for writing: %w", path, err)
	}

	b := &Backend{write: write, read: write, subs: make(map[*subscriber]struct{})}
	if memory {
		return b, nil
	}

	readDSN := fmt.Sprintf("%s?_pragma=busy_timeout(%d)&_query_only=1", path, busyTimeoutMS)
	read, err := sql.Open(driverName, readDSN)
	if err != nil {
		_ = write.Close()
		return nil, fmt.Errorf("opening sqlite database %q for reading: %w", path, err)
	}
	read.SetMaxOpenConns(readPoolSize)
	read.SetMaxIdleConns(readPoolSize)
	if err := read.PingContext(ctx); err != nil {
		_ = read.Close()
		_ = write.Close()
		return nil, fmt.Errorf("opening sqlite database %q for reading: %w", path, err)
	}
	b.read = read
	return b, nil
}

// Ping checks that both the write connection and the read pool answer.
func (b *Backend) Ping(ctx context.Context) error {
	if err := b.write.PingContext(ctx); err != nil {
		return fmt.Errorf("pinging sqlite write connection: %w", err)
	}
	if err := b.read.PingContext(ctx); err != nil {
		return fmt.Errorf("pinging sqlite read pool: %w", err)
	}
	return nil
}

// Close closes every subscription channel and every connection.
func (b *Backend) Close() error {
	b.closeSubscribers()
	var errs []error
	if b.read != b.write {
		if err := b.read.Close(); err != nil {
			errs = append(errs, fmt.Errorf("closing sqlite read pool: %w", err))
		}
	}
	if err := b.write.Close(); err != nil {
		errs = append(errs, fmt.Errorf("closing sqlite write connection: %w", err))
	}
	return errors.Join(errs...)
}

// Migrate creates Soniq's SQLite schema with IF NOT EXISTS, plus the task
// registry table Soniq only has on Postgres and the sidecar's own
// cancel-request table. It never alters an existing table.
func (b *Backend) Migrate(ctx context.Context) error {
	return b.inWriteTx(ctx, "migrating sqlite schema", func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, schemaDDL+limitsDDL); err != nil {
			return err
		}
		return upgradeOverrides(ctx, tx)
	})
}

// inWriteTx runs fn in a BEGIN IMMEDIATE transaction on the write
// connection and commits it. what names the operation for error messages.
func (b *Backend) inWriteTx(ctx context.Context, what string, fn func(tx *sql.Tx) error) error {
	tx, err := b.beginImmediate(ctx)
	if err != nil {
		return fmt.Errorf("%s: beginning transaction: %w", what, err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return fmt.Errorf("%s: %w", what, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("%s: committing: %w", what, err)
	}
	return nil
}

// beginImmediate starts a write transaction, waiting as long as ctx allows.
// Inside this process the single write connection already serialises
// writers; another process writing the same file can still hold the lock
// past busy_timeout (SQLite's busy handler backs off to 100 ms sleeps and
// a busy writer can win every race). BEGIN has done nothing yet, so
// retrying it after SQLITE_BUSY is safe; short jittered waits keep this
// process in the race instead of failing the caller.
func (b *Backend) beginImmediate(ctx context.Context) (*sql.Tx, error) {
	for {
		tx, err := b.write.BeginTx(ctx, nil)
		if err == nil || !isBusy(err) {
			return tx, err
		}
		wait := time.Millisecond + time.Duration(mathrand.Int64N(int64(4*time.Millisecond)))
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, fmt.Errorf("%w (gave up: %w)", err, ctx.Err())
		case <-timer.C:
		}
	}
}

// isBusy reports SQLITE_BUSY, including its extended codes.
func isBusy(err error) bool {
	var se *msqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqliteBusy
}

// schemaDDL is Soniq 0.1.0's SQLite DDL (soniq/backends/sqlite.py), verbatim
// in substance, plus the claim-order index, followed by soniq_recurring_jobs
// and soniq_task_registry as Soniq's Postgres migrations define them
// (SQLite types), and the sidecar's own cancel-request table.
const schemaDDL = `
CREATE TABLE IF NOT EXISTS soniq_jobs (
    id TEXT PRIMARY KEY,
    job_name TEXT NOT NULL,
    args TEXT NOT NULL,
    args_hash TEXT,
    status TEXT NOT NULL DEFAULT 'queued'
        CHECK (status IN ('queued', 'processing', 'done', 'cancelled')),
    attempts INTEGER DEFAULT 0,
    max_attempts INTEGER DEFAULT 3,
    queue TEXT DEFAULT 'default',
    priority INTEGER DEFAULT 100,
    unique_job INTEGER DEFAULT 0,
    dedup_key TEXT,
    scheduled_at TEXT,
    expires_at TEXT,
    last_error TEXT,
    result TEXT,
    worker_id TEXT,
    producer_id TEXT,
    created_at TEXT,
    updated_at TEXT
);

CREATE INDEX IF NOT EXISTS idx_eq_jobs_status_priority
    ON soniq_jobs (status, priority) WHERE status = 'queued';
CREATE INDEX IF NOT EXISTS idx_eq_jobs_queue_status
    ON soniq_jobs (queue, status);

-- The sidecar's own addition: the claim order as an index over queued rows,
-- so a claim reads its rows in order and stops (no sort of the whole queue).
-- Additive: Soniq's tools never see it, and Soniq's own claim may use it.
CREATE INDEX IF NOT EXISTS soniq_sidecar_claim_order
    ON soniq_jobs (priority, scheduled_at, created_at) WHERE status = 'queued';

CREATE TRIGGER IF NOT EXISTS soniq_jobs_reject_dead_letter_insert
BEFORE INSERT ON soniq_jobs
FOR EACH ROW WHEN NEW.status = 'dead_letter'
BEGIN
    SELECT RAISE(ABORT, 'soniq_jobs.status=dead_letter is rejected: DLQ rows live in soniq_dead_letter_jobs');
END;

CREATE TRIGGER IF NOT EXISTS soniq_jobs_reject_dead_letter_update
BEFORE UPDATE ON soniq_jobs
FOR EACH ROW WHEN NEW.status = 'dead_letter'
BEGIN
    SELECT RAISE(ABORT, 'soniq_jobs.status=dead_letter is rejected: DLQ rows live in soniq_dead_letter_jobs');
END;

CREATE TABLE IF NOT EXISTS soniq_workers (
    id TEXT PRIMARY KEY,
    hostname TEXT NOT NULL,
    pid INTEGER NOT NULL,
    queues TEXT DEFAULT '[]',
    concurrency INTEGER DEFAULT 1,
    status TEXT DEFAULT 'active',
    last_heartbeat TEXT,
    started_at TEXT,
    metadata TEXT
);

CREATE TABLE IF NOT EXISTS soniq_dead_letter_jobs (
    id TEXT PRIMARY KEY,
    job_name TEXT NOT NULL,
    args TEXT NOT NULL,
    queue TEXT NOT NULL,
    priority INTEGER NOT NULL,
    max_attempts INTEGER NOT NULL,
    attempts INTEGER NOT NULL,
    last_error TEXT,
    dead_letter_reason TEXT NOT NULL,
    original_created_at TEXT NOT NULL,
    moved_to_dead_letter_at TEXT NOT NULL,
    resurrection_count INTEGER DEFAULT 0,
    last_resurrection_at TEXT,
    tags TEXT,
    created_at TEXT
);

CREATE INDEX IF NOT EXISTS idx_soniq_dead_letter_jobs_job_name
    ON soniq_dead_letter_jobs (job_name);
CREATE INDEX IF NOT EXISTS idx_soniq_dead_letter_jobs_queue
    ON soniq_dead_letter_jobs (queue);
CREATE INDEX IF NOT EXISTS idx_soniq_dead_letter_jobs_reason
    ON soniq_dead_letter_jobs (dead_letter_reason);
CREATE INDEX IF NOT EXISTS idx_soniq_dead_letter_jobs_moved_at
    ON soniq_dead_letter_jobs (moved_to_dead_letter_at);

-- Soniq keeps schedules in memory on SQLite; the sidecar gives SQLite the
-- table of Soniq's Postgres migration 0003_scheduler (SQLite types,
-- timestamps as Soniq's SQLite backend writes them), so that schedules
-- outlive a restart here too.
CREATE TABLE IF NOT EXISTS soniq_recurring_jobs (
    id TEXT PRIMARY KEY,
    job_name TEXT NOT NULL,
    schedule_type TEXT NOT NULL CHECK (schedule_type IN ('interval', 'cron')),
    schedule_value TEXT NOT NULL,
    priority INTEGER NOT NULL DEFAULT 100,
    queue TEXT NOT NULL DEFAULT 'default',
    max_attempts INTEGER NOT NULL DEFAULT 3,
    job_kwargs TEXT NOT NULL DEFAULT '{}',
    status TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'paused')),
    created_at TEXT,
    last_run TEXT,
    next_run TEXT,
    run_count INTEGER NOT NULL DEFAULT 0,
    last_job_id TEXT,
    updated_at TEXT
);

CREATE INDEX IF NOT EXISTS idx_soniq_recurring_jobs_status
    ON soniq_recurring_jobs (status);
CREATE INDEX IF NOT EXISTS idx_soniq_recurring_jobs_next_run
    ON soniq_recurring_jobs (next_run);

CREATE TABLE IF NOT EXISTS soniq_task_registry (
    task_name TEXT NOT NULL,
    worker_id TEXT NOT NULL,
    last_seen_at TEXT NOT NULL,
    args_model_repr TEXT,
    PRIMARY KEY (task_name, worker_id)
);

CREATE INDEX IF NOT EXISTS idx_soniq_task_registry_task_name
    ON soniq_task_registry (task_name);

-- The sidecar's own table: cancel requests for running jobs, one per job
-- (the Postgres schema's 9000_sidecar_cancel_requests.sql, in SQLite types).
CREATE TABLE IF NOT EXISTS soniq_sidecar_cancel_requests (
    job_id TEXT PRIMARY KEY,
    worker_id TEXT,
    status TEXT NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'acknowledged', 'refused')),
    handler TEXT,
    detail TEXT,
    requested_at TEXT NOT NULL,
    resolved_at TEXT
);
`

// queryIDs runs a statement returning one id column and collects it.
func queryIDs(ctx context.Context, tx *sql.Tx, query string, args ...any) ([]string, error) {
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}
