package backends

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"time"
)

// ClaimLimit is one scope's caps as a claim obeys them: the rows of its
// job names are claimed only while the scope (per key value, with a key)
// is under every cap, counted from the rows themselves in the whole
// database, and never into a reserve (ClaimParams.Ahead).
type ClaimLimit struct {
	// Scope names the scope (a job name, or a group's name); claimers
	// serialize on it, so every sidecar must give a scope the same name.
	Scope string
	// Names are every job name of the scope: their rows count against the
	// caps. The claim takes those that are also in ClaimParams.Names.
	Names []string
	// Key is the path into args the caps apply per value of (nil: one cap
	// for the scope). The key of a row is LimitKey's.
	Key []string
	// Concurrency is the most rows of the scope (per key) processing at
	// once; 0 = no such cap. A negative value pauses the scope: nothing of
	// it is claimed.
	Concurrency int
	// RateN claims in any window of RatePer (per key); RateN 0 = no such
	// cap.
	RateN   int
	RatePer time.Duration
	// Keys are per-key caps that replace Concurrency and the rate for one
	// key value (the operator's overrides); nil for none.
	Keys []KeyCaps
}

// KeyCaps are the caps of one key value of a scope, replacing the scope's
// (a field left 0 keeps the scope's; a Concurrency < 0 pauses the key).
type KeyCaps struct {
	// Key is the key value; Null means the key null (Key is then "").
	Key         string
	Null        bool
	Concurrency int
	RateN       int
	RatePer     time.Duration
}

// Deferral is one scope's rows a claim left queued because of a cap:
// Limit is "concurrency" or "rate", Keys the number of keys (1 for an
// unkeyed scope) that had a runnable row held back by that cap.
type Deferral struct {
	Scope, Limit string
	Keys         int
}

// LimitReport receives what a limited claim held back, for the metrics.
// A claim calls it at most once, before it returns; it may be nil.
type LimitReport func([]Deferral)

// LimitKey is the key of a row with args for the key path: the text of the
// value at path (a string's own text, a number's as written, true or
// false), and ok false for the key null (a missing field, a null, an
// object or an array, or args that are not an object).
func LimitKey(args json.RawMessage, path []string) (key string, ok bool) {
	cur := args
	for _, seg := range path {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(cur, &obj); err != nil || obj == nil {
			return "", false
		}
		v, has := obj[seg]
		if !has {
			return "", false
		}
		cur = v
	}
	cur = bytes.TrimSpace(cur)
	if len(cur) == 0 {
		return "", false
	}
	switch cur[0] {
	case '"':
		var s string
		if err := json.Unmarshal(cur, &s); err != nil {
			return "", false
		}
		return s, true
	case 't', 'f':
		return string(cur), true
	case 'n', '{', '[':
		return "", false
	}
	return string(cur), true // a number, as written
}

// LimitLockID is the 64-bit id claimers serialize a scope and key on
// (Postgres: a transaction-scoped advisory lock). Every sidecar computes
// the same id for the same scope and key.
func LimitLockID(scope, key string, null bool) int64 {
	h := fnv.New64a()
	h.Write([]byte("soniq-limit\x00"))
	h.Write([]byte(scope))
	if null {
		h.Write([]byte{0, 0})
	} else {
		h.Write([]byte{0, 1})
		h.Write([]byte(key))
	}
	return int64(h.Sum64())
}

// Caps is the concurrency and rate that apply to one key of l: the key's
// own caps where the operator set them, else the scope's. Concurrency < 0
// means paused; 0 means no cap.
func (l ClaimLimit) Caps(key string, null bool) (concurrency, rateN int, ratePer time.Duration) {
	concurrency, rateN, ratePer = l.Concurrency, l.RateN, l.RatePer
	for _, k := range l.Keys {
		if k.Null != null || (!null && k.Key != key) {
			continue
		}
		if k.Concurrency != 0 {
			concurrency = k.Concurrency
		}
		if k.RateN != 0 {
			rateN, ratePer = k.RateN, k.RatePer
		}
	}
	return concurrency, rateN, ratePer
}

// LimitedNames is every job name some scope of limits counts.
func LimitedNames(limits []ClaimLimit) []string {
	var out []string
	for _, l := range limits {
		out = append(out, l.Names...)
	}
	return out
}

// KeyPath is the key path as the manifest writes it ("args.tenant_id").
func KeyPath(path []string) string {
	if len(path) == 0 {
		return ""
	}
	return "args." + strings.Join(path, ".")
}

// LimitIndexer is implemented by backends that index the rows of limited
// scopes by key, so a claim finds the keys with queued rows without
// reading a capped backlog. The engine calls it at start with the key
// paths its manifest declares; it is idempotent.
type LimitIndexer interface {
	PrepareLimitKeys(ctx context.Context, paths [][]string) error
}

