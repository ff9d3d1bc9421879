package supervisor

// Fleet-wide limits on the loop's side (docs/limits.md): each pool's
// scopes as its claims pass them to the backend, which enforces the caps
// against the rows of the whole database; the key indexes made at start;
// the metrics of what the caps held back and what this sidecar holds of
// each scope. Nothing per key is kept here: keys are unbounded.

import (
	"context"
	"slices"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/config"
)

// poolLimits is the scopes one pool's claims obey.
type poolLimits struct {
	scopes []backends.ClaimLimit
	// all: every job name of the pool is limited, so it reserves nothing.
	all bool
}

// initLimits gives pl the scopes of its limited jobs, each with every job
// name of the manifest that shares it (a group's rows count whoever
// claims them).
func (l *loop) initLimits(pl *pool) {
	pl.limit = poolLimits{scopes: claimLimits(l.cfg.Manifest, pl.h), all: len(pl.h.Jobs) > 0}
	for _, j := range pl.h.Jobs {
		if j.Limit == nil {
			pl.limit.all = false
		}
	}
}

// claimLimits is the scopes of h's limited jobs, in the order first met.
func claimLimits(m *config.Manifest, h *config.Handler) []backends.ClaimLimit {
	var out []backends.ClaimLimit
	for _, j := range h.Jobs {
		if j.Limit == nil || slices.ContainsFunc(out, func(c backends.ClaimLimit) bool { return c.Scope == j.Limit.Scope }) {
			continue
		}
		c := backends.ClaimLimit{Scope: j.Limit.Scope, Key: j.Limit.Key, Concurrency: j.Limit.Concurrency}
		if r := j.Limit.Rate; r != nil {
			c.RateN, c.RatePer = r.N, r.Per
		}
		for _, hh := range m.Handlers {
			for _, jj := range hh.Jobs {
				if jj.Limit != nil && jj.Limit.Scope == c.Scope {
					c.Names = append(c.Names, jj.Name)
				}
			}
		}
		out = append(out, c)
	}
	return out
}

// limitKeyPaths is every key path the manifest's limits declare, nil for
// the scopes without a key; empty without limits.
func limitKeyPaths(m *config.Manifest) [][]string {
	var paths [][]string
	seen := map[string]bool{}
	for _, h := range m.Handlers {
		for _, j := range h.Jobs {
			if j.Limit == nil {
				continue
			}
			k := backends.KeyPath(j.Limit.Key)
			if !seen[k] {
				seen[k] = true
				paths = append(paths, j.Limit.Key)
			}
		}
	}
	return paths
}

// prepareLimits has the backend index the rows of the declared key paths
// (Postgres: built concurrently when missing, at once when present). A
// failure is logged and the run goes on: the caps hold without the
// indexes, a claim only reads more.
func (s *Supervisor) prepareLimits(ctx context.Context) {
	paths := limitKeyPaths(s.cfg.Manifest)
	li, ok := s.cfg.Backend.(backends.LimitIndexer)
	if len(paths) == 0 || !ok {
		return
	}
	if err := li.PrepareLimitKeys(ctx, paths); err != nil {
		s.log.Warn("could not index the limits' keys; the caps hold, but a claim reads more rows", "err", err)
	}
}

// limitHeld counts t in its scope's gauge while this sidecar holds its row.
func (l *loop) limitHeld(t *task, delta int) {
	if t.spec != nil && t.spec.Limit != nil {
		l.metrics.limitRunning(t.spec.Limit.Scope, delta)
	}
}
