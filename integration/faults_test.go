package integration

// Faults of a bad day in a pod, produced for real against the binary: signals
// from a terminal or a reload, settings that would recover live workers.

import (
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// SIGHUP (a closed terminal, a supervisor's reload) drains like SIGTERM:
// the running sync job finishes, its row is done, exit 0.
func TestFaultSighupDrains(t *testing.T) {
	w := newWorld(t, sdks[0], manifestOpts{})
	id := w.enqueue("t.sleep_sync", `{"seconds":1}`, 0)
	sc := w.startSidecar(nil)
	w.waitStarted(t, id)
	sc.signal(syscall.SIGHUP)
	code, _ := sc.wait(15 * time.Second)
	require.Equal(t, 0, code, "SIGHUP must drain and exit 0, not kill the sidecar")
	assert.Equal(t, backends.StatusDone, w.job(id).Status)
	sc.waitLog(time.Second, "signal received", map[string]any{"signal": "hangup"})
	sc.waitLog(time.Second, "state transition", map[string]any{"state": "STOPPED", "from": "DRAINING"})
}

// A heartbeat timeout a live Soniq worker could miss is refused at start
// (exit 2, naming the setting and the rule) before anything is claimed.
func TestFaultShortHeartbeatTimeoutRefused(t *testing.T) {
	w := newWorld(t, sdks[0], manifestOpts{})
	id := w.enqueue("t.noop", `{}`, 0)
	cmd := exec.Command(sidecarBinary(t), "run", "--manifest", w.manifest, "--metrics-addr", "")
	cmd.Dir = w.dir
	cmd.Env = []string{"SONIQ_DATABASE_URL=" + w.dbURL, "SONIQ_HEARTBEAT_TIMEOUT=3", "SONIQ_HEARTBEAT_INTERVAL=1"}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "%s", out)
	assert.Equal(t, 2, ee.ExitCode(), "%s", out)
	assert.Contains(t, string(out), `heartbeat_timeout="3s": (from SONIQ_HEARTBEAT_TIMEOUT) must be at least 1m0s`)
	assert.Equal(t, backends.StatusQueued, w.job(id).Status, "nothing was claimed")
}
