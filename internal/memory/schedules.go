package memory

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

func cloneSchedule(s *backends.Schedule) backends.Schedule {
	c := *s
	c.Args = slices.Clone(s.Args)
	c.CreatedAt = clonePtr(s.CreatedAt)
	c.LastRun = clonePtr(s.LastRun)
	c.NextRun = clonePtr(s.NextRun)
	c.LastJobID = clonePtr(s.LastJobID)
	c.UpdatedAt = clonePtr(s.UpdatedAt)
	return c
}

// byNameLocked is the schedule of a name (the oldest, were there two).
func (b *Backend) byNameLocked(name string) *backends.Schedule {
	var found *backends.Schedule
	for _, s := range b.schedules {
		if s.Name == name && (found == nil || s.CreatedAt.Before(*found.CreatedAt)) {
			found = s
		}
	}
	return found
}

// stamp is a stored time: the SQL backends keep microseconds.
func stamp(t time.Time) *time.Time {
	v := t.UTC().Truncate(time.Microsecond)
	return &v
}

// UpsertSchedule declares a schedule (see backends.Schedules).
func (b *Backend) UpsertSchedule(ctx context.Context, p backends.ScheduleParams) (backends.Schedule, bool, error) {
	if err := ctx.Err(); err != nil {
		return backends.Schedule{}, false, err
	}
	if p.Name == "" {
		return backends.Schedule{}, false, errors.New("declare schedule: job name is empty")
	}
	if p.Type != "interval" && p.Type != "cron" {
		return backends.Schedule{}, false, fmt.Errorf("declare schedule %s: schedule type %q is neither interval nor cron", p.Name, p.Type)
	}
	args := bytes.TrimSpace(p.Args)
	if len(args) == 0 {
		args = json.RawMessage(`{}`)
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(args, &obj) != nil || obj == nil {
		return backends.Schedule{}, false, fmt.Errorf("declare schedule %s: args must be a JSON object", p.Name)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	t := now()
	s := b.byNameLocked(p.Name)
	created := s == nil
	if created {
		s = &backends.Schedule{ID: backends.NewID(), Name: p.Name, Status: backends.ScheduleActive, CreatedAt: stamp(t)}
		b.schedules[s.ID] = s
	}
	keep := !created && s.Type == p.Type && s.Value == p.Value && s.NextRun != nil
	s.Type, s.Value, s.Args = p.Type, p.Value, slices.Clone(json.RawMessage(args))
	s.Queue = cmp.Or(p.Queue, "default")
	s.Priority, s.MaxAttempts = 100, 3
	if p.Priority != nil {
		s.Priority = *p.Priority
	}
	if p.MaxAttempts != nil {
		s.MaxAttempts = *p.MaxAttempts
	}
	if !keep {
		s.NextRun = stamp(p.NextRun)
	}
	s.UpdatedAt = stamp(t)
	for id, o := range b.schedules {
		if o.Name == p.Name && id != s.ID {
			delete(b.schedules, id)
		}
	}
	return cloneSchedule(s), created, nil
}

// ListSchedules returns every schedule by job name.
func (b *Backend) ListSchedules(ctx context.Context) ([]backends.Schedule, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]backends.Schedule, 0, len(b.schedules))
	for _, s := range b.schedules {
		out = append(out, cloneSchedule(s))
	}
	slices.SortFunc(out, func(a, b backends.Schedule) int { return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.ID, b.ID)) })
	return out, nil
}

// SetScheduleStatus pauses or resumes a schedule.
func (b *Backend) SetScheduleStatus(ctx context.Context, name, status string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if status != backends.ScheduleActive && status != backends.SchedulePaused {
		return fmt.Errorf("set schedule %s status: %q is neither active nor paused", name, status)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.byNameLocked(name)
	if s == nil {
		return fmt.Errorf("schedule %s: %w", name, backends.ErrNotFound)
	}
	s.Status, s.UpdatedAt = status, stamp(now())
	return nil
}

// RemoveSchedule deletes a schedule.
func (b *Backend) RemoveSchedule(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	found := false
	for id, s := range b.schedules {
		if s.Name == name {
			delete(b.schedules, id)
			found = true
		}
	}
	if !found {
		return fmt.Errorf("schedule %s: %w", name, backends.ErrNotFound)
	}
	return nil
}

// DueSchedules returns the active schedules due at now (or without a next
// run), oldest due first.
func (b *Backend) DueSchedules(ctx context.Context, at time.Time) ([]backends.Schedule, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []backends.Schedule
	for _, s := range b.schedules {
		if s.Status == backends.ScheduleActive && (s.NextRun == nil || !s.NextRun.After(at)) {
			out = append(out, cloneSchedule(s))
		}
	}
	slices.SortFunc(out, func(a, b backends.Schedule) int {
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
	return out, nil
}

// InitScheduleNextRun gives a schedule without a next run its first one.
func (b *Backend) InitScheduleNextRun(ctx context.Context, id string, next time.Time) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.schedules[id]
	if !ok || s.NextRun != nil {
		return false, nil
	}
	s.NextRun, s.UpdatedAt = stamp(next), stamp(now())
	return true, nil
}

// FireSchedule fires a due schedule under the store's lock.
func (b *Backend) FireSchedule(ctx context.Context, f backends.ScheduleFiring) (backends.Job, bool, error) {
	if err := ctx.Err(); err != nil {
		return backends.Job{}, false, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.schedules[f.ScheduleID]
	if !ok || s.Status != backends.ScheduleActive || s.NextRun == nil || !s.NextRun.Equal(f.Due.UTC().Truncate(time.Microsecond)) {
		return backends.Job{}, false, nil
	}
	t := now()
	j := &backends.Job{ID: backends.NewID(), Name: s.Name, Args: slices.Clone(s.Args), Status: backends.StatusQueued,
		MaxAttempts: s.MaxAttempts, Queue: s.Queue, Priority: s.Priority, CreatedAt: t, UpdatedAt: t}
	if f.ProducerID != "" {
		j.ProducerID = ptr(f.ProducerID)
	}
	b.insertLocked(j)
	s.NextRun, s.LastRun = stamp(f.NextRun), stamp(f.FiredAt)
	s.RunCount++
	s.LastJobID = ptr(j.ID)
	s.UpdatedAt = stamp(t)
	b.notifyLocked(j.Queue)
	return cloneJob(j), true, nil
}

// ScheduleLeader always leads: the store's lock makes each firing atomic.
func (b *Backend) ScheduleLeader() backends.ScheduleLeader { return backends.LocalScheduleLeader{} }
