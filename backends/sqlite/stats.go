package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// Stats reads one GROUP BY over soniq_jobs and the dead-letter count in a
// single read transaction, so both come from the same snapshot.
func (b *Backend) Stats(ctx context.Context) (backends.Stats, error) {
	var s backends.Stats
	tx, err := b.read.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return s, fmt.Errorf("reading queue stats: beginning transaction: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	rows, err := tx.QueryContext(ctx, `SELECT status, COUNT(*) FROM soniq_jobs GROUP BY status`)
	if err != nil {
		return s, fmt.Errorf("reading queue stats: counting jobs: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			status string
			n      int64
		)
		if err := rows.Scan(&status, &n); err != nil {
			return s, fmt.Errorf("reading queue stats: %w", err)
		}
		s.Count(status, n)
	}
	if err := rows.Err(); err != nil {
		return s, fmt.Errorf("reading queue stats: %w", err)
	}
	var dead int64
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM soniq_dead_letter_jobs`).Scan(&dead); err != nil {
		return s, fmt.Errorf("reading queue stats: counting dead-letter jobs: %w", err)
	}
	s.Count("dead_letter", dead)
	return s, nil
}
