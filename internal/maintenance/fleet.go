package maintenance

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// Soniq's own worker claims every job of its queues whatever its name, and
// dead-letters the names it has no handler for (job_not_found). A Soniq
// worker on a queue a sidecar serves therefore takes the sidecar's jobs and
// dead-letters them. The sidecar cannot stop that, but it can see it coming:
// Soniq workers register their queues in soniq_workers. FleetWatcher says
// so once per such worker (and again if it goes away and comes back), and
// reports how many there are for a gauge an operator can alert on.

// fleetCheckEvery bounds how often the worker table is read.
const fleetCheckEvery = 30 * time.Second

// FleetScope is the workers a FleetWatcher and a FleetSizer read: the
// live rows of the workers table, seen from this worker. Backend, WorkerID
// and Kind are required.
type FleetScope struct {
	Backend  backends.Backend
	WorkerID string
	// Kind is the worker-row kind of this program (backends.MetaKind):
	// rows of that kind are its peers.
	Kind string
	// Queues are the queues this worker claims from; none means every
	// queue.
	Queues []string
	// HeartbeatTimeout: rows heard from within it are live.
	HeartbeatTimeout time.Duration
	// Interval between reads (a FleetSizer's once settled): at most 30 s;
	// 0 means 30 s.
	Interval time.Duration
}

// interval is s.Interval within its bounds.
func (s FleetScope) interval() time.Duration {
	if s.Interval <= 0 || s.Interval > fleetCheckEvery {
		return fleetCheckEvery
	}
	return s.Interval
}

// FleetConfig is what a FleetWatcher watches with.
type FleetConfig struct {
	FleetScope
	Log *slog.Logger
	// Foreign is called (from the watcher's goroutine) after every check
	// that read the table, with the number of live foreign workers that
	// share a queue with this one.
	Foreign func(n int)
}

// FleetWatcher reads the live workers at start and periodically, and
// warns of the ones that are not of this program's kind and claim from a
// queue this worker serves.
type FleetWatcher struct {
	service
	cfg FleetConfig
	// warned is the set of workers reported at the last check; only the
	// watcher's goroutine touches it.
	warned map[string]bool
}

// NewFleetWatcher prepares a FleetWatcher; nothing runs before Start.
func NewFleetWatcher(cfg FleetConfig) *FleetWatcher {
	cfg.Interval = cfg.interval()
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Foreign == nil {
		cfg.Foreign = func(int) {}
	}
	return &FleetWatcher{cfg: cfg, warned: map[string]bool{}}
}

// Start checks now and every Interval until ctx ends or Stop is called.
func (f *FleetWatcher) Start(ctx context.Context) {
	f.start(ctx, func(ctx context.Context) { every(ctx, f.cfg.Interval, true, f.check) })
}

func (f *FleetWatcher) check(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	workers, err := f.cfg.Backend.LiveWorkers(cctx, f.cfg.HeartbeatTimeout)
	if err != nil {
		return // the next check tries again; claims report database trouble
	}
	now := map[string]bool{}
	for _, w := range workers {
		if w.ID == f.cfg.WorkerID || backends.WorkerKind(w.Metadata) == f.cfg.Kind {
			continue
		}
		shared := sharedQueues(f.cfg.Queues, w.Queues)
		if shared == "" {
			continue
		}
		now[w.ID] = true
		if !f.warned[w.ID] {
			f.cfg.Log.Warn("a worker that is not a sidecar (Soniq's own) claims from a queue this sidecar serves: it takes jobs of any name and dead-letters the ones it has no handler for (job_not_found); give Soniq workers and sidecars disjoint queues",
				"worker_id", w.ID, "hostname", w.Hostname, "pid", w.PID, "shared_queues", shared)
		}
	}
	for id := range f.warned {
		if !now[id] {
			f.cfg.Log.Info("a worker that shared this sidecar's queues is gone or no longer live", "worker_id", id)
		}
	}
	f.warned = now
	f.cfg.Foreign(len(now))
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

// FleetSize counts the live sidecars sharing a queue with this one: the
// rows of kind among workers, this worker's own counted even when it is
// missing. Claim-ahead sizes reserves and result batches by it
// (internal/reserve, completer.SetFleet).
func FleetSize(workers []backends.Worker, self, kind string, queues []string) int {
	n := 1 // this one
	for _, w := range workers {
		if w.ID == self || backends.WorkerKind(w.Metadata) != kind || sharedQueues(queues, w.Queues) == "" {
			continue
		}
		n++
	}
	return n
}

// fleetSizeFirst is the first wait between two counts of the fleet; it
// doubles up to the interval. Sidecars of a fleet start about together and
// each one's first count may miss the others still registering.
const fleetSizeFirst = 250 * time.Millisecond

// FleetSizerConfig is what a FleetSizer counts with. Size is required.
type FleetSizerConfig struct {
	FleetScope
	// Size is called (from the sizer's goroutine) with every count read.
	Size func(n int)
}

// FleetSizer counts the live sidecars sharing this one's queues (FleetSize)
// at start, then 0.25 s, 0.5 s, 1 s ... apart up to its interval.
type FleetSizer struct {
	service
	cfg FleetSizerConfig
}

// NewFleetSizer prepares a FleetSizer; nothing runs before Start.
func NewFleetSizer(cfg FleetSizerConfig) *FleetSizer {
	cfg.Interval = cfg.interval()
	return &FleetSizer{cfg: cfg}
}

// Start counts now and then ever less often, until ctx ends or Stop.
func (f *FleetSizer) Start(ctx context.Context) {
	f.start(ctx, func(ctx context.Context) {
		wait := min(fleetSizeFirst, f.cfg.Interval)
		t := time.NewTimer(0)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			f.count(ctx)
			t.Reset(wait)
			wait = min(2*wait, f.cfg.Interval)
		}
	})
}

func (f *FleetSizer) count(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	workers, err := f.cfg.Backend.LiveWorkers(cctx, f.cfg.HeartbeatTimeout)
	if err != nil {
		return // the next count tries again; the last one stands
	}
	f.cfg.Size(FleetSize(workers, f.cfg.WorkerID, f.cfg.Kind, f.cfg.Queues))
}
