package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// Subscribe LISTENs on soniq_new_job and soniq_sidecar_cancel on one
// dedicated connection (outside the pool, so it never starves queries) and
// delivers each payload: a queue name, or the id of a running job a cancel
// was requested for. LISTEN is active when Subscribe returns. A lost connection is
// re-established with backoff; notifications sent meanwhile are lost, which
// callers cover by polling. The channel is closed when ctx is done or the
// backend is closed.
//
// In transaction-pooling mode without a ListenURL it returns
// backends.ErrNoWakeups: a LISTEN through such a pooler registers on a
// server session the client then leaves, so notifications would be lost
// without a word.
func (b *Backend) Subscribe(ctx context.Context) (<-chan backends.Wakeup, error) {
	if b.listenCfg == nil {
		return nil, fmt.Errorf("listen on %s through a transaction-mode pooler: %w", notifyChannel, backends.ErrNoWakeups)
	}
	conn, err := b.listen(ctx)
	if err != nil {
		return nil, err
	}
	out := make(chan backends.Wakeup, 64)
	ctx, cancel := context.WithCancel(ctx)
	b.subs.Add(2)
	go func() {
		defer b.subs.Done()
		select {
		case <-b.stop:
		case <-ctx.Done():
		}
		cancel()
	}()
	go func() {
		defer b.subs.Done()
		defer close(out)
		defer cancel()
		b.deliver(ctx, conn, out)
	}()
	return out, nil
}

func (b *Backend) listen(ctx context.Context) (*pgx.Conn, error) {
	cfg := b.listenCfg.Copy()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, b.wrap(err, "connect to %s:%d/%s to listen", cfg.Host, cfg.Port, cfg.Database)
	}
	// Without arguments pgx sends both statements at once (simple protocol).
	if _, err := conn.Exec(ctx, "LISTEN "+notifyChannel+"; LISTEN "+cancelChannel); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, b.wrap(err, "listen on %s and %s", notifyChannel, cancelChannel)
	}
	return conn, nil
}

const (
	listenBackoffMin = 100 * time.Millisecond
	listenBackoffMax = 10 * time.Second
)

func (b *Backend) deliver(ctx context.Context, conn *pgx.Conn, out chan<- backends.Wakeup) {
	closeConn := func() {
		if conn != nil {
			closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			_ = conn.Close(closeCtx)
			cancel()
			conn = nil
		}
	}
	defer closeConn()
	backoff := listenBackoffMin
	for {
		if conn == nil {
			var err error
			if conn, err = b.listen(ctx); err != nil {
				if !sleepCtx(ctx, backoff) {
					return
				}
				backoff = min(backoff*2, listenBackoffMax)
				continue
			}
			backoff = listenBackoffMin
			// Notifications sent while no LISTEN was active are lost: one
			// wake-up for every queue ("") makes the subscriber claim now
			// rather than at its next poll.
			select {
			case out <- backends.Wakeup{}:
			default:
			}
		}
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			closeConn()
			continue
		}
		w := backends.Wakeup{Queue: n.Payload}
		if n.Channel == cancelChannel {
			w = backends.Wakeup{CancelJobID: n.Payload}
		}
		// Never block the listener on a slow reader; wake-ups coalesce.
		select {
		case out <- w:
		default:
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
