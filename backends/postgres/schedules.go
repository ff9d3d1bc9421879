package postgres

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// schedulerLockKey = advisory_key("soniq.scheduler"), the lock Soniq's
// scheduler takes before each tick (see the other keys in postgres.go).
const schedulerLockKey int64 = 1159553910399431960

// scheduleColumns selects a soniq_recurring_jobs row in scanSchedule's order.
const scheduleColumns = `id::text, job_name, schedule_type, schedule_value, priority, queue, max_attempts,
	job_kwargs::text, status, created_at, last_run, next_run, run_count, last_job_id::text, updated_at`

func scanSchedule(row pgx.Row) (backends.Schedule, error) {
	var s backends.Schedule
	var args string
	var created, lastRun, nextRun, updated pgtype.Timestamptz
	if err := row.Scan(&s.ID, &s.Name, &s.Type, &s.Value, &s.Priority, &s.Queue, &s.MaxAttempts,
		&args, &s.Status, &created, &lastRun, &nextRun, &s.RunCount, &s.LastJobID, &updated); err != nil {
		return backends.Schedule{}, err
	}
	s.Args = json.RawMessage(args)
	s.CreatedAt, s.LastRun, s.NextRun, s.UpdatedAt = tsPtr(created), tsPtr(lastRun), tsPtr(nextRun), tsPtr(updated)
	return s, nil
}

// tsPtr is a nullable timestamp; an infinite one reads as NULL (neither
// Soniq nor the sidecar writes one).
func tsPtr(t pgtype.Timestamptz) *time.Time {
	if !t.Valid || t.InfinityModifier != pgtype.Finite {
		return nil
	}
	v := t.Time.UTC()
	return &v
}

// scheduleDefaults fills in Soniq's defaults and checks what the table's
// constraints would refuse, so the error names the field.
func scheduleDefaults(p backends.ScheduleParams) (args string, queue string, priority, maxAttempts int, err error) {
	if p.Name == "" {
		return "", "", 0, 0, errors.New("declare schedule: job name is empty")
	}
	if p.Type != "interval" && p.Type != "cron" {
		return "", "", 0, 0, fmt.Errorf("declare schedule %s: schedule type %q is neither interval nor cron", p.Name, p.Type)
	}
	a := p.Args
	if len(a) == 0 {
		a = json.RawMessage("{}")
	}
	if !isJSONObject(a) {
		return "", "", 0, 0, fmt.Errorf("declare schedule %s: args must be a JSON object", p.Name)
	}
	return string(a), cmp.Or(p.Queue, defaultQueue), deref(p.Priority, defaultPriority), deref(p.MaxAttempts, defaultMaxAttempts), nil
}

// UpsertSchedule declares a schedule (see backends.Schedules). Like
// Soniq's, it serialises declarations of one name on
// pg_advisory_xact_lock(hashtext(name)), so two schedulers starting at
// once (sidecars or Soniq's) never leave two rows for one name.
func (b *Backend) UpsertSchedule(ctx context.Context, p backends.ScheduleParams) (backends.Schedule, bool, error) {
	args, queue, priority, maxAttempts, err := scheduleDefaults(p)
	if err != nil {
		return backends.Schedule{}, false, err
	}
	var out backends.Schedule
	var created bool
	err = pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext($1))", p.Name); err != nil {
			return err
		}
		var id, typ, value string
		var next pgtype.Timestamptz
		err := tx.QueryRow(ctx, `SELECT id::text, schedule_type, schedule_value, next_run FROM soniq_recurring_jobs
		WHERE job_name = $1 ORDER BY created_at NULLS LAST, id LIMIT 1 FOR UPDATE`, p.Name).Scan(&id, &typ, &value, &next)
		if errors.Is(err, pgx.ErrNoRows) {
			created = true
			out, err = scanSchedule(tx.QueryRow(ctx, `INSERT INTO soniq_recurring_jobs
			(id, job_name, schedule_type, schedule_value, priority, queue, max_attempts, job_kwargs, status,
			 created_at, next_run, run_count, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8::text::jsonb, 'active', now(), $9, 0, now())
			RETURNING `+scheduleColumns, backends.NewID(), p.Name, p.Type, p.Value, priority, queue, maxAttempts, args, p.NextRun))
			return err
		}
		if err != nil {
			return err
		}
		keep := typ == p.Type && value == p.Value && next.Valid
		out, err = scanSchedule(tx.QueryRow(ctx, `UPDATE soniq_recurring_jobs SET schedule_type = $2, schedule_value = $3,
			priority = $4, queue = $5, max_attempts = $6, job_kwargs = $7::text::jsonb,
			next_run = CASE WHEN $8 THEN next_run ELSE $9 END, updated_at = now()
		WHERE id = $1 RETURNING `+scheduleColumns, id, p.Type, p.Value, priority, queue, maxAttempts, args, keep, p.NextRun))
		if err != nil {
			return err
		}
		// Only SQL written by hand leaves a second row for one name;
		// Soniq's own declaration would replace them all too.
		_, err = tx.Exec(ctx, `DELETE FROM soniq_recurring_jobs WHERE job_name = $1 AND id <> $2`, p.Name, id)
		return err
	})
	if err != nil {
		return backends.Schedule{}, false, b.wrap(err, "declare schedule %s", p.Name)
	}
	return out, created, nil
}

