package integration

import (
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// A Postgres restart takes a fraction of a second, but PgBouncer waits
// server_login_retry after a failed server login before it tries again
// (15 s by default), and meanwhile refuses every client: a 0.2 s restart
// became 15–18 s without a database. The repository's PgBouncer settings
// (the ones the docs recommend) retry after 1 s, so a sidecar behind
// PgBouncer runs a job enqueued just after the database came back within
// a few seconds.
func TestPgBouncerRecoversQuicklyAfterPostgresRestart(t *testing.T) {
	// Serial: it bounds how soon PgBouncer logs in again after its server comes
	// back, a time other tests' load would stretch.
	w := newWorld(t, sdks[0], manifestOpts{})
	u, err := url.Parse(w.dbURL)
	require.NoError(t, err)
	// The cut stands for the restart: server connections die and new ones
	// are refused until it ends, as while Postgres is down.
	proxy := newCutProxy(t, u.Host)
	viaProxy := *u
	viaProxy.Host = proxy.ln.Addr().String()

	base, err := os.MkdirTemp("", "soniq-pgb-outage-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(base, 0o755))
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	pgbURL, err := url.Parse(startScript(t, nil, "pgbouncer.sh", filepath.Join(base, "pgb"), viaProxy.String()))
	require.NoError(t, err)
	pooled := *u
	pooled.Host = pgbURL.Host

	sc := w.startSidecar(map[string]string{"SONIQ_DATABASE_URL": pooled.String(), "SONIQ_DATABASE_POOLER": "transaction",
		"SONIQ_POLL_INTERVAL": "0.2"})
	sc.waitReady(t, w.handlerName(), 1)
	first := w.enqueue("t.noop", `{}`, 0)
	w.waitDone(t, sc, 20*time.Second, first)

	proxy.cut()
	// Long enough for the sidecar's polls to make PgBouncer try (and fail)
	// a server login while the database is away.
	eventually(t, 10*time.Second, "a statement failed while the database was away", func() bool {
		return len(sc.logs("heartbeat failed")) > 0
	})
	time.Sleep(300 * time.Millisecond)
	proxy.restore()
	back := time.Now()
	id := w.enqueue("t.noop", `{}`, 0)
	eventually(t, 30*time.Second, "the job enqueued after the restart is done", func() bool {
		return w.job(id).Status == backends.StatusDone
	})
	took := time.Since(back)
	t.Logf("job done %.2fs after the database came back", took.Seconds())
	// 1 s of server_login_retry, a poll of 0.2 s and the job itself, with a
	// wide margin for a loaded machine; the default (15 s) is far outside.
	assert.Less(t, took, 6*time.Second, "PgBouncer must retry the server login soon after a restart")
	sc.stop(t)
}
