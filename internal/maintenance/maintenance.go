// Package maintenance holds the engine's background services other than
// the result writer: the heartbeat, the leader's maintenance pass
// (stale-worker recovery, expired rows), the queue statistics poller, and
// the watchers of the worker table (foreign workers on this worker's
// queues) and of the claim-order index, and the self-audit's reader (the
// rows processing under this worker, for the engine to weigh).
//
// Each is a type made from a config, started with Start(ctx) and ended
// with Stop, which returns once its one goroutine has. They read and write
// the backend and report through the callbacks they were given; none
// knows the engine's loop, pools or tasks.
package maintenance

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// DefaultInterval is the maintenance interval of a config that sets none
// (Soniq's cleanup_interval default).
const DefaultInterval = 5 * time.Minute

// passTimeout bounds one maintenance pass, leadership included. It exists
// only so a wedged database cannot hold a pass forever.
const passTimeout = 30 * time.Second

// MaintainerConfig is what a Maintainer maintains with. Backend and
// WorkerID are required.
type MaintainerConfig struct {
	Backend  backends.Backend
	WorkerID string
	// Interval is the time between passes (cleanup_interval); 0 means
	// DefaultInterval.
	Interval time.Duration
	// HeartbeatTimeout is how long a worker may be silent before its
	// rows are recovered (heartbeat_timeout).
	HeartbeatTimeout time.Duration
	Log              *slog.Logger
	// Recovered is called (from the Maintainer's goroutine) after a pass
	// recovered silent workers: how many, and how many of their jobs were
	// queued again.
	Recovered func(workers, jobs int)
}

// Maintainer runs stale-worker recovery and expired-row deletion on one
// worker of the database at a time: each pass first takes the backend's
// maintenance leadership (Soniq's advisory lock on Postgres, so sidecars
// and Soniq's own workers elect one between them) and does nothing if
// another holds it.
type Maintainer struct {
	service
	cfg MaintainerConfig
	// refusedSince is when this worker last found leadership held by
	// another after leading or starting (zero while it can lead), and
	// warned whether the long refusal was logged; pass alone uses them.
	refusedSince time.Time
	warned       bool
	// releaseBy bounds the wait for the database when a pass gives the
	// leadership up (StopBy; unix ns, 0: the backend's own bound).
	releaseBy atomic.Int64
}

// NewMaintainer prepares a Maintainer; nothing runs before Start.
func NewMaintainer(cfg MaintainerConfig) *Maintainer {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Recovered == nil {
		cfg.Recovered = func(int, int) {}
	}
	return &Maintainer{cfg: cfg}
}

// StopBy is Stop for a shutdown whose database work ends at deadline: a
// pass under way gives the leadership up within it (zero: the backend's
// own bound).
func (m *Maintainer) StopBy(deadline time.Time) {
	if !deadline.IsZero() {
		m.releaseBy.Store(deadline.UnixNano())
	}
	m.Stop()
}

// release gives the leadership up, within the deadline StopBy set.
func (m *Maintainer) release(give func(context.Context)) {
	ctx := context.Background()
	if ns := m.releaseBy.Load(); ns != 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, time.Unix(0, ns))
		defer cancel()
	}
	give(ctx)
}

// Start runs a pass now and every Interval until ctx ends or Stop is
// called.
func (m *Maintainer) Start(ctx context.Context) {
	m.start(ctx, func(ctx context.Context) { every(ctx, m.cfg.Interval, true, m.pass) })
}

