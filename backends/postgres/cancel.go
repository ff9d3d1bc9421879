package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// cancelTable is the sidecar's own table of cancel requests
// (schema/9000_sidecar_cancel_requests.sql).
const cancelTable = "soniq_sidecar_cancel_requests"

// RequestCancel cancels a queued job, or records a cancel request for a
// running one and notifies its holder, in one transaction (see
// backends.Backend.RequestCancel). The job's row is locked first, so the
// holder's terminal write waits for the request rather than racing it; the
// notification is delivered when the transaction commits.
func (b *Backend) RequestCancel(ctx context.Context, id string) (backends.CancelResult, error) {
	if !isUUID(id) {
		return backends.CancelResult{}, notFound("job", id)
	}
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		return backends.CancelResult{}, b.wrap(err, "cancel job %s: begin", id)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	job, err := scanJob(tx.QueryRow(ctx, `SELECT `+jobColumns("")+` FROM soniq_jobs WHERE id = $1 FOR UPDATE`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return backends.CancelResult{}, notFound("job", id)
	}
	if err != nil {
		return backends.CancelResult{}, b.wrap(err, "cancel job %s: read its row", id)
	}
	res := backends.CancelResult{Outcome: backends.CancelFinished}
	switch job.Status {
	case backends.StatusQueued:
		// Soniq's cancel_job.
		job, err = scanJob(tx.QueryRow(ctx, `UPDATE soniq_jobs SET status = 'cancelled', updated_at = now()
	WHERE id = $1 RETURNING `+jobColumns(""), id))
		if err != nil {
			return backends.CancelResult{}, b.wrap(err, "cancel queued job %s", id)
		}
		res.Outcome = backends.CancelledQueued
	case backends.StatusProcessing:
		_, err = tx.Exec(ctx, `INSERT INTO `+cancelTable+` (job_id, worker_id, status, requested_at)
	VALUES ($1, $2::uuid, 'pending', now())
	ON CONFLICT (job_id) DO UPDATE SET worker_id = EXCLUDED.worker_id, status = 'pending',
		handler = NULL, detail = NULL, requested_at = now(), resolved_at = NULL`, id, job.WorkerID)
		if err != nil {
			return backends.CancelResult{}, b.wrap(err, "record a cancel request for running job %s", id)
		}
		if _, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, cancelChannel, job.ID); err != nil {
			return backends.CancelResult{}, b.wrap(err, "notify the holder of job %s", id)
		}
		res.Outcome = backends.CancelRequested
	}
	if err := tx.Commit(ctx); err != nil {
		return backends.CancelResult{}, b.wrap(err, "cancel job %s: commit", id)
	}
	res.Job = job
	return res, nil
}

// PendingCancels returns the jobs processing under workerID with a pending
// cancel request.
func (b *Backend) PendingCancels(ctx context.Context, workerID string) ([]string, error) {
	if !isUUID(workerID) {
		return nil, nil
	}
	rows, err := b.pool.Query(ctx, `SELECT r.job_id::text FROM `+cancelTable+` r
	JOIN soniq_jobs j ON j.id = r.job_id
	WHERE r.status = 'pending' AND j.status = 'processing' AND j.worker_id = $1::uuid`, workerID)
	if err != nil {
		return nil, b.wrap(err, "read the cancel requests for worker %s", workerID)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, b.wrap(err, "read the cancel requests for worker %s", workerID)
	}
	return ids, nil
}

// RefuseCancel answers a pending request for a job processing under
// workerID with refused.
func (b *Backend) RefuseCancel(ctx context.Context, workerID, jobID, handler, detail string) (bool, error) {
	if !isUUID(workerID) || !isUUID(jobID) {
		return false, nil
	}
	tag, err := b.pool.Exec(ctx, `UPDATE `+cancelTable+` r
	SET status = 'refused', handler = $3, detail = $4, resolved_at = now()
	WHERE r.job_id = $2 AND r.status = 'pending'
	  AND EXISTS (SELECT 1 FROM soniq_jobs j WHERE j.id = r.job_id AND j.status = 'processing' AND j.worker_id = $1::uuid)`,
		workerID, jobID, handler, detail)
	if err != nil {
		return false, b.wrap(err, "refuse the cancel request for job %s", jobID)
	}
	return tag.RowsAffected() == 1, nil
}

// GetCancelRequest returns a job's cancel request.
func (b *Backend) GetCancelRequest(ctx context.Context, jobID string) (backends.CancelRequest, error) {
	if !isUUID(jobID) {
		return backends.CancelRequest{}, notFound("cancel request for job", jobID)
	}
	var r backends.CancelRequest
	err := b.pool.QueryRow(ctx, `SELECT job_id::text, worker_id::text, status, handler, detail, requested_at, resolved_at
	FROM `+cancelTable+` WHERE job_id = $1`, jobID).
		Scan(&r.JobID, &r.WorkerID, &r.Status, &r.Handler, &r.Detail, &r.RequestedAt, &r.ResolvedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return backends.CancelRequest{}, notFound("cancel request for job", jobID)
	}
	if err != nil {
		return backends.CancelRequest{}, b.wrap(err, "read the cancel request for job %s", jobID)
	}
	return r, nil
}

// deleteSettledCancels is DeleteExpired's part for the cancel requests.
// A database Soniq set up alone has no such table: nothing to delete.
func (b *Backend) deleteSettledCancels(ctx context.Context) error {
	_, err := b.pool.Exec(ctx, `DELETE FROM `+cancelTable+` r
	WHERE COALESCE(r.resolved_at, r.requested_at) < now() - make_interval(secs => $1::float8)
	  AND (r.status <> 'pending'
	       OR NOT EXISTS (SELECT 1 FROM soniq_jobs j WHERE j.id = r.job_id AND j.status IN ('queued', 'processing')))`,
		backends.CancelRequestTTL.Seconds())
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42P01" {
		return nil
	}
	if err != nil {
		return b.wrap(err, "delete settled cancel requests")
	}
	return nil
}

// cancelStatement writes rows cancelled (backends.OutcomeCancelled) and
// acknowledges their pending requests in the same statement, so a request
// is acknowledged exactly when its row was cancelled by its holder.
const cancelStatement = `WITH c AS (
	UPDATE soniq_jobs j SET status = 'cancelled', updated_at = now()
	FROM unnest($1::uuid[], $3::int4[]) AS u(id, attempts)
	WHERE j.id = ANY($1::uuid[]) AND j.id = u.id AND (j.status = 'processing' AND j.worker_id = $2::uuid AND j.attempts = u.attempts) IS TRUE
	RETURNING j.id
), a AS (
	UPDATE ` + cancelTable + ` r SET status = 'acknowledged', resolved_at = now()
	FROM c WHERE r.job_id = c.id AND r.status = 'pending'
)
SELECT id FROM c`
