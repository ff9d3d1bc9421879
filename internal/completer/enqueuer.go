package completer

import (
	"context"
	"errors"
	"log/slog"
	"sync"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// ErrStopped answers a request made after Stop.
var ErrStopped = errors.New("the sidecar is stopping: the child job was not written")

// EnqueueRequest is one immediate child job to write. Key is the caller's,
// handed back with the answer.
type EnqueueRequest struct {
	Key    any
	Params backends.EnqueueParams
}

// EnqueueAnswer is what became of an EnqueueRequest: the row that holds
// the job (its own id, or a queued duplicate's), or the error.
type EnqueueAnswer struct {
	Key   any
	JobID string
	Err   error
}

// EnqueuerConfig is what an Enqueuer writes with. Answered is called from
// the Enqueuer's goroutine once per request, after its write.
type EnqueuerConfig struct {
	Backend  backends.Backend
	Log      *slog.Logger
	Answered func(EnqueueAnswer)
}

// Enqueuer writes the child jobs a handler asks for at once (immediate),
// each in a transaction of its own, on a goroutine of its own, so that the
// loop never waits on the database and a result write never waits behind
// a child's. Create it with NewEnqueuer, start it with Start, end it with
// Stop, which returns once what it was given is written and answered.
type Enqueuer struct {
	cfg EnqueuerConfig

	mu      sync.Mutex
	queue   []EnqueueRequest
	closed  bool
	started bool
	wake    chan struct{} // capacity 1: "there is work"
	done    chan struct{} // closed when the goroutine has exited
}

// NewEnqueuer prepares an Enqueuer; nothing runs before Start.
func NewEnqueuer(cfg EnqueuerConfig) *Enqueuer {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Answered == nil {
		cfg.Answered = func(EnqueueAnswer) {}
	}
	return &Enqueuer{cfg: cfg, wake: make(chan struct{}, 1), done: make(chan struct{})}
}

// Start starts the goroutine that writes; a second Start does nothing.
func (e *Enqueuer) Start() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.started {
		return
	}
	e.started = true
	go e.run()
}

// Enqueue queues a write; it never blocks. After Stop the request is
// answered at once with ErrStopped.
func (e *Enqueuer) Enqueue(r EnqueueRequest) {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		e.cfg.Answered(EnqueueAnswer{Key: r.Key, Err: ErrStopped})
		return
	}
	e.queue = append(e.queue, r)
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// Stop writes what is queued, then ends the goroutine; it must follow Start.
func (e *Enqueuer) Stop() {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
	<-e.done
}

func (e *Enqueuer) run() {
	defer close(e.done)
	for {
		e.mu.Lock()
		batch, closed := e.queue, e.closed
		e.queue = nil
		e.mu.Unlock()
		for _, r := range batch {
			e.write(r)
		}
		if len(batch) > 0 {
			continue
		}
		if closed {
			return
		}
		<-e.wake
	}
}

// write runs one enqueue on a context of its own (a child asked for at
// once is written even while the sidecar stops), bounded by writeTimeout.
func (e *Enqueuer) write(r EnqueueRequest) {
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	job, err := e.cfg.Backend.Enqueue(ctx, r.Params)
	if err != nil {
		e.cfg.Log.Warn("a child job asked for at once could not be written", "job_name", r.Params.Name,
			"child_id", r.Params.ID, "error", err)
		e.cfg.Answered(EnqueueAnswer{Key: r.Key, Err: err})
		return
	}
	e.cfg.Answered(EnqueueAnswer{Key: r.Key, JobID: job.ID})
}
