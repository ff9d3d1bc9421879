package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/soniq-dev/soniq-sidecar/backends"
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

// PruneLimitClaims deletes the claim log's rows older than their scope's
// horizon (see backends.Limits), p.Batch rows a write transaction, so a
// long backlog never holds the file's write lock for long. The claims
// drop the rows of the keys they take as they go; this drops those of the
// keys that stopped getting jobs, which nothing else would.
func (b *Backend) PruneLimitClaims(ctx context.Context, p backends.ClaimLogPrune) (int, error) {
	horizons := map[string]int64{}
	for s := range p.Horizons {
		horizons[s] = p.Horizon(s).Microseconds()
	}
	hj, err := json.Marshal(horizons)
	if err != nil {
		return 0, fmt.Errorf("pruning the claim log: %w", err)
	}
	batch := max(p.Batch, 1)
	total := 0
	for total < p.Max {
		n := min(batch, p.Max-total)
		var deleted int64
		err := b.inWriteTx(ctx, "pruning the claim log", func(tx *sql.Tx) error {
			res, err := tx.ExecContext(ctx, `DELETE FROM soniq_sidecar_limit_claims WHERE rowid IN (
				SELECT c.rowid FROM soniq_sidecar_limit_claims c LEFT JOIN json_each(?) h ON h.key = c.scope
				WHERE c.claimed_at < ? - COALESCE(h.value, ?) LIMIT ?)`,
				string(hj), now().UnixMicro(), p.Floor.Microseconds(), n)
			if err != nil {
				return err
			}
			deleted, err = res.RowsAffected()
			return err
		})
		if err != nil {
			return total, err
		}
		total += int(deleted)
		if int(deleted) < n {
			break
		}
	}
	return total, nil
}
