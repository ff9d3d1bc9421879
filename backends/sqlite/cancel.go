package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// cancelTable is the sidecar's own table of cancel requests (schemaDDL).
const cancelTable = "soniq_sidecar_cancel_requests"

// noCancelTable turns SQLite's "no such table" for the cancel table into
// backends.ErrNoCancelTable, keeping the original error.
func noCancelTable(err error) error {
	if err != nil && strings.Contains(err.Error(), "no such table: "+cancelTable) {
		return fmt.Errorf("%w (%w)", backends.ErrNoCancelTable, err)
	}
	return err
}

// RequestCancel cancels a queued job, or records a cancel request for a
// running one and wakes this process's subscribers, in one IMMEDIATE
// transaction (see backends.Backend.RequestCancel). Other processes'
// holders find the request at their next poll: SQLite has no
// cross-process notification.
func (b *Backend) RequestCancel(ctx context.Context, id string) (backends.CancelResult, error) {
	res := backends.CancelResult{Outcome: backends.CancelFinished}
	err := b.inWriteTx(ctx, "cancelling job "+id, func(tx *sql.Tx) error {
		job, err := scanJob(tx.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM soniq_jobs WHERE id = ?`, id))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("job %s: %w", id, backends.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("reading its row: %w", err)
		}
		ts := formatTime(now())
		switch job.Status {
		case backends.StatusQueued:
			// Soniq's cancel_job.
			job, err = scanJob(tx.QueryRowContext(ctx, `UPDATE soniq_jobs SET status = 'cancelled', updated_at = ?
				WHERE id = ? RETURNING `+jobColumns, ts, id))
			if err != nil {
				return fmt.Errorf("cancelling the queued row: %w", err)
			}
			res.Outcome = backends.CancelledQueued
		case backends.StatusProcessing:
			if _, err := tx.ExecContext(ctx, `INSERT INTO `+cancelTable+` (job_id, worker_id, status, requested_at)
				VALUES (?1, ?2, 'pending', ?3)
				ON CONFLICT (job_id) DO UPDATE SET worker_id = excluded.worker_id, status = 'pending',
					handler = NULL, detail = NULL, requested_at = excluded.requested_at, resolved_at = NULL`,
				id, job.WorkerID, ts); err != nil {
				return fmt.Errorf("recording a cancel request for the running job: %w", noCancelTable(err))
			}
			res.Outcome = backends.CancelRequested
		}
		res.Job = job
		return nil
	})
	if err != nil {
		return backends.CancelResult{}, err
	}
	if res.Outcome == backends.CancelRequested {
		b.wake(backends.Wakeup{CancelJobID: res.Job.ID})
	}
	return res, nil
}

// PendingCancels returns the jobs processing under workerID with a pending
// cancel request.
func (b *Backend) PendingCancels(ctx context.Context, workerID string) ([]string, error) {
	rows, err := b.read.QueryContext(ctx, `SELECT r.job_id FROM `+cancelTable+` r
		JOIN soniq_jobs j ON j.id = r.job_id
		WHERE r.status = 'pending' AND j.status = 'processing' AND j.worker_id = ?`, workerID)
	if err != nil {
		return nil, fmt.Errorf("reading the cancel requests for worker %s: %w", workerID, noCancelTable(err))
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("reading the cancel requests for worker %s: %w", workerID, err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading the cancel requests for worker %s: %w", workerID, err)
	}
	return ids, nil
}

// RefuseCancel answers a pending request for a job processing under
// workerID with refused.
func (b *Backend) RefuseCancel(ctx context.Context, workerID, jobID, handler, detail string) (bool, error) {
	var n int64
	err := b.inWriteTx(ctx, "refusing the cancel request for job "+jobID, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE `+cancelTable+`
			SET status = 'refused', handler = ?3, detail = ?4, resolved_at = ?5
			WHERE job_id = ?2 AND status = 'pending'
			  AND EXISTS (SELECT 1 FROM soniq_jobs j WHERE j.id = ?2 AND j.status = 'processing' AND j.worker_id = ?1)`,
			workerID, jobID, handler, detail, formatTime(now()))
		if err != nil {
			return noCancelTable(err)
		}
		n, err = res.RowsAffected()
		return err
	})
	return n == 1, err
}