// ListSchedules returns every schedule by job name.
func (b *Backend) ListSchedules(ctx context.Context) ([]backends.Schedule, error) {
	rows, err := b.pool.Query(ctx, `SELECT `+scheduleColumns+` FROM soniq_recurring_jobs ORDER BY job_name, created_at, id`)
	if err != nil {
		return nil, b.wrap(err, "list schedules")
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (backends.Schedule, error) { return scanSchedule(r) })
	if err != nil {
		return nil, b.wrap(err, "list schedules")
	}
	return out, nil
}

// SetScheduleStatus pauses or resumes a schedule.
func (b *Backend) SetScheduleStatus(ctx context.Context, name, status string) error {
	if status != backends.ScheduleActive && status != backends.SchedulePaused {
		return fmt.Errorf("set schedule %s status: %q is neither active nor paused", name, status)
	}
	tag, err := b.pool.Exec(ctx, `UPDATE soniq_recurring_jobs SET status = $2, updated_at = now() WHERE job_name = $1`, name, status)
	if err != nil {
		return b.wrap(err, "set schedule %s %s", name, status)
	}
	if tag.RowsAffected() == 0 {
		return notFound("schedule", name)
	}
	return nil
}

// RemoveSchedule deletes a schedule.
func (b *Backend) RemoveSchedule(ctx context.Context, name string) error {
	tag, err := b.pool.Exec(ctx, `DELETE FROM soniq_recurring_jobs WHERE job_name = $1`, name)
	if err != nil {
		return b.wrap(err, "remove schedule %s", name)
	}
	if tag.RowsAffected() == 0 {
		return notFound("schedule", name)
	}
	return nil
}

// DueSchedules returns the active schedules due at now (or without a
// next run), oldest due first.
func (b *Backend) DueSchedules(ctx context.Context, now time.Time) ([]backends.Schedule, error) {
	rows, err := b.pool.Query(ctx, `SELECT `+scheduleColumns+` FROM soniq_recurring_jobs
	WHERE status = 'active' AND (next_run <= $1 OR next_run IS NULL) ORDER BY next_run NULLS FIRST, job_name`, now)
	if err != nil {
		return nil, b.wrap(err, "read due schedules")
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (backends.Schedule, error) { return scanSchedule(r) })
	if err != nil {
		return nil, b.wrap(err, "read due schedules")
	}
	return out, nil
}

// InitScheduleNextRun gives a schedule without a next run its first one.
func (b *Backend) InitScheduleNextRun(ctx context.Context, id string, next time.Time) (bool, error) {
	if !isUUID(id) {
		return false, nil
	}
	tag, err := b.pool.Exec(ctx, `UPDATE soniq_recurring_jobs SET next_run = $2, updated_at = now()
	WHERE id = $1 AND next_run IS NULL`, id, next)
	if err != nil {
		return false, b.wrap(err, "set schedule %s's first run", id)
	}
	return tag.RowsAffected() == 1, nil
}

// FireSchedule fires a due schedule: the compare-and-swap on next_run, the
// bookkeeping, the enqueue and its notification commit together or not at
// all, so a schedule never advances without its job nor a job is enqueued
// twice for one due run.
func (b *Backend) FireSchedule(ctx context.Context, f backends.ScheduleFiring) (backends.Job, bool, error) {
	if !isUUID(f.ScheduleID) {
		return backends.Job{}, false, nil
	}
	jobID := backends.NewID()
	var job backends.Job
	fired := false
	err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		var name, args, queue string
		var priority, maxAttempts int
		err := tx.QueryRow(ctx, `UPDATE soniq_recurring_jobs
		SET next_run = $3, last_run = $4, run_count = run_count + 1, last_job_id = $5, updated_at = now()
		WHERE id = $1 AND next_run = $2 AND status = 'active'
		RETURNING job_name, job_kwargs::text, queue, priority, max_attempts`,
			f.ScheduleID, f.Due, f.NextRun, f.FiredAt, jobID).Scan(&name, &args, &queue, &priority, &maxAttempts)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		job, err = scanJob(tx.QueryRow(ctx, `INSERT INTO soniq_jobs
		(id, job_name, args, max_attempts, priority, queue, unique_job, producer_id)
		VALUES ($1, $2, $3::text::jsonb, $4, $5, $6, false, NULLIF($7, ''))
		RETURNING `+jobColumns(""), jobID, name, args, maxAttempts, priority, queue, f.ProducerID))
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "SELECT pg_notify($1, $2)", notifyChannel, queue); err != nil {
			return err
		}
		fired = true
		return nil
	})
	if err != nil {
		return backends.Job{}, false, b.wrap(err, "fire schedule %s", f.ScheduleID)
	}
	return job, fired, nil
}

