package supervisor

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/config"
)

// A limited job's rows are claimed under its cap, counting those in the
// reserve, while an unlimited job of the same pool keeps its reserve; a
// slot of the scope freed here claims again at once, not at the poll.
func TestLimitedJobsKeepTheirCapInAPoolThatReserves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := aheadSettings(time.Second)
		s.PollInterval = time.Minute // a capped scope must not wait for the poll
		w := newFakeWorld(t, s, 8, 4, nil)
		h := &w.sup.cfg.Manifest.Handlers[0]
		h.Jobs[0].Limit = &config.Limit{Scope: "async.sleep", Concurrency: 2, Line: 1}
		cc := &claimCounter{Backend: w.sup.cfg.Backend}
		w.sup.cfg.Backend = cc
		var limited, free []string
		for range 20 {
			limited = append(limited, w.enqueue("async.sleep", 0.1))
			free = append(free, w.enqueue("sync.sleep", 0.01))
		}
		go func() { w.runErr <- w.sup.Run(context.Background()) }()
		most := 0
		start := time.Now()
		for time.Since(start) < 10*time.Second {
			n := 0
			for _, id := range limited {
				if w.job(id).Status == backends.StatusProcessing {
					n++
				}
			}
			most = max(most, n)
			time.Sleep(10 * time.Millisecond)
			synctest.Wait()
		}
		assert.Equal(t, 2, most, "at most the cap processing (running or reserved) at any sample, and the cap reached")
		w.waitAllDone(append(limited, free...), time.Minute)
		assert.Less(t, time.Since(start), 30*time.Second, "20 jobs of 0.1 s two at a time drain without waiting for the minute's poll")
		cc.mu.Lock()
		for _, p := range cc.asked {
			require.Len(t, p.Limits, 1)
			assert.Equal(t, backends.ClaimLimit{Scope: "async.sleep", Names: []string{"async.sleep"}, Concurrency: 2}, p.Limits[0])
		}
		cc.mu.Unlock()
		w.sup.Shutdown()
		require.NoError(t, <-w.runErr)
	})
}
