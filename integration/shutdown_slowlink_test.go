package integration

import (
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// A SIGTERM with six async jobs running, over a link with 100 ms of
// latency each way to Postgres: the six are cancelled and NACKed at
// shutdown_timeout, and the exit follows STOPPED by about one round trip
// (the NACKs and the stop mark in one statement, the services' last
// writes beside it, no wait for connections cut mid-statement). The
// timeline is logged (-v) for measuring; the bound leaves room for -race
// and a loaded machine. One write after another, this took 1.2–1.8 s past
// shutdown_timeout; the NACKs together, then the stop mark, then the
// close, 0.6–1.0 s; all together 0.25–0.47 s, two round trips when every
// pool connection was busy as the last write began (docs/shutdown.md).
func TestShutdownOverASlowLink(t *testing.T) {
	t.Parallel()
	w := newWorld(t, sdks[0], manifestOpts{concurrency: 8})
	proxy, viaProxy := w.faultProxy()
	ids := w.enqueueN("t.sleep_async", `{"seconds":60}`, 6)
	const timeout = 2 * time.Second
	sc := w.startSidecar(map[string]string{"SONIQ_DATABASE_URL": viaProxy.String(), "SONIQ_SHUTDOWN_TIMEOUT": "2"})
	w.waitStarted(t, ids...)
	proxy.SetLatency(100 * time.Millisecond)
	time.Sleep(time.Second) // every connection sees the latency
	sent := sc.signal(syscall.SIGTERM)
	code, at := sc.wait(30 * time.Second)
	require.Equal(t, 0, code)
	stopped := logTime(t, sc.waitLog(time.Second, "state transition", map[string]any{"state": "STOPPED"}))
	t.Logf("SIGTERM → STOPPED line %s → exit %s: %s past shutdown_timeout, %s from the STOPPED line",
		stopped.Sub(sent).Round(time.Millisecond), at.Sub(sent).Round(time.Millisecond),
		(at.Sub(sent) - timeout).Round(time.Millisecond), at.Sub(stopped).Round(time.Millisecond))
	assert.Less(t, at.Sub(sent), timeout+3*time.Second, "the last writes over a 100 ms link take a few round trips, not seconds")
	proxy.SetLatency(0)
	for _, id := range ids {
		j := w.job(id)
		assert.Equal(t, backends.StatusQueued, j.Status, "%s NACKed", id)
		assert.Equal(t, 1, j.Attempts, "%s: attempts kept", id)
	}
	var status string
	require.NoError(t, w.db.QueryRow(t.Context(), `SELECT status FROM soniq_workers WHERE id = $1`, sc.workerID(t)).Scan(&status))
	assert.Equal(t, backends.WorkerStopped, status, "the stop mark was written")
}
