package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// heldRow is one row of a ReturnJobs batch as the statement reads it
// through json_each.
type heldRow struct {
	ID       string `json:"id"`
	Attempts int    `json:"attempts"`
}

// ReturnJobs gives back rows the worker claimed and never started, with the
// claim's attempt refunded and scheduled_at kept, in one statement.
func (b *Backend) ReturnJobs(ctx context.Context, workerID string, held []backends.Job) ([]string, error) {
	if len(held) == 0 {
		return nil, nil
	}
	rows := make([]heldRow, 0, len(held))
	seen := make(map[string]bool, len(held))
	for _, j := range held {
		// A repeated id would join the row twice; the first wins.
		if !seen[j.ID] {
			seen[j.ID] = true
			rows = append(rows, heldRow{ID: j.ID, Attempts: j.Attempts})
		}
	}
	payload, err := marshalJSON(rows)
	if err != nil {
		return nil, fmt.Errorf("returning jobs of worker %s: %w", workerID, err)
	}
	ts := formatTime(now())
	var returned, queues []string
	err = b.inWriteTx(ctx, "returning unstarted jobs of worker "+workerID, func(tx *sql.Tx) error {
		rs, err := tx.QueryContext(ctx, `UPDATE soniq_jobs SET
				status = 'queued',
				worker_id = NULL,
				attempts = MAX(COALESCE(soniq_jobs.attempts, 0) - 1, 0),
				updated_at = ?3
			FROM json_each(?1) AS v
			WHERE soniq_jobs.id = v.value ->> 'id'
			  AND soniq_jobs.status = 'processing' AND soniq_jobs.worker_id = ?2
			  AND COALESCE(soniq_jobs.attempts, 0) = v.value ->> 'attempts'
			RETURNING soniq_jobs.id, COALESCE(soniq_jobs.queue, 'default')`, payload, workerID, ts)
		if err != nil {
			return err
		}
		defer rs.Close()
		for rs.Next() {
			var id, queue string
			if err := rs.Scan(&id, &queue); err != nil {
				return err
			}
			returned, queues = append(returned, id), append(queues, queue)
		}
		return rs.Err()
	})
	if err != nil {
		return nil, err
	}
	// Only after the commit: a woken worker must find the rows queued.
	woken := make(map[string]bool, 1)
	for _, q := range queues {
		if !woken[q] {
			woken[q] = true
			b.notify(q)
		}
	}
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	return inInputOrder(ids, returned), nil
}
