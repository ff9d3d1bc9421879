package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// RegisterWorker upserts the worker row by id. Soniq's register_worker
// replaces whatever row holds (hostname, pid); this one never does: a row
// with another id there is ErrIdentityTaken (TakeOver replaces a dead one).
func (b *Backend) RegisterWorker(ctx context.Context, w backends.Worker) error {
	if !isUUID(w.ID) {
		return fmt.Errorf("register worker: id %q is not a uuid (soniq_workers.id is uuid)", w.ID)
	}
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		return b.wrap(err, "register worker %s (%s pid %d): begin", w.ID, w.Hostname, w.PID)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := b.registerIn(ctx, tx, w); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return b.wrap(err, "register worker %s (%s pid %d): commit", w.ID, w.Hostname, w.PID)
	}
	return nil
}

// registerIn upserts w's row by id in tx, refusing a (hostname, pid) held
// by another id.
func (b *Backend) registerIn(ctx context.Context, tx pgx.Tx, w backends.Worker) error {
	queues := w.Queues
	if queues == nil {
		queues = []string{}
	}
	metadata := string(w.Metadata)
	if metadata == "" {
		metadata = "{}"
	}
	var version *string
	if w.Version != "" {
		version = &w.Version
	}
	concurrency := max(w.Concurrency, 1)
	var holder, holderMeta string
	err := tx.QueryRow(ctx, `SELECT id::text, COALESCE(metadata::text, '') FROM soniq_workers
	WHERE hostname = $1 AND pid = $2 AND id <> $3`, w.Hostname, w.PID, w.ID).Scan(&holder, &holderMeta)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return b.wrap(err, "register worker %s: reading the row of %s pid %d", w.ID, w.Hostname, w.PID)
	default:
		return fmt.Errorf("register worker %s: %s pid %d is held by worker %s (metadata %s): %w",
			w.ID, w.Hostname, w.PID, holder, holderMeta, backends.ErrIdentityTaken)
	}
	_, err = tx.Exec(ctx, `INSERT INTO soniq_workers
	(id, hostname, pid, queues, concurrency, status, last_heartbeat, started_at, version, metadata)
	VALUES ($1, $2, $3, $4, $5, 'active', now(), now(), $6, $7::text::jsonb)
	ON CONFLICT (id) DO UPDATE SET
	    hostname = EXCLUDED.hostname,
	    pid = EXCLUDED.pid,
	    queues = EXCLUDED.queues,
	    concurrency = EXCLUDED.concurrency,
	    status = 'active',
	    last_heartbeat = now(),
	    version = EXCLUDED.version,
	    metadata = EXCLUDED.metadata`,
		w.ID, w.Hostname, w.PID, queues, concurrency, version, metadata)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		// Another registration took (hostname, pid) meanwhile.
		return fmt.Errorf("register worker %s: %s pid %d was taken meanwhile (%s): %w",
			w.ID, w.Hostname, w.PID, pgErr.Message, backends.ErrIdentityTaken)
	}
	if err != nil {
		return b.wrap(err, "register worker %s (%s pid %d)", w.ID, w.Hostname, w.PID)
	}
	return nil
}

// SameIdentity returns the other rows whose metadata names w's identity.
func (b *Backend) SameIdentity(ctx context.Context, w backends.Worker) ([]backends.Worker, error) {
	id, ok := backends.IdentityOf(w.Metadata)
	if !ok {
		return nil, nil
	}
	rows, err := b.pool.Query(ctx, `SELECT id::text, hostname, pid, COALESCE(queues, '{}'), COALESCE(concurrency, 1), status,
	last_heartbeat, COALESCE(started_at, last_heartbeat), COALESCE(version, ''), metadata::text,
	EXTRACT(EPOCH FROM now() - last_heartbeat)::float8
	FROM soniq_workers
	WHERE metadata->>'kind' = $1 AND metadata->>'instance' = $2 AND metadata->>'hostname' = $3 AND id::text <> $4
	ORDER BY last_heartbeat DESC, id`, id.Kind, id.Instance, id.Host, strings.ToLower(w.ID))
	if err != nil {
		return nil, b.wrap(err, "list the worker rows of %s %s on %s", id.Kind, id.Instance, id.Host)
	}
	defer rows.Close()
	var out []backends.Worker
	for rows.Next() {
		var r backends.Worker
		var meta *string
		var age float64
		if err := rows.Scan(&r.ID, &r.Hostname, &r.PID, &r.Queues, &r.Concurrency, &r.Status,
			&r.LastHeartbeat, &r.StartedAt, &r.Version, &meta, &age); err != nil {
			return nil, b.wrap(err, "list the worker rows of %s %s on %s: reading a row", id.Kind, id.Instance, id.Host)
		}
		if meta != nil {
			r.Metadata = []byte(*meta)
		}
		r.HeartbeatAge = time.Duration(age * float64(time.Second))
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, b.wrap(err, "list the worker rows of %s %s on %s", id.Kind, id.Instance, id.Host)
	}
	return out, nil
}

