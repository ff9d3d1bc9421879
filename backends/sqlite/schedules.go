package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// scheduleColumns selects a soniq_recurring_jobs row in scanSchedule's order.
const scheduleColumns = `id, job_name, schedule_type, schedule_value, priority, queue, max_attempts,
	job_kwargs, status, created_at, last_run, next_run, run_count, last_job_id, updated_at`

func scanSchedule(r rowScanner) (backends.Schedule, error) {
	var s backends.Schedule
	var args string
	var created, lastRun, nextRun, updated, lastJob sql.NullString
	if err := r.Scan(&s.ID, &s.Name, &s.Type, &s.Value, &s.Priority, &s.Queue, &s.MaxAttempts,
		&args, &s.Status, &created, &lastRun, &nextRun, &s.RunCount, &lastJob, &updated); err != nil {
		return backends.Schedule{}, err
	}
	s.Args = json.RawMessage(args)
	s.LastJobID = nullString(lastJob)
	var err error
	for _, c := range []struct {
		dst  **time.Time
		src  sql.NullString
		name string
	}{{&s.CreatedAt, created, "created_at"}, {&s.LastRun, lastRun, "last_run"}, {&s.NextRun, nextRun, "next_run"}, {&s.UpdatedAt, updated, "updated_at"}} {
		if *c.dst, err = parseNullTime(c.src, c.name); err != nil {
			return backends.Schedule{}, fmt.Errorf("schedule %s: %w", s.Name, err)
		}
	}
	return s, nil
}

