package supervisor

// The self-audit on the fake clock: the real supervisor with the memory
// backend and fake handlers. A row processing under the worker that the
// sidecar does not hold is made the way another program (or a bug) would
// leave it: claimed through the backend with the sidecar's worker id.

import (
	"context"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/internal/maintenance"
)

// orphanFor claims a job nobody serves under w's worker id, behind the
// sidecar's back.
func orphanFor(t *testing.T, w *fakeWorld) string {
	t.Helper()
	id := w.enqueue("foreign.job", 0)
	jobs, err := w.mem.Claim(context.Background(), backends.ClaimParams{WorkerID: w.sup.workerID, Names: []string{"foreign.job"}, Limit: 1})
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	require.Equal(t, id, jobs[0].ID)
	return id
}

func (w *fakeWorld) logged(msg string) []map[string]any {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []map[string]any
	for _, r := range w.logs {
		if strings.HasPrefix(r.Msg, msg) {
			out = append(out, r.Attrs)
		}
	}
	return out
}

func TestAuditReleasesAnOrphanAndLeavesRunningJobsAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t, fakeSettings(30*time.Second, time.Minute), 8, 4, nil)
		w.sup.cfg.Settings.AuditInterval = 10 * time.Second
		long := w.enqueue("async.sleep", 100) // runs through many readings
		w.run(1)
		orphan := orphanFor(t, w)

		// One reading finds it unknown; the next, a grace later, releases it.
		time.Sleep(15 * time.Second)
		synctest.Wait()
		assert.Equal(t, backends.StatusProcessing, w.job(orphan).Status, "one reading is not enough")
		time.Sleep(10 * time.Second)
		synctest.Wait()
		j := w.job(orphan)
		assert.Equal(t, backends.StatusQueued, j.Status, "released after the second reading")
		assert.Nil(t, j.WorkerID)
		assert.Equal(t, 1, j.Attempts, "attempts untouched")
		lines := w.logged("self-audit: released a job this worker held but was not running")
		require.Len(t, lines, 1)
		assert.Equal(t, orphan, lines[0]["job_id"])
		assert.Equal(t, "foreign.job", lines[0]["job_name"])
		assert.Equal(t, w.sup.workerID, lines[0]["worker_id"])

		// The running job was read at every reading and never touched.
		time.Sleep(80 * time.Second)
		synctest.Wait()
		l := w.job(long)
		assert.Equal(t, backends.StatusDone, l.Status)
		assert.Equal(t, 1, l.Attempts)
		w.sup.Shutdown()
		w.wait()
		assert.Len(t, w.logged("self-audit: released"), 1)
	})
}

// The control: with the audit off, the same orphan stays processing under
// a live worker for good, which is what the audit is for.
func TestAuditOffLeavesTheOrphan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t, fakeSettings(30*time.Second, time.Minute), 8, 4, nil)
		w.sup.cfg.Settings.AuditInterval = -1
		w.enqueue("async.sleep", 1)
		w.run(1)
		orphan := orphanFor(t, w)
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		assert.Equal(t, backends.StatusProcessing, w.job(orphan).Status)
		w.sup.Shutdown()
		w.wait()
	})
}

// stallingCompletes is the memory backend with Complete held until
// release is closed: a result being written while the database stalls.
type stallingCompletes struct {
	backends.Backend
	mu      sync.Mutex
	release chan struct{}
}

func (s *stallingCompletes) Complete(ctx context.Context, workerID string, cs []backends.Completion) ([]string, error) {
	s.mu.Lock()
	ch := s.release
	s.mu.Unlock()
	if ch != nil {
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return s.Backend.Complete(ctx, workerID, cs)
}

func TestAuditLeavesAResultBeingWrittenAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t, fakeSettings(30*time.Second, time.Minute), 8, 4, nil)
		stall := &stallingCompletes{Backend: w.sup.cfg.Backend, release: make(chan struct{})}
		w.sup.cfg.Backend = stall
		w.sup.cfg.Settings.AuditInterval = 10 * time.Second
		id := w.enqueue("async.sleep", 1)
		w.run(1)
		// Its result is with the writer from 1 s on; the row stays
		// processing through several readings.
		time.Sleep(45 * time.Second)
		synctest.Wait()
		assert.Equal(t, backends.StatusProcessing, w.job(id).Status)
		assert.Empty(t, w.logged("self-audit: released"))
		close(stall.release)
		time.Sleep(time.Second)
		synctest.Wait()
		j := w.job(id)
		assert.Equal(t, backends.StatusDone, j.Status)
		assert.Equal(t, 1, j.Attempts)
		w.sup.Shutdown()
		w.wait()
	})
}

// What the loop holds, each way: an async job still running in an attached
// handler from an earlier session (its foreign map says false: not sync)
// is held as much as a live one.
func TestAuditKnowsWhatTheLoopHolds(t *testing.T) {
	r := newCrashRig(t)
	w := r.sup.newWriter(4)
	r.l.writer = w
	p := r.ready(t)
	assert.False(t, r.l.knows("a"))
	p.attach.foreign = map[string]bool{"async": false, "sync": true}
	assert.True(t, r.l.knows("async"))
	assert.True(t, r.l.knows("sync"))
	r.l.live["live"] = &task{}
	r.l.inherited.rows = map[string]*task{"inherited": {}}
	r.l.ackWait = map[string]*process{"acked": p}
	for _, id := range []string{"live", "inherited", "acked"} {
		assert.True(t, r.l.knows(id), id)
	}
	w.Nack(backends.Job{ID: "nacked", Attempts: 1}) // not started: it stays with the writer
	assert.True(t, r.l.knows("nacked"))
	assert.False(t, r.l.knows("other"))
}

// A claim whose reply was lost leaves rows processing under this worker
// that the loop does not hold; the reconciliation gives them back
// unstarted, with the attempt the claim charged. While it has not run (the
// database refusing the read through an outage), the audit must not
// release them itself: its release keeps that attempt, charged without a
// run (chaos seed 7 found one dead-lettered at 4 of 3 attempts).
func TestAuditLeavesALostClaimsRowsToTheReconciliation(t *testing.T) {
	r := newCrashRig(t)
	mem := r.sup.cfg.Backend
	ctx := context.Background()
	_, err := mem.Enqueue(ctx, backends.EnqueueParams{Name: "foreign.job"})
	require.NoError(t, err)
	require.NoError(t, mem.RegisterWorker(ctx, backends.Worker{ID: r.sup.workerID, Hostname: "h", PID: 1}))
	claimed, err := mem.Claim(ctx, backends.ClaimParams{WorkerID: r.sup.workerID, Names: []string{"foreign.job"}, Limit: 1})
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	r.l.claim.reconcile = true // the claim's reply was lost; the read has not succeeded yet

	at := time.Now()
	r.l.onAudit(maintenance.AuditReading{Rows: claimed, At: at})
	r.l.onAudit(maintenance.AuditReading{Rows: claimed, At: at.Add(time.Hour)})
	r.l.wg.Wait()
	j, err := mem.Get(ctx, claimed[0].ID)
	require.NoError(t, err)
	assert.Equal(t, backends.StatusProcessing, j.Status, "left to the reconciliation")
	assert.Equal(t, 1, j.Attempts)
}
