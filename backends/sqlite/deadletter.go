package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

const deadLetterColumns = `id, job_name, args, queue, priority, max_attempts, attempts, last_error,
	dead_letter_reason, original_created_at, moved_to_dead_letter_at, resurrection_count,
	last_resurrection_at, tags, created_at`

func scanDeadLetter(r rowScanner) (backends.DeadLetterJob, error) {
	var (
		d                                  backends.DeadLetterJob
		args                               string
		lastErr, tags                      sql.NullString
		origCreated, moved, lastRes, creat sql.NullString
		resurrections                      sql.NullInt64
	)
	if err := r.Scan(&d.ID, &d.Name, &args, &d.Queue, &d.Priority, &d.MaxAttempts, &d.Attempts,
		&lastErr, &d.Reason, &origCreated, &moved, &resurrections, &lastRes, &tags, &creat); err != nil {
		return backends.DeadLetterJob{}, err
	}
	d.Args = json.RawMessage(args)
	d.LastError = nullString(lastErr)
	d.ResurrectionCount = int(resurrections.Int64)
	if tags.Valid {
		d.Tags = json.RawMessage(tags.String)
	}
	for _, f := range []struct {
		src    sql.NullString
		dst    *time.Time
		column string
	}{
		{origCreated, &d.OriginalCreatedAt, "original_created_at"},
		{moved, &d.MovedAt, "moved_to_dead_letter_at"},
		{creat, &d.CreatedAt, "created_at"},
	} {
		t, err := parseNullTime(f.src, f.column)
		if err != nil {
			return backends.DeadLetterJob{}, err
		}
		if t != nil {
			*f.dst = *t
		}
	}
	var err error
	if d.LastResurrectionAt, err = parseNullTime(lastRes, "last_resurrection_at"); err != nil {
		return backends.DeadLetterJob{}, err
	}
	return d, nil
}

// ListDeadLetter returns dead-letter rows, newest move first.
func (b *Backend) ListDeadLetter(ctx context.Context, limit int) ([]backends.DeadLetterJob, error) {
	if limit < 0 {
		return nil, fmt.Errorf("listing dead-letter jobs: negative limit %d", limit)
	}
	query := `SELECT ` + deadLetterColumns + ` FROM soniq_dead_letter_jobs
		ORDER BY moved_to_dead_letter_at DESC, rowid DESC`
	var args []any
	if limit > 0 {
		query += ` LIMIT ?`
		args = append(args, limit)
	}
	rows, err := b.read.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("listing dead-letter jobs: %w", err)
	}
	defer rows.Close()
	var out []backends.DeadLetterJob
	for rows.Next() {
		d, err := scanDeadLetter(rows)
		if err != nil {
			return nil, fmt.Errorf("listing dead-letter jobs: reading row: %w", err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing dead-letter jobs: %w", err)
	}
	return out, nil
}

// ReplayDeadLetter mirrors Soniq's DeadLetterService.replay with its
// defaults: a new queued row (fresh id, attempts 0, scheduled_at now, same
// name, args, queue, priority and max_attempts) and, in the same
// transaction, resurrection_count+1 and last_resurrection_at on the
// dead-letter row, which stays as the audit trail.
func (b *Backend) ReplayDeadLetter(ctx context.Context, id string) (string, error) {
	newID := backends.NewID()
	ts := formatTime(now())
	var queue string
	err := b.inWriteTx(ctx, "replaying dead-letter job "+id, func(tx *sql.Tx) error {
		err := tx.QueryRowContext(ctx, `INSERT INTO soniq_jobs
				(id, job_name, args, status, attempts, max_attempts, priority, queue,
				 unique_job, scheduled_at, created_at, updated_at)
			SELECT ?1, job_name, args, 'queued', 0, max_attempts, priority, queue, 0, ?2, ?2, ?2
			FROM soniq_dead_letter_jobs WHERE id = ?3
			RETURNING queue`, newID, ts, id).Scan(&queue)
		if errors.Is(err, sql.ErrNoRows) {
			return backends.ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("inserting job: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE soniq_dead_letter_jobs
			SET resurrection_count = COALESCE(resurrection_count, 0) + 1, last_resurrection_at = ?
			WHERE id = ?`, ts, id); err != nil {
			return fmt.Errorf("counting the resurrection: %w", err)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	b.notify(queue)
	return newID, nil
}

// PurgeDeadLetter deletes one dead-letter row.
func (b *Backend) PurgeDeadLetter(ctx context.Context, id string) error {
	return b.inWriteTx(ctx, "purging dead-letter job "+id, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM soniq_dead_letter_jobs WHERE id = ?`, id)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		if n == 0 {
			return backends.ErrNotFound
		}
		return nil
	})
}
