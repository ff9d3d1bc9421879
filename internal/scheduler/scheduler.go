// Package scheduler is the sidecar's recurring-job scheduler: the service
// that fires the due schedules of soniq_recurring_jobs while it leads the
// database's schedulers (Soniq's own included), each firing exactly once.
package scheduler

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/internal/schedule"
)

// DefaultTick is the longest a scheduler goes without reading the
// schedules: how soon it learns of a schedule added, changed, paused or
// removed by another process, and how often a scheduler that does not
// lead tries the leadership. Between two reads it fires each schedule
// at its next_run, on a timer.
const DefaultTick = time.Second

// tickTimeout bounds one tick's database work; it exists only so a wedged
// database cannot hold the scheduler forever.
const tickTimeout = 30 * time.Second

// Config is what a Scheduler fires with. Backend is required.
type Config struct {
	Backend backends.Schedules
	// ProducerID is written to the producer_id of every job fired: which
	// sidecar fired it.
	ProducerID string
	// Tick is the longest time between two looks at the schedules; 0
	// means DefaultTick.
	Tick time.Duration
	Log  *slog.Logger
	// Enqueued, when set, is called for every job a firing enqueued.
	Enqueued func()
	// Metrics counts firings; nil counts nothing.
	Metrics *Metrics
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Scheduler fires the due schedules of soniq_recurring_jobs while it leads
// (see backends.Schedules.ScheduleLeader). Start it with Start; Stop ends
// it and gives the leadership up.
type Scheduler struct {
	cfg    Config
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
	// releaseBy bounds the wait for the database when the leadership is
	// given up (StopBy); zero: the leadership's own bound.
	releaseBy time.Time
	// warned remembers the unreadable schedules already logged, by id and
	// value, so a bad row is reported once, not every tick.
	warned map[string]string
	leader backends.ScheduleLeader
	leads  bool // for logging changes of leadership
	// leadLogged is when a change of leadership was last logged at INFO.
	leadLogged time.Time
	// failing is the warning of the tick's failure logged last: the same
	// failure tick after tick (a database down, a table not migrated) is
	// logged once, and again when it changes or after a tick that worked.
	failing string
}

// New prepares a Scheduler; nothing runs before Start.
func New(cfg Config) *Scheduler {
	if cfg.Tick <= 0 {
		cfg.Tick = DefaultTick
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Scheduler{cfg: cfg, warned: map[string]string{}}
}

// Start looks now, then at each schedule's next_run and at least every
// Tick, until ctx ends or Stop is called. A second Start does nothing.
func (s *Scheduler) Start(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done != nil {
		return
	}
	ctx, s.cancel = context.WithCancel(ctx)
	s.done = make(chan struct{})
	s.leader = s.cfg.Backend.ScheduleLeader()
	go func() {
		defer close(s.done)
		defer s.release()
		t := time.NewTimer(0)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			t.Reset(s.look(ctx).Sub(s.cfg.Now()))
		}
	}()
}

// Stop ends the scheduler and returns once its goroutine has (and the
// leadership is given up). It does nothing if it never started.
func (s *Scheduler) Stop() { s.StopBy(time.Time{}) }

// StopBy is Stop for a shutdown whose database work ends at deadline:
// giving the leadership up waits for the database until then at most
// (zero: the leadership's own bound).
func (s *Scheduler) StopBy(deadline time.Time) {
	s.mu.Lock()
	cancel, done := s.cancel, s.done
	s.releaseBy = deadline
	s.mu.Unlock()
	if done == nil {
		return
	}
	cancel()
	<-done
}

// release gives the leadership up, within the deadline StopBy set.
func (s *Scheduler) release() {
	s.mu.Lock()
	by := s.releaseBy
	s.mu.Unlock()
	ctx := context.Background()
	if !by.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, by)
		defer cancel()
	}
	s.leader.Close(ctx)
}

// Tick is one look for due schedules: when this scheduler leads, each due
// one fires once. Exported for tests that drive the scheduler look by look
// instead of calling Start (which looks on its own goroutine); never call
// it beside Start.
func (s *Scheduler) Tick(ctx context.Context) {
	s.look(ctx)
}

// look fires the due schedules when this scheduler leads, and returns
// when to look next: the earliest next_run before the next Tick (so a
// schedule fires at its due time, not at the first look after it), else
// a Tick from now.
func (s *Scheduler) look(ctx context.Context) time.Time {
	if s.leader == nil {
		s.leader = s.cfg.Backend.ScheduleLeader()
	}
	now := s.cfg.Now()
	wake := now.Add(s.cfg.Tick)
	ctx, cancel := context.WithTimeout(ctx, tickTimeout)
	defer cancel()
	lead, done, err := s.leader.Hold(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.warn("scheduler: taking the leadership failed; trying again every tick", err)
		}
		s.setLeads(false)
		return wake
	}
	s.setLeads(lead)
	if !lead {
		return wake
	}
	defer done()
	// What falls due before the next look is read too: its timer.
	due, err := s.cfg.Backend.DueSchedules(ctx, wake)
	if err != nil {
		if ctx.Err() == nil {
			s.warn("scheduler: reading due schedules failed; trying again every tick", err)
		}
		return wake
	}
	if s.failing != "" {
		s.cfg.Log.Info("scheduler: reading due schedules works again")
		s.failing = ""
	}
	for _, sc := range due {
		next := sc.NextRun
		if next == nil || !next.After(now) {
			var ok bool
			if next, ok = s.fire(ctx, sc, now); !ok {
				// Not fired: it is read again at the next look.
				continue
			}
		}
		if next.Before(wake) {
			wake = *next
		}
	}
	return wake
}

