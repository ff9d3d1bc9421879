package memory

import (
	"context"
	"fmt"
	"slices"
	"strings"

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
	t := now()
	// Soniq's replay inserts scheduled_at = NOW(): runnable at once.
	b.insertLocked(&backends.Job{
		ID:          newJobID,
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
	b.notifyLocked(d.Queue)
	return newJobID, nil
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
