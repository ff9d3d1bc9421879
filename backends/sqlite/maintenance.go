package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"
)

// RecoverStaleWorkers stops every worker silent for longer than olderThan,
// whatever its status, and requeues its processing rows, in one
// transaction. A NULL last_heartbeat is never stale, as in Soniq's
// cleanup_stale_workers.
func (b *Backend) RecoverStaleWorkers(ctx context.Context, olderThan time.Duration, except string) (int, int, error) {
	t := now()
	threshold := formatTime(t.Add(-olderThan))
	var workers, jobs int
	err := b.inWriteTx(ctx, "recovering stale workers", func(tx *sql.Tx) error {
		silent, err := queryIDs(ctx, tx, `SELECT w.id FROM soniq_workers w
			WHERE w.last_heartbeat < ? AND w.id <> ?
			  AND (w.status <> 'stopped'
			       OR EXISTS (SELECT 1 FROM soniq_jobs j WHERE j.worker_id = w.id AND j.status = 'processing'))`, threshold, except)
		if err != nil {
			return fmt.Errorf("finding silent workers: %w", err)
		}
		workers = len(silent)
		if workers == 0 {
			return nil
		}
		silentJSON, err := json.Marshal(silent)
		if err != nil {
			return fmt.Errorf("encoding silent worker ids: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE soniq_workers SET status = 'stopped'
			WHERE status <> 'stopped' AND id IN (SELECT value FROM json_each(?))`, string(silentJSON)); err != nil {
			return fmt.Errorf("stopping silent workers: %w", err)
		}
		res, err := tx.ExecContext(ctx, `UPDATE soniq_jobs SET status = 'queued', worker_id = NULL, updated_at = ?
			WHERE status = 'processing' AND worker_id IN (SELECT value FROM json_each(?))`,
			formatTime(t), string(silentJSON))
		if err != nil {
			return fmt.Errorf("requeueing jobs of silent workers: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("requeueing jobs of silent workers: %w", err)
		}
		jobs = int(n)
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	return workers, jobs, nil
}

// DeleteExpired deletes done rows whose expires_at has passed, then the
// settled cancel requests.
func (b *Backend) DeleteExpired(ctx context.Context) (int, error) {
	var n int64
	err := b.inWriteTx(ctx, "deleting expired jobs", func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM soniq_jobs WHERE status = 'done' AND expires_at < ?`,
			formatTime(now()))
		if err != nil {
			return err
		}
		if n, err = res.RowsAffected(); err != nil {
			return err
		}
		return deleteSettledCancels(ctx, tx)
	})
	return int(n), err
}
