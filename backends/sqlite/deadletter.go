package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
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
		ORDER BY moved_to_dead_letter_at DESC, id`
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

// deadLetterWhere renders f as a WHERE clause and its arguments. Ages are
// turned into cutoffs by this process's clock, the clock every timestamp
// of this backend is written by, and compared as text: the stored form
// sorts as the time does (see formatTime).
func deadLetterWhere(f backends.DeadLetterFilter) (string, []any) {
	var (
		conds []string
		args  []any
	)
	in := func(column string, values []string) {
		marks := strings.TrimSuffix(strings.Repeat("?,", len(values)), ",")
		conds = append(conds, column+" IN ("+marks+")")
		for _, v := range values {
			args = append(args, v)
		}
	}
	if len(f.JobNames) > 0 {
		in("job_name", f.JobNames)
	}
	if len(f.Queues) > 0 {
		in("queue", f.Queues)
	}
	t := now()
	if f.Since > 0 {
		conds = append(conds, "moved_to_dead_letter_at >= ?")
		args = append(args, formatTime(t.Add(-f.Since)))
	}
	if f.OlderThan > 0 {
		conds = append(conds, "moved_to_dead_letter_at < ?")
		args = append(args, formatTime(t.Add(-f.OlderThan)))
	}
	if len(conds) == 0 {
		return "1", nil
	}
	return strings.Join(conds, " AND "), args
}

// CountDeadLetters counts the dead-letter rows f selects.
func (b *Backend) CountDeadLetters(ctx context.Context, f backends.DeadLetterFilter) (int64, error) {
	where, args := deadLetterWhere(f)
	var n int64
	if err := b.read.QueryRowContext(ctx, `SELECT count(*) FROM soniq_dead_letter_jobs WHERE `+where, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("counting dead-letter jobs: %w", err)
	}
	return n, nil
}

// EachDeadLetter streams the selected rows to fn: database/sql steps the
// statement one row per Next, so nothing is gathered first.
func (b *Backend) EachDeadLetter(ctx context.Context, f backends.DeadLetterFilter, limit int, fn func(backends.DeadLetterJob) error) error {
	if limit < 0 {
		return fmt.Errorf("reading dead-letter jobs: negative limit %d", limit)
	}
	where, args := deadLetterWhere(f)
	query := `SELECT ` + deadLetterColumns + ` FROM soniq_dead_letter_jobs WHERE ` + where + `
		ORDER BY moved_to_dead_letter_at DESC, id`
	if limit > 0 {
		query += ` LIMIT ?`
		args = append(args, limit)
	}
	rows, err := b.read.QueryContext(ctx, query, args...)
	if err != nil {
		return fmt.Errorf("reading dead-letter jobs: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		d, err := scanDeadLetter(rows)
		if err != nil {
			return fmt.Errorf("reading dead-letter jobs: reading row: %w", err)
		}
		if err := fn(d); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("reading dead-letter jobs: %w", err)
	}
	return nil
}

// newIDSQL makes a version 4 UUID in canonical form inside SQLite, so a
// bulk replay is one INSERT … SELECT however many rows it copies.
// randomblob draws from SQLite's own CSPRNG, seeded by the OS.
const newIDSQL = `lower(hex(randomblob(4))) || '-' || lower(hex(randomblob(2))) || '-4' ||
	substr(lower(hex(randomblob(2))), 2) || '-' || substr('89ab', 1 + (random() & 3), 1) ||
	substr(lower(hex(randomblob(2))), 2) || '-' || lower(hex(randomblob(6)))`

// ReplayDeadLetters is ReplayDeadLetter for every selected row, in one
// write transaction: the cutoffs are computed once, so the INSERT and the
// UPDATE select the same rows, and no other writer runs between them.
func (b *Backend) ReplayDeadLetters(ctx context.Context, f backends.DeadLetterFilter) (int64, error) {
	where, args := deadLetterWhere(f)
	ts := formatTime(now())
	var (
		n      int64
		queues []string
	)
	err := b.inWriteTx(ctx, "replaying dead-letter jobs", func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `SELECT DISTINCT queue FROM soniq_dead_letter_jobs WHERE `+where, args...)
		if err != nil {
			return fmt.Errorf("reading their queues: %w", err)
		}
		for rows.Next() {
			var q string
			if err := rows.Scan(&q); err != nil {
				rows.Close()
				return fmt.Errorf("reading their queues: %w", err)
			}
			queues = append(queues, q)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("reading their queues: %w", err)
		}
		res, err := tx.ExecContext(ctx, `INSERT INTO soniq_jobs
				(id, job_name, args, status, attempts, max_attempts, priority, queue,
				 unique_job, scheduled_at, created_at, updated_at)
			SELECT `+newIDSQL+`, job_name, args, 'queued', 0, max_attempts, priority, queue, 0, ?, ?, ?
			FROM soniq_dead_letter_jobs WHERE `+where, append([]any{ts, ts, ts}, args...)...)
		if err != nil {
			return fmt.Errorf("inserting jobs: %w", err)
		}
		if n, err = res.RowsAffected(); err != nil {
			return fmt.Errorf("inserting jobs: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE soniq_dead_letter_jobs
			SET resurrection_count = COALESCE(resurrection_count, 0) + 1, last_resurrection_at = ?
			WHERE `+where, append([]any{ts}, args...)...); err != nil {
			return fmt.Errorf("counting the resurrections: %w", err)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	for _, q := range queues {
		b.notify(q)
	}
	return n, nil
}

// PurgeDeadLetters deletes every selected row.
func (b *Backend) PurgeDeadLetters(ctx context.Context, f backends.DeadLetterFilter) (int64, error) {
	where, args := deadLetterWhere(f)
	var n int64
	err := b.inWriteTx(ctx, "purging dead-letter jobs", func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM soniq_dead_letter_jobs WHERE `+where, args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, err
}
