package main

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends/postgres/pgtest"
)

// The probe's statement cut by its deadline through PgBouncer sends no
// cancel request: the statement, a stand-in for a probe stalled behind a
// stopped Postgres, is still running afterwards, and PgBouncer still serves.
func TestProbeCutThroughPgBouncerSendsNoCancelRequest(t *testing.T) {
	url := pgtest.NewDatabase(t)
	pooled := pgtest.ThroughPooler(t, url)

	conn, err := probeConnect(t.Context(), pooled)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	_, err = conn.Exec(ctx, `SELECT pg_sleep(2) /* a probe cut by its deadline */`, pgx.QueryExecModeSimpleProtocol)
	cancel()
	require.Error(t, err)
	_ = conn.Close(t.Context())
	time.Sleep(300 * time.Millisecond) // a cancel request would have landed by now

	direct, err := pgx.Connect(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = direct.Close(context.Background()) })
	var running int
	require.NoError(t, direct.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
		WHERE state = 'active' AND query LIKE '%a probe cut by its deadline%' AND pid <> pg_backend_pid()`).Scan(&running))
	assert.Equal(t, 1, running, "the statement was cancelled: the probe sent a cancel request through PgBouncer")
	require.NoError(t, probeOnce(t.Context(), pooled), "PgBouncer still serves")
}
