package supervisor

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/config"
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
	bound := pl.ahead.sizing.WaitBound()
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

// A claim answered after a freeze longer than heartbeat_timeout allows
// (the claim ran, then the sidecar was stopped before its answer reached
// the loop) may have had its rows recovered, run and cancelled by another
// worker: they are given back unstarted, not dispatched on resume. A claim
// answered in time is held as usual.
func TestALateClaimsRowsAreGivenBackNotStarted(t *testing.T) {
	for _, tc := range []struct {
		name     string
		late     func(s config.Settings) time.Duration
		returned bool
	}{
		{"answered in time", func(config.Settings) time.Duration { return 0 }, false},
		{"answered after heartbeat_timeout", func(s config.Settings) time.Duration { return s.HeartbeatTimeout }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newCrashRig(t)
			w := completer.New(completer.Config{Backend: r.sup.cfg.Backend, WorkerID: r.l.host.workerID}) // never started: it only holds the returns
			r.l.writer = w
			p := r.ready(t)
			pl := p.pool
			r.l.cfg.Settings.HeartbeatInterval, r.l.cfg.Settings.HeartbeatTimeout = 5*time.Second, time.Minute
			jobs := []backends.Job{{ID: backends.NewID(), Name: "async.sleep", Args: []byte(`{}`), Attempts: 1, MaxAttempts: 3}}
			r.l.claim.inFlight++
			r.l.onClaimed(claimedEvent{pool: pl, jobs: jobs, limit: 1, sentAt: time.Now().Add(-tc.late(r.l.cfg.Settings))})
			if tc.returned {
				assert.Empty(t, pl.pending, "not dispatched")
				assert.Nil(t, r.l.live[jobs[0].ID], "not held")
				assert.True(t, w.Holds(jobs[0].ID), "queued to go back, its attempt refunded")
			} else {
				assert.Len(t, pl.pending, 1)
				assert.False(t, w.Holds(jobs[0].ID))
			}
		})
	}
}