// ScheduleLeader is the scheduler's leadership on advisory_key
// ("soniq.scheduler"). The leader holds it as a session lock, from tick to
// tick, on a connection of its own outside the pool: the listen URL's when
// one is set (behind a transaction-mode pooler that URL reaches a real
// session), else a direct connection like the one LISTEN uses. A
// scheduler that does not lead holds no connection: each tick it reads
// pg_locks through the pool, and only when the lock is free does it
// connect and try it, so a fleet spends one connection on the lock, not
// one per sidecar. Behind a transaction-mode pooler with no listen URL no
// connection keeps a session, so each tick takes the same key as a
// transaction lock inside an open transaction instead, as the maintenance
// leader does there; the two kinds of lock on one key exclude each other.
func (b *Backend) ScheduleLeader() backends.ScheduleLeader {
	return &scheduleLeader{b: b}
}

type scheduleLeader struct {
	b    *Backend
	mu   sync.Mutex
	conn *pgx.Conn // the session holding the lock; nil when not leading
}

// schedulerLockHeld reads whether any session holds the scheduler key in
// this database. pg_locks shows a bigint advisory key as its high and low
// 32 bits (classid, objid) with objsubid 1.
const schedulerLockHeld = `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory'
	AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
	AND classid = $1::bigint::oid AND objid = $2::bigint::oid AND objsubid = 1)`

func (l *scheduleLeader) Hold(ctx context.Context) (bool, func(), error) {
	if l.b.listenCfg == nil {
		return l.holdTx(ctx)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn != nil {
		// A session lock lasts as long as its session: a session that
		// still answers still holds it.
		if _, err := l.conn.Exec(ctx, "SELECT 1"); err != nil {
			l.drop(ctx)
			return false, nil, l.b.wrap(err, "check the scheduler lock's connection")
		}
		return true, func() {}, nil
	}
	var held bool
	key := uint64(schedulerLockKey)
	if err := l.b.pool.QueryRow(ctx, schedulerLockHeld, int64(key>>32), int64(key&0xffffffff)).Scan(&held); err != nil {
		return false, nil, l.b.wrap(err, "look up the scheduler lock")
	}
	if held {
		return false, nil, nil
	}
	cfg := l.b.listenCfg.Copy()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return false, nil, l.b.wrap(err, "connect to %s:%d/%s for the scheduler lock", cfg.Host, cfg.Port, cfg.Database)
	}
	l.conn = conn
	var ok bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", schedulerLockKey).Scan(&ok); err != nil {
		l.drop(ctx)
		return false, nil, l.b.wrap(err, "try the scheduler lock")
	}
	if !ok {
		// Another scheduler took it since the look-up.
		l.drop(ctx)
		return false, nil, nil
	}
	return true, func() {}, nil
}

// drop closes the lock's session (freeing the lock if it held it).
func (l *scheduleLeader) drop(ctx context.Context) {
	if l.conn != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_ = l.conn.Close(cctx)
		cancel()
	}
	l.conn = nil
}

func (l *scheduleLeader) holdTx(ctx context.Context) (bool, func(), error) {
	tx, err := l.b.pool.Begin(ctx)
	if err != nil {
		return false, nil, l.b.wrap(err, "begin scheduler leader transaction")
	}
	rollback := func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = tx.Rollback(rctx)
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL idle_in_transaction_session_timeout = %d", backends.LeaderHoldLimit.Milliseconds())); err != nil {
		rollback()
		return false, nil, l.b.wrap(err, "bound scheduler leader transaction")
	}
	var ok bool
	if err := tx.QueryRow(ctx, "SELECT pg_try_advisory_xact_lock($1)", schedulerLockKey).Scan(&ok); err != nil {
		rollback()
		return false, nil, l.b.wrap(err, "try the scheduler lock")
	}
	if !ok {
		rollback()
		return false, nil, nil
	}
	var once sync.Once
	return true, func() { once.Do(rollback) }, nil
}

// Close unlocks within ctx and at most 5 s, then closes the session, which
// frees the lock in any case. A shutdown's ctx ends at its write deadline:
// over a partition the unlock waited its own 5 s past that deadline, after
// every other last write had been given up.
func (l *scheduleLeader) Close(ctx context.Context) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if ctx.Err() == nil {
		// One round trip (exec mode: no statement prepared first), at the
		// end of a shutdown.
		var unlocked bool
		_ = l.conn.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", pgx.QueryExecModeExec, schedulerLockKey).Scan(&unlocked)
	}
	l.drop(ctx)
}
