package postgres

import (
	"context"
	"net/url"
	"testing"
	"time"

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