// TakeOver registers w in place of dead workers of its identity and gives
// it their processing rows, in one transaction.
func (b *Backend) TakeOver(ctx context.Context, w backends.Worker, dead []backends.Worker) ([]backends.Job, error) {
	if !isUUID(w.ID) {
		return nil, fmt.Errorf("take over: worker id %q is not a uuid (soniq_workers.id is uuid)", w.ID)
	}
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		return nil, b.wrap(err, "worker %s taking over %d dead workers: begin", w.ID, len(dead))
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var gone []string
	for _, d := range dead {
		if !isUUID(d.ID) || strings.EqualFold(d.ID, w.ID) {
			continue
		}
		var status string
		var beat time.Time
		err := tx.QueryRow(ctx, `SELECT status, last_heartbeat FROM soniq_workers WHERE id = $1 FOR UPDATE`, d.ID).Scan(&status, &beat)
		if errors.Is(err, pgx.ErrNoRows) {
			continue // taken over or removed meanwhile
		}
		if err != nil {
			return nil, b.wrap(err, "worker %s taking over %s: reading its row", w.ID, d.ID)
		}
		if status != d.Status || !beat.Equal(d.LastHeartbeat) {
			return nil, fmt.Errorf("worker %s taking over %s: it was %s with a heartbeat at %s, it is now %s with a heartbeat at %s: %w",
				w.ID, d.ID, d.Status, d.LastHeartbeat.UTC().Format(time.RFC3339Nano), status, beat.UTC().Format(time.RFC3339Nano), backends.ErrWorkerAlive)
		}
		gone = append(gone, d.ID)
	}
	var held []string
	if len(gone) > 0 {
		// Detach every row of the dead workers (the foreign key forbids
		// deleting a row that jobs still name, short of ON DELETE SET NULL),
		// remembering the processing ones, then delete the dead rows: one of
		// them may hold w's (hostname, pid), as a container restart gives.
		rows, err := tx.Query(ctx, `UPDATE soniq_jobs SET worker_id = NULL
		WHERE worker_id = ANY($1::uuid[]) RETURNING id::text, status`, gone)
		if err != nil {
			return nil, b.wrap(err, "worker %s taking over %v: detaching their jobs", w.ID, gone)
		}
		var id, status string
		_, err = pgx.ForEachRow(rows, []any{&id, &status}, func() error {
			if status == backends.StatusProcessing {
				held = append(held, id)
			}
			return nil
		})
		if err != nil {
			return nil, b.wrap(err, "worker %s taking over %v: detaching their jobs", w.ID, gone)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM soniq_workers WHERE id = ANY($1::uuid[])`, gone); err != nil {
			return nil, b.wrap(err, "worker %s taking over %v: removing their rows", w.ID, gone)
		}
	}
	if err := b.registerIn(ctx, tx, w); err != nil {
		return nil, err
	}
	var jobs []backends.Job
	if len(held) > 0 {
		rows, err := tx.Query(ctx, `UPDATE soniq_jobs SET worker_id = $1, updated_at = now()
		WHERE id = ANY($2::uuid[]) AND status = 'processing' AND worker_id IS NULL
		RETURNING `+jobColumns(""), w.ID, held)
		if err != nil {
			return nil, b.wrap(err, "worker %s taking over the jobs of %v", w.ID, gone)
		}
		jobs, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (backends.Job, error) { return scanJob(r) })
		if err != nil {
			return nil, b.wrap(err, "worker %s taking over the jobs of %v", w.ID, gone)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, b.wrap(err, "worker %s taking over %v: commit", w.ID, gone)
	}
	return jobs, nil
}

// Heartbeat sets last_heartbeat = now(); ErrNotFound if the row is gone,
// ErrWorkerNotActive if it is no longer active.
func (b *Backend) Heartbeat(ctx context.Context, workerID string) error {
	if !isUUID(workerID) {
		return notFound("worker", workerID)
	}
	var status string
	err := b.pool.QueryRow(ctx, `UPDATE soniq_workers SET last_heartbeat = now() WHERE id = $1 RETURNING status`, workerID).Scan(&status)
	if errors.Is(err, pgx.ErrNoRows) {
		return notFound("worker", workerID)
	}
	if err != nil {
		return b.wrap(err, "heartbeat worker %s", workerID)
	}
	if status != backends.WorkerActive {
		return fmt.Errorf("heartbeat worker %s: its status is %q: %w", workerID, status, backends.ErrWorkerNotActive)
	}
	return nil
}

// SetWorkerStatus sets a worker's status. Like Soniq's mark_worker_stopped
// it also counts as a heartbeat.
func (b *Backend) SetWorkerStatus(ctx context.Context, workerID, status string) error {
	switch status {
	case backends.WorkerActive, backends.WorkerStopping, backends.WorkerStopped:
	default:
		return fmt.Errorf("set worker %s status: invalid status %q", workerID, status)
	}
	if !isUUID(workerID) {
		return notFound("worker", workerID)
	}
	// One round trip (exec mode: no statement prepared first): the stop
	// mark is one of a shutdown's last writes, and on a slow link each
	// round trip shows in the exit.
	tag, err := b.pool.Exec(ctx, `UPDATE soniq_workers SET status = $2, last_heartbeat = now() WHERE id = $1`,
		pgx.QueryExecModeExec, workerID, status)
	if err != nil {
		return b.wrap(err, "set worker %s status to %s", workerID, status)
	}
	if tag.RowsAffected() == 0 {
		return notFound("worker", workerID)
	}
	return nil
}

// RegisterTasks upserts the task registry rows for a worker in one statement.
func (b *Backend) RegisterTasks(ctx context.Context, workerID string, names []string) error {
	// One INSERT cannot touch the same conflict row twice.
	names = slices.Compact(slices.Sorted(slices.Values(names)))
	if len(names) == 0 {
		return nil
	}
	_, err := b.pool.Exec(ctx, `INSERT INTO soniq_task_registry (task_name, worker_id, last_seen_at)
	SELECT n, $1, now() FROM unnest($2::text[]) AS n
	ON CONFLICT (task_name, worker_id) DO UPDATE SET last_seen_at = now()`, workerID, names)
	if err != nil {
		return b.wrap(err, "register %d task names for worker %s", len(names), workerID)
	}
	return nil
}

// LiveWorkers returns the active workers heard from within the last within.
func (b *Backend) LiveWorkers(ctx context.Context, within time.Duration) ([]backends.Worker, error) {
	rows, err := b.pool.Query(ctx, `SELECT id::text, hostname, pid, COALESCE(queues, '{}'), COALESCE(concurrency, 1), status,
	last_heartbeat, COALESCE(started_at, last_heartbeat), COALESCE(version, ''), metadata::text
	FROM soniq_workers
	WHERE status = 'active' AND last_heartbeat >= now() - make_interval(secs => $1::float8)
	ORDER BY id`, within.Seconds())
	if err != nil {
		return nil, b.wrap(err, "list workers heard from within %s", within)
	}
	defer rows.Close()
	var out []backends.Worker
	for rows.Next() {
		var w backends.Worker
		var meta *string
		if err := rows.Scan(&w.ID, &w.Hostname, &w.PID, &w.Queues, &w.Concurrency, &w.Status,
			&w.LastHeartbeat, &w.StartedAt, &w.Version, &meta); err != nil {
			return nil, b.wrap(err, "list workers: reading a row")
		}
		if meta != nil {
			w.Metadata = []byte(*meta)
		}
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, b.wrap(err, "list workers heard from within %s", within)
	}
	return out, nil
}
