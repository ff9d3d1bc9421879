package supervisor

import (
	"context"
	"sync/atomic"
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

// processingOf counts the rows of ids processing.
func (w *fakeWorld) processingOf(ids []string) int {
	n := 0
	for _, id := range ids {
		if w.job(id).Status == backends.StatusProcessing {
			n++
		}
	}
	return n
}

// An operator's override is read before the first claim (a paused scope is
// never claimed by a sidecar just started) and then every poll; clearing
// it restores the manifest's cap.
func TestLimitOverridesApplyAtStartAndEachPoll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := aheadSettings(0)
		s.PollInterval = time.Second
		w := newFakeWorld(t, s, 8, 4, nil)
		w.sup.cfg.Manifest.Handlers[0].Jobs[0].Limit = &config.Limit{Scope: "async.sleep", Concurrency: 3, Line: 1}
		ctx := context.Background()
		zero, one := 0, 1
		_, err := w.mem.SetLimit(ctx, backends.LimitOverride{Scope: "async.sleep", Concurrency: &zero})
		require.NoError(t, err)
		var ids []string
		for range 10 {
			ids = append(ids, w.enqueue("async.sleep", 60))
		}
		go func() { w.runErr <- w.sup.Run(ctx) }()
		time.Sleep(3 * time.Second)
		synctest.Wait()
		assert.Equal(t, 0, w.processingOf(ids), "paused from the start")

		_, err = w.mem.SetLimit(ctx, backends.LimitOverride{Scope: "async.sleep", Concurrency: &one})
		require.NoError(t, err)
		time.Sleep(2500 * time.Millisecond)
		synctest.Wait()
		assert.Equal(t, 1, w.processingOf(ids), "the override's cap, within a poll interval")

		_, err = w.mem.ClearLimit(ctx, "async.sleep", nil, false)
		require.NoError(t, err)
		time.Sleep(2500 * time.Millisecond)
		synctest.Wait()
		assert.Equal(t, 3, w.processingOf(ids), "the manifest's cap again")
		w.sup.Shutdown()
		require.NoError(t, <-w.runErr)
	})
}

// Sidecars that declare different caps for one scope hold the smaller, and
// each says so once.
func TestSidecarsThatDisagreeHoldTheSmallerCap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := aheadSettings(0)
		s.PollInterval = time.Second
		w := newFakeWorld(t, s, 8, 4, nil)
		w.sup.cfg.Manifest.Handlers[0].Jobs[0].Limit = &config.Limit{Scope: "async.sleep", Concurrency: 4, Line: 1}
		ctx := context.Background()
		require.NoError(t, w.mem.RegisterWorker(ctx, backends.Worker{ID: backends.NewID(), Hostname: "old@host", PID: 1, Status: backends.WorkerActive,
			Metadata: []byte(`{"limits":{"async.sleep":{"concurrency":2}}}`)}))
		var ids []string
		for range 10 {
			ids = append(ids, w.enqueue("async.sleep", 60))
		}
		go func() { w.runErr <- w.sup.Run(ctx) }()
		for range 5 {
			time.Sleep(time.Second) // the older sidecar keeps beating
			synctest.Wait()
		}
		assert.LessOrEqual(t, w.processingOf(ids), 2, "the smaller cap holds")
		warns := w.logged("another sidecar declares different caps")
		require.Len(t, warns, 1, "one WARN")
		assert.Equal(t, "async.sleep", warns[0]["scope"])
		assert.Equal(t, "concurrency 4", warns[0]["ours"])
		assert.Equal(t, "concurrency 2", warns[0]["theirs"])
		w.sup.Shutdown()
		require.NoError(t, <-w.runErr)
	})
}

// A backlog under a rate cap drains at no less than 90 % of the rate, and
// never more than the rate in any window.
func TestRateCappedBacklogDrainsNearTheRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := aheadSettings(0)
		s.PollInterval = time.Minute // the window's slide, not the poll, claims again
		w := newFakeWorld(t, s, 8, 4, nil)
		w.sup.cfg.Manifest.Handlers[0].Jobs[0].Limit = &config.Limit{Scope: "async.sleep", Rate: &config.Rate{N: 10, Per: time.Second}, Line: 1}
		var ids []string
		for range 200 {
			ids = append(ids, w.enqueue("async.sleep", 0.001))
		}
		go func() { w.runErr <- w.sup.Run(context.Background()) }()
		start := time.Now()
		time.Sleep(5 * time.Second)
		synctest.Wait()
		started := 0
		for _, id := range ids {
			if w.job(id).Attempts > 0 {
				started++
			}
		}
		elapsed := time.Since(start).Seconds()
		t.Logf("%d claims in %.1f s under 10/1s", started, elapsed)
		assert.GreaterOrEqual(t, float64(started), 0.9*10*elapsed, "drains at ≥ 90 % of the rate")
		assert.LessOrEqual(t, float64(started), 10*(elapsed+1), "never more than the rate in any window")
		w.sup.Shutdown()
		require.NoError(t, <-w.runErr)
	})
}

