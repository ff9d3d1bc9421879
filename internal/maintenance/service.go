package maintenance

import (
	"context"
	"sync"
	"time"
)

// service is the shape every service here shares: one goroutine, started
// by start and ended by Stop, which returns once it has.
type service struct {
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// start runs body on a goroutine of its own until ctx ends or Stop is
// called. A second start does nothing.
func (s *service) start(ctx context.Context, body func(context.Context)) {
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
		body(ctx)
	}()
}

// Stop ends the service and returns once its goroutine has. It does
// nothing if the service never started, and may be called again.
func (s *service) Stop() {
	s.mu.Lock()
	cancel, done := s.cancel, s.done
	s.mu.Unlock()
	if done == nil {
		return
	}
	cancel()
	<-done
}

// every runs f now (when first is set) and then every interval until ctx
// ends: the body of each periodic service.
func every(ctx context.Context, interval time.Duration, first bool, f func(context.Context)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	if first {
		f(ctx)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f(ctx)
		}
	}
}
