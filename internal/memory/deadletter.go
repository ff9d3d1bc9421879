package memory

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// ListDeadLetter returns dead-letter rows, newest move first.
func (b *Backend) ListDeadLetter(ctx context.Context, limit int) ([]backends.DeadLetterJob, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]backends.DeadLetterJob, 0, len(b.deadLetters))
	for _, d := range b.deadLetters {
		out = append(out, cloneDeadLetter(d))
	}
	slices.SortFunc(out, func(x, y backends.DeadLetterJob) int {
		if c := y.MovedAt.Compare(x.MovedAt); c != 0 {
			return c
		}
		return strings.Compare(x.ID, y.ID)
	})
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// ReplayDeadLetter enqueues a copy of a dead-letter row and keeps the row
// as the audit trail, as Soniq's dead-letter service does.
func (b *Backend) ReplayDeadLetter(ctx context.Context, id string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	newJobID := backends.NewID()
	b.mu.Lock()
	defer b.mu.Unlock()
	d, ok := b.deadLetters[id]
	if !ok {
		return "", fmt.Errorf("replay dead-letter job %s: %w", id, backends.ErrNotFound)
	}
	b.replayLocked(d, newJobID, now())
	b.notifyLocked(d.Queue)
	return newJobID, nil
}

// replayLocked inserts a fresh queued copy of d and counts the
// resurrection on d.
func (b *Backend) replayLocked(d *backends.DeadLetterJob, id string, t time.Time) {
	// Soniq's replay inserts scheduled_at = NOW(): runnable at once.
	b.insertLocked(&backends.Job{
		ID:          id,
		Name:        d.Name,
		Args:        slices.Clone(d.Args),
		Status:      backends.StatusQueued,
		MaxAttempts: d.MaxAttempts,
		Queue:       d.Queue,
		Priority:    d.Priority,
		ScheduledAt: ptr(t),
		CreatedAt:   t,
		UpdatedAt:   t,
	})
	d.ResurrectionCount++
	d.LastResurrectionAt = ptr(t)
}

// PurgeDeadLetter deletes a dead-letter row.
func (b *Backend) PurgeDeadLetter(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.deadLetters[id]; !ok {
		return fmt.Errorf("purge dead-letter job %s: %w", id, backends.ErrNotFound)
	}
	delete(b.deadLetters, id)
	return nil
}

func cloneDeadLetter(d *backends.DeadLetterJob) backends.DeadLetterJob {
	c := *d
	c.Args = slices.Clone(d.Args)
	c.Tags = slices.Clone(d.Tags)
	c.LastError = clonePtr(d.LastError)
	c.LastResurrectionAt = clonePtr(d.LastResurrectionAt)
	return c
}

// matchDeadLetter reports whether f selects d at time t.
func matchDeadLetter(f backends.DeadLetterFilter, d *backends.DeadLetterJob, t time.Time) bool {
	if len(f.JobNames) > 0 && !slices.Contains(f.JobNames, d.Name) {
		return false
	}
	if len(f.Queues) > 0 && !slices.Contains(f.Queues, d.Queue) {
		return false
	}
	if f.Since > 0 && d.MovedAt.Before(t.Add(-f.Since)) {
		return false
	}
	if f.OlderThan > 0 && !d.MovedAt.Before(t.Add(-f.OlderThan)) {
		return false
	}
	return true
}

// CountDeadLetters counts the dead-letter rows f selects.
func (b *Backend) CountDeadLetters(ctx context.Context, f backends.DeadLetterFilter) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	t := now()
	var n int64
	for _, d := range b.deadLetters {
		if matchDeadLetter(f, d, t) {
			n++
		}
	}
	return n, nil
}

// EachDeadLetter calls fn with copies of the selected rows, newest move
// first. The rows are copied under the lock and fn runs without it, so fn
// may call back into the store.
func (b *Backend) EachDeadLetter(ctx context.Context, f backends.DeadLetterFilter, limit int, fn func(backends.DeadLetterJob) error) error {
	if limit < 0 {
		return fmt.Errorf("reading dead-letter jobs: negative limit %d", limit)
	}
	all, err := b.ListDeadLetter(ctx, 0)
	if err != nil {
		return err
	}
	t := now()
	sent := 0
	for i := range all {
		if !matchDeadLetter(f, &all[i], t) {
			continue
		}
		if err := fn(all[i]); err != nil {
			return err
		}
		if sent++; limit > 0 && sent == limit {
			break
		}
	}
	return nil
}

// ReplayDeadLetters replays every selected row under one lock.
func (b *Backend) ReplayDeadLetters(ctx context.Context, f backends.DeadLetterFilter) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	t := now()
	var n int64
	woken := map[string]bool{}
	for _, d := range b.deadLetters {
		if !matchDeadLetter(f, d, t) {
			continue
		}
		b.replayLocked(d, backends.NewID(), t)
		n++
		if !woken[d.Queue] {
			woken[d.Queue] = true
			b.notifyLocked(d.Queue)
		}
	}
	return n, nil
}

// PurgeDeadLetters deletes every selected row.
func (b *Backend) PurgeDeadLetters(ctx context.Context, f backends.DeadLetterFilter) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	t := now()
	var n int64
	for id, d := range b.deadLetters {
		if matchDeadLetter(f, d, t) {
			delete(b.deadLetters, id)
			n++
		}
	}
	return n, nil
}

// BackdateDeadLetter moves a dead-letter row's moved_to_dead_letter_at back by d.
func (b *Backend) BackdateDeadLetter(ctx context.Context, id string, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	row, ok := b.deadLetters[id]
	if !ok {
		return fmt.Errorf("backdate dead-letter job %s: %w", id, backends.ErrNotFound)
	}
	row.MovedAt = row.MovedAt.Add(-d)
	return nil
}
