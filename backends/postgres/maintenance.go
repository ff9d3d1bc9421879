package postgres

import (
	"context"
	"strings"
	"time"

	"github.com/soniq-dev/soniq-sidecar/backends"
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

// PruneLimitClaims deletes the claim log's rows older than their scope's
// horizon (see backends.Limits), p.Batch rows a statement. The claims
// drop the rows of the keys they take as they go; this drops those of the
// keys that stopped getting jobs, which nothing else would.
func (b *Backend) PruneLimitClaims(ctx context.Context, p backends.ClaimLogPrune) (int, error) {
	scopes := make([]string, 0, len(p.Horizons))
	secs := make([]float64, 0, len(p.Horizons))
	for s := range p.Horizons {
		scopes, secs = append(scopes, s), append(secs, p.Horizon(s).Seconds())
	}
	batch := max(p.Batch, 1)
	total := 0
	for total < p.Max {
		n := min(batch, p.Max-total)
		// By ctid: the log has no key of its own. A claim's own pruning
		// may delete some of the same rows meanwhile; a row already
		// deleted is skipped.
		tag, err := b.pool.Exec(ctx, `DELETE FROM soniq_sidecar_limit_claims WHERE ctid = ANY(ARRAY(
	SELECT c.ctid FROM soniq_sidecar_limit_claims c
	LEFT JOIN unnest($1::text[], $2::float8[]) AS h(scope, secs) ON h.scope = c.scope
	WHERE c.claimed_at < statement_timestamp() - make_interval(secs => COALESCE(h.secs, $3::float8))
	LIMIT $4))`, scopes, secs, p.Floor.Seconds(), n)
		if err != nil {
			return total, b.wrap(err, "delete the claim log's rows past every rate window")
		}
		total += int(tag.RowsAffected())
		if int(tag.RowsAffected()) < n {
			break
		}
	}
	return total, nil
}
