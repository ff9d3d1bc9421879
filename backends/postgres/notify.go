package postgres

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// TryLeader takes Soniq's maintenance advisory lock (advisory_key
// "soniq.maintenance") without blocking, on a pooled connection that is held
// until release. Sharing Soniq's key makes sidecars and Soniq's own workers
// elect one maintainer between them; a dropped connection frees the lock.
//
// Through a transaction-mode pooler a session lock would stay on whichever
// server session ran it, so there the lock is transaction-scoped instead.
func (b *Backend) TryLeader(ctx context.Context) (func(), bool, error) {
	if b.opts.TransactionPooling {
		return b.tryLeaderTx(ctx)
	}
	conn, err := b.pool.Acquire(ctx)
	if err != nil {
		return nil, false, b.wrap(err, "acquire connection for leader lock")
	}
	var ok bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", maintenanceLockKey).Scan(&ok); err != nil {
		conn.Release()
		return nil, false, b.wrap(err, "try leader lock")
	}
	if !ok {
		conn.Release()
		return nil, false, nil
	}
	var once sync.Once
	release := func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var unlocked bool
			if err := conn.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", maintenanceLockKey).Scan(&unlocked); err != nil || !unlocked {
				// Closing the session is the sure way to free a session lock.
				_ = conn.Conn().Close(ctx)
			}
			conn.Release()
		})
	}
	return release, true, nil
}

// leaderHoldLimit bounds how long a transaction-scoped leadership may sit
// idle in its transaction: Postgres ends the session (freeing the lock) if
// a leader stalls, e.g. a frozen process whose TCP connection stays open.
const leaderHoldLimit = 2 * time.Minute

// tryLeaderTx takes the same key with pg_try_advisory_xact_lock in a
// transaction that stays open until release. An open transaction pins one
// server session in a transaction-mode pooler, so the lock means what it
// says; it conflicts with the session lock of the same key, so sidecars on
// direct connections and Soniq's own workers still elect one leader with
// these. Ending the transaction, the client's death (the pooler closes a
// server session whose client left mid-transaction) or leaderHoldLimit of
// idleness frees it.
func (b *Backend) tryLeaderTx(ctx context.Context) (func(), bool, error) {
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		return nil, false, b.wrap(err, "begin leader transaction")
	}
	rollback := func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = tx.Rollback(rctx)
	}
	// SET LOCAL ends with the transaction, so it never leaks to the next
	// client of the server session.
	if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL idle_in_transaction_session_timeout = %d", leaderHoldLimit.Milliseconds())); err != nil {
		rollback()
		return nil, false, b.wrap(err, "bound leader transaction")
	}
	var ok bool
	if err := tx.QueryRow(ctx, "SELECT pg_try_advisory_xact_lock($1)", maintenanceLockKey).Scan(&ok); err != nil {
		rollback()
		return nil, false, b.wrap(err, "try leader lock")
	}
	if !ok {
		rollback()
		return nil, false, nil
	}
	var once sync.Once
	return func() { once.Do(rollback) }, true, nil
}

// Subscribe LISTENs on soniq_new_job on a dedicated connection (outside the
// pool, so it never starves queries) and delivers each payload, the queue
// name. LISTEN is active when Subscribe returns. A lost connection is
// re-established with backoff; notifications sent meanwhile are lost, which
// callers cover by polling. The channel is closed when ctx is done or the
// backend is closed.
//
// In transaction-pooling mode without a ListenURL it returns
// backends.ErrNoWakeups: a LISTEN through such a pooler registers on a
// server session the client then leaves, so notifications would be lost
// without a word.
func (b *Backend) Subscribe(ctx context.Context) (<-chan string, error) {
	if b.listenCfg == nil {
		return nil, fmt.Errorf("listen on %s through a transaction-mode pooler: %w", notifyChannel, backends.ErrNoWakeups)
	}
	conn, err := b.listen(ctx)
	if err != nil {
		return nil, err
	}
	out := make(chan string, 64)
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
	if _, err := conn.Exec(ctx, "LISTEN "+notifyChannel); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, b.wrap(err, "listen on %s", notifyChannel)
	}
	return conn, nil
}

const (
	listenBackoffMin = 100 * time.Millisecond
	listenBackoffMax = 10 * time.Second
)

func (b *Backend) deliver(ctx context.Context, conn *pgx.Conn, out chan<- string) {
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
		}
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			closeConn()
			continue
		}
		// Never block the listener on a slow reader; wake-ups coalesce.
		select {
		case out <- n.Payload:
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
