package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// ReturnJobs gives back rows the worker claimed and never started, with the
// claim's attempt refunded and scheduled_at kept. The planner settings and
// the write go in one pipelined round trip, one implicit transaction, as
// Complete's do; nothing is kept on the session, so it is safe behind a
// transaction-mode pooler.
func (b *Backend) ReturnJobs(ctx context.Context, workerID string, held []backends.Job) ([]string, error) {
	if len(held) == 0 {
		return nil, nil
	}
	if !isUUID(workerID) {
		return nil, fmt.Errorf("return jobs: worker id %q is not a uuid", workerID)
	}
	ids := make([]pgtype.UUID, 0, len(held))
	attempts := make([]int32, 0, len(held))
	seen := make(map[pgtype.UUID]bool, len(held))
	for _, j := range held {
		// An id that cannot be a uuid matches no row; a repeated one would
		// join the row twice. The first wins.
		if !isUUID(j.ID) {
			continue
		}
		id := parseUUID(j.ID)
		if seen[id] {
			continue
		}
		seen[id] = true
		ids = append(ids, id)
		attempts = append(attempts, int32(j.Attempts))
	}
	if len(ids) == 0 {
		return nil, nil
	}
	batch := &pgx.Batch{}
	// Primary-key lookups whatever the statistics say (see Complete): the
	// guard is one IS TRUE expression, so idx_soniq_jobs_worker_id, which
	// holds every row this worker ever ran, cannot serve it.
	batch.Queue(writePlannerHints)
	returned := make(map[pgtype.UUID]bool, len(ids))
	// The notification goes out on commit, one per queue, so an idle
	// worker (this one, another sidecar, Soniq's) claims the rows at once.
	batch.Queue(returnStatement, ids, attempts, workerID, notifyChannel).Query(func(rows pgx.Rows) error {
		var id pgtype.UUID
		_, err := pgx.ForEachRow(rows, []any{&id}, func() error {
			returned[id] = true
			return nil
		})
		return err
	})
	if err := b.pool.SendBatch(ctx, batch).Close(); err != nil {
		return nil, b.wrap(err, "return %d unstarted jobs of worker %s", len(ids), workerID)
	}
	return inCallersOrder(len(held), func(i int) string { return held[i].ID }, returned), nil
}

// returnStatement gives reserved rows back to the queue and wakes the
// workers of their queues. Its rows are found and paired with its arrays as
// the guarded writes' are (doneStatement).
const returnStatement = `WITH returned AS (
	UPDATE soniq_jobs j
	SET status = 'queued', worker_id = NULL,
	    attempts = GREATEST(COALESCE(j.attempts, 0) - 1, 0),
	    updated_at = now()
	FROM unnest($1::uuid[], $2::int4[]) AS h(id, attempts)
	WHERE j.id = ANY($1::uuid[]) AND j.id = h.id
	  AND (j.status = 'processing' AND j.worker_id = $3::uuid AND COALESCE(j.attempts, 0) = h.attempts) IS TRUE
	RETURNING j.id, j.queue
), woken AS (
	SELECT count(pg_notify($4, q)) FROM (SELECT DISTINCT COALESCE(queue, 'default') AS q FROM returned) AS d
)
SELECT id FROM returned, woken`
