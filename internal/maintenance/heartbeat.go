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
	Log      *slog.Logger
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
	h.start(ctx, func(ctx context.Context) { every(ctx, h.cfg.Interval, false, h.beat) })
}

func (h *Heartbeat) beat(ctx context.Context) {
	// A beat may take as long as the interval (at least a second) before
	// it counts as failed: the next one is due then.
	hctx, cancel := context.WithTimeout(ctx, max(h.cfg.Interval, time.Second))
	err := h.cfg.Backend.Heartbeat(hctx, h.cfg.WorkerID)
	cancel()
	switch {
	case err == nil || ctx.Err() != nil:
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