// LimitOverride is an operator's cap for a scope, or for one key value of
// it, set with `soniq-sidecar limit set` and kept in the database until
// cleared, replacing the manifests' caps on every sidecar.
type LimitOverride struct {
	Scope string
	// Key is the key value the override is for; nil for the whole scope
	// or the key null.
	Key *string
	// NullKey: the override is for the key null (a missing field, a
	// null, an object or an array); Key is then nil.
	NullKey bool
	// Concurrency replaces the concurrency cap when set; 0 pauses (its
	// rows stay queued).
	Concurrency *int
	// RateN claims in any window of RatePer replace the rate cap when
	// RateN > 0.
	RateN   int
	RatePer time.Duration
	// UpdatedAt is when it was last set.
	UpdatedAt time.Time
}

// Limits is the storage of the operators' overrides of the limits
// (limits.go: the sidecar's own table, made by Migrate).
type Limits interface {
	// SetLimit creates or replaces the override of o.Scope (and o.Key).
	// A field left unset in o keeps the override's earlier value of it.
	SetLimit(ctx context.Context, o LimitOverride) (LimitOverride, error)
	// ClearLimit deletes the override of scope (and key, or the key null
	// when nullKey is set); false when there was none.
	ClearLimit(ctx context.Context, scope string, key *string, nullKey bool) (bool, error)
	// LimitOverrides returns every override, by scope then key (the
	// scope's own first).
	LimitOverrides(ctx context.Context) ([]LimitOverride, error)
	// CountByStatus counts the rows of names queued and processing, for
	// what `limit list` shows of a scope.
	CountByStatus(ctx context.Context, names []string) (queued, processing int64, err error)
	// LimitUsage reads a scope's rows as `limit list` shows them: l is the
	// scope as a claim sees it (its names, key path and the caps in force,
	// the overrides laid over); top is how many of its busiest keys to
	// return (none without a key path). It is read from the rows in a
	// bounded amount of memory however many keys there are.
	LimitUsage(ctx context.Context, l ClaimLimit, top int) (ScopeUsage, error)
	// PruneLimitClaims deletes the claim log's rows that no rate window
	// can count any more (see ClaimLogPrune), in statements of at most
	// p.Batch rows and at most p.Max rows in all (the rest are left to
	// the next call). It returns how many it deleted.
	PruneLimitClaims(ctx context.Context, p ClaimLogPrune) (int, error)
}

// ClaimLogPrune says which rows of the claim log PruneLimitClaims deletes:
// those of a scope logged longer ago than its horizon.
type ClaimLogPrune struct {
	// Horizons are the horizons of the scopes named; Floor is every other
	// scope's. ClaimLogHorizons makes both.
	Horizons map[string]time.Duration
	Floor    time.Duration
	// Batch is the most rows one statement (one transaction) deletes;
	// Max the most one call does.
	Batch, Max int
}

// ClaimLogFloor is the least time the claim log keeps a row: the horizon
// of a scope that no running sidecar declares and no override names.
const ClaimLogFloor = 24 * time.Hour

// ClaimLogHorizons is how long the claim log must keep each scope's rows.
// A claim of a scope counts the rows logged within its rate window: its
// manifest's, a running peer's smaller rate's, or an override's, of the
// scope or of a key. Each of those is declared by a running sidecar (in
// its worker row) or held in the overrides, so a row older than the
// longest of them, per scope, can be counted by no claim. A sidecar not
// running yet could declare a longer window, but the claims already drop
// the rows older than their own window as they go, so it could not rely
// on older ones anyway; the floor (ClaimLogFloor) keeps every window of up
// to a day exact across a fleet down for a while (a deploy, a crash loop),
// when no running sidecar declares the scope.
func ClaimLogHorizons(workers []Worker, overrides []LimitOverride) ClaimLogPrune {
	p := ClaimLogPrune{Horizons: map[string]time.Duration{}, Floor: ClaimLogFloor}
	longer := func(scope string, d time.Duration) {
		p.Horizons[scope] = max(p.Horizons[scope], d, ClaimLogFloor)
	}
	for _, w := range workers {
		for scope, c := range DeclaredLimits(w.Metadata) {
			longer(scope, time.Duration(c.RateSeconds)*time.Second)
		}
	}
	for _, o := range overrides {
		longer(o.Scope, o.RatePer)
	}
	return p
}

// Horizon is how long the claim log keeps scope's rows.
func (p ClaimLogPrune) Horizon(scope string) time.Duration {
	if h, ok := p.Horizons[scope]; ok {
		return max(h, p.Floor)
	}
	return p.Floor
}

// ScopeUsage is a scope's rows as `limit list` shows them.
type ScopeUsage struct {
	// Running and Queued count the rows of the scope's names processing
	// and queued; Deferred is the sum of its keys' (KeyUsage.Deferred).
	Running, Queued, Deferred int64
	// Busiest are at most the asked number of keys with rows, by most
	// running, then most queued, then key (bytewise, the key null last).
	Busiest []KeyUsage
	// Keys are l.Keys' own, one each in their order (zero when the key
	// has no rows).
	Keys []KeyUsage
}

