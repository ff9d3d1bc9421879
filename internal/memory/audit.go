package memory

import (
	"context"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// ProcessingJobs returns the rows processing under workerID.
func (b *Backend) ProcessingJobs(ctx context.Context, workerID string) ([]backends.Job, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []backends.Job
	for _, j := range b.jobs {
		if j.Status == backends.StatusProcessing && j.WorkerID != nil && *j.WorkerID == workerID {
			out = append(out, cloneJob(j))
		}
	}
	return out, nil
}

// ReleaseJobs gives back the rows of held still processing under workerID
// at the attempt held says.
func (b *Backend) ReleaseJobs(ctx context.Context, workerID string, held []backends.Job) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	t := now()
	var released []string
	for _, h := range held {
		j, ok := b.jobs[h.ID]
		if !ok || j.Status != backends.StatusProcessing || j.WorkerID == nil || *j.WorkerID != workerID || j.Attempts != h.Attempts {
			continue
		}
		j.Status = backends.StatusQueued
		j.WorkerID = nil
		j.UpdatedAt = t
		j.ScheduledAt = ptr(t)
		released = append(released, h.ID)
	}
	return released, nil
}
