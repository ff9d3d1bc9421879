package memory

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// scopeKey is one key of one scope.
type scopeKey struct {
	scope, key string
	null       bool
}

// limited picks, from the runnable candidates in claim order, the rows a
// claim with limits takes: limited rows only into the first p.Limit and
// only under their caps, unlimited ones as an unlimited claim would.
// b.mu is held.
func (b *Backend) limited(candidates []*backends.Job, p backends.ClaimParams, t time.Time) []*backends.Job {
	scopeOf := map[string]*backends.ClaimLimit{}
	for i := range p.Limits {
		for _, n := range p.Limits[i].Names {
			scopeOf[n] = &p.Limits[i]
		}
	}
	keyOf := func(l *backends.ClaimLimit, j *backends.Job) scopeKey {
		k := scopeKey{scope: l.Scope}
		if len(l.Key) == 0 {
			k.null = true
			return k
		}
		var ok bool
		k.key, ok = backends.LimitKey(j.Args, l.Key)
		k.null = !ok
		return k
	}
	running := map[scopeKey]int{}
	for _, j := range b.jobs {
		if l := scopeOf[j.Name]; l != nil && j.Status == backends.StatusProcessing {
			running[keyOf(l, j)]++
		}
	}
	deferred := map[[2]string]map[scopeKey]bool{}
	deferKey := func(k scopeKey, limit string) {
		m := deferred[[2]string{k.scope, limit}]
		if m == nil {
			m = map[scopeKey]bool{}
			deferred[[2]string{k.scope, limit}] = m
		}
		m[k] = true
	}
	var out []*backends.Job
	slots, ahead := p.Limit, p.Ahead
	for _, j := range candidates {
		l := scopeOf[j.Name]
		if l == nil {
			switch {
			case slots > 0:
				slots--
				out = append(out, j)
			case ahead > 0 && j.Attempts+1 < j.MaxAttempts:
				ahead--
				out = append(out, j)
			}
			continue
		}
		if slots == 0 {
			continue
		}
		k := keyOf(l, j)
		conc, rateN, ratePer := l.Caps(k.key, k.null)
		switch {
		case conc < 0 || (conc > 0 && running[k] >= conc):
			deferKey(k, "concurrency")
			continue
		case rateN > 0 && b.claimsSince(k, t.Add(-ratePer)) >= rateN:
			deferKey(k, "rate")
			continue
		}
		running[k]++
		if rateN > 0 {
			b.rateLog[k] = append(b.rateLog[k], t)
		}
		slots--
		out = append(out, j)
	}
	if p.Report != nil && len(deferred) > 0 {
		var ds []backends.Deferral
		for sl, keys := range deferred {
			ds = append(ds, backends.Deferral{Scope: sl[0], Limit: sl[1], Keys: len(keys)})
		}
		slices.SortFunc(ds, func(a, b backends.Deferral) int {
			if a.Scope != b.Scope {
				if a.Scope < b.Scope {
					return -1
				}
				return 1
			}
			if a.Limit < b.Limit {
				return -1
			}
			return 1
		})
		p.Report(ds)
	}
	return out
}

// claimsSince counts the claims of k logged after since, dropping older
// ones. b.mu is held.
func (b *Backend) claimsSince(k scopeKey, since time.Time) int {
	log := b.rateLog[k]
	i := 0
	for i < len(log) && !log[i].After(since) {
		i++
	}
	log = log[i:]
	b.rateLog[k] = log
	return len(log)
}

// overrideKey addresses one override.
type overrideKey struct {
	scope   string
	key     string
	hasKey  bool
	nullKey bool
}

func overrideKeyOf(scope string, key *string, nullKey bool) overrideKey {
	switch {
	case nullKey:
		return overrideKey{scope: scope, hasKey: true, nullKey: true}
	case key == nil:
		return overrideKey{scope: scope}
	}
	return overrideKey{scope: scope, key: *key, hasKey: true}
}

