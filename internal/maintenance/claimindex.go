package supervisor

import (
	"context"
	"time"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// A Postgres database set up by Soniq's own tools (or by `migrate
// --no-claim-index`) has no index matching the claim order, so every claim
// sorts every queued row and throughput falls as the queue deepens.
// watchClaimIndex says so once, with the fix, and keeps a gauge and a
// /readyz detail an operator can alert on. Readiness itself is not
// affected: the sidecar works, only slower.

// claimIndexCheckEvery bounds how often the catalog is read; an index an
// operator adds later clears the gauge at the next check.
const claimIndexCheckEvery = 5 * time.Minute

// claimIndexAdvice is the detail /readyz shows while the index is missing.
const claimIndexAdvice = "warning: the claim-order index soniq_sidecar_claim_order is missing, so every claim sorts every queued row; run `soniq-sidecar migrate` to create it"

func (s *Supervisor) watchClaimIndex(ctx context.Context, ci backends.ClaimIndexer) {
	t := time.NewTicker(claimIndexCheckEvery)
	defer t.Stop()
	warned := false
	for {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		ok, err := ci.HasClaimIndex(cctx)
		cancel()
		if err == nil {
			s.setClaimIndexMissing(!ok)
			if !ok && !warned {
				s.log.Warn("the claim-order index is missing: every claim sorts every queued row, so claims slow down as the queue grows; run `soniq-sidecar migrate` (it builds the index concurrently, without blocking Soniq or the sidecar)",
					"index", "soniq_sidecar_claim_order")
			}
			if ok && warned {
				s.log.Info("the claim-order index is present now", "index", "soniq_sidecar_claim_order")
			}
			warned = !ok
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *Supervisor) setClaimIndexMissing(missing bool) {
	s.claimIndexMissing.Store(missing)
	s.metrics.claimIndex(missing)
}

// Advisories are conditions an operator should fix that do not make the
// sidecar unready (shown by /readyz under "ready").
func (s *Supervisor) Advisories() []string {
	if s.claimIndexMissing.Load() {
		return []string{claimIndexAdvice}
	}
	return nil
}
