package maintenance

import (
	"context"
	"log/slog"
	"time"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// A Postgres database set up by Soniq's own tools (or by `migrate
// --no-claim-index`) has no index matching the claim order, so every claim
// sorts every queued row and throughput falls as the queue deepens.
// ClaimIndexWatcher says so once, with the fix, and reports each check so
// the engine keeps a gauge and a /readyz detail an operator can alert on.
// Readiness itself is not affected: the sidecar works, only slower.

// claimIndexCheckEvery bounds how often the catalog is read; an index an
// operator adds later clears the gauge at the next check.
const claimIndexCheckEvery = 5 * time.Minute

// checkTimeout bounds one read of the catalog or the worker table; a
// check that fails is tried again at the next tick.
const checkTimeout = 10 * time.Second

// ClaimIndexWatcher checks for the claim-order index at start and every
// five minutes.
type ClaimIndexWatcher struct {
	service
	ci      backends.ClaimIndexer
	log     *slog.Logger
	missing func(bool)
}

// NewClaimIndexWatcher prepares a watcher that calls missing (from its
// goroutine) with the result of every check that succeeded; nothing runs
// before Start.
func NewClaimIndexWatcher(ci backends.ClaimIndexer, log *slog.Logger, missing func(bool)) *ClaimIndexWatcher {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &ClaimIndexWatcher{ci: ci, log: log, missing: missing}
}

// Start checks now and every five minutes until ctx ends or Stop is
// called.
func (w *ClaimIndexWatcher) Start(ctx context.Context) {
	w.start(ctx, func(ctx context.Context) {
		warned := false
		every(ctx, claimIndexCheckEvery, true, func(ctx context.Context) { warned = w.check(ctx, warned) })
	})
}

// check reads the catalog once; warned says whether the index was missing
// at the last check, and check returns whether it is now.
func (w *ClaimIndexWatcher) check(ctx context.Context, warned bool) bool {
	cctx, cancel := context.WithTimeout(ctx, checkTimeout)
	ok, err := w.ci.HasClaimIndex(cctx)
	cancel()
	if err != nil {
		return warned
	}
	w.missing(!ok)
	if !ok && !warned {
		w.log.Warn("the claim-order index is missing: every claim sorts every queued row, so claims slow down as the queue grows; run `soniq-sidecar migrate` (it builds the index concurrently, without blocking Soniq or the sidecar)",
			"index", "soniq_sidecar_claim_order")
	}
	if ok && warned {
		w.log.Info("the claim-order index is present now", "index", "soniq_sidecar_claim_order")
	}
	return !ok
}
