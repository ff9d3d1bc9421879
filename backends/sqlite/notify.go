package sqlite

import (
	"context"
	"fmt"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// subscriber is one Subscribe channel.
type subscriber struct {
	ch   chan backends.Wakeup
	stop func() bool // stops the context.AfterFunc that closes ch
}

// Subscribe delivers the queue of every job enqueued (or replayed) through
// this Backend, and the id of every running job a cancel is requested for
// through it. SQLite has no cross-process notification; other producers'
// jobs are found by polling. No goroutine is started: context.AfterFunc
// closes the channel once ctx is done.
func (b *Backend) Subscribe(ctx context.Context) (<-chan backends.Wakeup, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("subscribing to new jobs: %w", err)
	}
	s := &subscriber{ch: make(chan backends.Wakeup, subscriberBuffer)}
	b.subsMu.Lock()
	defer b.subsMu.Unlock()
	if b.closed {
		return nil, fmt.Errorf("subscribing to new jobs: backend closed")
	}
	b.subs[s] = struct{}{}
	s.stop = context.AfterFunc(ctx, func() { b.unsubscribe(s) })
	return s.ch, nil
}

func (b *Backend) unsubscribe(s *subscriber) {
	b.subsMu.Lock()
	defer b.subsMu.Unlock()
	if _, ok := b.subs[s]; ok {
		delete(b.subs, s)
		close(s.ch)
	}
}

// notify wakes every subscriber without blocking; a full buffer already
// holds a pending wake-up, so dropping coalesces.
func (b *Backend) notify(queue string) { b.wake(backends.Wakeup{Queue: queue}) }

func (b *Backend) wake(w backends.Wakeup) {
	b.subsMu.Lock()
	defer b.subsMu.Unlock()
	for s := range b.subs {
		select {
		case s.ch <- w:
		default:
		}
	}
}

func (b *Backend) closeSubscribers() {
	b.subsMu.Lock()
	defer b.subsMu.Unlock()
	b.closed = true
	for s := range b.subs {
		s.stop()
		delete(b.subs, s)
		close(s.ch)
	}
}
