package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// RegisterWorker upserts the worker row by id. Soniq's SQLite soniq_workers
// has no unique (hostname, pid) index and no version column; a row with
// another id on w's (hostname, pid) is refused as on Postgres
// (ErrIdentityTaken: only TakeOver replaces one), and Worker.Version is not
// stored.
func (b *Backend) RegisterWorker(ctx context.Context, w backends.Worker) error {
	if w.ID == "" {
		return errors.New("registering worker: empty worker id")
	}
	return b.inWriteTx(ctx, "registering worker "+w.ID, func(tx *sql.Tx) error {
		return registerIn(ctx, tx, w)
	})
}

// registerIn upserts w's row by id in tx, refusing a (hostname, pid) held
// by another id.
func registerIn(ctx context.Context, tx *sql.Tx, w backends.Worker) error {
	queues := w.Queues
	if queues == nil {
		queues = []string{}
	}
	queuesJSON, err := json.Marshal(queues)
	if err != nil {
		return fmt.Errorf("encoding queues: %w", err)
	}
	var metadata any
	if len(w.Metadata) > 0 {
		if !json.Valid(w.Metadata) {
			return errors.New("metadata is not valid JSON")
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
	var holder string
	var meta sql.NullString
	err = tx.QueryRowContext(ctx, `SELECT id, metadata FROM soniq_workers WHERE hostname = ? AND pid = ? AND id <> ? LIMIT 1`,
		w.Hostname, w.PID, w.ID).Scan(&holder, &meta)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return fmt.Errorf("reading the rows of %s pid %d: %w", w.Hostname, w.PID, err)
	default:
		return fmt.Errorf("%s pid %d is held by worker %s (metadata %s): %w", w.Hostname, w.PID, holder, meta.String, backends.ErrIdentityTaken)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO soniq_workers
		(id, hostname, pid, queues, concurrency, status, last_heartbeat, started_at, metadata)
		VALUES (?, ?, ?, ?, ?, 'active', ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET hostname = excluded.hostname, pid = excluded.pid, queues = excluded.queues,
		    concurrency = excluded.concurrency, status = 'active', last_heartbeat = excluded.last_heartbeat,
		    metadata = excluded.metadata`,
		w.ID, w.Hostname, w.PID, string(queuesJSON), concurrency,
		formatTime(t), formatTime(started), metadata); err != nil {
		return fmt.Errorf("writing the row: %w", err)
	}
	return nil
}

// SameIdentity returns the other rows whose metadata names w's identity.
// The table is small (one row per worker): it is read whole and filtered
// here, which also copes with metadata that is not JSON.
func (b *Backend) SameIdentity(ctx context.Context, w backends.Worker) ([]backends.Worker, error) {
	id, ok := backends.IdentityOf(w.Metadata)
	if !ok {
		return nil, nil
	}
	what := fmt.Sprintf("listing the worker rows of %s %s on %s", id.Kind, id.Instance, id.Host)
	rows, err := b.read.QueryContext(ctx, `SELECT id, hostname, pid, COALESCE(queues, '[]'), COALESCE(concurrency, 1), COALESCE(status, ''),
		COALESCE(last_heartbeat, ''), COALESCE(started_at, last_heartbeat, ''), metadata
		FROM soniq_workers WHERE metadata IS NOT NULL AND id <> ?`, w.ID)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer func() { _ = rows.Close() }()
	t := now()
	var out []backends.Worker
	for rows.Next() {
		var r backends.Worker
		var queues, heartbeat, started string
		var meta sql.NullString
		if err := rows.Scan(&r.ID, &r.Hostname, &r.PID, &queues, &r.Concurrency, &r.Status, &heartbeat, &started, &meta); err != nil {
			return nil, fmt.Errorf("%s: reading a row: %w", what, err)
		}
		r.Metadata = []byte(meta.String)
		if !backends.IdentitiesMatch(r.Metadata, w.Metadata) {
			continue
		}
		_ = json.Unmarshal([]byte(queues), &r.Queues)
		if r.LastHeartbeat, err = parseTime(heartbeat); err != nil {
			return nil, fmt.Errorf("%s: worker %s: last_heartbeat: %w", what, r.ID, err)
		}
		if r.StartedAt, err = parseTime(started); err != nil {
			r.StartedAt = r.LastHeartbeat
		}
		r.HeartbeatAge = t.Sub(r.LastHeartbeat)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	slices.SortFunc(out, func(a, b backends.Worker) int { return b.LastHeartbeat.Compare(a.LastHeartbeat) })
	return out, nil
}

// TakeOver registers w in place of dead workers of its identity and gives
// it their processing rows, in one transaction.
func (b *Backend) TakeOver(ctx context.Context, w backends.Worker, dead []backends.Worker) ([]backends.Job, error) {
	if w.ID == "" {
		return nil, errors.New("taking over: empty worker id")
	}
	var jobs []backends.Job
	err := b.inWriteTx(ctx, fmt.Sprintf("worker %s taking over %d dead workers", w.ID, len(dead)), func(tx *sql.Tx) error {
		jobs = nil
		var held []string
		for _, d := range dead {
			if d.ID == w.ID {
				continue
			}
			var status, beat sql.NullString
			err := tx.QueryRowContext(ctx, `SELECT status, last_heartbeat FROM soniq_workers WHERE id = ?`, d.ID).Scan(&status, &beat)
			if errors.Is(err, sql.ErrNoRows) {
				continue // taken over or removed meanwhile
			}
			if err != nil {
				return fmt.Errorf("reading the row of %s: %w", d.ID, err)
			}
			at, _ := parseTime(beat.String)
			if status.String != d.Status || !at.Equal(d.LastHeartbeat) {
				return fmt.Errorf("%s was %s with a heartbeat at %s, it is now %s with a heartbeat at %s: %w",
					d.ID, d.Status, formatTime(d.LastHeartbeat), status.String, beat.String, backends.ErrWorkerAlive)
			}
			ids, err := queryIDs(ctx, tx, `SELECT id FROM soniq_jobs WHERE worker_id = ? AND status = 'processing'`, d.ID)
			if err != nil {
				return fmt.Errorf("reading the jobs of %s: %w", d.ID, err)
			}
			held = append(held, ids...)
			if _, err := tx.ExecContext(ctx, `UPDATE soniq_jobs SET worker_id = NULL WHERE worker_id = ? AND status <> 'processing'`, d.ID); err != nil {
				return fmt.Errorf("detaching the jobs of %s: %w", d.ID, err)
			}
			if _, err := tx.ExecContext(ctx, `DELETE FROM soniq_workers WHERE id = ?`, d.ID); err != nil {
				return fmt.Errorf("removing the row of %s: %w", d.ID, err)
			}
		}
		if err := registerIn(ctx, tx, w); err != nil {
			return err
		}
		if len(held) == 0 {
			return nil
		}
		idsJSON, err := json.Marshal(held)
		if err != nil {
			return fmt.Errorf("encoding job ids: %w", err)
		}
		rows, err := tx.QueryContext(ctx, `UPDATE soniq_jobs SET worker_id = ?, updated_at = ?
			WHERE id IN (SELECT value FROM json_each(?)) AND status = 'processing'
			RETURNING `+jobColumns, w.ID, formatTime(now()), string(idsJSON))
		if err != nil {
			return fmt.Errorf("taking their jobs: %w", err)
		}
		defer func() { _ = rows.Close() }()
		for rows.Next() {
			j, err := scanJob(rows)
			if err != nil {
				return fmt.Errorf("taking their jobs: %w", err)
			}
			jobs = append(jobs, j)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return jobs, nil
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
