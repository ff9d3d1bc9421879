package postgres

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends/postgres/pgtest"
	"github.com/soniq-dev/soniq-sidecar/internal/netfault"
)

// Over a slow link, Close does not wait for a connection closing after a
// cancelled statement (a cancel request and a goodbye, each answered: two
// round trips or more); it says goodbye on the idle ones and returns.
// Waiting for the pool, it took closeWait (250 ms) here, at the end of
// every shutdown whose services were stopped mid-statement.
func TestCloseDoesNotWaitForACancelledStatementsConnection(t *testing.T) {
	raw := pgtest.NewDatabase(t)
	u, err := url.Parse(raw)
	require.NoError(t, err)
	proxy, err := netfault.Start(u.Host)
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Close() })
	via := *u
	via.Host = proxy.Addr()
	b, err := Open(t.Context(), via.String())
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	// An idle connection beside the one about to be cut.
	require.NoError(t, b.Ping(t.Context()))
	proxy.SetLatency(100 * time.Millisecond)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, err = b.pool.Exec(ctx, "SELECT pg_sleep(10)")
	require.Error(t, err, "the statement is cut")
	start := time.Now()
	require.NoError(t, b.Close())
	took := time.Since(start)
	t.Logf("Close took %s", took)
	assert.Less(t, took, 100*time.Millisecond, "the cut connection's goodbye is not waited for")
}

// Giving the scheduler's leadership up over a partition waits no longer
// than its context (a shutdown passes its write deadline). Before, the
// unlock waited its own 5 s whatever the caller's deadline: a sidecar
// shut down during a partition exited 10 s after SIGTERM with
// shutdown_timeout 3 s and shutdown_write_timeout 2 s. The session is
// closed in any case, and once the link heals the server frees the lock.
func TestScheduleLeaderCloseOverAPartitionEndsWithItsContext(t *testing.T) {
	raw := pgtest.NewDatabase(t)
	u, err := url.Parse(raw)
	require.NoError(t, err)
	proxy, err := netfault.Start(u.Host)
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Close() })
	via := *u
	via.Host = proxy.Addr()
	ctx := t.Context()
	b, err := Open(ctx, via.String())
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	l := b.ScheduleLeader()
	lead, _, err := l.Hold(ctx)
	require.NoError(t, err)
	require.True(t, lead, "the only scheduler leads")

	proxy.Partition()
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	l.Close(cctx)
	took := time.Since(start)
	t.Logf("Close over a partition took %s with a context of 200 ms", took)
	assert.Less(t, took, 1500*time.Millisecond, "bounded by its context, not by the unlock's own 5 s")

	proxy.Heal()
	direct, err := pgx.Connect(ctx, raw)
	require.NoError(t, err)
	t.Cleanup(func() { _ = direct.Close(context.Background()) })
	assert.Eventually(t, func() bool {
		var ok bool
		return direct.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", schedulerLockKey).Scan(&ok) == nil && ok
	}, 10*time.Second, 50*time.Millisecond, "the closed session's lock is freed once the link heals")
}
