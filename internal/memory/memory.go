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
	schedules            map[string]*backends.Schedule // by id
	backends.LocalLeader                               // TryLeader
	subscribers          map[int]chan backends.Wakeup
	cancels              map[string]*backends.CancelRequest // by job id
	nextSub              int
	closed               chan struct{} // closed by Close; ends every Subscribe goroutine
	closeOnce            sync.Once
	// seq breaks created_at ties so rows enqueued within one clock tick
	// still claim in insertion order, as a SQL sequence of inserts would.
	seq  int64
	seqs map[string]int64
	// rateLog holds the claim times of rate-limited keys (limits.go).
	rateLog map[scopeKey][]time.Time
	// overrides are the operators' caps (limits.go).
	overrides map[overrideKey]backends.LimitOverride
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
		schedules:   map[string]*backends.Schedule{},
		subscribers: map[int]chan backends.Wakeup{},
		cancels:     map[string]*backends.CancelRequest{},
		closed:      make(chan struct{}),
		seqs:        map[string]int64{},
		rateLog:     map[scopeKey][]time.Time{},
		overrides:   map[overrideKey]backends.LimitOverride{},
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
	args, hash, err := enqueueArgs(p)
	if err != nil {
		return backends.Job{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	j, err := b.enqueueLocked(p, args, hash)
	if err != nil {
		return backends.Job{}, err
	}
	return cloneJob(j), nil
}

// enqueueArgs checks p's name, id and args and computes its args_hash
// (unique jobs only).
func enqueueArgs(p backends.EnqueueParams) (json.RawMessage, *string, error) {
	if p.Name == "" {
		return nil, nil, fmt.Errorf("enqueue: job name is empty")
	}
	if p.ID != "" && !backends.IsUUID(p.ID) {
		return nil, nil, fmt.Errorf("enqueue %q: id %q is not a uuid", p.Name, p.ID)
	}
	args := p.Args
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage(`{}`)
	}
	if !json.Valid(args) {
		return nil, nil, fmt.Errorf("enqueue %q: args are not valid JSON", p.Name)
	}
	var hash *string
	if p.UniqueJob {
		h, err := backends.ArgsHash(args)
		if err != nil {
			return nil, nil, fmt.Errorf("enqueue %q: hash args: %w", p.Name, err)
		}
		hash = &h
	}
	return args, hash, nil
}

// enqueueLocked inserts a queued job, or returns the queued row it
// conflicts with (its dedup key, or its name and args when unique). An id
// already taken is an error.
func (b *Backend) enqueueLocked(p backends.EnqueueParams, args json.RawMessage, hash *string) (*backends.Job, error) {
	for _, j := range b.jobs {
		if j.Status != backends.StatusQueued {
			continue
		}
		if p.DedupKey != "" && j.DedupKey != nil && *j.DedupKey == p.DedupKey {
			return j, nil
		}
		if hash != nil && j.UniqueJob && j.Name == p.Name && j.ArgsHash != nil && *j.ArgsHash == *hash {
			return j, nil
		}
	}

	id := p.ID
	if id == "" {
		id = backends.NewID()
	} else if _, taken := b.jobs[id]; taken {
		return nil, fmt.Errorf("enqueue %q: job id %s is taken", p.Name, id)
	}
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
	return j, nil
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
func (b *Backend) notifyLocked(queue string) { b.wakeLocked(backends.Wakeup{Queue: queue}) }

func (b *Backend) wakeLocked(w backends.Wakeup) {
	for _, ch := range b.subscribers {
		select {
		case ch <- w:
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
	if p.Limit < 0 || p.Ahead < 0 || p.Limit+p.Ahead <= 0 {
		return nil, fmt.Errorf("claim: limit %d and ahead %d must not be negative and must add up to more than 0", p.Limit, p.Ahead)
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
	if len(p.Limits) > 0 {
		candidates = b.limited(candidates, p, t)
	} else {
		if len(candidates) > p.Limit+p.Ahead {
			candidates = candidates[:p.Limit+p.Ahead]
		}
		if len(candidates) > p.Limit {
			// The reserve's rows: none on its last attempt (ClaimParams.Ahead).
			kept := candidates[:p.Limit]
			for _, j := range candidates[p.Limit:] {
				if j.Attempts+1 < j.MaxAttempts {
					kept = append(kept, j)
				}
			}
			candidates = kept
		}
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

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}
