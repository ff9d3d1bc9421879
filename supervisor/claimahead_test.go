package supervisor

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/config"
)

// claimCounter counts the claim statements and the rows they took.
type claimCounter struct {
	backends.Backend
	claims, rows atomic.Int64
	mu           sync.Mutex
	asked        []backends.ClaimParams
}

func (c *claimCounter) Claim(ctx context.Context, p backends.ClaimParams) ([]backends.Job, error) {
	jobs, err := c.Backend.Claim(ctx, p)
	if err == nil {
		c.claims.Add(1)
		c.rows.Add(int64(len(jobs)))
		c.mu.Lock()
		c.asked = append(c.asked, p)
		c.mu.Unlock()
	}
	return jobs, err
}

func aheadSettings(ahead time.Duration) config.Settings {
	s := fakeSettings(30*time.Second, time.Minute)
	s.ClaimAhead, s.ClaimAheadMax = ahead, 500
	s.AuditInterval = -1
	return s
}

// waitAll waits on the fake clock until every job is done.
func (w *fakeWorld) waitAllDone(ids []string, within time.Duration) {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		done := 0
		for _, id := range ids {
			if w.job(id).Status == backends.StatusDone {
				done++
			}
		}
		if done == len(ids) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	w.t.Fatalf("not every job done within %s", within)
}

// At a steady rate the claims take the free slots plus a reserve of about
// claim_ahead of work: fewer, larger statements than free slots alone, and
// every job still runs once.
func TestClaimAheadClaimsFewerLargerBatches(t *testing.T) {
	rowsPerClaim := func(ahead time.Duration) float64 {
		var got float64
		synctest.Test(t, func(t *testing.T) {
			w := newFakeWorld(t, aheadSettings(ahead), 4, 1, nil)
			cc := &claimCounter{Backend: w.sup.cfg.Backend}
			w.sup.cfg.Backend = cc
			ids := make([]string, 800)
			for i := range ids {
				ids[i] = w.enqueue("async.sleep", 0.01) // 400 jobs/s on 4 slots
			}
			w.run(4)
			w.waitAllDone(ids, time.Minute)
			for _, id := range ids {
				require.Equal(t, 1, w.job(id).Attempts, "job %s ran once", id)
			}
			got = float64(cc.rows.Load()) / float64(cc.claims.Load())
			w.sup.Shutdown()
			w.wait()
		})
		return got
	}
	off, on := rowsPerClaim(0), rowsPerClaim(100*time.Millisecond)
	t.Logf("rows per claim: claim_ahead 0: %.1f; 100 ms: %.1f", off, on)
	assert.LessOrEqual(t, off, 4.0, "without a reserve a claim takes free slots only")
	assert.GreaterOrEqual(t, on, 3*off, "400 jobs/s × 100 ms = a reserve of 40, topped up at half (the first claims, before a rate is measured, take free slots only)")
}

// The fleet's size reaches each pool's sizing: with three more live
// sidecars on its queues (rows in the workers table) a pool of the same
// jobs at the same rate keeps a reserve four times as large while the
// queue is deep, so its claims are several times larger; a Soniq worker's
// row does not count. Every job still runs once.
func TestClaimAheadSizesTheReserveForTheFleet(t *testing.T) {
	rowsPerClaim := func(sidecarPeers, soniqPeers int) float64 {
		var got float64
		synctest.Test(t, func(t *testing.T) {
			w := newFakeWorld(t, aheadSettings(100*time.Millisecond), 4, 1, nil)
			for i := range sidecarPeers + soniqPeers {
				meta := json.RawMessage(`{"kind":"` + workerKind + `"}`)
				if i >= sidecarPeers {
					meta = nil // Soniq's own worker names no kind
				}
				require.NoError(t, w.mem.RegisterWorker(context.Background(), backends.Worker{ID: backends.NewID(),
					Hostname: "peer", PID: 1000 + i, Concurrency: 4, Version: "x", Metadata: meta}))
			}
			cc := &claimCounter{Backend: w.sup.cfg.Backend}
			w.sup.cfg.Backend = cc
			ids := make([]string, 1600)
			for i := range ids {
				ids[i] = w.enqueue("async.sleep", 0.01) // 400 jobs/s on 4 slots
			}
			w.run(4)
			w.waitAllDone(ids, time.Minute)
			for _, id := range ids {
				require.Equal(t, 1, w.job(id).Attempts, "job %s ran once", id)
			}
			got = float64(cc.rows.Load()) / float64(cc.claims.Load())
			w.sup.Shutdown()
			w.wait()
		})
		return got
	}
	alone, soniq, fleet := rowsPerClaim(0, 0), rowsPerClaim(0, 3), rowsPerClaim(3, 0)
	t.Logf("rows per claim: alone %.1f; beside 3 Soniq workers %.1f; in a fleet of 4 sidecars %.1f", alone, soniq, fleet)
	assert.InDelta(t, alone, soniq, alone/4, "Soniq's workers are not sidecars: the reserve stays the pool's own")
	assert.GreaterOrEqual(t, fleet, 2.5*alone, "400 jobs/s × 100 ms × 4 sidecars = a reserve of 160, against 40 alone")
}

