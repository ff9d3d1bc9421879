package memory

import (
	"context"
	"fmt"
	"slices"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// Complete applies guarded terminal writes; all of them under one lock, so
// the batch is atomic as a single statement per outcome would be.
func (b *Backend) Complete(ctx context.Context, workerID string, cs []backends.Completion) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for _, c := range cs {
		if c.Outcome < backends.OutcomeDone || c.Outcome > backends.OutcomeCancelled {
			return nil, fmt.Errorf("complete job %s: unknown outcome %d", c.JobID, c.Outcome)
		}
		if c.Attempts < 1 {
			return nil, fmt.Errorf("complete job %s: %w", c.JobID, backends.ErrNoAttempt)
		}
	}
	kids, err := checkChildren(cs)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	t := now()
	var applied []string
	for _, c := range cs {
		j, ok := b.jobs[c.JobID]
		if !ok || j.Status != backends.StatusProcessing || j.WorkerID == nil || *j.WorkerID != workerID || j.Attempts != c.Attempts {
			continue
		}
		applied = append(applied, j.ID)
		switch c.Outcome {
		case backends.OutcomeDone:
			b.childrenLocked(kids[c.JobID])
			if c.ResultTTL == 0 {
				b.deleteLocked(j.ID)
				continue
			}
			j.Status = backends.StatusDone
			if c.Result != nil {
				j.Result = slices.Clone(c.Result)
			}
			exp := t.Add(c.ResultTTL)
			j.ExpiresAt = &exp
		case backends.OutcomeRetry:
			j.Status = backends.StatusQueued
			j.LastError = ptr(backends.TruncateError(c.Error))
			j.ScheduledAt = nil
			if c.Delay > 0 {
				at := t.Add(c.Delay)
				j.ScheduledAt = &at
			}
			j.WorkerID = nil
		case backends.OutcomeDeadLetter:
			b.deadLetters[j.ID] = &backends.DeadLetterJob{
				ID:                j.ID,
				Name:              j.Name,
				Args:              slices.Clone(j.Args),
				Queue:             j.Queue,
				Priority:          j.Priority,
				MaxAttempts:       j.MaxAttempts,
				Attempts:          j.Attempts,
				LastError:         ptr(backends.TruncateError(c.Error)),
				Reason:            c.Reason,
				OriginalCreatedAt: j.CreatedAt,
				MovedAt:           t,
				CreatedAt:         t,
			}
			b.deleteLocked(j.ID)
			continue
		case backends.OutcomeSnooze:
			j.Status = backends.StatusQueued
			j.Attempts = max(j.Attempts-1, 0)
			at := t.Add(min(max(c.Delay, 0), backends.MaxSnooze))
			j.ScheduledAt = &at
			// Soniq's reschedule_job writes "SNOOZE" alone without a reason.
			msg := "SNOOZE"
			if c.Reason != "" {
				msg += ": " + c.Reason
			}
			j.LastError = ptr(backends.TruncateError(msg))
			j.WorkerID = nil
		case backends.OutcomeCancelled:
			j.Status = backends.StatusCancelled
			if r := b.cancels[j.ID]; r != nil && r.Status == backends.CancelPending {
				r.Status, r.ResolvedAt = backends.CancelAcknowledged, ptr(t)
			}
		}
		j.UpdatedAt = t
	}
	return applied, nil
}

// Nack returns processing rows to the queue (the field contract of docs/compatibility.md, "nack").
// Guarded by the worker that holds the rows and the attempt it holds them at.
func (b *Backend) Nack(ctx context.Context, workerID string, held []backends.Job) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for _, h := range held {
		if h.Attempts < 1 {
			return nil, fmt.Errorf("nack job %s: %w", h.ID, backends.ErrNoAttempt)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	t := now()
	var nacked []string
	for _, h := range held {
		j, ok := b.jobs[h.ID]
		if !ok || j.Status != backends.StatusProcessing || j.WorkerID == nil || *j.WorkerID != workerID || j.Attempts != h.Attempts {
			continue
		}
		j.Status = backends.StatusQueued
		j.WorkerID = nil
		j.UpdatedAt = t
		j.ScheduledAt = ptr(t)
		nacked = append(nacked, h.ID)
	}
	return nacked, nil
}

// AdoptOrphans gives processing rows with no worker back to workerID.
func (b *Backend) AdoptOrphans(ctx context.Context, workerID string, ids []string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var adopted []string
	for _, id := range ids {
		if j, ok := b.jobs[id]; ok && j.Status == backends.StatusProcessing && j.WorkerID == nil {
			j.WorkerID = ptr(workerID)
			j.UpdatedAt = now()
			adopted = append(adopted, id)
		}
	}
	return adopted, nil
}
