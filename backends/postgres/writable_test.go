package postgres

import (
	"context"
	"net"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/soniq-dev/soniq-sidecar/backends/postgres/pgtest"
)

// Every connection carries client-side keepalive and a TCP user timeout.
func TestConnectionsHaveKeepaliveAndUserTimeout(t *testing.T) {
	b := openURL(t, pgtest.NewDatabase(t))
	conn, err := b.pool.Acquire(t.Context())
	require.NoError(t, err)
	defer conn.Release()
	tc, ok := conn.Conn().PgConn().Conn().(*net.TCPConn)
	require.True(t, ok, "the test server is reached over TCP")
	raw, err := tc.SyscallConn()
	require.NoError(t, err)
	var keepalive, idle, userTimeout int
	var serr error
	require.NoError(t, raw.Control(func(fd uintptr) {
		if keepalive, serr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_KEEPALIVE); serr != nil {
			return
		}
		if idle, serr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_KEEPIDLE); serr != nil {
			return
		}
		userTimeout, serr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT)
	}))
	require.NoError(t, serr)
	assert.Equal(t, 1, keepalive)
	assert.Equal(t, int(keepaliveIdle.Seconds()), idle)
	assert.Equal(t, int(tcpUserTimeout.Milliseconds()), userTimeout)
}

// withDBDefault sets a database-level default for the sessions that start
// from now on, and resets it at cleanup.
func withDBDefault(t *testing.T, url, setting string) {
	t.Helper()
	name := url[strings.LastIndex(url, "/")+1:]
	if i := strings.IndexByte(name, '?'); i >= 0 {
		name = name[:i]
	}
	admin := openURL(t, url)
	_, err := admin.pool.Exec(t.Context(), "ALTER DATABASE "+name+" SET "+setting)
	require.NoError(t, err)
}

// A database whose new sessions are read-only is refused at connect, unless
// the URL chooses its servers itself with target_session_attrs.
func TestReadOnlySessionsAreRefusedUnlessTheURLChooses(t *testing.T) {
	url := pgtest.NewDatabase(t)
	withDBDefault(t, url, "default_transaction_read_only = on")

	_, err := Open(t.Context(), url)
	require.Error(t, err, "a read-only server is not a place to write results")
	assert.Contains(t, err.Error(), "read only")

	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	b, err := Open(t.Context(), url+sep+"target_session_attrs=any")
	require.NoError(t, err, "the URL's own choice stands")
	_ = b.Close()
}

// A pooled session that answers 25006 is not pooled again.
func TestSessionThatAnswersReadOnlyIsDropped(t *testing.T) {
	b := openURL(t, pgtest.NewDatabase(t))
	ctx := t.Context()
	conn, err := b.pool.Acquire(ctx)
	require.NoError(t, err)
	pid := conn.Conn().PgConn().PID()
	// The session turns read-only behind the pool's back, as one on a
	// demoted primary does.
	_, err = conn.Exec(ctx, "SET default_transaction_read_only = on")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "CREATE TEMP TABLE x (i int)")
	require.ErrorContains(t, err, "25006")
	conn.Release()

	seen := map[uint32]bool{}
	for range 4 {
		c, err := b.pool.Acquire(context.WithoutCancel(ctx))
		require.NoError(t, err)
		seen[c.Conn().PgConn().PID()] = true
		_, err = c.Exec(ctx, "CREATE TEMP TABLE IF NOT EXISTS y (i int)")
		assert.NoError(t, err, "every session handed out can write")
		c.Release()
	}
	assert.False(t, seen[pid], "the read-only session was dropped")
}