func querySchedules(ctx context.Context, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}, query string, args ...any) ([]backends.Schedule, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []backends.Schedule
	for rows.Next() {
		s, err := scanSchedule(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// UpsertSchedule declares a schedule (see backends.Schedules), in one
// write transaction.
func (b *Backend) UpsertSchedule(ctx context.Context, p backends.ScheduleParams) (backends.Schedule, bool, error) {
	what := fmt.Sprintf("declaring schedule %q", p.Name)
	if p.Name == "" {
		return backends.Schedule{}, false, errors.New("declaring schedule: empty job name")
	}
	if p.Type != "interval" && p.Type != "cron" {
		return backends.Schedule{}, false, fmt.Errorf("%s: schedule type %q is neither interval nor cron", what, p.Type)
	}
	args, err := normaliseArgs(p.Args)
	if err != nil {
		return backends.Schedule{}, false, fmt.Errorf("%s: %w", what, err)
	}
	queue := cmp.Or(p.Queue, defaultQueue)
	priority, maxAttempts := defaultPriority, defaultMaxAttempts
	if p.Priority != nil {
		priority = *p.Priority
	}
	if p.MaxAttempts != nil {
		maxAttempts = *p.MaxAttempts
	}
	ts := formatTime(now())
	next := formatTime(p.NextRun)
	var out backends.Schedule
	var created bool
	err = b.inWriteTx(ctx, what, func(tx *sql.Tx) error {
		var id, typ, value string
		var nextRun sql.NullString
		err := tx.QueryRowContext(ctx, `SELECT id, schedule_type, schedule_value, next_run FROM soniq_recurring_jobs
			WHERE job_name = ? ORDER BY created_at IS NULL, created_at, id LIMIT 1`, p.Name).Scan(&id, &typ, &value, &nextRun)
		if errors.Is(err, sql.ErrNoRows) {
			created = true
			out, err = scanSchedule(tx.QueryRowContext(ctx, `INSERT INTO soniq_recurring_jobs
				(id, job_name, schedule_type, schedule_value, priority, queue, max_attempts, job_kwargs, status,
				 created_at, next_run, run_count, updated_at)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'active', ?, ?, 0, ?)
				RETURNING `+scheduleColumns, backends.NewID(), p.Name, p.Type, p.Value, priority, queue, maxAttempts,
				string(args), ts, next, ts))
			return err
		}
		if err != nil {
			return err
		}
		if typ == p.Type && value == p.Value && nextRun.Valid && nextRun.String != "" {
			next = nextRun.String
		}
		out, err = scanSchedule(tx.QueryRowContext(ctx, `UPDATE soniq_recurring_jobs SET schedule_type = ?, schedule_value = ?,
				priority = ?, queue = ?, max_attempts = ?, job_kwargs = ?, next_run = ?, updated_at = ?
			WHERE id = ? RETURNING `+scheduleColumns, p.Type, p.Value, priority, queue, maxAttempts, string(args), next, ts, id))
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM soniq_recurring_jobs WHERE job_name = ? AND id <> ?`, p.Name, id)
		return err
	})
	if err != nil {
		return backends.Schedule{}, false, err
	}
	return out, created, nil
}

// ListSchedules returns every schedule by job name.
func (b *Backend) ListSchedules(ctx context.Context) ([]backends.Schedule, error) {
	out, err := querySchedules(ctx, b.read, `SELECT `+scheduleColumns+` FROM soniq_recurring_jobs ORDER BY job_name, created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("listing schedules: %w", err)
	}
	return out, nil
}

// SetScheduleStatus pauses or resumes a schedule.
func (b *Backend) SetScheduleStatus(ctx context.Context, name, status string) error {
	if status != backends.ScheduleActive && status != backends.SchedulePaused {
		return fmt.Errorf("setting schedule %q status: %q is neither active nor paused", name, status)
	}
	return b.scheduleWrite(ctx, fmt.Sprintf("setting schedule %q %s", name, status),
		`UPDATE soniq_recurring_jobs SET status = ?, updated_at = ? WHERE job_name = ?`, status, formatTime(now()), name)
}

// RemoveSchedule deletes a schedule.
func (b *Backend) RemoveSchedule(ctx context.Context, name string) error {
	return b.scheduleWrite(ctx, fmt.Sprintf("removing schedule %q", name), `DELETE FROM soniq_recurring_jobs WHERE job_name = ?`, name)
}

// scheduleWrite runs one statement on a schedule; ErrNotFound when it
// changed no row.
func (b *Backend) scheduleWrite(ctx context.Context, what, query string, args ...any) error {
	var n int64
	err := b.inWriteTx(ctx, what, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, query, args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("%s: %w", what, backends.ErrNotFound)
	}
	return nil
}

// DueSchedules returns the active schedules due at now (or without a next
// run), oldest due first. The times are compared parsed, not as text, so a
// row written by hand in another timestamp form is read right too.
func (b *Backend) DueSchedules(ctx context.Context, at time.Time) ([]backends.Schedule, error) {
	all, err := querySchedules(ctx, b.read, `SELECT `+scheduleColumns+` FROM soniq_recurring_jobs WHERE status = 'active'`)
	if err != nil {
		return nil, fmt.Errorf("reading due schedules: %w", err)
	}
	due := all[:0]
	for _, s := range all {
		if s.NextRun == nil || !s.NextRun.After(at) {
			due = append(due, s)
		}
	}
	slices.SortStableFunc(due, func(a, b backends.Schedule) int {
		switch {
		case a.NextRun == nil && b.NextRun == nil:
			return cmp.Compare(a.Name, b.Name)
		case a.NextRun == nil:
			return -1
		case b.NextRun == nil:
			return 1
		}
		return cmp.Or(a.NextRun.Compare(*b.NextRun), cmp.Compare(a.Name, b.Name))
	})
	return due, nil
}

// InitScheduleNextRun gives a schedule without a next run its first one.
func (b *Backend) InitScheduleNextRun(ctx context.Context, id string, next time.Time) (bool, error) {
	err := b.scheduleWrite(ctx, "setting schedule "+id+"'s first run",
		`UPDATE soniq_recurring_jobs SET next_run = ?, updated_at = ? WHERE id = ? AND (next_run IS NULL OR next_run = '')`,
		formatTime(next), formatTime(now()), id)
	if errors.Is(err, backends.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// FireSchedule fires a due schedule. The compare-and-swap, the bookkeeping
// and the enqueue share one IMMEDIATE transaction, which serialises them
// against every other writer of the file, in this process or another: a
// run fires once however many schedulers share the file, and no lock
// beyond the transaction is needed.
func (b *Backend) FireSchedule(ctx context.Context, f backends.ScheduleFiring) (backends.Job, bool, error) {
	var job backends.Job
	fired := false
	jobID := backends.NewID()
	err := b.inWriteTx(ctx, "firing schedule "+f.ScheduleID, func(tx *sql.Tx) error {
		var name, args, queue, status string
		var priority, maxAttempts int
		var next sql.NullString
		err := tx.QueryRowContext(ctx, `SELECT job_name, job_kwargs, queue, priority, max_attempts, status, next_run
			FROM soniq_recurring_jobs WHERE id = ?`, f.ScheduleID).Scan(&name, &args, &queue, &priority, &maxAttempts, &status, &next)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		due, err := parseNullTime(next, "next_run")
		if err != nil {
			return err
		}
		if status != backends.ScheduleActive || due == nil || !due.Equal(f.Due.UTC().Truncate(time.Microsecond)) {
			return nil
		}
		ts := formatTime(now())
		if _, err := tx.ExecContext(ctx, `UPDATE soniq_recurring_jobs
			SET next_run = ?, last_run = ?, run_count = run_count + 1, last_job_id = ?, updated_at = ? WHERE id = ?`,
			formatTime(f.NextRun), formatTime(f.FiredAt), jobID, ts, f.ScheduleID); err != nil {
			return err
		}
		job, err = scanJob(tx.QueryRowContext(ctx, `INSERT INTO soniq_jobs
			(id, job_name, args, status, attempts, max_attempts, priority, queue, unique_job, producer_id, created_at, updated_at)
			VALUES (?, ?, ?, 'queued', 0, ?, ?, ?, 0, ?, ?, ?)
			RETURNING `+jobColumns, jobID, name, args, maxAttempts, priority, queue, nullIfEmpty(f.ProducerID), ts, ts))
		if err != nil {
			return fmt.Errorf("enqueueing %q: %w", name, err)
		}
		fired = true
		return nil
	})
	if err != nil {
		return backends.Job{}, false, err
	}
	if fired {
		b.notify(job.Queue)
	}
	return job, fired, nil
}

// ScheduleLeader always leads: see FireSchedule.
func (b *Backend) ScheduleLeader() backends.ScheduleLeader { return backends.LocalScheduleLeader{} }
