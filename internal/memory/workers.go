package memory

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// RegisterWorker upserts the worker row by id; a (hostname, pid) held by
// another id is refused (only TakeOver replaces a row).
func (b *Backend) RegisterWorker(ctx context.Context, w backends.Worker) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if w.ID == "" {
		return fmt.Errorf("register worker: id is empty")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.registerLocked(w)
}

func (b *Backend) registerLocked(w backends.Worker) error {
	for id, old := range b.workers {
		if id != w.ID && old.Hostname == w.Hostname && old.PID == w.PID {
			return fmt.Errorf("register worker %s: %s pid %d is held by worker %s: %w", w.ID, w.Hostname, w.PID, id, backends.ErrIdentityTaken)
		}
	}
	t := now()
	row := w
	row.Queues = slices.Clone(w.Queues)
	row.Metadata = slices.Clone(w.Metadata)
	row.Status = backends.WorkerActive
	row.LastHeartbeat = t
	row.HeartbeatAge = 0
	if old, ok := b.workers[w.ID]; ok {
		row.StartedAt = old.StartedAt
	} else {
		row.StartedAt = t
	}
	b.workers[w.ID] = &row
	return nil
}

// SameIdentity returns the other rows whose metadata names w's identity.
func (b *Backend) SameIdentity(ctx context.Context, w backends.Worker) ([]backends.Worker, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if _, ok := backends.IdentityOf(w.Metadata); !ok {
		return nil, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	t := now()
	var out []backends.Worker
	for id, r := range b.workers {
		if id == w.ID || !backends.IdentitiesMatch(r.Metadata, w.Metadata) {
			continue
		}
		c := *r
		c.Queues = slices.Clone(r.Queues)
		c.Metadata = slices.Clone(r.Metadata)
		c.HeartbeatAge = t.Sub(r.LastHeartbeat)
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b backends.Worker) int { return b.LastHeartbeat.Compare(a.LastHeartbeat) })
	return out, nil
}

// TakeOver registers w in place of dead workers of its identity and gives
// it their processing rows, all under one lock.
func (b *Backend) TakeOver(ctx context.Context, w backends.Worker, dead []backends.Worker) ([]backends.Job, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if w.ID == "" {
		return nil, fmt.Errorf("take over: worker id is empty")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	gone := map[string]bool{}
	for _, d := range dead {
		r, ok := b.workers[d.ID]
		if !ok || d.ID == w.ID {
			continue
		}
		if r.Status != d.Status || !r.LastHeartbeat.Equal(d.LastHeartbeat) {
			return nil, fmt.Errorf("worker %s taking over %s: it was %s with a heartbeat at %s, it is now %s with a heartbeat at %s: %w",
				w.ID, d.ID, d.Status, d.LastHeartbeat, r.Status, r.LastHeartbeat, backends.ErrWorkerAlive)
		}
		gone[d.ID] = true
	}
	// Check the registration before changing anything: all or nothing.
	for id, old := range b.workers {
		if id != w.ID && !gone[id] && old.Hostname == w.Hostname && old.PID == w.PID {
			return nil, fmt.Errorf("worker %s taking over: %s pid %d is held by worker %s: %w", w.ID, w.Hostname, w.PID, id, backends.ErrIdentityTaken)
		}
	}
	for id := range gone {
		delete(b.workers, id)
	}
	if err := b.registerLocked(w); err != nil {
		return nil, err
	}
	t := now()
	var jobs []backends.Job
	for _, j := range b.jobs {
		if j.WorkerID == nil || !gone[*j.WorkerID] {
			continue
		}
		if j.Status != backends.StatusProcessing {
			j.WorkerID = nil
			continue
		}
		j.WorkerID = ptr(w.ID)
		j.UpdatedAt = t
		jobs = append(jobs, cloneJob(j))
	}
	slices.SortFunc(jobs, func(a, b backends.Job) int { return strings.Compare(a.ID, b.ID) })
	return jobs, nil
}

// Heartbeat sets last_heartbeat = now.
func (b *Backend) Heartbeat(ctx context.Context, workerID string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	w, ok := b.workers[workerID]
	if !ok {
		return fmt.Errorf("heartbeat worker %s: %w", workerID, backends.ErrNotFound)
	}
	w.LastHeartbeat = now()
	if w.Status != backends.WorkerActive {
		return fmt.Errorf("heartbeat worker %s: its status is %q: %w", workerID, w.Status, backends.ErrWorkerNotActive)
	}
	return nil
}

// SetWorkerStatus sets a worker's status.
func (b *Backend) SetWorkerStatus(ctx context.Context, workerID, status string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	switch status {
	case backends.WorkerActive, backends.WorkerStopping, backends.WorkerStopped:
	default:
		return fmt.Errorf("set worker %s status: invalid status %q", workerID, status)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	w, ok := b.workers[workerID]
	if !ok {
		return fmt.Errorf("set worker %s status: %w", workerID, backends.ErrNotFound)
	}
	w.Status = status
	return nil
}

// LiveWorkers returns the active workers heard from within the last within.
func (b *Backend) LiveWorkers(ctx context.Context, within time.Duration) ([]backends.Worker, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	since := now().Add(-within)
	var out []backends.Worker
	for _, w := range b.workers {
		if w.Status == backends.WorkerActive && !w.LastHeartbeat.Before(since) {
			c := *w
			c.Queues = slices.Clone(w.Queues)
			c.Metadata = slices.Clone(w.Metadata)
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b backends.Worker) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// RegisterTasks upserts the task registry rows.
func (b *Backend) RegisterTasks(ctx context.Context, workerID string, names []string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	t := now()
	for _, n := range names {
		b.tasks[taskKey{name: n, workerID: workerID}] = t
	}
	return nil
}
