package main

import (
	"context"
	"encoding/json"
	"os"
	"sync"
	"time"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/backends/postgres"
)

// ceilingRun drains the queue with the sidecar's own statements and no
// handler at all: one claim in flight at a time, limit = batch (the most the
// supervisor claims for a pool: its free capacity), and a concurrent writer
// that completes whatever is pending in batches of up to 500 (as
// internal/completer/completer.go does). It returns when every job is written; ready
// runs before the first claim and finished after the last write, while the
// pool's server processes are still alive to be measured.
func ceilingRun(ctx context.Context, url string, batch int, ready, finished func()) error {
	b, err := postgres.Open(ctx, url)
	if err != nil {
		return err
	}
	defer b.Close()
	workerID := backends.NewID()
	host, _ := os.Hostname()
	if err := b.RegisterWorker(ctx, backends.Worker{ID: workerID, Hostname: host + "-bench-ceiling-" + workerID[:8], PID: os.Getpid(),
		Concurrency: batch, Version: "bench"}); err != nil {
		return err
	}
	// Warm the pool's connections so the first statements do not pay for them.
	if _, err := b.Claim(ctx, backends.ClaimParams{WorkerID: workerID, Names: []string{"bench.none"}, Limit: 1}); err != nil {
		return err
	}
	ready()

	var (
		mu      sync.Mutex
		pending []backends.Completion
		closed  bool
		wake    = make(chan struct{}, 1)
		werr    error
		wdone   = make(chan struct{})
	)
	signal := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	go func() {
		defer close(wdone)
		for {
			mu.Lock()
			cs, c := pending, closed
			mu.Unlock()
			if len(cs) == 0 {
				if c {
					return
				}
				<-wake
				continue
			}
			cs = cs[:min(len(cs), 500):min(len(cs), 500)]
			if _, err := b.Complete(ctx, workerID, cs); err != nil {
				werr = err
				return
			}
			mu.Lock()
			pending = pending[len(cs):]
			mu.Unlock()
		}
	}()
	null := json.RawMessage("null")
	for {
		jobs, err := b.Claim(ctx, backends.ClaimParams{WorkerID: workerID,
			Names: []string{"bench.noop", "bench.latency", "bench.sleep"}, Limit: batch})
		if err != nil {
			return err
		}
		mu.Lock()
		for _, j := range jobs {
			// What the supervisor writes for a handler that returned None.
			pending = append(pending, backends.Completion{JobID: j.ID, Outcome: backends.OutcomeDone, Result: null, ResultTTL: 300 * time.Second})
		}
		if len(jobs) == 0 {
			closed = true
		}
		mu.Unlock()
		signal()
		if len(jobs) == 0 {
			break
		}
	}
	<-wdone
	if werr == nil {
		finished()
	}
	return werr
}
