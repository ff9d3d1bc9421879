package integration

import (
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// A database set up by Soniq's own tools has no claim-order index: `run`
// says so in one WARN naming the fix, exposes it as a gauge and a /readyz
// detail (still 200: the sidecar works, only slower), and runs jobs. After
// `soniq-sidecar migrate` a new sidecar is quiet and the gauge reads 0.
func TestRunWarnsOnceWithoutTheClaimIndex(t *testing.T) {
	t.Parallel()
	w := newWorld(t, sdks[0], manifestOpts{})
	_, err := w.db.Exec(t.Context(), `DROP INDEX soniq_sidecar_claim_order`)
	require.NoError(t, err)

	sc := w.startSidecar(nil, "--metrics-addr", "127.0.0.1:0")
	addr := sc.httpAddr(t)
	warn := sc.waitLog(30*time.Second, "claim-order index is missing", map[string]any{"level": "WARN"})
	assert.Contains(t, warn["msg"], "soniq-sidecar migrate", "the WARN names the fix")

	var body string
	eventually(t, 30*time.Second, "/readyz 200 with the advisory", func() bool {
		code, b, err := obsGet(addr, "/readyz")
		body = b
		return err == nil && code == http.StatusOK && strings.Contains(b, "claim-order index")
	})
	assert.True(t, strings.HasPrefix(body, "ready\n"), body)
	assert.Contains(t, body, "soniq-sidecar migrate")
	v, ok := obsScrape(t, addr).value("soniq_claim_index_missing", nil)
	assert.True(t, ok, "gauge exported")
	assert.Equal(t, 1.0, v)

	id := w.enqueue("t.noop", `{}`, 0)
	eventually(t, 30*time.Second, "job done", func() bool { return w.job(id).Status == backends.StatusDone })
	sc.signal(syscall.SIGTERM)
	code, _ := sc.wait(30 * time.Second)
	require.Equal(t, 0, code)
	assert.Len(t, sc.logs("claim-order index is missing"), 1, "one WARN, not one per check or per claim")

	out, err := exec.Command(sidecarBinary(t), "migrate", "--database-url", w.dbURL).CombinedOutput()
	require.NoError(t, err, "%s", out)
	sc2 := w.startSidecar(nil, "--metrics-addr", "127.0.0.1:0")
	addr = sc2.httpAddr(t)
	waitReadyz(t, addr, 30*time.Second) // exactly "ready\n"
	eventually(t, 30*time.Second, "gauge 0 after migrate", func() bool {
		v, ok := obsScrape(t, addr).value("soniq_claim_index_missing", nil)
		return ok && v == 0
	})
	assert.Empty(t, sc2.logs("claim-order index is missing"))
	sc2.signal(syscall.SIGTERM)
	code, _ = sc2.wait(30 * time.Second)
	require.Equal(t, 0, code)
}
