package maintenance

import (
	"context"
	"time"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// statsEvery is how often the queue statistics are read.
const statsEvery = 15 * time.Second

// statsTimeout bounds one read; a read that fails leaves the last value.
const statsTimeout = 10 * time.Second

// StatsPoller reads the queue statistics (backends.Backend.Stats) at start
// and every 15 s, and hands each read to a callback (the soniq_queue_jobs
// gauge).
type StatsPoller struct {
	service
	backend backends.Backend
	got     func(backends.Stats)
}

// NewStatsPoller prepares a StatsPoller that calls got (from its
// goroutine) with every successful read; nothing runs before Start.
func NewStatsPoller(b backends.Backend, got func(backends.Stats)) *StatsPoller {
	return &StatsPoller{backend: b, got: got}
}

// Start reads now and every 15 s until ctx ends or Stop is called.
func (p *StatsPoller) Start(ctx context.Context) {
	p.start(ctx, func(ctx context.Context) { every(ctx, statsEvery, true, p.poll) })
}

func (p *StatsPoller) poll(ctx context.Context) {
	sctx, cancel := context.WithTimeout(ctx, statsTimeout)
	defer cancel()
	if st, err := p.backend.Stats(sctx); err == nil {
		p.got(st)
	}
}
