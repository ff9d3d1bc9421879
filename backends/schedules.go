package backends

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// Schedule statuses allowed in soniq_recurring_jobs.
const (
	ScheduleActive = "active"
	SchedulePaused = "paused"
)

// Schedule is one soniq_recurring_jobs row. A schedule is keyed by its
// job name, as Soniq's scheduler keys it: one schedule per name. The JSON
// keys are the table's column names.
type Schedule struct {
	ID          string          `json:"id"`
	Name        string          `json:"job_name"`
	Type        string          `json:"schedule_type"`  // interval or cron
	Value       string          `json:"schedule_value"` // seconds, or the cron expression
	Priority    int             `json:"priority"`
	Queue       string          `json:"queue"`
	MaxAttempts int             `json:"max_attempts"`
	Args        json.RawMessage `json:"job_kwargs"`
	Status      string          `json:"status"`
	CreatedAt   *time.Time      `json:"created_at"`
	LastRun     *time.Time      `json:"last_run"`
	NextRun     *time.Time      `json:"next_run"`
	RunCount    int             `json:"run_count"`
	LastJobID   *string         `json:"last_job_id"`
	UpdatedAt   *time.Time      `json:"updated_at"`
}

// ScheduleParams declares a schedule (UpsertSchedule). Zero values take
// Soniq's defaults (queue "default", priority 100, max_attempts 3).
type ScheduleParams struct {
	Name        string
	Type        string // interval or cron
	Value       string
	Args        json.RawMessage // a JSON object; nil means {}
	Queue       string
	Priority    *int
	MaxAttempts *int
	// NextRun is the first run, computed by the caller from now. It is
	// written when the schedule is new, when its timing (type or value)
	// changed, or when the row has none; a re-declared schedule with the
	// same timing keeps the next_run it had, so restarting every sidecar
	// neither postpones nor skips its next run.
	NextRun time.Time
}

// ScheduleFiring is one firing of a due schedule (FireSchedule).
type ScheduleFiring struct {
	ScheduleID string
	// Due is the next_run the caller read: the firing happens only if
	// the row still has it (the compare-and-swap that makes each due run
	// fire once, whichever scheduler gets there first).
	Due time.Time
	// NextRun replaces it.
	NextRun time.Time
	// FiredAt is written to last_run.
	FiredAt time.Time
	// ProducerID is the fired job's producer_id ("" = NULL).
	ProducerID string
}

// Schedules is the storage of recurring schedules (soniq_recurring_jobs).
type Schedules interface {
	// UpsertSchedule declares a schedule by name, as Soniq's
	// scheduler.add does: an existing schedule of that name keeps its id,
	// status, created_at, last_run, run_count and last_job_id, and takes
	// the new timing, args, queue, priority and max_attempts (next_run:
	// see ScheduleParams.NextRun). created reports a new row.
	UpsertSchedule(ctx context.Context, p ScheduleParams) (s Schedule, created bool, err error)
	// ListSchedules returns every schedule, by job name.
	ListSchedules(ctx context.Context) ([]Schedule, error)
	// SetScheduleStatus sets status (active or paused); ErrNotFound when
	// no schedule has that name.
	SetScheduleStatus(ctx context.Context, name, status string) error
	// RemoveSchedule deletes the schedule; ErrNotFound when none has that
	// name.
	RemoveSchedule(ctx context.Context, name string) error
	// DueSchedules returns the active schedules whose next_run is at or
	// before now, or NULL (a row written without one), oldest first. A
	// scheduler passes a time ahead of its clock to learn what falls due
	// before it looks again.
	DueSchedules(ctx context.Context, now time.Time) ([]Schedule, error)
	// InitScheduleNextRun sets next_run on a schedule that has none;
	// false when it has one (or is gone).
	InitScheduleNextRun(ctx context.Context, id string, next time.Time) (bool, error)
	// FireSchedule fires a due schedule in one transaction: if the row is
	// active and its next_run is still f.Due, it moves next_run to
	// f.NextRun, sets last_run, run_count+1 and last_job_id, and enqueues
	// a job with the row's name, args (job_kwargs), queue, priority and
	// max_attempts (waking subscribers as Enqueue does). fired is false,
	// and nothing changed, when the row has moved on (another scheduler
	// fired it), was paused or removed.
	FireSchedule(ctx context.Context, f ScheduleFiring) (job Job, fired bool, err error)
	// ScheduleLeader is the scheduler's leadership: on Postgres Soniq's
	// session advisory lock advisory_key("soniq.scheduler"), so that one
	// scheduler of the database, a sidecar or Soniq's own, evaluates due
	// schedules at a time. Each firing's compare-and-swap keeps the
	// firings exactly-once whatever the lock does.
	ScheduleLeader() ScheduleLeader
}

// ScheduleLeader is a scheduler's hold on the leadership.
type ScheduleLeader interface {
	// Hold takes or keeps the leadership for one tick: true when this
	// scheduler leads. done must be called once the tick's work is over
	// (a leadership that lasts only a transaction ends there; a session
	// lock is kept for the next tick). A lost connection loses the
	// leadership; Hold then tries again.
	Hold(ctx context.Context) (leader bool, done func(), err error)
	// Close gives the leadership up and releases its connection. ctx
	// bounds how long it waits for the database (a shutdown passes its
	// write deadline); the connection is closed in any case, which ends
	// the leadership once the server sees it.
	Close(ctx context.Context)
}

// LocalScheduleLeader is the leadership of a backend without locks
// across processes (SQLite, memory): it always leads. Each firing's write
// transaction is the compare-and-swap that keeps two processes sharing a
// SQLite file from firing one run twice.
type LocalScheduleLeader struct{}

// Hold always leads.
func (LocalScheduleLeader) Hold(ctx context.Context) (bool, func(), error) {
	if err := ctx.Err(); err != nil {
		return false, nil, fmt.Errorf("holding scheduler leadership: %w", err)
	}
	return true, func() {}, nil
}

// Close does nothing.
func (LocalScheduleLeader) Close(context.Context) {}
