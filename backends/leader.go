package backends

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// LeaderHoldLimit bounds how long maintenance leadership may outlive its
// holder's last word to the database, on a backend that elects across
// processes: the leader's hold on the lock sits idle for the whole pass, and
// the Postgres backend has the database end it once it has been idle this
// long (a leader partitioned from the database, or frozen, while a proxy
// keeps its TCP connection open). A pass is bounded by 30 s, so a live
// leader is not cut short. A follower that has not been able to lead for
// longer than this says so.
const LeaderHoldLimit = 45 * time.Second

// LocalLeader is the maintenance leader lock of a backend that cannot
// coordinate across processes (SQLite on one host, memory): one holder per
// Backend instance at a time. Maintenance is idempotent, so two processes
// sharing a SQLite file each running it is harmless.
type LocalLeader struct {
	mu   sync.Mutex
	held bool
}

// TryLeader takes the lock if it is free; release gives it back (once).
func (l *LocalLeader) TryLeader(ctx context.Context) (release func(context.Context), ok bool, err error) {
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
	return func(context.Context) {
		once.Do(func() {
			l.mu.Lock()
			l.held = false
			l.mu.Unlock()
		})
	}, true, nil
}
