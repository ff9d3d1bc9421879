package supervisor

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/internal/completer"
)

// After a freeze (SIGSTOP, a paused VM) the loop's first event may free a
// slot while every reserved row is long past its bound: those rows may
// have been recovered, run and even cancelled by another worker meanwhile.
// The settle step gives them back before anything is dispatched, so none
// of them starts here. Before, the free slots took them (make chaos, seed
// 7: a job ran again after its cancel was acknowledged).
func TestRowsHeldAcrossAFreezeAreGivenBackNotStarted(t *testing.T) {
	r := newCrashRig(t)
	w := completer.New(completer.Config{Backend: r.sup.cfg.Backend, WorkerID: r.l.host.workerID}) // never started: it only holds the returns
	r.l.writer = w
	p := r.ready(t)
	pl := p.pool
	bound := pl.claim.reserve.waitBound()
	require.Positive(t, bound, "claim-ahead is on")
	stale := []*task{
		{job: &backends.Job{ID: backends.NewID(), Name: "async.sleep"}, pool: pl, spec: pl.h.Job("async.sleep"), queuedAt: time.Now().Add(-3 * bound)},
		{job: &backends.Job{ID: backends.NewID(), Name: "async.sleep"}, pool: pl, spec: pl.h.Job("async.sleep"), queuedAt: time.Now().Add(-3 * bound)},
	}
	for _, tk := range stale {
		r.l.hold(tk)
		pl.pending = append(pl.pending, tk)
	}
	r.l.settle(pl)
	assert.Empty(t, p.tasks, "no row held since before the freeze started")
	assert.Empty(t, pl.pending)
	assert.Equal(t, 2, w.Pending(), "both given back, their attempt refunded")
	for _, tk := range stale {
		assert.True(t, w.Holds(tk.job.ID), "job %s queued to go back", tk.job.ID)
	}
}
