package memory

import (
	"context"
	"time"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// RecoverStaleWorkers stops silent workers, whatever their status, and
// requeues their rows.
func (b *Backend) RecoverStaleWorkers(ctx context.Context, olderThan time.Duration, except string) (int, int, error) {
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	t := now()
	threshold := t.Add(-olderThan)
	silent := map[string]bool{}
	for id, w := range b.workers {
		if w.LastHeartbeat.Before(threshold) && id != except {
			silent[id] = false
		}
	}
	jobs := 0
	for _, j := range b.jobs {
		if j.Status == backends.StatusProcessing && j.WorkerID != nil {
			if _, ok := silent[*j.WorkerID]; ok {
				silent[*j.WorkerID] = true
				j.Status = backends.StatusQueued
				j.WorkerID = nil
				j.UpdatedAt = t
				jobs++
			}
		}
	}
	workers := 0
	for id, relieved := range silent {
		w := b.workers[id]
		if relieved || w.Status != backends.WorkerStopped {
			w.Status = backends.WorkerStopped
			workers++
		}
	}
	return workers, jobs, nil
}

// DeleteExpired deletes done rows whose expires_at has passed.
func (b *Backend) DeleteExpired(ctx context.Context) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	t := now()
	n := 0
	for id, j := range b.jobs {
		if j.Status == backends.StatusDone && j.ExpiresAt != nil && j.ExpiresAt.Before(t) {
			b.deleteLocked(id)
			n++
		}
	}
	before := t.Add(-backends.CancelRequestTTL)
	for id, r := range b.cancels {
		at := r.RequestedAt
		if r.ResolvedAt != nil {
			at = *r.ResolvedAt
		}
		if !at.Before(before) {
			continue
		}
		if j, ok := b.jobs[id]; r.Status == backends.CancelPending && ok &&
			(j.Status == backends.StatusQueued || j.Status == backends.StatusProcessing) {
			continue
		}
		delete(b.cancels, id)
	}
	return n, nil
}
