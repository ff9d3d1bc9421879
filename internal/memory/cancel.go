package memory

import (
	"context"
	"fmt"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// RequestCancel cancels a queued job, or records a cancel request for a
// running one and wakes the subscribers.
func (b *Backend) RequestCancel(ctx context.Context, id string) (backends.CancelResult, error) {
	if err := ctx.Err(); err != nil {
		return backends.CancelResult{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	j, ok := b.jobs[id]
	if !ok {
		return backends.CancelResult{}, fmt.Errorf("cancel job %s: %w", id, backends.ErrNotFound)
	}
	res := backends.CancelResult{Outcome: backends.CancelFinished}
	switch j.Status {
	case backends.StatusQueued:
		j.Status = backends.StatusCancelled
		j.UpdatedAt = now()
		res.Outcome = backends.CancelledQueued
	case backends.StatusProcessing:
		b.cancels[id] = &backends.CancelRequest{JobID: id, WorkerID: clonePtr(j.WorkerID),
			Status: backends.CancelPending, RequestedAt: now()}
		b.wakeLocked(backends.Wakeup{CancelJobID: id})
		res.Outcome = backends.CancelRequested
	}
	res.Job = cloneJob(j)
	return res, nil
}

// PendingCancels returns the jobs processing under workerID with a pending
// cancel request.
func (b *Backend) PendingCancels(ctx context.Context, workerID string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var ids []string
	for id, r := range b.cancels {
		if r.Status == backends.CancelPending && b.heldLocked(id, workerID) {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// heldLocked reports whether job id is processing under workerID.
func (b *Backend) heldLocked(id, workerID string) bool {
	j, ok := b.jobs[id]
	return ok && j.Status == backends.StatusProcessing && j.WorkerID != nil && *j.WorkerID == workerID
}

// RefuseCancel answers a pending request for a job processing under
// workerID with refused.
func (b *Backend) RefuseCancel(ctx context.Context, workerID, jobID, handler, detail string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.cancels[jobID]
	if r == nil || r.Status != backends.CancelPending || !b.heldLocked(jobID, workerID) {
		return false, nil
	}
	r.Status, r.Handler, r.Detail, r.ResolvedAt = backends.CancelRefused, ptr(handler), ptr(detail), ptr(now())
	return true, nil
}

// GetCancelRequest returns a job's cancel request.
func (b *Backend) GetCancelRequest(ctx context.Context, jobID string) (backends.CancelRequest, error) {
	if err := ctx.Err(); err != nil {
		return backends.CancelRequest{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.cancels[jobID]
	if r == nil {
		return backends.CancelRequest{}, fmt.Errorf("cancel request for job %s: %w", jobID, backends.ErrNotFound)
	}
	c := *r
	c.WorkerID, c.Handler, c.Detail, c.ResolvedAt = clonePtr(r.WorkerID), clonePtr(r.Handler), clonePtr(r.Detail), clonePtr(r.ResolvedAt)
	return c, nil
}
