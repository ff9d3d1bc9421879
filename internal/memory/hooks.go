package memory

import (
	"context"
	"fmt"
	"time"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// The methods below reach past the Backend interface for the contract
// suite's harness (backendtest.Harness). They enforce what the SQL
// schemas enforce, notably the status CHECK that rejects 'dead_letter'.

// checkStatus is the soniq_jobs status CHECK constraint.
func checkStatus(status string) error {
	switch status {
	case backends.StatusQueued, backends.StatusProcessing, backends.StatusDone, backends.StatusCancelled:
		return nil
	}
	return fmt.Errorf("soniq_jobs status check: %q is not one of queued, processing, done, cancelled", status)
}

// SetRawStatus writes a job's status directly, subject only to the CHECK.
func (b *Backend) SetRawStatus(ctx context.Context, jobID, status string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkStatus(status); err != nil {
		return fmt.Errorf("set raw status of job %s: %w", jobID, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	j, ok := b.jobs[jobID]
	if !ok {
		return fmt.Errorf("set raw status of job %s: %w", jobID, backends.ErrNotFound)
	}
	j.Status = status
	return nil
}

// InsertRawStatus inserts a minimal job row with the given status.
func (b *Backend) InsertRawStatus(ctx context.Context, status string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkStatus(status); err != nil {
		return fmt.Errorf("insert raw job: %w", err)
	}
	id := backends.NewID()
	t := now()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.insertLocked(&backends.Job{
		ID: id, Name: "raw", Args: []byte(`{}`), Status: status, MaxAttempts: 3,
		Queue: "default", Priority: 100, CreatedAt: t, UpdatedAt: t,
	})
	return nil
}

// BackdateHeartbeat moves a worker's last_heartbeat back by d.
func (b *Backend) BackdateHeartbeat(ctx context.Context, workerID string, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	w, ok := b.workers[workerID]
	if !ok {
		return fmt.Errorf("backdate heartbeat of worker %s: %w", workerID, backends.ErrNotFound)
	}
	w.LastHeartbeat = w.LastHeartbeat.Add(-d)
	return nil
}

// BackdateExpiry moves a job's expires_at back by d.
func (b *Backend) BackdateExpiry(ctx context.Context, jobID string, d time.Duration) error {
	return b.updateJob(ctx, jobID, "backdate expiry", func(j *backends.Job) error {
		if j.ExpiresAt == nil {
			return fmt.Errorf("expires_at is NULL")
		}
		j.ExpiresAt = ptr(j.ExpiresAt.Add(-d))
		return nil
	})
}

// BackdateCreated moves a job's created_at back by d.
func (b *Backend) BackdateCreated(ctx context.Context, jobID string, d time.Duration) error {
	return b.updateJob(ctx, jobID, "backdate created_at", func(j *backends.Job) error {
		j.CreatedAt = j.CreatedAt.Add(-d)
		return nil
	})
}

func (b *Backend) updateJob(ctx context.Context, jobID, what string, f func(*backends.Job) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	j, ok := b.jobs[jobID]
	if !ok {
		return fmt.Errorf("%s of job %s: %w", what, jobID, backends.ErrNotFound)
	}
	if err := f(j); err != nil {
		return fmt.Errorf("%s of job %s: %w", what, jobID, err)
	}
	return nil
}

// SetRawAttempts writes a job's attempts directly.
func (b *Backend) SetRawAttempts(ctx context.Context, jobID string, attempts int) error {
	return b.updateJob(ctx, jobID, "set raw attempts", func(j *backends.Job) error {
		j.Attempts = attempts
		return nil
	})
}