func (m *Maintainer) pass(ctx context.Context) {
	mctx, cancel := context.WithTimeout(ctx, passTimeout)
	defer cancel()
	b, log := m.cfg.Backend, m.cfg.Log
	release, ok, err := b.TryLeader(mctx)
	if err != nil {
		if ctx.Err() == nil {
			log.Warn("maintenance: leader election failed", "err", err)
		}
		return
	}
	if !ok {
		m.refused(time.Now())
		return
	}
	m.refusedSince, m.warned = time.Time{}, false
	defer m.release(release)
	// Logged inside the tenure (after taking, before giving up), so the
	// logged spans of a fleet never overlap unless two leaders did.
	start := time.Now()
	log.Info("maintenance: leader", "worker_id", m.cfg.WorkerID)
	defer func() {
		log.Info("maintenance: leadership released", "worker_id", m.cfg.WorkerID, "held", time.Since(start))
	}()
	workers, jobs, err := b.RecoverStaleWorkers(mctx, m.cfg.HeartbeatTimeout, m.cfg.WorkerID)
	if err != nil {
		log.Warn("maintenance: stale-worker recovery failed", "err", err)
	} else if workers > 0 {
		m.cfg.Recovered(workers, jobs)
		log.Warn("maintenance: recovered stale workers; their jobs are queued again",
			"workers", workers, "jobs", jobs, "heartbeat_timeout", m.cfg.HeartbeatTimeout)
	}
	n, err := b.DeleteExpired(mctx)
	if err != nil {
		log.Warn("maintenance: deleting expired results failed", "err", err)
	} else if n > 0 {
		log.Info("maintenance: deleted expired results", "rows", n)
	}
	m.pruneClaimLog(mctx)
}

// The claim log is pruned claimLogBatch rows a statement, at most
// claimLogMax a pass: a backlog of old rows (a log left by an earlier
// release) goes over a few passes without holding locks or the pass long.
const (
	claimLogBatch = 1000
	claimLogMax   = 100_000
)

// liveWithin is how recently a worker beat to count as running when the
// claim log's horizons are read: the longest heartbeat timeout the settings
// allow, so a sidecar late with its beats still keeps its windows' rows.
const liveWithin = 10 * time.Minute

// pruneClaimLog deletes the claim log's rows that no rate window can count
// any more (backends.ClaimLogHorizons): the windows the running sidecars
// declare and the overrides', each scope's longest, and never less than a
// day. Reading either fails: nothing is deleted this pass.
func (m *Maintainer) pruneClaimLog(ctx context.Context) {
	b, log := m.cfg.Backend, m.cfg.Log
	overrides, err := b.LimitOverrides(ctx)
	var workers []backends.Worker
	if err == nil {
		workers, err = b.LiveWorkers(ctx, max(m.cfg.HeartbeatTimeout, liveWithin))
	}
	var n int
	if err == nil {
		p := backends.ClaimLogHorizons(workers, overrides)
		p.Batch, p.Max = claimLogBatch, claimLogMax
		n, err = b.PruneLimitClaims(ctx, p)
	}
	switch {
	case errors.Is(err, backends.ErrNoSchema):
		// A database set up without the sidecar's tables: no log to prune.
		log.Debug("maintenance: no claim log to prune", "err", err)
	case err != nil:
		log.Warn("maintenance: pruning the limits' claim log failed", "err", err)
	case n > 0:
		log.Info("maintenance: pruned the limits' claim log of rows past every rate window", "rows", n)
	}
}

// refused notes a pass that found leadership held by another worker: at
// DEBUG every time, and once at WARN when no pass of this worker has led
// for longer than a leader can keep leadership without its database: the
// leader may be gone while the database still thinks it holds the lock, and
// nobody recovers stale workers meanwhile.
func (m *Maintainer) refused(now time.Time) {
	if m.refusedSince.IsZero() {
		m.refusedSince = now
	}
	unavailable := now.Sub(m.refusedSince)
	m.cfg.Log.Debug("maintenance: another worker leads; this pass skipped",
		"worker_id", m.cfg.WorkerID, "unavailable_for", unavailable)
	if !m.warned && unavailable > backends.LeaderHoldLimit {
		m.warned = true
		m.cfg.Log.Warn("maintenance: leadership held by another worker for longer than a leader may keep it; "+
			"if no worker logs maintenance passes, stale-worker recovery is not running",
			"worker_id", m.cfg.WorkerID, "unavailable_for", unavailable, "bound", backends.LeaderHoldLimit)
	}
}
