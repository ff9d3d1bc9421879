package supervisor

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/internal/logtest"
)

// A sidecar whose rows were recovered by another worker while it still ran
// them (it was frozen past heartbeat_timeout) finds its row stopped at the
// next heartbeat or claim, registers again before claiming anything, and
// gives up the executions of the requeued rows: the one another worker
// re-claimed is never written by it, the one it re-claims itself after
// registering again is run again and written once.
func TestWorkerLostRegistersAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := fakeSettings(30*time.Second, time.Minute)
		s.HeartbeatInterval = 2 * time.Second
		w := newFakeWorld(t, s, 4, 4, nil)
		taken, back := w.enqueue("async.sleep", 10), w.enqueue("async.sleep", 10)
		w.run(2)
		ctx := context.Background()
		me := w.sup.WorkerID()

		// Another worker's recovery: it saw our heartbeat stale. Between two
		// polls, with every goroutine of the bubble blocked, so the recovery
		// and the other worker's claim happen before the sidecar looks.
		time.Sleep(time.Second + 50*time.Millisecond)
		synctest.Wait()
		workers, jobs, err := w.mem.RecoverStaleWorkers(ctx, 0, "")
		require.NoError(t, err)
		require.Equal(t, [2]int{1, 2}, [2]int{workers, jobs})
		other := backends.NewID()
		require.NoError(t, w.mem.RegisterWorker(ctx, backends.Worker{ID: other, Hostname: "other", PID: 2}))
		claimed, err := w.mem.Claim(ctx, backends.ClaimParams{WorkerID: other, Limit: 1})
		require.NoError(t, err)
		require.Len(t, claimed, 1)
		require.Equal(t, taken, claimed[0].ID, "the oldest row goes to the other worker")
		recovered := time.Now()

		// Within one heartbeat interval the sidecar notices and registers again.
		var lost logtest.Record
		for lost.Msg == "" && time.Since(recovered) < 10*time.Second {
			time.Sleep(100 * time.Millisecond)
			synctest.Wait()
			w.mu.Lock()
			for _, r := range w.logs {
				if len(r.Msg) > 40 && r.Msg[:40] == "this sidecar's worker row was lost (anot" {
					lost = r
				}
			}
			w.mu.Unlock()
		}
		require.NotEmpty(t, lost.Msg, "one WARN line says the row was lost and registered again")
		assert.LessOrEqual(t, lost.At.Sub(recovered), s.HeartbeatInterval, "noticed within one heartbeat interval")
		// Both rows were requeued by the recovery. Neither was claimed
		// again under the stopped row (the claim is refused until the row
		// is registered again), so both executions here are given up.
		assert.ElementsMatch(t, []string{taken, back}, lost.Attrs["jobs_requeued"])
		require.NoError(t, w.mem.Heartbeat(ctx, me), "the row is active again")

		// Both first executions end at 10 s; the re-claimed row runs again.
		time.Sleep(25 * time.Second)
		synctest.Wait()
		j := w.job(taken)
		assert.Equal(t, backends.StatusProcessing, j.Status, "the other worker's row is untouched by our late result")
		require.NotNil(t, j.WorkerID)
		assert.Equal(t, other, *j.WorkerID)
		assert.Nil(t, j.Result)
		j = w.job(back)
		assert.Equal(t, backends.StatusDone, j.Status)
		assert.Equal(t, 2, j.Attempts, "claimed again by this sidecar after the recovery")
		w.mu.Lock()
		var runsOfBack []fakeRun
		for _, r := range w.runs {
			if r.id == back {
				runsOfBack = append(runsOfBack, r)
			}
		}
		w.mu.Unlock()
		require.Len(t, runsOfBack, 2, "the row that came back ran again")
		assert.False(t, runsOfBack[1].at.Before(runsOfBack[0].end), "never twice at once in one process")

		w.sup.Shutdown()
		_ = w.wait()
	})
}
