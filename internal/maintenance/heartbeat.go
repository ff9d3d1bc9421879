package maintenance

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// HeartbeatConfig is what a Heartbeat beats with. Backend, WorkerID and
// Interval are required.
type HeartbeatConfig struct {
	Backend  backends.Backend
	WorkerID string
	Interval time.Duration
	// Timeout is this sidecar's heartbeat_timeout: a beat that lands after
	// none did for more than half of it logs one WARN line (0: never).
	Timeout time.Duration
	Log     *slog.Logger
	// Lost is called (from the Heartbeat's goroutine) when a heartbeat
	// finds the worker row gone or no longer active: another worker
	// recovered its jobs (it was silent too long: a frozen VM, a
	// partition) or another program took the row.
	Lost func(err error)
}

// Heartbeat keeps soniq_workers.last_heartbeat fresh every Interval until
// it is stopped. The engine stops it last, after the worker row is marked
// stopped: beats go on in every shutdown state (Soniq's own worker stops
// early; the contract says not to).
type Heartbeat struct {
	service
	cfg HeartbeatConfig
	// landed is when the last beat landed (the registration, at first);
	// only the service's goroutine reads and writes it.
	landed time.Time
}

// NewHeartbeat prepares a Heartbeat; nothing runs before Start.
func NewHeartbeat(cfg HeartbeatConfig) *Heartbeat {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Lost == nil {
		cfg.Lost = func(error) {}
	}
	return &Heartbeat{cfg: cfg}
}

// Start beats every Interval, the first one Interval from now (the row was
// just registered), until ctx ends or Stop is called.
func (h *Heartbeat) Start(ctx context.Context) {
	h.start(ctx, func(ctx context.Context) {
		h.landed = time.Now()
		every(ctx, h.cfg.Interval, false, h.beat)
	})
}

func (h *Heartbeat) beat(ctx context.Context) {
	// A beat may take as long as the interval (at least a second) before
	// it counts as failed: the next one is due then.
	hctx, cancel := context.WithTimeout(ctx, max(h.cfg.Interval, time.Second))
	err := h.cfg.Backend.Heartbeat(hctx, h.cfg.WorkerID)
	cancel()
	switch {
	case err == nil:
		// A silence this long is a database outage, a failover, a
		// partition or a frozen process: one a little longer, past the
		// recovering worker's heartbeat_timeout, gives this sidecar's
		// jobs to another worker, which runs them again (their results
		// held here are then discarded).
		if silent := time.Since(h.landed); h.cfg.Timeout > 0 && silent > h.cfg.Timeout/2 {
			h.cfg.Log.Warn("no heartbeat landed for more than half of heartbeat_timeout: a silence longer than the timeout lets another worker recover this sidecar's jobs and run them again; set heartbeat_timeout (on every worker of the database) above the longest outage you expect",
				"worker_id", h.cfg.WorkerID, "silent", silent.Round(time.Millisecond), "heartbeat_timeout", h.cfg.Timeout)
		}
		h.landed = time.Now()
	case ctx.Err() != nil:
	case WorkerRowLost(err):
		h.cfg.Lost(err)
	default:
		h.cfg.Log.Warn("heartbeat failed", "worker_id", h.cfg.WorkerID, "err", err)
	}
}

// WorkerRowLost reports whether err (from a heartbeat or a claim) says the
// worker row is gone or no longer active.
func WorkerRowLost(err error) bool {
	return errors.Is(err, backends.ErrNotFound) || errors.Is(err, backends.ErrWorkerNotActive)
}
