package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

const deadLetterColumns = `id::text, job_name, args, queue, priority, max_attempts, attempts,
	last_error, dead_letter_reason, original_created_at, moved_to_dead_letter_at,
	resurrection_count, last_resurrection_at, tags, created_at`

func scanDeadLetter(row pgx.Row) (backends.DeadLetterJob, error) {
	var (
		d             backends.DeadLetterJob
		args, tags    []byte
		resurrections *int32
		createdAt     *time.Time
	)
	err := row.Scan(&d.ID, &d.Name, &args, &d.Queue, &d.Priority, &d.MaxAttempts, &d.Attempts,
		&d.LastError, &d.Reason, &d.OriginalCreatedAt, &d.MovedAt,
		&resurrections, &d.LastResurrectionAt, &tags, &createdAt)
	if err != nil {
		return backends.DeadLetterJob{}, err
	}
	d.Args = json.RawMessage(args)
	if tags != nil {
		d.Tags = json.RawMessage(tags)
	}
	d.ResurrectionCount = int(deref(resurrections, 0))
	d.CreatedAt = deref(createdAt, time.Time{})
	return d, nil
}

// ListDeadLetter returns dead-letter rows, newest move first (Soniq's
// list_dead_letter_jobs order), at most limit (0 = all).
func (b *Backend) ListDeadLetter(ctx context.Context, limit int) ([]backends.DeadLetterJob, error) {
	var lim *int
	if limit > 0 {
		lim = &limit
	}
	rows, err := b.pool.Query(ctx, `SELECT `+deadLetterColumns+` FROM soniq_dead_letter_jobs
	ORDER BY moved_to_dead_letter_at DESC, id
	LIMIT $1`, lim)
	if err != nil {
		return nil, b.wrap(err, "list dead-letter jobs")
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (backends.DeadLetterJob, error) { return scanDeadLetter(r) })
	if err != nil {
		return nil, b.wrap(err, "list dead-letter jobs")
	}
	return out, nil
}

// ReplayDeadLetter mirrors Soniq's DeadLetterService.replay with its
// defaults (reset_attempts=True, same max_attempts, priority and queue): a
// new queued row with a fresh id, attempts 0 and scheduled_at now(), and the
// dead-letter row kept as the audit trail with resurrection_count+1 and
// last_resurrection_at now(). One statement, so it is atomic; unlike Soniq it
// also wakes listeners.
func (b *Backend) ReplayDeadLetter(ctx context.Context, id string) (string, error) {
	if !isUUID(id) {
		return "", notFound("dead-letter job", id)
	}
	newID := backends.NewID()
	var got string
	err := b.pool.QueryRow(ctx, `WITH d AS (
	UPDATE soniq_dead_letter_jobs
	SET resurrection_count = COALESCE(resurrection_count, 0) + 1, last_resurrection_at = now()
	WHERE id = $1
	RETURNING job_name, args, max_attempts, priority, queue
), ins AS (
	INSERT INTO soniq_jobs (id, job_name, args, max_attempts, priority, queue, attempts, status, scheduled_at)
	SELECT $2, job_name, args, max_attempts, priority, queue, 0, 'queued', now() FROM d
	RETURNING id, queue
)
SELECT id::text, pg_notify($3, queue) IS NULL FROM ins`, id, newID, notifyChannel).Scan(&got, new(bool))
	if errors.Is(err, pgx.ErrNoRows) {
		return "", notFound("dead-letter job", id)
	}
	if err != nil {
		return "", b.wrap(err, "replay dead-letter job %s", id)
	}
	return got, nil
}

// PurgeDeadLetter deletes one dead-letter row.
func (b *Backend) PurgeDeadLetter(ctx context.Context, id string) error {
	if !isUUID(id) {
		return notFound("dead-letter job", id)
	}
	tag, err := b.pool.Exec(ctx, `DELETE FROM soniq_dead_letter_jobs WHERE id = $1`, id)
	if err != nil {
		return b.wrap(err, "purge dead-letter job %s", id)
	}
	if tag.RowsAffected() == 0 {
		return notFound("dead-letter job", id)
	}
	return nil
}

