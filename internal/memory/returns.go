package memory

import (
	"context"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// ReturnJobs gives back rows the worker claimed and never started, with the
// claim's attempt refunded and scheduled_at kept, all under one lock.
func (b *Backend) ReturnJobs(ctx context.Context, workerID string, held []backends.Job) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	t := now()
	var returned []string
	woken := map[string]bool{}
	for _, h := range held {
		j, ok := b.jobs[h.ID]
		if !ok || j.Status != backends.StatusProcessing || j.WorkerID == nil || *j.WorkerID != workerID || j.Attempts != h.Attempts {
			continue
		}
		j.Status = backends.StatusQueued
		j.WorkerID = nil
		j.Attempts = max(j.Attempts-1, 0)
		j.UpdatedAt = t
		returned = append(returned, h.ID)
		if !woken[j.Queue] {
			woken[j.Queue] = true
			b.notifyLocked(j.Queue)
		}
	}
	return returned, nil
}
