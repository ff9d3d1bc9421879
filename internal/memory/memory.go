// Package memory is an in-process Backend for tests only: it keeps Soniq's
// rows in mutex-protected maps, with the same observable behaviour as the
// SQL backends (the shared contract suite proves it), and persists nothing.
package memory

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// Backend is the in-memory store. The zero value is not usable; call New.
type Backend struct {
	mu                   sync.Mutex
	jobs                 map[string]*backends.Job
	deadLetters          map[string]*backends.DeadLetterJob
	workers              map[string]*backends.Worker
	tasks                map[taskKey]time.Time
	backends.LocalLeader // TryLeader
	subscribers          map[int]chan string
	nextSub              int
	closed               chan struct{} // closed by Close; ends every Subscribe goroutine
	closeOnce            sync.Once
	// seq breaks created_at ties so rows enqueued within one clock tick
	// still claim in insertion order, as a SQL sequence of inserts would.
	seq  int64
	seqs map[string]int64
}

type taskKey struct{ name, workerID string }

var _ backends.Backend = (*Backend)(nil)

// New returns an empty, ready backend.
func New() *Backend {
	return &Backend{
		jobs:        map[string]*backends.Job{},
		deadLetters: map[string]*backends.DeadLetterJob{},
		workers:     map[string]*backends.Worker{},
		tasks:       map[taskKey]time.Time{},
		subscribers: map[int]chan string{},
		closed:      make(chan struct{}),
		seqs:        map[string]int64{},
	}
}

// now is the store's clock: UTC without a monotonic reading, so stored
// times compare and print like the SQL backends' timestamps.
func now() time.Time { return time.Now().UTC().Round(0) }

// Migrate is a no-op: the maps exist from New.
func (b *Backend) Migrate(ctx context.Context) error { return ctx.Err() }

// Ping always succeeds while ctx is live.
func (b *Backend) Ping(ctx context.Context) error { return ctx.Err() }

// Close ends every subscription. The data stays readable.
func (b *Backend) Close() error {
	b.closeOnce.Do(func() {
		close(b.closed)
		b.mu.Lock()
		defer b.mu.Unlock()
		for id, ch := range b.subscribers {
			close(ch)
			delete(b.subscribers, id)
		}
	})
	return nil
}

// Enqueue inserts a queued job, or returns the queued row it conflicts with.
func (b *Backend) Enqueue(ctx context.Context, p backends.EnqueueParams) (backends.Job, error) {
	if err := ctx.Err(); err != nil {
		return backends.Job{}, err
	}
	if p.Name == "" {
		return backends.Job{}, fmt.Errorf("enqueue: job name is empty")
	}
	args := p.Args
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage(`{}`)
	}
	if !json.Valid(args) {
		return backends.Job{}, fmt.Errorf("enqueue %q: args are not valid JSON", p.Name)
	}
	var hash *string
	if p.UniqueJob {
		h, err := backends.ArgsHash(args)
		if err != nil {
			return backends.Job{}, fmt.Errorf("enqueue %q: hash args: %w", p.Name, err)
		}
		hash = &h
	}

	b.mu.Lock()
	defer b.mu.Unlock()
	for _, j := range b.jobs {
		if j.Status != backends.StatusQueued {
			continue
		}
		if p.DedupKey != "" && j.DedupKey != nil && *j.DedupKey == p.DedupKey {
			return cloneJob(j), nil
		}
		if hash != nil && j.UniqueJob && j.Name == p.Name && j.ArgsHash != nil && *j.ArgsHash == *hash {
			return cloneJob(j), nil
		}
	}

	id := backends.NewID()
	t := now()
	j := &backends.Job{
		ID:          id,
		Name:        p.Name,
		Args:        slices.Clone(args),
		ArgsHash:    hash,
		Status:      backends.StatusQueued,
		MaxAttempts: 3,
		Queue:       "default",
		Priority:    100,
		UniqueJob:   p.UniqueJob,
		CreatedAt:   t,
		UpdatedAt:   t,
	}
	if p.Queue != "" {
		j.Queue = p.Queue
	}
	if p.Priority != nil {
		j.Priority = *p.Priority
	}
	if p.MaxAttempts != nil {
		j.MaxAttempts = *p.MaxAttempts
	}
	if p.Delay > 0 {
		at := t.Add(p.Delay)
		j.ScheduledAt = &at
	}
	if p.DedupKey != "" {
		j.DedupKey = ptr(p.DedupKey)
	}
	if p.ProducerID != "" {
		j.ProducerID = ptr(p.ProducerID)
	}
	b.insertLocked(j)
	b.notifyLocked(j.Queue)
	return cloneJob(j), nil
}

