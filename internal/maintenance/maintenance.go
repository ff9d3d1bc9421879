package supervisor

// The goroutines Run owns besides the loop: heartbeats, registration,
// maintenance, queue statistics and new-job notifications.

import (
	"context"
	"errors"
	"time"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// every runs f now (when first is set) and then every interval until ctx
// ends: the shape of each periodic goroutine Run owns.
func every(ctx context.Context, interval time.Duration, first bool, f func(context.Context)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	if first {
		f(ctx)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f(ctx)
		}
	}
}

// heartbeat keeps soniq_workers.last_heartbeat fresh in every state until
// Run is about to return (DRAINING, FORCE_TIMEOUT_PATH and WAIT_FOR_THREAD
// included: Soniq's own worker stops early, the contract says not to).
func (s *Supervisor) heartbeat(ctx context.Context) {
	every(ctx, s.cfg.Settings.HeartbeatInterval, false, s.beatOnce)
}

func (s *Supervisor) beatOnce(ctx context.Context) {
	hctx, cancel := context.WithTimeout(ctx, max(s.cfg.Settings.HeartbeatInterval, time.Second))
	err := s.cfg.Backend.Heartbeat(hctx, s.workerID)
	cancel()
	switch {
	case err == nil || ctx.Err() != nil:
	case workerRowLost(err):
		// Another worker recovered our jobs (we were silent too long: a
		// frozen VM, a partition) or another program took our row. The
		// loop stops claiming and registers again.
		s.emit(workerLostEvent{err: err})
	default:
		s.log.Warn("heartbeat failed", "worker_id", s.workerID, "err", err)
	}
}

// register upserts this sidecar's worker row and its task names.
func (s *Supervisor) register(ctx context.Context) error {
	return s.registerWith(ctx, func(w backends.Worker) error { return s.cfg.Backend.RegisterWorker(ctx, w) })
}

// registerWith registers this sidecar's worker row with do, then its task
// names. When another worker row holds the row's (hostname, pid) (a Soniq
// worker given the same hostname, or another live sidecar in the pod with
// the same instance name), the row is registered under a hostname made
// unique by the worker id instead: never taking the other row, never
// stalling.
func (s *Supervisor) registerWith(ctx context.Context, do func(backends.Worker) error) error {
	s.identityMu.Lock()
	defer s.identityMu.Unlock()
	w := s.identity
	err := do(w)
	if errors.Is(err, backends.ErrIdentityTaken) {
		alt := w
		alt.Hostname = w.Hostname + "#" + w.ID[:min(8, len(w.ID))]
		s.log.Warn("another worker row has this sidecar's hostname and pid; registering under a hostname made unique by the worker id (give every sidecar that shares a hostname its own --instance)",
			"worker_id", w.ID, "hostname", w.Hostname, "pid", w.PID, "registered_as", alt.Hostname, "err", err)
		if err = do(alt); err == nil {
			s.identity = alt
		}
	}
	if err != nil {
		return err
	}
	return s.cfg.Backend.RegisterTasks(ctx, w.ID, s.taskNames)
}

func (s *Supervisor) workerHostname() string {
	s.identityMu.Lock()
	defer s.identityMu.Unlock()
	return s.identity.Hostname
}

// maintain runs stale-worker recovery and expired-row cleanup on one
// sidecar at a time (the leader), once at start and every cleanup interval.
func (s *Supervisor) maintain(ctx context.Context) {
	interval := s.cfg.Settings.CleanupInterval
	if interval <= 0 {
		interval = 5 * time.Minute
	}
	every(ctx, interval, true, s.maintainOnce)
}

func (s *Supervisor) maintainOnce(ctx context.Context) {
	mctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	release, ok, err := s.cfg.Backend.TryLeader(mctx)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("maintenance: leader election failed", "err", err)
		}
		return
	}
	if !ok {
		return
	}
	defer release()
	// Logged inside the tenure (after taking, before giving up), so the
	// logged spans of a fleet never overlap unless two leaders did.
	start := time.Now()
	s.log.Info("maintenance: leader", "worker_id", s.workerID)
	defer func() {
		s.log.Info("maintenance: leadership released", "worker_id", s.workerID, "held", time.Since(start))
	}()
	workers, jobs, err := s.cfg.Backend.RecoverStaleWorkers(mctx, s.cfg.Settings.HeartbeatTimeout, s.workerID)
	if err != nil {
		s.log.Warn("maintenance: stale-worker recovery failed", "err", err)
	} else if workers > 0 {
		s.metrics.staleRecovered(workers, jobs)
		s.log.Warn("maintenance: recovered stale workers; their jobs are queued again",
			"workers", workers, "jobs", jobs, "heartbeat_timeout", s.cfg.Settings.HeartbeatTimeout)
	}
	n, err := s.cfg.Backend.DeleteExpired(mctx)
	if err != nil {
		s.log.Warn("maintenance: deleting expired results failed", "err", err)
	} else if n > 0 {
		s.log.Info("maintenance: deleted expired results", "rows", n)
	}
}

// pollStats refreshes the soniq_queue_jobs gauge from the stats contract.
func (s *Supervisor) pollStats(ctx context.Context) {
	every(ctx, 15*time.Second, true, func(ctx context.Context) {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if st, err := s.cfg.Backend.Stats(sctx); err == nil {
			s.metrics.setQueueStats(st)
		}
	})
}

// subscribe forwards new-job notifications to the loop as wake-ups.
func (s *Supervisor) subscribe(ctx context.Context) {
	ch, err := s.cfg.Backend.Subscribe(ctx)
	if errors.Is(err, backends.ErrNoWakeups) {
		s.log.Info("polling only: no new-job notifications", "poll_interval", s.cfg.Settings.PollInterval, "reason", err)
		return
	}
	if err != nil {
		s.log.Warn("new-job notifications unavailable; polling only", "poll_interval", s.cfg.Settings.PollInterval, "err", err)
		return
	}
	for q := range ch {
		s.emit(wakeEvent{queue: q})
	}
}
