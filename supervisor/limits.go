package supervisor

// Fleet-wide limits on the loop's side (docs/limits.md): each pool's
// scopes as its claims pass them to the backend, which enforces the caps
// against the rows of the whole database; the key indexes made at start;
// the metrics of what the caps held back and what this sidecar holds of
// each scope. Nothing per key is kept here: keys are unbounded.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/config"
)

// poolLimits is the scopes one pool's claims obey.
type poolLimits struct {
	// declared: the scopes as the manifest declares them; scopes: as the
	// claims pass them, with the fleet's smaller caps and the operators'
	// overrides laid over (applyOverrides).
	declared []backends.ClaimLimit
	scopes   []backends.ClaimLimit
	// all: every job name of the pool is limited, so it reserves nothing.
	all bool
}

// initLimits gives pl the scopes of its limited jobs, each with every job
// name of the manifest that shares it (a group's rows count whoever
// claims them).
func (l *loop) initLimits(pl *pool) {
	scopes := claimLimits(l.cfg.Manifest, pl.h)
	pl.limit = poolLimits{declared: scopes, scopes: scopes, all: len(pl.h.Jobs) > 0}
	for _, c := range scopes {
		l.metrics.limitDeclared(c.Scope, c.Concurrency > 0, c.RateN > 0)
	}
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

// LimitKeyPaths is every key path the manifest's limits declare, nil for
// the scopes without a key; empty without limits. A sidecar indexes them
// at start (backends.LimitIndexer); `migrate --manifest` builds the same
// indexes ahead of it.
func LimitKeyPaths(m *config.Manifest) [][]string {
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
	paths := LimitKeyPaths(s.cfg.Manifest)
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

// declaredCaps is what this sidecar publishes of its scopes in its worker
// row (backends.MetaLimits).
func declaredCaps(m *config.Manifest) map[string]backends.DeclaredCaps {
	out := map[string]backends.DeclaredCaps{}
	for _, h := range m.Handlers {
		for _, j := range h.Jobs {
			if j.Limit == nil {
				continue
			}
			d := out[j.Limit.Scope]
			d.Names = append(d.Names, j.Name)
			d.Key = backends.KeyPath(j.Limit.Key)
			d.Concurrency = j.Limit.Concurrency
			if r := j.Limit.Rate; r != nil {
				d.RateN, d.RateSeconds = r.N, int(r.Per/time.Second)
			}
			out[j.Limit.Scope] = d
		}
	}
	return out
}

// overrideReads is the loop's reading of the operators' overrides and of
// the caps the other sidecars declare, each poll.
type overrideReads struct {
	reading bool
	failing bool
	// warned holds the disagreements already logged: one WARN each.
	warned map[string]bool
}

// readOverrides reads, off the loop, the overrides and the live workers'
// declared caps; onOverridesRead applies them.
func (l *loop) readOverrides() {
	if l.overrides.reading || !slices.ContainsFunc(l.pools, func(pl *pool) bool { return len(pl.limit.declared) > 0 }) {
		return
	}
	l.overrides.reading = true
	backend, emit, cut := l.cfg.Backend, l.emit, l.shut.cut
	within := l.cfg.Settings.HeartbeatTimeout
	l.wg.Add(1)
	go func() { // owned by the run's WaitGroup; bounded by writeTimeout and the shutdown's write deadline
		defer l.wg.Done()
		ctx, cancel := context.WithTimeout(cut, writeTimeout)
		defer cancel()
		emit(readOverrides(ctx, backend, within))
	}()
}

// peerCaps is one live sidecar's declared caps.
type peerCaps struct {
	worker string
	caps   map[string]backends.DeclaredCaps
}

// onOverridesRead lays the overrides over the caps each pool's claims pass:
// per scope, the smaller of this manifest's cap and every live sidecar's
// (one WARN per disagreement), then the operators' overrides.
func (l *loop) onOverridesRead(e overridesReadEvent) {
	l.overrides.reading = false
	if e.err != nil {
		if !l.overrides.failing {
			l.log.Warn("reading the limits' overrides failed; the caps in force stay, and the next poll reads them again", "err", e.err)
		}
		l.overrides.failing = true
		return
	}
	l.overrides.failing = false
	l.applyOverrides(e.overrides, e.peers)
}

// applyOverrides sets each pool's effective scopes.
func (l *loop) applyOverrides(os []backends.LimitOverride, peers []peerCaps) {
	if l.overrides.warned == nil {
		l.overrides.warned = map[string]bool{}
	}
	for _, pl := range l.pools {
		if len(pl.limit.declared) == 0 {
			continue
		}
		scopes := make([]backends.ClaimLimit, len(pl.limit.declared))
		for i, d := range pl.limit.declared {
			c := d
			for _, p := range peers {
				if p.worker == l.host.workerID {
					continue
				}
				theirs, ok := p.caps[d.Scope]
				if !ok {
					continue
				}
				c = l.smallerCaps(c, d, theirs)
			}
			scopes[i] = backends.ApplyOverrides(c, os)
		}
		pl.limit.scopes = scopes
	}
}

// smallerCaps is c with each of theirs that is smaller than ours, and a
// WARN, once, for each that differs.
func (l *loop) smallerCaps(c, ours backends.ClaimLimit, theirs backends.DeclaredCaps) backends.ClaimLimit {
	mine := backends.DeclaredCaps{Concurrency: ours.Concurrency, RateN: ours.RateN, RateSeconds: int(ours.RatePer / time.Second)}
	theirs.Names, theirs.Key = nil, "" // the caps are compared, not the names or the key
	if mine.Concurrency == theirs.Concurrency && mine.RateN == theirs.RateN && mine.RateSeconds == theirs.RateSeconds {
		return c
	}
	if w := fmt.Sprintf("%s|%+v", ours.Scope, theirs); !l.overrides.warned[w] {
		l.overrides.warned[w] = true
		l.log.Warn("another sidecar declares different caps for this limit's scope (a rollout?); the smaller of each cap holds until they agree",
			"scope", ours.Scope, "ours", capsText(mine), "theirs", capsText(theirs))
	}
	if theirs.Concurrency > 0 && (c.Concurrency == 0 || theirs.Concurrency < c.Concurrency) {
		c.Concurrency = theirs.Concurrency
	}
	if theirs.RateN > 0 && theirs.RateSeconds > 0 {
		per := time.Duration(theirs.RateSeconds) * time.Second
		// The smaller rate: fewer claims per second.
		if c.RateN == 0 || float64(theirs.RateN)/per.Seconds() < float64(c.RateN)/c.RatePer.Seconds() {
			c.RateN, c.RatePer = theirs.RateN, per
		}
	}
	return c
}

// capsText is caps as the manifest writes them.
func capsText(d backends.DeclaredCaps) string {
	var parts []string
	if d.Concurrency > 0 {
		parts = append(parts, fmt.Sprintf("concurrency %d", d.Concurrency))
	}
	if d.RateN > 0 {
		parts = append(parts, fmt.Sprintf("rate %d/%s", d.RateN, time.Duration(d.RateSeconds)*time.Second))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// readOverridesAtStart reads the overrides before the first claim, so a
// scope paused by an operator is never claimed by a sidecar just started.
// Run calls it before the loop runs; a failure is logged and the manifest's
// caps hold until the first poll reads them.
func (l *loop) readOverridesAtStart(ctx context.Context) {
	if !slices.ContainsFunc(l.pools, func(pl *pool) bool { return len(pl.limit.declared) > 0 }) {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	e := readOverrides(ctx, l.cfg.Backend, l.cfg.Settings.HeartbeatTimeout)
	if e.err != nil {
		l.overrides.failing = true
		l.log.Warn("reading the limits' overrides failed; the manifest's caps hold until the next poll reads them", "err", e.err)
		return
	}
	l.applyOverrides(e.overrides, e.peers)
}

// readOverrides reads the overrides and the live sidecars' declared caps.
func readOverrides(ctx context.Context, backend backends.Backend, within time.Duration) overridesReadEvent {
	e := overridesReadEvent{}
	e.overrides, e.err = backend.LimitOverrides(ctx)
	if e.err != nil {
		return e
	}
	var workers []backends.Worker
	workers, e.err = backend.LiveWorkers(ctx, within)
	for _, w := range workers {
		if d := backends.DeclaredLimits(w.Metadata); len(d) > 0 {
			e.peers = append(e.peers, peerCaps{worker: w.ID, caps: d})
		}
	}
	return e
}

// rateRetry is how soon a pool whose claim a rate cap held back claims
// again: a twentieth of its shortest rate window (50 ms at 1/s), so a
// backlog drains at no less than about 95 % of the rate.
func rateRetry(scopes []backends.ClaimLimit) time.Duration {
	d := time.Duration(0)
	for _, s := range scopes {
		per := s.RatePer
		for _, k := range s.Keys {
			if k.RateN > 0 && (per == 0 || k.RatePer < per) {
				per = k.RatePer
			}
		}
		if per > 0 && (d == 0 || per/20 < d) {
			d = per / 20
		}
	}
	return max(d, 10*time.Millisecond)
}
