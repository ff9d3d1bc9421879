package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// ProcessingJobs returns the rows processing under workerID.
func (b *Backend) ProcessingJobs(ctx context.Context, workerID string) ([]backends.Job, error) {
	if !isUUID(workerID) {
		return nil, fmt.Errorf("list processing jobs: worker id %q is not a uuid", workerID)
	}
	rows, err := b.pool.Query(ctx, `SELECT `+jobColumns("")+` FROM soniq_jobs
	WHERE worker_id = $1::uuid AND status = 'processing'`, workerID)
	if err != nil {
		return nil, b.wrap(err, "list processing jobs of worker %s", workerID)
	}
	sc := newJobScanner()
	jobs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (backends.Job, error) { return sc.scan(r) })
	if err != nil {
		return nil, b.wrap(err, "list processing jobs of worker %s", workerID)
	}
	return jobs, nil
}

// ReleaseJobs gives back the rows of held still processing under workerID
// at the attempt held says.
func (b *Backend) ReleaseJobs(ctx context.Context, workerID string, held []backends.Job) ([]string, error) {
	if !isUUID(workerID) {
		return nil, fmt.Errorf("release jobs: worker id %q is not a uuid", workerID)
	}
	ids := make([]string, 0, len(held))
	attempts := make([]int32, 0, len(held))
	for _, j := range held {
		if isUUID(j.ID) {
			ids = append(ids, j.ID)
			attempts = append(attempts, int32(j.Attempts))
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := b.pool.Query(ctx, `UPDATE soniq_jobs j
	SET status = 'queued', worker_id = NULL, updated_at = now(), scheduled_at = now()
	FROM unnest($2::uuid[], $3::int[]) AS h(id, attempts)
	WHERE j.id = ANY($2::uuid[]) AND j.id = h.id AND j.attempts = h.attempts AND j.status = 'processing' AND j.worker_id = $1::uuid
	RETURNING j.id::text`, workerID, ids, attempts)
	if err != nil {
		return nil, b.wrap(err, "release %d jobs of worker %s", len(ids), workerID)
	}
	released, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, b.wrap(err, "release %d jobs of worker %s", len(ids), workerID)
	}
	return released, nil
}