// warn logs a tick's failure unless it is the one logged last.
func (s *Scheduler) warn(msg string, err error) {
	if key := msg + ": " + err.Error(); key != s.failing {
		s.failing = key
		s.cfg.Log.Warn(msg, "error", err)
	}
}

// leadLogEvery bounds the INFO lines about leadership: behind a
// transaction-mode pooler without a listen URL the leadership is taken
// tick by tick and may pass between sidecars every second.
const leadLogEvery = time.Minute

func (s *Scheduler) setLeads(lead bool) {
	if lead == s.leads {
		return
	}
	s.leads = lead
	level := slog.LevelInfo
	if now := s.cfg.Now(); now.Sub(s.leadLogged) < leadLogEvery {
		level = slog.LevelDebug
	} else {
		s.leadLogged = now
	}
	if lead {
		s.cfg.Log.Log(context.Background(), level, "scheduler: leading; firing due schedules")
	} else {
		s.cfg.Log.Log(context.Background(), level, "scheduler: another scheduler leads")
	}
}

// fire fires one due schedule and returns its next run once the row
// holds it (nil, false when it does not: not fired, lost to another
// scheduler, failed). An interval's next run counts from the run that was
// due, so the firing's own lateness does not add up run after run; a
// schedule that missed runs (nothing fired while every scheduler was
// down) fires once to catch up and counts from now, as Soniq's scheduler
// does (schedule.Spec.NextAfterDue).
func (s *Scheduler) fire(ctx context.Context, sc backends.Schedule, now time.Time) (*time.Time, bool) {
	spec, err := schedule.Parse(sc.Type, sc.Value)
	if err != nil {
		if s.warned[sc.ID] != sc.Type+" "+sc.Value {
			s.warned[sc.ID] = sc.Type + " " + sc.Value
			s.cfg.Log.Error("scheduler: schedule cannot be read; it does not fire until it is declared again",
				"schedule_id", sc.ID, "job_name", sc.Name, "error", err)
		}
		return nil, false
	}
	delete(s.warned, sc.ID)
	if sc.NextRun == nil {
		// A row written without a first run (by SQL): it gets one, as
		// Soniq's scheduler gives it on loading.
		next := spec.Next(now)
		ok, err := s.cfg.Backend.InitScheduleNextRun(ctx, sc.ID, next)
		if err != nil && ctx.Err() == nil {
			s.cfg.Log.Warn("scheduler: setting a schedule's first run failed", "job_name", sc.Name, "error", err)
		}
		return &next, ok && err == nil
	}
	next := spec.NextAfterDue(*sc.NextRun, now)
	firedAt := now.UTC().Truncate(time.Microsecond)
	job, fired, err := s.cfg.Backend.FireSchedule(ctx, backends.ScheduleFiring{ScheduleID: sc.ID, Due: *sc.NextRun,
		NextRun: next, FiredAt: firedAt, ProducerID: s.cfg.ProducerID})
	if err != nil {
		if ctx.Err() != nil {
			return nil, false
		}
		s.cfg.Metrics.failed()
		s.cfg.Log.Error("scheduler: enqueueing a due schedule's job failed; the schedule stays due and is tried again next tick",
			"job_name", sc.Name, "due", sc.NextRun.UTC(), "error", err)
		return nil, false
	}
	if !fired {
		return nil, false // another scheduler fired this run, or it was paused or removed meanwhile
	}
	if s.cfg.Enqueued != nil {
		s.cfg.Enqueued()
	}
	late := firedAt.Sub(*sc.NextRun)
	s.cfg.Metrics.fired(late > s.cfg.Tick)
	s.cfg.Log.Info("scheduler: fired", "job_name", sc.Name, "job_id", job.ID, "queue", job.Queue,
		"due", sc.NextRun.UTC(), "late", late.Round(time.Millisecond), "next_run", next)
	return &next, true
}

// Metrics are the scheduler's counters.
type Metrics struct {
	firedC, lateC, failedC metric.Int64Counter
}

// NewMetrics creates the scheduler's counters on a meter, each exported
// at 0 from the start so that the first firing is an increase.
func NewMetrics(m metric.Meter) (*Metrics, error) {
	var x Metrics
	var err error
	if x.firedC, err = m.Int64Counter("soniq_schedule_fired",
		metric.WithDescription("Jobs enqueued by this sidecar's scheduler for due recurring schedules (soniq_recurring_jobs).")); err != nil {
		return nil, fmt.Errorf("creating scheduler metrics: %w", err)
	}
	if x.lateC, err = m.Int64Counter("soniq_schedule_late",
		metric.WithDescription("Of those, the firings that came more than a scheduler tick (1 s) after the schedule's next_run: missed runs caught up after downtime, or a slow database.")); err != nil {
		return nil, fmt.Errorf("creating scheduler metrics: %w", err)
	}
	if x.failedC, err = m.Int64Counter("soniq_schedule_enqueue_failed",
		metric.WithDescription("Due schedules whose firing failed (the job could not be enqueued); the schedule stays due and is tried again on the next tick.")); err != nil {
		return nil, fmt.Errorf("creating scheduler metrics: %w", err)
	}
	ctx := context.Background()
	x.firedC.Add(ctx, 0)
	x.lateC.Add(ctx, 0)
	x.failedC.Add(ctx, 0)
	return &x, nil
}

func (m *Metrics) fired(late bool) {
	if m == nil {
		return
	}
	m.firedC.Add(context.Background(), 1)
	if late {
		m.lateC.Add(context.Background(), 1)
	}
}

func (m *Metrics) failed() {
	if m == nil {
		return
	}
	m.failedC.Add(context.Background(), 1)
}
