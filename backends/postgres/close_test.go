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

// openThroughProxy opens a backend on a new test database through a
// netfault proxy; raw is the database's own URL.
func openThroughProxy(t *testing.T) (b *Backend, proxy *netfault.Proxy, raw string) {
	t.Helper()
	raw = pgtest.NewDatabase(t)
	u, err := url.Parse(raw)
	require.NoError(t, err)
	proxy, err = netfault.Start(u.Host)
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Close() })
	via := *u
	via.Host = proxy.Addr()
	b, err = Open(t.Context(), via.String())
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	return b, proxy, raw
}

// releasedWithinOverAPartition partitions the link and checks that release,
// given a context of 200 ms, returns within it (and a goodbye written, not
// waited for), not after its own bound of 5 s.
func releasedWithinOverAPartition(t *testing.T, proxy *netfault.Proxy, release func(context.Context)) {
	t.Helper()
	proxy.Partition()
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	release(ctx)
	took := time.Since(start)
	t.Logf("the release over a partition took %s with a context of 200 ms", took)
	assert.Less(t, took, 1500*time.Millisecond, "bounded by its context, not by its own 5 s")
}

// Over a slow link, Close does not wait for a connection closing after a
// cancelled statement (a cancel request and a goodbye, each answered: two
// round trips or more); it says goodbye on the idle ones and returns.
// Waiting for the pool, it took closeWait (250 ms) here, at the end of
// every shutdown whose services were stopped mid-statement.
func TestCloseDoesNotWaitForACancelledStatementsConnection(t *testing.T) {
	b, proxy, _ := openThroughProxy(t)
	// An idle connection beside the one about to be cut.
	require.NoError(t, b.Ping(t.Context()))
	proxy.SetLatency(100 * time.Millisecond)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, err := b.pool.Exec(ctx, "SELECT pg_sleep(10)")
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
	ctx := t.Context()
	b, proxy, raw := openThroughProxy(t)
	l := b.ScheduleLeader()
	lead, _, err := l.Hold(ctx)
	require.NoError(t, err)
	require.True(t, lead, "the only scheduler leads")

	releasedWithinOverAPartition(t, proxy, l.Close)

	proxy.Heal()
	direct, err := pgx.Connect(ctx, raw)
	require.NoError(t, err)
	t.Cleanup(func() { _ = direct.Close(context.Background()) })
	assert.Eventually(t, func() bool {
		var ok bool
		return direct.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", schedulerLockKey).Scan(&ok) == nil && ok
	}, 10*time.Second, 50*time.Millisecond, "the closed session's lock is freed once the link heals")
}

// Giving the maintenance leadership up over a partition waits no longer
// than the release's context. The leader's statements run on other
// sessions than its lock's transaction, so a shutdown's cut leaves that
// session idle, and its rollback waited its own 5 s past the write
// deadline. A failed rollback closes the session; once the link heals the
// server ends the transaction and another worker leads.
func TestLeaderReleaseOverAPartitionEndsWithItsContext(t *testing.T) {
	ctx := t.Context()
	b, proxy, raw := openThroughProxy(t)
	release, ok, err := b.TryLeader(ctx)
	require.NoError(t, err)
	require.True(t, ok, "the only worker leads")

	releasedWithinOverAPartition(t, proxy, release)

	proxy.Heal()
	other, err := Open(ctx, raw)
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Close() })
	assert.Eventually(t, func() bool {
		rel, ok, err := other.TryLeader(ctx)
		if err == nil && ok {
			rel(ctx)
		}
		return err == nil && ok
	}, 10*time.Second, 50*time.Millisecond, "the abandoned transaction's lock is freed once the link heals")
}
