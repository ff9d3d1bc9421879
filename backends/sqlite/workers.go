package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// RegisterWorker upserts the worker row. Soniq's SQLite soniq_workers has
// no unique (hostname, pid) index and no version column, so a predecessor's
// row is deleted in the same transaction (the new id wins), another
// program's row with the same (hostname, pid) is refused as on Postgres, and
// Worker.Version is not stored.
func (b *Backend) RegisterWorker(ctx context.Context, w backends.Worker) error {
	if w.ID == "" {
		return errors.New("registering worker: empty worker id")
	}
	queues := w.Queues
	if queues == nil {
		queues = []string{}
	}
	queuesJSON, err := json.Marshal(queues)
	if err != nil {
		return fmt.Errorf("registering worker %s: encoding queues: %w", w.ID, err)
	}
	var metadata any
	if len(w.Metadata) > 0 {
		if !json.Valid(w.Metadata) {
			return fmt.Errorf("registering worker %s: metadata is not valid JSON", w.ID)
		}
		metadata = string(w.Metadata)
	}
	concurrency := w.Concurrency
	if concurrency <= 0 {
		concurrency = 1
	}
	t := now()
	started := t
	if !w.StartedAt.IsZero() {
		started = w.StartedAt
	}
	return b.inWriteTx(ctx, "registering worker "+w.ID, func(tx *sql.Tx) error {
		// Only our own predecessor's row is taken over (see the Postgres
		// backend); its processing rows go back to the queue first.
		rows, err := tx.QueryContext(ctx, `SELECT id, COALESCE(metadata, '') FROM soniq_workers
			WHERE hostname = ? AND pid = ? AND id <> ?`, w.Hostname, w.PID, w.ID)
		if err != nil {
			return fmt.Errorf("reading the rows of %s pid %d: %w", w.Hostname, w.PID, err)
		}
		var predecessors []string
		for rows.Next() {
			var id, meta string
			if err := rows.Scan(&id, &meta); err != nil {
				_ = rows.Close()
				return fmt.Errorf("reading the rows of %s pid %d: %w", w.Hostname, w.PID, err)
			}
			if !backends.IsPredecessor([]byte(meta), w.Metadata) {
				_ = rows.Close()
				return fmt.Errorf("%s pid %d is held by worker %s (metadata %s): %w", w.Hostname, w.PID, id, meta, backends.ErrIdentityTaken)
			}
			predecessors = append(predecessors, id)
		}
		if err := rows.Close(); err != nil {
			return fmt.Errorf("reading the rows of %s pid %d: %w", w.Hostname, w.PID, err)
		}
		for _, id := range predecessors {
			if _, err := tx.ExecContext(ctx, `UPDATE soniq_jobs
				SET status = CASE WHEN status = 'processing' THEN 'queued' ELSE status END, worker_id = NULL, updated_at = ?
				WHERE worker_id = ?`, formatTime(t), id); err != nil {
				return fmt.Errorf("releasing the jobs of predecessor %s: %w", id, err)
			}
			if _, err := tx.ExecContext(ctx, `DELETE FROM soniq_workers WHERE id = ?`, id); err != nil {
				return fmt.Errorf("removing predecessor %s: %w", id, err)
			}
		}
		if _, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO soniq_workers
			(id, hostname, pid, queues, concurrency, status, last_heartbeat, started_at, metadata)
			VALUES (?, ?, ?, ?, ?, 'active', ?, ?, ?)`,
			w.ID, w.Hostname, w.PID, string(queuesJSON), concurrency,
			formatTime(t), formatTime(started), metadata); err != nil {
			return fmt.Errorf("writing the row: %w", err)
		}
		return nil
	})
}

// Heartbeat sets last_heartbeat to now; ErrNotFound if the row is gone,
// ErrWorkerNotActive if it is no longer active.
func (b *Backend) Heartbeat(ctx context.Context, workerID string) error {
	what := "recording heartbeat of worker " + workerID
	var status sql.NullString
	err := b.inWriteTx(ctx, what, func(tx *sql.Tx) error {
		err := tx.QueryRowContext(ctx, `UPDATE soniq_workers SET last_heartbeat = ? WHERE id = ? RETURNING status`,
			formatTime(now()), workerID).Scan(&status)
		if errors.Is(err, sql.ErrNoRows) {
			return backends.ErrNotFound
		}
		return err
	})
	if err != nil {
		return err
	}
	if status.String != backends.WorkerActive {
		return fmt.Errorf("%s: its status is %q: %w", what, status.String, backends.ErrWorkerNotActive)
	}
	return nil
}

// SetWorkerStatus sets a worker's status. Like Soniq's mark_worker_stopped,
// stopping also stamps last_heartbeat.
func (b *Backend) SetWorkerStatus(ctx context.Context, workerID, status string) error {
	what := fmt.Sprintf("setting worker %s status to %q", workerID, status)
	switch status {
	case backends.WorkerActive, backends.WorkerStopping:
		return b.updateWorker(ctx, what, `UPDATE soniq_workers SET status = ? WHERE id = ?`, status, workerID)
	case backends.WorkerStopped:
		return b.updateWorker(ctx, what, `UPDATE soniq_workers SET status = ?, last_heartbeat = ? WHERE id = ?`,
			status, formatTime(now()), workerID)
	}
	return fmt.Errorf("%s: unknown status", what)
}

func (b *Backend) updateWorker(ctx context.Context, what, query string, args ...any) error {
	return b.inWriteTx(ctx, what, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, query, args...)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		if n == 0 {
			return backends.ErrNotFound
		}
		return nil
	})
}

// RegisterTasks upserts (task_name, worker_id, last_seen_at) rows. Soniq's
// SQLite backend keeps no task registry; Migrate creates the table with
// the Postgres schema's columns so the information is not lost.
func (b *Backend) RegisterTasks(ctx context.Context, workerID string, names []string) error {
	if len(names) == 0 {
		return nil
	}
	namesJSON, err := json.Marshal(names)
	if err != nil {
		return fmt.Errorf("registering tasks of worker %s: encoding names: %w", workerID, err)
	}
	return b.inWriteTx(ctx, "registering tasks of worker "+workerID, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO soniq_task_registry (task_name, worker_id, last_seen_at)
			SELECT DISTINCT value, ?1, ?2 FROM json_each(?3) WHERE true
			ON CONFLICT (task_name, worker_id) DO UPDATE SET last_seen_at = excluded.last_seen_at`,
			workerID, formatTime(now()), string(namesJSON))
		return err
	})
}

