package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// Stats is the queue-stats contract: one grouped count over soniq_jobs and the dead-letter
// count, read in one statement so they share a snapshot.
func (b *Backend) Stats(ctx context.Context) (backends.Stats, error) {
	rows, err := b.pool.Query(ctx, `SELECT status, count(*) FROM soniq_jobs GROUP BY status
	UNION ALL
	SELECT 'dead_letter', count(*) FROM soniq_dead_letter_jobs`)
	if err != nil {
		return backends.Stats{}, b.wrap(err, "read queue stats")
	}
	var s backends.Stats
	var status string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&status, &n}, func() error {
		// soniq_jobs cannot hold 'dead_letter' (CHECK), so that row is
		// always the dead-letter table's count.
		s.Count(status, n)
		return nil
	})
	if err != nil {
		return backends.Stats{}, b.wrap(err, "read queue stats")
	}
	return s, nil
}