// AddRow places one row of a backend's usage statement: part 0 is the
// scope's own counts, part 1 one of the busiest keys, part 2 the n-th
// (from 1) of l.Keys' own, which Keys must already hold room for.
func (u *ScopeUsage) AddRow(part int, n int64, k KeyUsage) error {
	switch part {
	case 0:
		u.Running, u.Queued, u.Deferred = k.Running, k.Queued, k.Deferred
	case 1:
		u.Busiest = append(u.Busiest, k)
	default:
		if n < 1 || n > int64(len(u.Keys)) {
			return fmt.Errorf("key %d of %d", n, len(u.Keys))
		}
		u.Keys[n-1] = k
	}
	return nil
}

// KeyUsage is one key's rows of a scope. Deferred counts its runnable
// queued rows (not scheduled for later) held back now by the concurrency
// cap: all of them while the key (or the scope) is paused or has as many
// rows processing as its cap allows, none otherwise. A rate cap's
// deferrals come and go within its window and are not counted here.
type KeyUsage struct {
	Key  string
	Null bool
	// Running, Queued, Deferred: as ScopeUsage's, for this key.
	Running, Queued, Deferred int64
}

// Deferred is how many of a key's runnable rows its concurrency cap holds
// back, by KeyUsage's rule, with running rows processing.
func (l ClaimLimit) Deferred(key string, null bool, running, runnable int64) int64 {
	conc, _, _ := l.Caps(key, null)
	if conc < 0 || (conc > 0 && running >= int64(conc)) {
		return runnable
	}
	return 0
}

// LessBusy orders keys as ScopeUsage.Busiest lists them: -1 when a is
// busier than b.
func LessBusy(a, b KeyUsage) int {
	switch {
	case a.Running != b.Running:
		return cmpDesc(a.Running, b.Running)
	case a.Queued != b.Queued:
		return cmpDesc(a.Queued, b.Queued)
	case a.Null != b.Null:
		if a.Null {
			return 1
		}
		return -1
	}
	return strings.Compare(a.Key, b.Key)
}

func cmpDesc(a, b int64) int {
	if a > b {
		return -1
	}
	return 1
}

// SortOverrides orders overrides by scope, then key (bytewise), the
// scope's own first, then the key null's.
func SortOverrides(os []LimitOverride) {
	rank := func(o LimitOverride) int {
		switch {
		case o.NullKey:
			return 1
		case o.Key == nil:
			return 0
		}
		return 2
	}
	slices.SortFunc(os, func(a, b LimitOverride) int {
		if c := strings.Compare(a.Scope, b.Scope); c != 0 {
			return c
		}
		if c := rank(a) - rank(b); c != 0 || rank(a) < 2 {
			return c
		}
		return strings.Compare(*a.Key, *b.Key)
	})
}

// ApplyOverrides lays the overrides over a scope's declared caps: the
// scope's own replaces them (a concurrency of 0 pauses the scope), each
// key's, the key null's included, becomes a KeyCaps (0 pauses the key). A
// key's override of a scope without a key is of no key of it, and ignored.
func ApplyOverrides(l ClaimLimit, os []LimitOverride) ClaimLimit {
	l.Keys = nil
	for _, o := range os {
		if o.Scope != l.Scope {
			continue
		}
		if o.NullKey || o.Key != nil {
			if len(l.Key) == 0 {
				continue
			}
			k := KeyCaps{Null: o.NullKey, RateN: o.RateN, RatePer: o.RatePer}
			if !o.NullKey {
				k.Key = *o.Key
			}
			if o.Concurrency != nil {
				k.Concurrency = pausedIfZero(*o.Concurrency)
			}
			l.Keys = append(l.Keys, k)
			continue
		}
		if o.Concurrency != nil {
			l.Concurrency = pausedIfZero(*o.Concurrency)
		}
		if o.RateN > 0 {
			l.RateN, l.RatePer = o.RateN, o.RatePer
		}
	}
	return l
}

func pausedIfZero(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

// MetaLimits is the worker metadata key under which a sidecar publishes the
// caps its manifest declares, by scope, so the sidecars of a fleet can see
// that they disagree (a rollout) and hold the smaller.
const MetaLimits = "limits"

// DeclaredCaps is one scope's caps as a sidecar declares them in its
// worker row's metadata.
type DeclaredCaps struct {
	// Names are the job names of the scope in the sidecar's manifest.
	Names []string `json:"names,omitempty"`
	// Key is the scope's key path as the manifest writes it
	// ("args.tenant_id"); "" without one.
	Key         string `json:"key,omitempty"`
	Concurrency int    `json:"concurrency,omitempty"`
	RateN       int    `json:"rate_n,omitempty"`
	RateSeconds int    `json:"rate_seconds,omitempty"`
}

// DeclaredLimits reads the caps a worker row's metadata declares, by
// scope; nil when it declares none.
func DeclaredLimits(meta json.RawMessage) map[string]DeclaredCaps {
	var m struct {
		Limits map[string]DeclaredCaps `json:"limits"`
	}
	if json.Unmarshal(meta, &m) != nil {
		return nil
	}
	return m.Limits
}