// LiveWorkers returns the active workers heard from within the last within.
func (b *Backend) LiveWorkers(ctx context.Context, within time.Duration) ([]backends.Worker, error) {
	rows, err := b.read.QueryContext(ctx, `SELECT id, hostname, pid, COALESCE(queues, '[]'), COALESCE(concurrency, 1), status,
		last_heartbeat, COALESCE(started_at, last_heartbeat), metadata
		FROM soniq_workers WHERE status = 'active' AND last_heartbeat >= ? ORDER BY id`, formatTime(now().Add(-within)))
	if err != nil {
		return nil, fmt.Errorf("listing workers heard from within %s: %w", within, err)
	}
	defer func() { _ = rows.Close() }()
	var out []backends.Worker
	for rows.Next() {
		var w backends.Worker
		var queues, heartbeat, started string
		var meta sql.NullString
		if err := rows.Scan(&w.ID, &w.Hostname, &w.PID, &queues, &w.Concurrency, &w.Status, &heartbeat, &started, &meta); err != nil {
			return nil, fmt.Errorf("listing workers: reading a row: %w", err)
		}
		if err := json.Unmarshal([]byte(queues), &w.Queues); err != nil {
			return nil, fmt.Errorf("listing workers: worker %s: queues %q are not a JSON list: %w", w.ID, queues, err)
		}
		if w.LastHeartbeat, err = parseTime(heartbeat); err != nil {
			return nil, fmt.Errorf("listing workers: worker %s: last_heartbeat: %w", w.ID, err)
		}
		if w.StartedAt, err = parseTime(started); err != nil {
			return nil, fmt.Errorf("listing workers: worker %s: started_at: %w", w.ID, err)
		}
		if meta.Valid {
			w.Metadata = []byte(meta.String)
		}
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing workers heard from within %s: %w", within, err)
	}
	return out, nil
}
