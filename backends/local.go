package backends

import (
	"context"
	"fmt"
	"sync"
)

// Count adds n rows of a status to its bucket ("dead_letter" for the count
// of the dead-letter table) and keeps Total the sum of the five buckets, as
// seed 002 defines it. Unknown statuses are ignored: they cannot exist.
func (s *Stats) Count(status string, n int64) {
	switch status {
	case StatusQueued:
		s.Queued += n
	case StatusProcessing:
		s.Processing += n
	case StatusDone:
		s.Done += n
	case StatusCancelled:
		s.Cancelled += n
	case "dead_letter":
		s.DeadLetter += n
	default:
		return
	}
	s.Total = s.Queued + s.Processing + s.Done + s.DeadLetter + s.Cancelled
}

// LocalLeader is the maintenance leader lock of a backend that cannot
// coordinate across processes (SQLite on one host, memory): one holder per
// Backend instance at a time. Maintenance is idempotent, so two processes
// sharing a SQLite file each running it is harmless.
type LocalLeader struct {
	mu   sync.Mutex
	held bool
}

// TryLeader takes the lock if it is free; release gives it back (once).
func (l *LocalLeader) TryLeader(ctx context.Context) (release func(), ok bool, err error) {
	if err := ctx.Err(); err != nil {
		return nil, false, fmt.Errorf("trying leadership: %w", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held {
		return nil, false, nil
	}
	l.held = true
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			l.held = false
			l.mu.Unlock()
		})
	}, true, nil
}
