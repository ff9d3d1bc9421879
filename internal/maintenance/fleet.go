package supervisor

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// Soniq's own worker claims every job of its queues whatever its name, and
// dead-letters the names it has no handler for (job_not_found). A Soniq
// worker on a queue a sidecar serves therefore takes the sidecar's jobs and
// dead-letters them. The sidecar cannot stop that, but it can see it coming:
// Soniq workers register their queues in soniq_workers. watchFleet says so
// once per such worker (and again if it goes away and comes back), and
// keeps a gauge an operator can alert on.

// fleetCheckEvery bounds how often the worker table is read.
const fleetCheckEvery = 30 * time.Second

func (s *Supervisor) watchFleet(ctx context.Context) {
	t := time.NewTicker(min(fleetCheckEvery, s.cfg.Settings.CleanupInterval))
	defer t.Stop()
	warned := map[string]bool{}
	for {
		s.checkFleet(ctx, warned)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *Supervisor) checkFleet(ctx context.Context, warned map[string]bool) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	workers, err := s.cfg.Backend.LiveWorkers(cctx, s.cfg.Settings.HeartbeatTimeout)
	if err != nil {
		return // the next check tries again; claims report database trouble
	}
	now := map[string]bool{}
	for _, w := range workers {
		if w.ID == s.workerID || backends.WorkerKind(w.Metadata) == workerKind {
			continue
		}
		shared := sharedQueues(s.cfg.Settings.Queues, w.Queues)
		if shared == "" {
			continue
		}
		now[w.ID] = true
		if !warned[w.ID] {
			s.log.Warn("a worker that is not a sidecar (Soniq's own) claims from a queue this sidecar serves: it takes jobs of any name and dead-letters the ones it has no handler for (job_not_found); give Soniq workers and sidecars disjoint queues",
				"worker_id", w.ID, "hostname", w.Hostname, "pid", w.PID, "shared_queues", shared)
		}
	}
	for id := range warned {
		if !now[id] {
			s.log.Info("a worker that shared this sidecar's queues is gone or no longer live", "worker_id", id)
		}
	}
	clear(warned)
	for id := range now {
		warned[id] = true
	}
	s.metrics.foreignWorkers(len(now))
}

// sharedQueues describes the queues two workers both claim from, or ""
// when none: no queues means every queue.
func sharedQueues(ours, theirs []string) string {
	switch {
	case len(ours) == 0 && len(theirs) == 0:
		return "every queue"
	case len(ours) == 0:
		return strings.Join(theirs, ",")
	case len(theirs) == 0:
		return strings.Join(ours, ",")
	}
	var both []string
	for _, q := range ours {
		if slices.Contains(theirs, q) {
			both = append(both, q)
		}
	}
	return strings.Join(both, ",")
}
