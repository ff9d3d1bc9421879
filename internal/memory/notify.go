package memory

import (
	"context"
	"fmt"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// Subscribe delivers the queue of each local enqueue, and each running job
// a cancel is requested for, until ctx is done.
func (b *Backend) Subscribe(ctx context.Context) (<-chan backends.Wakeup, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	select {
	case <-b.closed:
		return nil, fmt.Errorf("subscribe: backend is closed")
	default:
	}
	ch := make(chan backends.Wakeup, 64)
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
