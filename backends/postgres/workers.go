package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// RegisterWorker upserts the worker row as Soniq's register_worker does (on
// a (hostname, pid) conflict the new id wins and the row becomes active),
// except that it takes over only its own predecessor's row.
func (b *Backend) RegisterWorker(ctx context.Context, w backends.Worker) error {
	if !isUUID(w.ID) {
		return fmt.Errorf("register worker: id %q is not a uuid (soniq_workers.id is uuid)", w.ID)
	}
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
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		return b.wrap(err, "register worker %s (%s pid %d): begin", w.ID, w.Hostname, w.PID)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	// A row with our (hostname, pid) and another id: in a container every
	// start is pid 1 on the same hostname, so it may be our dead
	// predecessor, whose jobs still reference its id through soniq_jobs'
	// foreign key (taking the new id would fail). Only a predecessor's rows
	// are released (processing ones back to the queue, attempts preserved,
	// as stale-worker recovery does; the others detached); any other
	// program's row is left alone.
	var holder, holderMeta string
	err = tx.QueryRow(ctx, `SELECT id::text, COALESCE(metadata::text, '') FROM soniq_workers
	WHERE hostname = $1 AND pid = $2 AND id <> $3 FOR UPDATE`, w.Hostname, w.PID, w.ID).Scan(&holder, &holderMeta)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return b.wrap(err, "register worker %s: reading the row of %s pid %d", w.ID, w.Hostname, w.PID)
	case !backends.IsPredecessor([]byte(holderMeta), []byte(metadata)):
		return fmt.Errorf("register worker %s: %s pid %d is held by worker %s (metadata %s): %w",
			w.ID, w.Hostname, w.PID, holder, holderMeta, backends.ErrIdentityTaken)
	default:
		if _, err := tx.Exec(ctx, `UPDATE soniq_jobs
	SET status = CASE WHEN status = 'processing' THEN 'queued' ELSE status END,
	    worker_id = NULL, updated_at = now()
	WHERE worker_id = $1`, holder); err != nil {
			return b.wrap(err, "register worker %s: releasing the jobs of its predecessor %s on %s pid %d", w.ID, holder, w.Hostname, w.PID)
		}
	}
	if _, err := tx.Exec(ctx, `INSERT INTO soniq_workers
	(id, hostname, pid, queues, concurrency, status, last_heartbeat, started_at, version, metadata)
	VALUES ($1, $2, $3, $4, $5, 'active', now(), now(), $6, $7::text::jsonb)
	ON CONFLICT (hostname, pid) DO UPDATE SET
	    id = EXCLUDED.id,
	    queues = EXCLUDED.queues,
	    concurrency = EXCLUDED.concurrency,
	    status = 'active',
	    last_heartbeat = now(),
	    started_at = now(),
	    version = EXCLUDED.version,
	    metadata = EXCLUDED.metadata`,
		w.ID, w.Hostname, w.PID, queues, concurrency, version, metadata); err != nil {
		return b.wrap(err, "register worker %s (%s pid %d)", w.ID, w.Hostname, w.PID)
	}
	if err := tx.Commit(ctx); err != nil {
		return b.wrap(err, "register worker %s (%s pid %d): commit", w.ID, w.Hostname, w.PID)
	}
	return nil
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
	tag, err := b.pool.Exec(ctx, `UPDATE soniq_workers SET status = $2, last_heartbeat = now() WHERE id = $1`,
		workerID, status)
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

// RecoverStaleWorkers stops every worker silent for longer than olderThan,
// whatever its status, and requeues its processing rows (attempts
// preserved) in one statement, hence one transaction. Locking the silent
// rows first means a heartbeat that lands meanwhile takes the worker out of
// the set (the lock re-reads the row) instead of losing its jobs.
func (b *Backend) RecoverStaleWorkers(ctx context.Context, olderThan time.Duration, except string) (int, int, error) {
	var workers, jobs int
	err := b.pool.QueryRow(ctx, `WITH silent AS (
	SELECT w.id, w.status FROM soniq_workers w
	WHERE w.last_heartbeat < now() - make_interval(secs => $1::float8)
	  AND w.id::text IS DISTINCT FROM $2
	  AND (w.status <> 'stopped'
	       OR EXISTS (SELECT 1 FROM soniq_jobs j WHERE j.worker_id = w.id AND j.status = 'processing'))
	FOR UPDATE OF w
), w AS (
	UPDATE soniq_workers SET status = 'stopped'
	WHERE id IN (SELECT id FROM silent WHERE status <> 'stopped')
	RETURNING id
), j AS (
	UPDATE soniq_jobs SET status = 'queued', worker_id = NULL, updated_at = now()
	WHERE status = 'processing' AND worker_id IN (SELECT id FROM silent)
	RETURNING 1
)
SELECT (SELECT count(*) FROM silent), (SELECT count(*) FROM j)`, olderThan.Seconds(), strings.ToLower(except)).Scan(&workers, &jobs)
	if err != nil {
		return 0, 0, b.wrap(err, "recover workers silent for %s", olderThan)
	}
	return workers, jobs, nil
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
