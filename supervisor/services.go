package supervisor

import (
	"context"
	"sync"
	"time"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/internal/completer"
	"github.com/soniq-dev/soniq-sidecar/internal/maintenance"
	"github.com/soniq-dev/soniq-sidecar/internal/scheduler"
)

// services are the background services Run owns besides the loop, each
// with one goroutine of its own. They report to the engine through the
// callbacks wired here, never by touching the loop's state.
type services struct {
	// heartbeat is stopped last: beats go on in every shutdown state,
	// until the worker row is marked stopped.
	heartbeat *maintenance.Heartbeat
	// writer is stopped once the loop has returned, so every result the
	// loop decided is written.
	writer *completer.Completer
	// enqueuer writes the child jobs asked for at once; stopped with the
	// writer.
	enqueuer *completer.Enqueuer
	// watchers are stopped once the loop has returned, beside the
	// writer's last writes: the leader's maintenance, the queue
	// statistics, the fleet and the claim-order index.
	watchers []interface{ Stop() }
}

// startServices starts them all on ctx (detached from Run's own context:
// they end when Run stops them). total is the in-flight budget.
func (s *Supervisor) startServices(ctx context.Context, total int) *services {
	svc := &services{}
	svc.heartbeat = maintenance.NewHeartbeat(maintenance.HeartbeatConfig{Backend: s.cfg.Backend, WorkerID: s.workerID,
		Interval: s.cfg.Settings.HeartbeatInterval, Timeout: s.cfg.Settings.HeartbeatTimeout, Log: s.log,
		// The loop stops claiming and registers again.
		Lost: func(err error) { s.emit(workerLostEvent{err: err}) }})
	svc.heartbeat.Start(ctx)

	svc.writer = s.newWriter(total)
	svc.writer.Start()
	svc.enqueuer = s.newEnqueuer()
	svc.enqueuer.Start()

	maintainer := s.newMaintainer()
	maintainer.Start(ctx)
	svc.watchers = append(svc.watchers, maintainer)
	if s.metrics != nil {
		stats := maintenance.NewStatsPoller(s.cfg.Backend, s.metrics.setQueueStats)
		stats.Start(ctx)
		svc.watchers = append(svc.watchers, stats)
	}
	scope := maintenance.FleetScope{Backend: s.cfg.Backend, WorkerID: s.workerID, Kind: workerKind,
		Queues: s.cfg.Settings.Queues, HeartbeatTimeout: s.cfg.Settings.HeartbeatTimeout, Interval: s.cfg.Settings.CleanupInterval}
	fleet := maintenance.NewFleetWatcher(maintenance.FleetConfig{FleetScope: scope, Log: s.log, Foreign: s.metrics.foreignWorkers})
	fleet.Start(ctx)
	svc.watchers = append(svc.watchers, fleet)
	// Reserves and result batches are sized for the fleet sharing these
	// queues (internal/reserve, completer.SetFleet).
	// Only a change reaches the loop: every event settles the pools, and
	// may claim, as a poll would.
	writer, last := svc.writer, 1
	sizer := maintenance.NewFleetSizer(maintenance.FleetSizerConfig{FleetScope: scope, Size: func(n int) {
		if n == last {
			return
		}
		last = n
		writer.SetFleet(n)
		s.metrics.fleetSize(n)
		s.emit(fleetSizeEvent{n: n})
	}})
	sizer.Start(ctx)
	svc.watchers = append(svc.watchers, sizer)
	if s.cfg.Settings.AuditInterval > 0 {
		a := s.newAudit()
		a.Start(ctx)
		svc.watchers = append(svc.watchers, a)
	}
	if ci, ok := s.cfg.Backend.(backends.ClaimIndexer); ok {
		w := maintenance.NewClaimIndexWatcher(ci, s.log, s.setClaimIndexMissing)
		w.Start(ctx)
		svc.watchers = append(svc.watchers, w)
	}
	// `run --once` runs what is due and stops; it fires no schedules.
	if s.cfg.Settings.Scheduler && !s.cfg.Once {
		sch := scheduler.New(scheduler.Config{Backend: s.cfg.Backend, Log: s.log, Metrics: s.metrics.scheduleMetrics(),
			// Who fired a job: this sidecar's worker row, as Soniq's
			// producers write host:pid:program.
			ProducerID: s.producerID(), Enqueued: func() { s.metrics.jobsEnqueued("schedule", 1) }})
		sch.Start(ctx)
		svc.watchers = append(svc.watchers, sch)
	}
	return svc
}

// stopWatchers stops every watcher at once (their last words, such as
// a leadership's release, go out together) and returns a wait for them:
// on a slow link to the database, stopped one after another they cost a
// round trip or two each. Those whose last words wait for the database
// wait until deadline at most, the shutdown's write deadline (zero: none
// was set).
func (svc *services) stopWatchers(deadline time.Time) (wait func()) {
	var wg sync.WaitGroup
	for _, w := range svc.watchers {
		if b, ok := w.(interface{ StopBy(time.Time) }); ok {
			wg.Go(func() { b.StopBy(deadline) })
			continue
		}
		wg.Go(w.Stop)
	}
	return wg.Wait
}

// newWriter is the result writer, wired to the loop.
func (s *Supervisor) newWriter(total int) *completer.Completer {
	cfg := completer.Config{Backend: s.cfg.Backend, WorkerID: s.workerID, Log: s.log,
		// A batch smaller than a quarter of the in-flight budget lingers
		// briefly while results flow.
		LingerBatch: (total + 3) / 4,
		Requeued: func() {
			// An empty queue name wakes every pool.
			select {
			case s.events <- wakeEvent{}:
			default: // the loop is busy; the next poll will do
			}
		},
		ChildrenWritten: func(n int) { s.metrics.jobsEnqueued("child", n) },
		// Attached handlers forget a result once it is settled (acks.go).
		Settled: func(ids []string) {
			if s.acking.Load() {
				s.emit(settledEvent{ids: ids})
			}
		},
	}
	switch {
	case s.cfg.Once:
		// Claim again after every write: a retry written back to the
		// queue is due, and the claim after the last write ends the run.
		cfg.AfterWrite = func() {
			select {
			case s.events <- wakeEvent{}:
			default:
			}
		}
	case len(LimitKeyPaths(s.cfg.Manifest)) > 0:
		// A write may free slots of a limited scope (limits.go).
		cfg.AfterWrite = func() {
			select {
			case s.events <- writtenEvent{}:
			default: // the loop is busy; the next write or poll will do
			}
		}
	}
	return completer.New(cfg)
}

// newMaintainer is the leader's maintenance pass, counted in the metrics.
func (s *Supervisor) newMaintainer() *maintenance.Maintainer {
	return maintenance.NewMaintainer(maintenance.MaintainerConfig{Backend: s.cfg.Backend, WorkerID: s.workerID,
		Interval: s.cfg.Settings.CleanupInterval, HeartbeatTimeout: s.cfg.Settings.HeartbeatTimeout,
		Log: s.log, Recovered: s.metrics.staleRecovered})
}
