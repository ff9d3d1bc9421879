package postgres

import (
	"context"
	"fmt"
	"sync"
	"time"
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

// leaderHoldLimit bounds how long a transaction-scoped leadership may sit
// idle in its transaction: Postgres ends the session (freeing the lock) if
// a leader stalls, e.g. a frozen process whose TCP connection stays open.
const leaderHoldLimit = 2 * time.Minute
