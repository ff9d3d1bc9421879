package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// RegisterWorker upserts the worker row. Soniq's SQLite soniq_workers has
// no unique (hostname, pid) index and no version column, so the (hostname,
// pid) conflict is resolved by deleting the old row in the same transaction
// (the new id wins), and Worker.Version is not stored.
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
		if _, err := tx.ExecContext(ctx, `DELETE FROM soniq_workers
			WHERE hostname = ? AND pid = ? AND id <> ?`, w.Hostname, w.PID, w.ID); err != nil {
			return fmt.Errorf("removing the previous row for %s/%d: %w", w.Hostname, w.PID, err)
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

// Heartbeat sets last_heartbeat to now; ErrNotFound if the row is gone.
func (b *Backend) Heartbeat(ctx context.Context, workerID string) error {
	return b.updateWorker(ctx, "recording heartbeat of worker "+workerID,
		`UPDATE soniq_workers SET last_heartbeat = ? WHERE id = ?`, formatTime(now()), workerID)
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