// A sidecar publishes its scopes' key paths with their caps, and sidecars
// that agree on a keyed scope's caps say nothing of it.
func TestSidecarsThatAgreeOnAKeyedScopeSayNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := aheadSettings(0)
		s.PollInterval = time.Second
		w := newFakeWorld(t, s, 8, 4, nil)
		w.sup.cfg.Manifest.Handlers[0].Jobs[0].Limit = &config.Limit{Scope: "async.sleep", Concurrency: 4, Key: []string{"tenant"}, Line: 1}
		ctx := context.Background()
		require.NoError(t, w.mem.RegisterWorker(ctx, backends.Worker{ID: backends.NewID(), Hostname: "peer@host", PID: 1, Status: backends.WorkerActive,
			Metadata: []byte(`{"limits":{"async.sleep":{"names":["async.sleep"],"key":"args.tenant","concurrency":4}}}`)}))
		go func() { w.runErr <- w.sup.Run(ctx) }()
		for range 3 {
			time.Sleep(time.Second)
			synctest.Wait()
		}
		assert.Empty(t, w.logged("another sidecar declares different caps"))
		workers, err := w.mem.LiveWorkers(ctx, time.Minute)
		require.NoError(t, err)
		var mine map[string]backends.DeclaredCaps
		for _, wk := range workers {
			if wk.ID == w.sup.WorkerID() {
				mine = backends.DeclaredLimits(wk.Metadata)
			}
		}
		assert.Equal(t, "args.tenant", mine["async.sleep"].Key, "the key path is published")
		w.sup.Shutdown()
		require.NoError(t, <-w.runErr)
	})
}

// capWhileWritten is the backend with, once armed, a capped claim that
// comes back only after the job holding the cap was written: the write
// reaches the loop while the claim that counted its slot is in flight.
type capWhileWritten struct {
	backends.Backend
	w      *fakeWorld
	holder string       // the job holding the cap
	armed  bool         // set before the claim's goroutine exists; then only its
	done   atomic.Int64 // when the holder was seen done (unix ns)
}

func (c *capWhileWritten) Claim(ctx context.Context, p backends.ClaimParams) ([]backends.Job, error) {
	capped := false
	if report := p.Report; report != nil {
		p.Report = func(ds []backends.Deferral) { capped = true; report(ds) }
	}
	jobs, err := c.Backend.Claim(ctx, p)
	if err == nil && capped && c.armed {
		c.armed = false
		for c.w.job(c.holder).Status != backends.StatusDone {
			time.Sleep(time.Millisecond)
		}
		c.done.Store(time.Now().UnixNano())
		time.Sleep(time.Millisecond) // the write's event is handled first
	}
	return jobs, err
}

// A claim held back by a concurrency cap that counted a slot whose job was
// written while the claim was in flight claims again at once: the write
// came before the claim's answer said the scope was capped. Before, the
// queued job waited for the next poll.
func TestCappedClaimAnsweredAfterTheWriteThatFreedItsSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := aheadSettings(0)
		s.PollInterval = time.Minute
		w := newFakeWorld(t, s, 8, 4, nil)
		w.sup.cfg.Manifest.Handlers[0].Jobs[0].Limit = &config.Limit{Scope: "async.sleep", Concurrency: 1, Line: 1}
		holder := w.enqueue("async.sleep", 0.5)
		cw := &capWhileWritten{Backend: w.sup.cfg.Backend, w: w, holder: holder, armed: true}
		w.sup.cfg.Backend = cw
		w.run(1)
		next := w.enqueue("async.sleep", 0.01) // its wake-up's claim finds the cap full
		w.waitFor(10*time.Second, "the holder done", func() bool { return cw.done.Load() != 0 })
		w.waitFor(2*time.Minute, "the next job started", func() bool { return w.job(next).Attempts > 0 })
		wait := w.startedAt(next).Sub(time.Unix(0, cw.done.Load()))
		assert.Less(t, wait, 100*time.Millisecond, "started %s after the slot's write, not at the poll", wait)
		w.sup.Shutdown()
		require.NoError(t, <-w.runErr)
	})
}