// deadLetterWhere renders f as a WHERE clause whose parameters are
// numbered from len(args)+1, and returns args with f's values appended.
func deadLetterWhere(f backends.DeadLetterFilter, args []any) (string, []any) {
	var conds []string
	add := func(cond string, v any) {
		args = append(args, v)
		conds = append(conds, fmt.Sprintf(cond, len(args)))
	}
	if len(f.JobNames) > 0 {
		add("job_name = ANY($%d::text[])", f.JobNames)
	}
	if len(f.Queues) > 0 {
		add("queue = ANY($%d::text[])", f.Queues)
	}
	if f.Since > 0 {
		add("moved_to_dead_letter_at >= now() - make_interval(secs => $%d::float8)", f.Since.Seconds())
	}
	if f.OlderThan > 0 {
		add("moved_to_dead_letter_at < now() - make_interval(secs => $%d::float8)", f.OlderThan.Seconds())
	}
	if len(conds) == 0 {
		return "TRUE", args
	}
	return strings.Join(conds, " AND "), args
}

// CountDeadLetters counts the dead-letter rows f selects.
func (b *Backend) CountDeadLetters(ctx context.Context, f backends.DeadLetterFilter) (int64, error) {
	where, args := deadLetterWhere(f, nil)
	var n int64
	if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM soniq_dead_letter_jobs WHERE `+where, args...).Scan(&n); err != nil {
		return 0, b.wrap(err, "count dead-letter jobs")
	}
	return n, nil
}

// EachDeadLetter streams the selected rows to fn. pgx decodes each row
// from the connection's read buffer as Next is called, so no more than a
// buffer's worth of rows is in memory at a time, whatever the table holds.
func (b *Backend) EachDeadLetter(ctx context.Context, f backends.DeadLetterFilter, limit int, fn func(backends.DeadLetterJob) error) error {
	if limit < 0 {
		return fmt.Errorf("reading dead-letter jobs: negative limit %d", limit)
	}
	var lim *int
	if limit > 0 {
		lim = &limit
	}
	where, args := deadLetterWhere(f, []any{lim})
	rows, err := b.pool.Query(ctx, `SELECT `+deadLetterColumns+` FROM soniq_dead_letter_jobs
	WHERE `+where+`
	ORDER BY moved_to_dead_letter_at DESC, id
	LIMIT $1`, args...)
	if err != nil {
		return b.wrap(err, "read dead-letter jobs")
	}
	defer rows.Close()
	for rows.Next() {
		d, err := scanDeadLetter(rows)
		if err != nil {
			return b.wrap(err, "read dead-letter jobs")
		}
		if err := fn(d); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return b.wrap(err, "read dead-letter jobs")
	}
	return nil
}

// ReplayDeadLetters is ReplayDeadLetter for every selected row, in one
// statement: each gets a new queued row with a fresh version 4 id
// (gen_random_uuid, as NewID makes them), and the replayed queues are
// notified once each.
func (b *Backend) ReplayDeadLetters(ctx context.Context, f backends.DeadLetterFilter) (int64, error) {
	where, args := deadLetterWhere(f, []any{notifyChannel})
	var n int64
	err := b.pool.QueryRow(ctx, `WITH d AS (
	UPDATE soniq_dead_letter_jobs
	SET resurrection_count = COALESCE(resurrection_count, 0) + 1, last_resurrection_at = now()
	WHERE `+where+`
	RETURNING job_name, args, max_attempts, priority, queue
), ins AS (
	INSERT INTO soniq_jobs (id, job_name, args, max_attempts, priority, queue, attempts, status, scheduled_at)
	SELECT gen_random_uuid(), job_name, args, max_attempts, priority, queue, 0, 'queued', now() FROM d
	RETURNING queue
), woken AS (
	SELECT pg_notify($1, q.queue) IS NULL AS sent FROM (SELECT DISTINCT queue FROM ins) q
)
SELECT (SELECT count(*) FROM ins), (SELECT count(sent) FROM woken)`, args...).Scan(&n, new(int64))
	if err != nil {
		return 0, b.wrap(err, "replay dead-letter jobs")
	}
	return n, nil
}

// PurgeDeadLetters deletes every selected row in one statement.
func (b *Backend) PurgeDeadLetters(ctx context.Context, f backends.DeadLetterFilter) (int64, error) {
	where, args := deadLetterWhere(f, nil)
	tag, err := b.pool.Exec(ctx, `DELETE FROM soniq_dead_letter_jobs WHERE `+where, args...)
	if err != nil {
		return 0, b.wrap(err, "purge dead-letter jobs")
	}
	return tag.RowsAffected(), nil
}