// GetCancelRequest returns a job's cancel request.
func (b *Backend) GetCancelRequest(ctx context.Context, jobID string) (backends.CancelRequest, error) {
	var (
		r            backends.CancelRequest
		worker, h, d sql.NullString
		requested    string
		resolved     sql.NullString
	)
	err := b.read.QueryRowContext(ctx, `SELECT job_id, worker_id, status, handler, detail, requested_at, resolved_at
		FROM `+cancelTable+` WHERE job_id = ?`, jobID).Scan(&r.JobID, &worker, &r.Status, &h, &d, &requested, &resolved)
	if errors.Is(err, sql.ErrNoRows) {
		return backends.CancelRequest{}, fmt.Errorf("cancel request for job %s: %w", jobID, backends.ErrNotFound)
	}
	if err != nil {
		return backends.CancelRequest{}, fmt.Errorf("reading the cancel request for job %s: %w", jobID, noCancelTable(err))
	}
	r.WorkerID, r.Handler, r.Detail = nullString(worker), nullString(h), nullString(d)
	if r.RequestedAt, err = parseTime(requested); err != nil {
		return backends.CancelRequest{}, fmt.Errorf("reading the cancel request for job %s: requested_at: %w", jobID, err)
	}
	if r.ResolvedAt, err = parseNullTime(resolved, "resolved_at"); err != nil {
		return backends.CancelRequest{}, fmt.Errorf("reading the cancel request for job %s: %w", jobID, err)
	}
	return r, nil
}

// cancelBatch writes the guarded rows cancelled and acknowledges their
// pending requests, inside the caller's transaction.
func (b *Backend) cancelBatch(ctx context.Context, tx *sql.Tx, workerID, ts string, rows []completionRow, applied *[]string) error {
	payload, err := json.Marshal(rows)
	if err != nil {
		return fmt.Errorf("cancelling jobs: encoding batch: %w", err)
	}
	done, err := queryIDs(ctx, tx, `UPDATE soniq_jobs SET status = 'cancelled', updated_at = ?3
		FROM json_each(?1) AS v
		WHERE soniq_jobs.id = v.value ->> 'id'
		  AND soniq_jobs.status = 'processing' AND soniq_jobs.worker_id = ?2
		  AND soniq_jobs.attempts = v.value ->> 'attempts'
		RETURNING soniq_jobs.id`, string(payload), workerID, ts)
	if err != nil {
		return fmt.Errorf("cancelling jobs: %w", err)
	}
	if len(done) == 0 {
		return nil
	}
	donePayload, err := json.Marshal(done)
	if err != nil {
		return fmt.Errorf("cancelling jobs: encoding batch: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE `+cancelTable+` SET status = 'acknowledged', resolved_at = ?2
		WHERE job_id IN (SELECT value FROM json_each(?1)) AND status = 'pending'`, string(donePayload), ts); err != nil {
		return fmt.Errorf("acknowledging cancel requests: %w", noCancelTable(err))
	}
	*applied = append(*applied, done...)
	return nil
}

// deleteSettledCancels is DeleteExpired's part for the cancel requests. A
// file Soniq set up alone has no such table: nothing to delete.
func deleteSettledCancels(ctx context.Context, tx *sql.Tx) error {
	before := formatTime(now().Add(-backends.CancelRequestTTL))
	_, err := tx.ExecContext(ctx, `DELETE FROM `+cancelTable+`
		WHERE COALESCE(resolved_at, requested_at) < ?
		  AND (status <> 'pending'
		       OR NOT EXISTS (SELECT 1 FROM soniq_jobs j WHERE j.id = job_id AND j.status IN ('queued', 'processing')))`, before)
	if err != nil && errors.Is(noCancelTable(err), backends.ErrNoCancelTable) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("deleting settled cancel requests: %w", err)
	}
	return nil
}
