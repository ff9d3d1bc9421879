package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// ProcessingJobs returns the rows processing under workerID.
func (b *Backend) ProcessingJobs(ctx context.Context, workerID string) ([]backends.Job, error) {
	rows, err := b.read.QueryContext(ctx, `SELECT `+jobColumns+` FROM soniq_jobs
		WHERE worker_id = ? AND status = 'processing'`, workerID)
	if err != nil {
		return nil, fmt.Errorf("listing processing jobs of worker %s: %w", workerID, err)
	}
	defer rows.Close()
	var jobs []backends.Job
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, fmt.Errorf("listing processing jobs of worker %s: %w", workerID, err)
		}
		jobs = append(jobs, j)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing processing jobs of worker %s: %w", workerID, err)
	}
	return jobs, nil
}

// ReleaseJobs gives back the rows of held still processing under workerID
// at the attempt held says.
func (b *Backend) ReleaseJobs(ctx context.Context, workerID string, held []backends.Job) ([]string, error) {
	if len(held) == 0 {
		return nil, nil
	}
	ts := formatTime(now())
	var released []string
	err := b.inWriteTx(ctx, "releasing jobs of worker "+workerID, func(tx *sql.Tx) error {
		released = released[:0]
		for _, j := range held {
			res, err := tx.ExecContext(ctx, `UPDATE soniq_jobs
				SET status = 'queued', worker_id = NULL, updated_at = ?, scheduled_at = ?
				WHERE id = ? AND attempts = ? AND status = 'processing' AND worker_id = ?`,
				ts, ts, j.ID, j.Attempts, workerID)
			if err != nil {
				return fmt.Errorf("job %s: %w", j.ID, err)
			}
			if n, err := res.RowsAffected(); err != nil {
				return fmt.Errorf("job %s: %w", j.ID, err)
			} else if n == 1 {
				released = append(released, j.ID)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return released, nil
}
