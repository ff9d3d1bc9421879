// Package audit is a worker's self-audit: the defence against every bug
// that could leave a job processing under a live worker that is not
// running it. Such a row is never recovered by anyone else (the worker
// heartbeats, so no stale-worker recovery takes it), so it would wait
// forever. The worker periodically reads the rows processing under its id
// and compares them with the jobs it knows it holds; a row it does not
// know, seen so at two reads at least a grace apart and at the same
// attempt, is an orphan and is given back to the queue.
//
// The package holds the reading service (Service) and the decision
// (Tracker); what the worker knows, and the give-back, are the engine's.
package audit

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// Reader is what the service reads the rows with.
type Reader interface {
	ProcessingJobs(ctx context.Context, workerID string) ([]backends.Job, error)
}

// Reading is one read of the rows processing under the worker.
type Reading struct {
	Rows []backends.Job
	At   time.Time // when the read started: the rows are no older
	Err  error
}

// Service reads the worker's processing rows every Interval and hands each
// reading to Report, which must not block (the engine queues it).
type Service struct {
	Backend  Reader
	WorkerID string
	Interval time.Duration
	Report   func(Reading)

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// Start runs the service on a goroutine of its own until ctx ends or Stop
// is called. A second Start does nothing.
func (s *Service) Start(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done != nil {
		return
	}
	ctx, s.cancel = context.WithCancel(ctx)
	done := make(chan struct{})
	s.done = done
	go func() {
		defer close(done)
		if err := s.Run(ctx); err != nil && s.Report != nil {
			s.Report(Reading{At: time.Now(), Err: err})
		}
	}()
}

// Stop ends the service and returns once its goroutine has; it does
// nothing if it never started.
func (s *Service) Stop() {
	s.mu.Lock()
	cancel, done := s.cancel, s.done
	s.mu.Unlock()
	if done == nil {
		return
	}
	cancel()
	<-done
}

// Run reads until ctx is done; it returns nil then.
func (s *Service) Run(ctx context.Context) error {
	if s.Interval <= 0 {
		return fmt.Errorf("audit: interval must be > 0, got %s", s.Interval)
	}
	t := time.NewTicker(s.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		// A read is bounded by the interval, so a database that hangs
		// delays the next reading instead of stacking them.
		rctx, cancel := context.WithTimeout(ctx, s.Interval)
		at := time.Now()
		rows, err := s.Backend.ProcessingJobs(rctx, s.WorkerID)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			err = fmt.Errorf("self-audit: read the rows processing under worker %s: %w", s.WorkerID, err)
		}
		s.Report(Reading{Rows: rows, At: at, Err: err})
	}
}

// Tracker decides which rows are orphans. Its zero value is ready; it is
// not safe for concurrent use (the engine's loop owns it).
type Tracker struct {
	suspects map[string]suspect
}

type suspect struct {
	attempts int
	since    time.Time // the reading that first found it unknown
}

// Observe takes a reading's rows and whether the worker knows each one, and
// returns the orphans: rows unknown at this reading and at an earlier one
// at least grace before it, at the same attempt. A row known, gone, or
// claimed again (another attempt) in between is no suspect any more.
func (t *Tracker) Observe(rows []backends.Job, at time.Time, grace time.Duration, known func(id string) bool) []backends.Job {
	next := make(map[string]suspect, len(t.suspects))
	var orphans []backends.Job
	for _, j := range rows {
		if j.Status != backends.StatusProcessing || known(j.ID) {
			continue
		}
		s, ok := t.suspects[j.ID]
		if !ok || s.attempts != j.Attempts {
			next[j.ID] = suspect{attempts: j.Attempts, since: at}
			continue
		}
		if at.Sub(s.since) >= grace {
			orphans = append(orphans, j)
			continue
		}
		next[j.ID] = s
	}
	t.suspects = next
	return orphans
}

// Reset forgets every suspect: what the worker knows changed wholesale (its
// row was registered again, or it took over a predecessor's rows).
func (t *Tracker) Reset() { t.suspects = nil }

// Suspects is how many rows are unknown and waiting for their second look.
func (t *Tracker) Suspects() int { return len(t.suspects) }
