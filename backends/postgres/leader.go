package postgres

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// TryLeader takes Soniq's maintenance advisory lock (advisory_key
// "soniq.maintenance") without blocking. Sharing Soniq's key makes sidecars
// and Soniq's own workers elect one maintainer between them.
//
// The lock is transaction-scoped, in a transaction held open until release
// and bounded by the database itself: Postgres ends a session idle in its
// transaction for backends.LeaderHoldLimit, which frees the lock. A session lock
// would be freed only when the server noticed its client gone, and a
// partitioned leader behind a proxy that keeps TCP alive (PgBouncer, a
// cloud SQL proxy) is never noticed: it would stop stale recovery for the
// whole fleet. The same shape works through a transaction-mode pooler,
// where a session lock would stay on whichever server session ran it.
func (b *Backend) TryLeader(ctx context.Context) (func(context.Context), bool, error) {
	return b.tryLeaderTx(ctx)
}

// tryLeaderTx takes the same key with pg_try_advisory_xact_lock in a
// transaction that stays open until release. An open transaction pins one
// server session in a transaction-mode pooler, so the lock means what it
// says; it conflicts with the session lock of the same key, so sidecars on
// direct connections and Soniq's own workers still elect one leader with
// these. Ending the transaction, the client's death (the pooler closes a
// server session whose client left mid-transaction) or backends.LeaderHoldLimit of
// idleness frees it, whatever the network between does.
//
// The release rolls back within its ctx and at most 5 s; a rollback that
// fails closes the session (the server then ends the transaction). The
// leader's statements run on other sessions, so a shutdown's cut leaves
// this one idle: over a partition its rollback waited the 5 s past the
// shutdown's write deadline.
func (b *Backend) tryLeaderTx(ctx context.Context) (func(context.Context), bool, error) {
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		return nil, false, b.wrap(err, "begin leader transaction")
	}
	rollbackWithin := func(ctx context.Context) {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_ = tx.Rollback(rctx)
	}
	rollback := func() { rollbackWithin(context.WithoutCancel(ctx)) }
	// SET LOCAL ends with the transaction, so it never leaks to the next
	// client of the server session.
	if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL idle_in_transaction_session_timeout = %d", backends.LeaderHoldLimit.Milliseconds())); err != nil {
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
	return func(ctx context.Context) { once.Do(func() { rollbackWithin(ctx) }) }, true, nil
}
