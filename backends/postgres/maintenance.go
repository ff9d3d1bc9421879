package postgres

import (
	"context"
	"strings"
	"time"
)

// DeleteExpired deletes done rows whose expires_at has passed, then the
// settled cancel requests.
func (b *Backend) DeleteExpired(ctx context.Context) (int, error) {
	tag, err := b.pool.Exec(ctx, `DELETE FROM soniq_jobs WHERE status = 'done' AND expires_at < now()`)
	if err != nil {
		return 0, b.wrap(err, "delete expired jobs")
	}
	if err := b.deleteSettledCancels(ctx); err != nil {
		return int(tag.RowsAffected()), err
	}
	return int(tag.RowsAffected()), nil
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
