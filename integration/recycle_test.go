package integration

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// max_jobs recycles a process after about that many jobs (jittered ±10 %):
// it takes no new job, is stopped once idle, and a fresh one replaces it.
// No job is lost or run twice on the way.
func TestRecycleAfterMaxJobs(t *testing.T) {
	t.Parallel()
	forEachSDK(t, func(t *testing.T, s sdk) {
		w := newWorld(t, s, manifestOpts{})
		w.manifest = w.writeCustomManifest(t, "recycle.yaml", func(m string) string {
			return strings.Replace(m, "    processes: 1\n", "    processes: 1\n    max_jobs: 10\n", 1)
		})
		var ids []string
		for range 60 {
			ids = append(ids, w.enqueue("t.record", `{}`, 0))
		}
		sc := w.startSidecar(nil)
		eventually(t, 60*time.Second, "all 60 jobs done", func() bool { return w.stats().Done == 60 })

		pids := map[string]int{}
		runs := map[string]int{}
		for _, r := range w.recorded() {
			if r[0] == "run" {
				pids[r[2]]++
				runs[r[1]]++
			}
		}
		for _, id := range ids {
			assert.Equal(t, 1, runs[id], "job %s ran exactly once", id)
		}
		// 60 jobs, 9 to 11 per process: at least 6 processes served them.
		assert.GreaterOrEqual(t, len(pids), 6, "processes that ran jobs: %v", pids)
		for pid, n := range pids {
			assert.LessOrEqual(t, n, 11, "process %s ran %d jobs, max_jobs 10 (+10%% jitter)", pid, n)
		}
		assert.NotEmpty(t, sc.logs("reached max_jobs"))
		stopped := sc.logs("handler process stopped")
		assert.GreaterOrEqual(t, len(stopped), 5, "recycled processes exit cleanly")
		for _, l := range stopped {
			assert.Equal(t, "exited with status 0", l["exit"])
		}
		for _, id := range ids {
			require.Equal(t, backends.StatusDone, w.job(id).Status)
		}
		sc.signal(syscall.SIGTERM)
		code, _ := sc.wait(20 * time.Second)
		assert.Equal(t, 0, code)
	})
}