// At DRAINING the reserve goes back at once, unstarted and with the attempt
// its claim charged refunded; the jobs running finish.
func TestClaimAheadReserveGoesBackAtDraining(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t, aheadSettings(time.Second), 2, 1, nil)
		ids := make([]string, 400)
		for i := range ids {
			ids[i] = w.enqueue("async.sleep", 0.05) // 40 jobs/s: a reserve of 40
		}
		w.run(2)
		time.Sleep(3 * time.Second)
		synctest.Wait()
		processing := 0
		for _, id := range ids {
			if w.job(id).Status == backends.StatusProcessing {
				processing++
			}
		}
		require.Greater(t, processing, 10, "the reserve holds more than the 2 slots")
		w.sup.Shutdown()
		w.wait()
		done, queued := 0, 0
		for _, id := range ids {
			j := w.job(id)
			switch j.Status {
			case backends.StatusDone:
				done++
				assert.Equal(t, 1, j.Attempts)
			case backends.StatusQueued:
				queued++
				assert.Equal(t, 0, j.Attempts, "job %s: given back with its attempt refunded", id)
				assert.Nil(t, j.WorkerID)
			default:
				t.Errorf("job %s ended %s", id, j.Status)
			}
		}
		assert.Positive(t, queued)
		t.Logf("done %d, given back %d", done, queued)
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, r := range w.logs {
			assert.NotEqual(t, "shutdown_nack", r.Msg, "a reserved row is given back, never NACKed with its attempt kept")
		}
	})
}

// A reserved row that waits longer than its bound (its rate is gone: the
// slots are busy with a long job) goes back to the queue for another
// worker.
func TestClaimAheadGivesBackWhatWaitsTooLong(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t, aheadSettings(100*time.Millisecond), 1, 1, nil)
		fast := make([]string, 200)
		for i := range fast {
			fast[i] = w.enqueue("async.sleep", 0.005) // 200 jobs/s: a reserve of 20
		}
		w.run(1)
		time.Sleep(500 * time.Millisecond)
		synctest.Wait()
		slow, err := w.mem.Enqueue(context.Background(), backends.EnqueueParams{Name: "async.sleep", Args: []byte(`{"seconds":30}`), Priority: intPtr(1)})
		require.NoError(t, err)
		// The long job has the better priority: the next claim puts it
		// first, and the one slot then runs it for 30 s.
		time.Sleep(5 * time.Second)
		synctest.Wait()
		back := 0
		for _, id := range fast {
			if j := w.job(id); j.Status == backends.StatusQueued {
				back++
				assert.Equal(t, 0, j.Attempts, "given back with its attempt refunded")
			}
		}
		t.Logf("given back after waiting past the bound: %d; the slow job %s", back, w.job(slow.ID).Status)
		assert.Positive(t, back, "reserved rows behind a 30 s job were given back within the 1 s bound")
		w.sup.Shutdown()
		w.wait()
	})
}

func intPtr(v int) *int { return &v }

// enqueueDuringEmptyClaim is the backend with one job enqueued, once armed,
// while a reserve claim that found nothing is still on its way back: the
// job's wake-up reaches the loop before the empty answer does.
type enqueueDuringEmptyClaim struct {
	backends.Backend
	w     *fakeWorld
	armed atomic.Bool
	id    atomic.Value // the job enqueued, once it was
	at    atomic.Value // when it was
}

func (e *enqueueDuringEmptyClaim) Claim(ctx context.Context, p backends.ClaimParams) ([]backends.Job, error) {
	jobs, err := e.Backend.Claim(ctx, p)
	if err == nil && len(jobs) == 0 && p.Ahead > 0 && e.armed.CompareAndSwap(true, false) {
		j, err := e.Backend.Enqueue(context.Background(), backends.EnqueueParams{Name: "async.sleep", Args: []byte(`{"seconds":0.01}`)})
		require.NoError(e.w.t, err)
		e.id.Store(j.ID)
		e.at.Store(time.Now())
		time.Sleep(time.Millisecond) // the answer is still on the wire
	}
	return jobs, err
}

// A job enqueued while a reserve claim is in flight that finds nothing (its
// statement ran before the job's commit) is claimed at once: the empty
// answer, arriving after the job's wake-up, must not cancel it. Before, the
// job waited for the next poll (5 s by default); a bench drain stalled for
// that long about one start in ten.
func TestClaimAheadWakeDuringAnEmptyReserveClaim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := aheadSettings(100 * time.Millisecond)
		s.PollInterval = 5 * time.Second
		w := newFakeWorld(t, s, 4, 1, nil)
		e := &enqueueDuringEmptyClaim{Backend: w.sup.cfg.Backend, w: w}
		w.sup.cfg.Backend = e
		ids := make([]string, 200)
		for i := range ids {
			ids[i] = w.enqueue("async.sleep", 0.01) // 400 jobs/s: the reserve is on
		}
		w.run(4)
		w.waitAllDone(ids, time.Minute)
		e.armed.Store(true)
		// One job alone: it runs, and the claim after it asks for a
		// reserve and finds nothing.
		one := w.enqueue("async.sleep", 0.01)
		w.waitAllDone([]string{one}, time.Minute)
		w.waitFor(time.Minute, "a reserve claim that found nothing", func() bool { return e.id.Load() != nil })
		id := e.id.Load().(string)
		w.waitFor(10*time.Second, "the job enqueued during that claim", func() bool {
			return w.job(id).Status == backends.StatusDone
		})
		wait := w.startedAt(id).Sub(e.at.Load().(time.Time))
		assert.Less(t, wait, 100*time.Millisecond, "started %s after its enqueue, not at the next poll", wait)
		w.sup.Shutdown()
		w.wait()
	})
}

// startedAt is when the fake handler last received job id (zero if never).
func (w *fakeWorld) startedAt(id string) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	var at time.Time
	for _, r := range w.runs {
		if r.id == id {
			at = r.at
		}
	}
	return at
}
