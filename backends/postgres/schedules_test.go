package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends/postgres/pgtest"
)

// The scheduler's leadership excludes every other holder of Soniq's
// scheduler key: sidecars on a direct connection, sidecars behind a
// transaction-mode pooler (with the listen URL, or without it and a
// transaction lock per tick) and Soniq's own scheduler's session lock.
func TestScheduleLeaderIsExclusiveAcrossConnectionKinds(t *testing.T) {
	t.Parallel()
	direct, url := openTest(t)
	ctx := t.Context()
	pooled := func(listen string) *Backend {
		b, err := OpenWith(ctx, pgtest.ThroughPooler(t, url), Options{TransactionPooling: true, ListenURL: listen})
		require.NoError(t, err)
		t.Cleanup(func() { _ = b.Close() })
		return b
	}
	kinds := map[string]*Backend{"direct": direct, "pooler+listen": pooled(url), "pooler": pooled("")}
	soniq, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = soniq.Close(context.Background()) })
	soniqLock := func() bool {
		var ok bool
		require.NoError(t, soniq.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", schedulerLockKey).Scan(&ok))
		return ok
	}

	// While Soniq's scheduler holds it, no sidecar leads.
	require.True(t, soniqLock())
	for name, b := range kinds {
		l := b.ScheduleLeader()
		lead, _, err := l.Hold(ctx)
		require.NoError(t, err, name)
		require.False(t, lead, "%s leads beside Soniq's scheduler", name)
		l.Close(ctx)
	}
	_, err = soniq.Exec(ctx, "SELECT pg_advisory_unlock($1)", schedulerLockKey)
	require.NoError(t, err)

	for name, b := range kinds {
		l := b.ScheduleLeader()
		lead, done, err := l.Hold(ctx)
		require.NoError(t, err, name)
		require.True(t, lead, "%s leads when nobody else does", name)
		require.False(t, soniqLock(), "Soniq's scheduler leads beside %s", name)
		for other, ob := range kinds {
			ol := ob.ScheduleLeader()
			for range 5 { // through the pooler, different server sessions
				olead, odone, err := ol.Hold(ctx)
				require.NoError(t, err, other)
				require.False(t, olead, "%s leads beside %s", other, name)
				_ = odone
			}
			ol.Close(ctx)
		}
		done()
		if name != "pooler" {
			// A session lock outlives the tick: still held.
			require.False(t, soniqLock(), "%s keeps its session lock between ticks", name)
		}
		l.Close(ctx)
		require.True(t, soniqLock(), "the lock is free once %s gave it up", name)
		_, err = soniq.Exec(ctx, "SELECT pg_advisory_unlock($1)", schedulerLockKey)
		require.NoError(t, err)
	}
}

// A leader whose session dies loses the leadership: the next Hold says so
// and another scheduler takes over.
func TestScheduleLeaderLostWithItsSession(t *testing.T) {
	t.Parallel()
	a, url := openTest(t)
	b := openURL(t, url)
	ctx := t.Context()
	la, lb := a.ScheduleLeader(), b.ScheduleLeader()
	t.Cleanup(func() { la.Close(context.Background()) })
	t.Cleanup(func() { lb.Close(context.Background()) })
	lead, _, err := la.Hold(ctx)
	require.NoError(t, err)
	require.True(t, lead)
	pid := la.(*scheduleLeader).conn.PgConn().PID()
	_, err = b.pool.Exec(ctx, "SELECT pg_terminate_backend($1)", pid)
	require.NoError(t, err)
	deadline := time.Now().Add(10 * time.Second)
	for {
		lead, _, err := lb.Hold(ctx)
		require.NoError(t, err)
		if lead {
			break
		}
		require.True(t, time.Now().Before(deadline), "the lock of a terminated session was never freed")
		time.Sleep(20 * time.Millisecond)
	}
	lead, _, err = la.Hold(ctx)
	require.Error(t, err, "the old leader learns its session is gone")
	require.False(t, lead)
	lead, _, err = la.Hold(ctx)
	require.NoError(t, err)
	require.False(t, lead, "and follows")
}

// Only the leader holds a connection for the lock: the others look the
// lock up through the pool.
func TestScheduleFollowersHoldNoConnection(t *testing.T) {
	t.Parallel()
	a, url := openTest(t)
	ctx := t.Context()
	sessions := func() int {
		var n int
		require.NoError(t, a.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()`).Scan(&n))
		return n
	}
	leader := a.ScheduleLeader()
	t.Cleanup(func() { leader.Close(context.Background()) })
	lead, _, err := leader.Hold(ctx)
	require.NoError(t, err)
	require.True(t, lead)
	var followers []*Backend
	for range 3 {
		// One pooled session each at most: a follower's lock check must
		// fit in its pool, with no connection of its own beside it.
		followers = append(followers, openURL(t, url+"&pool_max_conns=1"))
	}
	for _, f := range followers {
		_, _, err := f.ScheduleLeader().Hold(ctx) // warm each pool
		require.NoError(t, err)
	}
	// The followers' own connections: other sessions of the database (the
	// leader pool's background work) come and go beside them.
	conns := func() int32 {
		var n int32
		for _, f := range followers {
			n += f.pool.Stat().TotalConns()
		}
		return n
	}
	before, beforeConns := sessions(), conns()
	for range 5 {
		for _, f := range followers {
			l := f.ScheduleLeader()
			lead, _, err := l.Hold(ctx)
			require.NoError(t, err)
			require.False(t, lead)
			require.Nil(t, l.(*scheduleLeader).conn, "a follower keeps no lock connection")
		}
	}
	require.LessOrEqual(t, conns(), beforeConns, "following opens no sessions")
	for _, f := range followers {
		require.LessOrEqual(t, f.pool.Stat().TotalConns(), int32(1), "a follower's pool of one session is all it uses")
	}
	t.Logf("sessions of the database before and after: %d, %d", before, sessions())
}