// SetLimit creates or replaces an override; unset fields keep their value.
func (b *Backend) SetLimit(ctx context.Context, o backends.LimitOverride) (backends.LimitOverride, error) {
	if err := ctx.Err(); err != nil {
		return backends.LimitOverride{}, err
	}
	if o.Scope == "" {
		return backends.LimitOverride{}, errors.New("set limit: the scope is empty")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	k := overrideKeyOf(o.Scope, o.Key, o.NullKey)
	cur, ok := b.overrides[k]
	if !ok {
		cur = backends.LimitOverride{Scope: o.Scope, NullKey: o.NullKey}
		if o.Key != nil && !o.NullKey {
			cur.Key = ptr(*o.Key)
		}
	}
	if o.Concurrency != nil {
		cur.Concurrency = ptr(*o.Concurrency)
	}
	if o.RateN > 0 {
		cur.RateN, cur.RatePer = o.RateN, o.RatePer
	}
	cur.UpdatedAt = now()
	b.overrides[k] = cur
	return cur, nil
}

// ClearLimit deletes an override.
func (b *Backend) ClearLimit(ctx context.Context, scope string, key *string, nullKey bool) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	k := overrideKeyOf(scope, key, nullKey)
	_, ok := b.overrides[k]
	delete(b.overrides, k)
	return ok, nil
}

// LimitOverrides returns every override in order.
func (b *Backend) LimitOverrides(ctx context.Context) ([]backends.LimitOverride, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]backends.LimitOverride, 0, len(b.overrides))
	for _, o := range b.overrides {
		out = append(out, o)
	}
	backends.SortOverrides(out)
	return out, nil
}

// CountByStatus counts the rows of names queued and processing.
func (b *Backend) CountByStatus(ctx context.Context, names []string) (queued, processing int64, err error) {
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, j := range b.jobs {
		if !slices.Contains(names, j.Name) {
			continue
		}
		switch j.Status {
		case backends.StatusQueued:
			queued++
		case backends.StatusProcessing:
			processing++
		}
	}
	return queued, processing, nil
}

// LimitUsage reads a scope's rows (see backends.Limits).
func (b *Backend) LimitUsage(ctx context.Context, l backends.ClaimLimit, top int) (backends.ScopeUsage, error) {
	var out backends.ScopeUsage
	if err := ctx.Err(); err != nil {
		return out, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	t := now()
	type counts struct{ running, queued, runnable int64 }
	byKey := map[scopeKey]*counts{}
	for _, j := range b.jobs {
		if !slices.Contains(l.Names, j.Name) || (j.Status != backends.StatusQueued && j.Status != backends.StatusProcessing) {
			continue
		}
		k := scopeKey{null: true}
		if len(l.Key) > 0 {
			var ok bool
			k.key, ok = backends.LimitKey(j.Args, l.Key)
			k.null = !ok
		}
		c := byKey[k]
		if c == nil {
			c = &counts{}
			byKey[k] = c
		}
		if j.Status == backends.StatusProcessing {
			c.running++
			continue
		}
		c.queued++
		if j.ScheduledAt == nil || !j.ScheduledAt.After(t) {
			c.runnable++
		}
	}
	usage := func(k scopeKey) backends.KeyUsage {
		u := backends.KeyUsage{Key: k.key, Null: k.null}
		if c := byKey[k]; c != nil {
			u.Running, u.Queued, u.Deferred = c.running, c.queued, l.Deferred(k.key, k.null, c.running, c.runnable)
		}
		return u
	}
	var all []backends.KeyUsage
	for k := range byKey {
		u := usage(k)
		out.Running += u.Running
		out.Queued += u.Queued
		out.Deferred += u.Deferred
		all = append(all, u)
	}
	if len(l.Key) > 0 && top > 0 {
		slices.SortFunc(all, backends.LessBusy)
		out.Busiest = all[:min(top, len(all))]
	}
	for _, kc := range l.Keys {
		out.Keys = append(out.Keys, usage(scopeKey{key: kc.Key, null: kc.Null}))
	}
	return out, nil
}

// PruneLimitClaims drops the logged claims older than their scope's
// horizon, and the keys left with none.
func (b *Backend) PruneLimitClaims(ctx context.Context, p backends.ClaimLogPrune) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	t := now()
	n := 0
	for k, log := range b.rateLog {
		before := t.Add(-p.Horizon(k.scope))
		i := 0
		for i < len(log) && log[i].Before(before) && n < p.Max {
			i++
			n++
		}
		if i == len(log) {
			delete(b.rateLog, k)
		} else {
			b.rateLog[k] = log[i:]
		}
	}
	return n, nil
}