func (b *Backend) insertLocked(j *backends.Job) {
	b.seq++
	b.seqs[j.ID] = b.seq
	b.jobs[j.ID] = j
}

func (b *Backend) deleteLocked(id string) {
	delete(b.jobs, id)
	delete(b.seqs, id)
}

// notifyLocked wakes subscribers without ever blocking: delivery is best
// effort and a full buffer already guarantees a wake-up is pending.
func (b *Backend) notifyLocked(queue string) {
	for _, ch := range b.subscribers {
		select {
		case ch <- queue:
		default:
		}
	}
}

// Get returns one job row.
func (b *Backend) Get(ctx context.Context, id string) (backends.Job, error) {
	if err := ctx.Err(); err != nil {
		return backends.Job{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	j, ok := b.jobs[id]
	if !ok {
		return backends.Job{}, fmt.Errorf("get job %s: %w", id, backends.ErrNotFound)
	}
	return cloneJob(j), nil
}

// Cancel cancels a queued job.
func (b *Backend) Cancel(ctx context.Context, id string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	j, ok := b.jobs[id]
	if !ok || j.Status != backends.StatusQueued {
		return false, nil
	}
	j.Status = backends.StatusCancelled
	j.UpdatedAt = now()
	return true, nil
}

// Claim takes up to p.Limit runnable rows in Soniq's order.
func (b *Backend) Claim(ctx context.Context, p backends.ClaimParams) ([]backends.Job, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if p.Limit <= 0 {
		return nil, fmt.Errorf("claim: limit must be > 0, got %d", p.Limit)
	}
	if p.WorkerID == "" {
		return nil, fmt.Errorf("claim: worker id is empty")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	t := now()
	w, ok := b.workers[p.WorkerID]
	if !ok {
		return nil, fmt.Errorf("claim for worker %s: %w", p.WorkerID, backends.ErrNotFound)
	}
	if w.Status != backends.WorkerActive {
		return nil, fmt.Errorf("claim for worker %s: its status is %q: %w", p.WorkerID, w.Status, backends.ErrWorkerNotActive)
	}
	w.LastHeartbeat = t
	var candidates []*backends.Job
	for _, j := range b.jobs {
		if j.Status != backends.StatusQueued ||
			(j.ScheduledAt != nil && j.ScheduledAt.After(t)) ||
			(len(p.Queues) > 0 && !slices.Contains(p.Queues, j.Queue)) ||
			(len(p.Names) > 0 && !slices.Contains(p.Names, j.Name)) ||
			slices.Contains(p.ExcludeNames, j.Name) {
			continue
		}
		candidates = append(candidates, j)
	}
	slices.SortFunc(candidates, b.compareClaimOrder)
	if len(candidates) > p.Limit {
		candidates = candidates[:p.Limit]
	}
	out := make([]backends.Job, 0, len(candidates))
	for _, j := range candidates {
		j.Status = backends.StatusProcessing
		j.Attempts++
		j.WorkerID = ptr(p.WorkerID)
		j.UpdatedAt = t
		out = append(out, cloneJob(j))
	}
	return out, nil
}

// compareClaimOrder is ORDER BY priority, scheduled_at NULLS FIRST, created_at.
func (b *Backend) compareClaimOrder(x, y *backends.Job) int {
	if c := x.Priority - y.Priority; c != 0 {
		return c
	}
	switch {
	case x.ScheduledAt == nil && y.ScheduledAt != nil:
		return -1
	case x.ScheduledAt != nil && y.ScheduledAt == nil:
		return 1
	case x.ScheduledAt != nil:
		if c := x.ScheduledAt.Compare(*y.ScheduledAt); c != 0 {
			return c
		}
	}
	if c := x.CreatedAt.Compare(y.CreatedAt); c != 0 {
		return c
	}
	return int(b.seqs[x.ID] - b.seqs[y.ID])
}

// Complete applies guarded terminal writes; all of them under one lock, so
// the batch is atomic as a single statement per outcome would be.
func (b *Backend) Complete(ctx context.Context, workerID string, cs []backends.Completion) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for _, c := range cs {
		if c.Outcome < backends.OutcomeDone || c.Outcome > backends.OutcomeSnooze {
			return nil, fmt.Errorf("complete job %s: unknown outcome %d", c.JobID, c.Outcome)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	t := now()
	var applied []string
	for _, c := range cs {
		j, ok := b.jobs[c.JobID]
		if !ok || j.Status != backends.StatusProcessing || j.WorkerID == nil || *j.WorkerID != workerID {
			continue
		}
		applied = append(applied, j.ID)
		switch c.Outcome {
		case backends.OutcomeDone:
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
			j.LastError = ptr("SNOOZE: " + c.Reason)
			j.WorkerID = nil
		}
		j.UpdatedAt = t
	}
	return applied, nil
}

// Nack returns processing rows to the queue (the field contract of docs/compatibility.md, "nack").
func (b *Backend) Nack(ctx context.Context, ids []string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	t := now()
	var nacked []string
	for _, id := range ids {
		j, ok := b.jobs[id]
		if !ok || j.Status != backends.StatusProcessing {
			continue
		}
		j.Status = backends.StatusQueued
		j.WorkerID = nil
		j.UpdatedAt = t
		j.ScheduledAt = ptr(t)
		nacked = append(nacked, id)
	}
	return nacked, nil
}

// Stats counts soniq_jobs by status and the dead-letter rows.
func (b *Backend) Stats(ctx context.Context) (backends.Stats, error) {
	if err := ctx.Err(); err != nil {
		return backends.Stats{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var s backends.Stats
	for _, j := range b.jobs {
		s.Count(j.Status, 1)
	}
	s.Count("dead_letter", int64(len(b.deadLetters)))
	return s, nil
}

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
		if id == w.ID || !backends.SameIdentity(r.Metadata, w.Metadata) {
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
	return n, nil
}

// Subscribe delivers the queue of each local enqueue until ctx is done.
func (b *Backend) Subscribe(ctx context.Context) (<-chan string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	select {
	case <-b.closed:
		return nil, fmt.Errorf("subscribe: backend is closed")
	default:
	}
	ch := make(chan string, 64)
	b.mu.Lock()
	id := b.nextSub
	b.nextSub++
	b.subscribers[id] = ch
	b.mu.Unlock()
	// Owned by ctx (or Close): it only waits, then unregisters and closes
	// under the lock so no send can race the close.
	go func() {
		select {
		case <-ctx.Done():
		case <-b.closed:
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		if c, ok := b.subscribers[id]; ok {
			close(c)
			delete(b.subscribers, id)
		}
	}()
	return ch, nil
}

func ptr[T any](v T) *T { return &v }

func cloneJob(j *backends.Job) backends.Job {
	c := *j
	c.Args = slices.Clone(j.Args)
	c.Result = slices.Clone(j.Result)
	c.ArgsHash = clonePtr(j.ArgsHash)
	c.DedupKey = clonePtr(j.DedupKey)
	c.ScheduledAt = clonePtr(j.ScheduledAt)
	c.ExpiresAt = clonePtr(j.ExpiresAt)
	c.LastError = clonePtr(j.LastError)
	c.ProducerID = clonePtr(j.ProducerID)
	c.WorkerID = clonePtr(j.WorkerID)
	return c
}

func cloneDeadLetter(d *backends.DeadLetterJob) backends.DeadLetterJob {
	c := *d
	c.Args = slices.Clone(d.Args)
	c.Tags = slices.Clone(d.Tags)
	c.LastError = clonePtr(d.LastError)
	c.LastResurrectionAt = clonePtr(d.LastResurrectionAt)
	return c
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}
