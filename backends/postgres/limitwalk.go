package postgres

// The walk of a limited scope's keys (limits.go has the claim it serves):
// which keys with runnable rows a claim reads, where the next walk goes on
// from, and the walk a claim's transaction reads for the next claim.

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// keyCursors is where each keyed scope's walk of its keys goes on from:
// the last key a claim of this backend took (nil: the start of a lap, the
// smallest key). One entry per scope, never per key. Claims of several
// pools may share a scope, so it is locked.
type keyCursors struct {
	mu    sync.Mutex
	after map[string]*string
}

func (c *keyCursors) get(scope string) *string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.after[scope]
}

func (c *keyCursors) set(scope string, after *string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.after == nil {
		c.after = map[string]*string{}
	}
	c.after[scope] = after
}

// walkBudget is how many keys a claim for limit slots visits per name on
// each side of its cursor: room for the keys it may take and a few found
// at their caps. The keys just ahead of the cursor are those claimed
// longest ago, so few of them are at their caps; where many are, the next
// claims go on past them.
func walkBudget(limit int) int { return limit + 16 }

// advance moves each keyed scope's walk on after what the claim took
// (tookByKey's counts).
func (c *keyCursors) advance(p backends.ClaimParams, plan limitPlan, took []map[keyRef]int) {
	for i, l := range p.Limits {
		if len(l.Key) == 0 || i >= len(plan.walks) || len(plan.walks[i].order) == 0 {
			continue
		}
		if after, move := plan.walks[i].next(took[i]); move {
			c.set(l.Scope, after)
		}
	}
}

// keyWalk is one scope's keys as a claim's walk visited them.
type keyWalk struct {
	// present: the names the walk found runnable rows of; nil: all may
	// have some.
	present []string
	order   []limitKey // in the walk's order; cap -1: at a cap
	fwd     int        // of them, visited after the cursor
	nullAt  int        // the key null's place in order; -1: none
	inPlace bool       // the key null is where the walk reached it
}

// placeNull puts the key null (nil: it has no runnable row) in the walk:
// it sorts after every other key, so its turn comes when the walk reached
// the largest key; otherwise it is visited last, out of its place.
func (w *keyWalk) placeNull(k *limitKey, budget int) {
	w.nullAt = -1
	if k == nil {
		return
	}
	w.inPlace = w.fwd < budget
	at := len(w.order)
	if w.inPlace {
		at = w.fwd
	}
	w.order = slices.Insert(w.order, at, *k)
	w.nullAt = at
}

// kept is the keys under their caps, at most limit, in the walk's order.
func (w *keyWalk) kept(limit int) []limitKey {
	var out []limitKey
	for _, k := range w.order {
		if k.cap >= 0 && len(out) < limit {
			out = append(out, k)
		}
	}
	return out
}

// next is where the scope's next walk starts: after the last key of the
// walk the claim took a row of (taken: rows by key), or, when it
// took none and every key visited was at its cap, after the last one
// visited. nil: from the smallest key, after the key null. move false:
// leave the cursor where it is.
func (w *keyWalk) next(taken map[keyRef]int) (after *string, move bool) {
	last := -1
	for i, k := range w.order {
		if i == w.nullAt && !w.inPlace {
			continue // visited out of its place: not where the walk is
		}
		if taken[keyRef{k.key, k.null}] > 0 {
			last = i
		}
	}
	if last < 0 {
		for _, k := range w.order {
			if k.cap >= 0 {
				return nil, false // keys under their caps got no row: their turn is still to come
			}
		}
		last = len(w.order) - 1
		if last == w.nullAt && !w.inPlace {
			last--
		}
		if last < 0 {
			return nil, false
		}
	}
	if k := w.order[last]; !k.null {
		key := k.key
		return &key, true
	}
	return nil, true
}

// keyDiscovery is the first round trip's statement for one scope: keys
// with a queued row of names, each with its first runnable row in claim
// order, its rows processing (of every name of the scope), its claims in
// the rate window, and its place in the walk (pass: 0 after the cursor,
// 1 the key null, 2 from the smallest key up to the cursor).
//
// The keys come from a loose index scan (per name, the smallest key above
// the last one, one index probe each), bounded: at most budget keys per
// name from the key after the cursor, then, from the smallest key, at most
// budget more up to the cursor. A claim's cost so follows its slots, not
// the number of keys with rows (thousands of tenants), and the walk goes
// round the keys claim after claim.
func keyDiscovery(l backends.ClaimLimit, names, queues []string, after *string, budget int) (string, []any) {
	k := keyExpr(l.Key)
	args := []any{names}
	add := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	runnable := "status = 'queued' AND (scheduled_at IS NULL OR scheduled_at <= now())"
	if len(queues) > 0 {
		runnable += " AND queue = ANY(" + add(queues) + "::text[])"
	}
	rateWindow := "0"
	if on, per := rated(l); on {
		rateWindow = `(SELECT count(*) FROM soniq_sidecar_limit_claims c WHERE c.scope = ` + add(l.Scope) + `
			AND c.key IS NOT DISTINCT FROM keys.k AND c.claimed_at > statement_timestamp() - make_interval(secs => ` + add(per.Seconds()) + `::float8))`
	}
	// A key's first row: per name (job_name = one value lets the key's
	// index give the claim order, where = ANY would walk the claim-order
	// index past every row of the capped keys), then the first of those.
	head := func(match string) string {
		return `(SELECT hh.* FROM (` + eachName(names, func(n string) string {
			return `SELECT priority, scheduled_at, created_at FROM soniq_jobs
			WHERE job_name = ` + n + ` AND ` + runnable + ` AND ` + match + `
			ORDER BY priority ASC, scheduled_at ASC NULLS FIRST, created_at ASC LIMIT 1`
		}) + `) hh
			ORDER BY hh.priority ASC, hh.scheduled_at ASC NULLS FIRST, hh.created_at ASC LIMIT 1)`
	}
	busy := ""
	if busyNames(l) != "" {
		busy = "busy"
	}
	running := func(val string) string {
		if len(l.Key) > 0 {
			return runningCount(l, "", val, busy) // the names are written in
		}
		return runningCount(l, add(l.Names), "", "")
	}
	if len(l.Key) == 0 {
		sql := `SELECT NULL::text AS k, h.priority, h.scheduled_at, h.created_at, ` + running("") + `, ` +
			strings.ReplaceAll(rateWindow, "keys.k", "NULL::text") + `, 1, NULL::text[]
		FROM ` + head("true") + ` h WHERE cardinality($1::text[]) > 0` // $1 is the keyed form's
		return sql, args
	}
	// Each step finds the next key and its first runnable row in one
	// probe of the key's index: ordered by the key first, which only
	// that index gives, so the planner cannot walk the claim-order
	// index past a capped key's rows instead.
	probe := func(name, cond string) string {
		return `SELECT ` + k + ` AS k, priority, scheduled_at, created_at FROM soniq_jobs
				WHERE job_name = ` + name + ` AND ` + runnable + ` AND ` + cond + `
				ORDER BY ` + k + `, priority ASC, scheduled_at ASC NULLS FIRST, created_at ASC LIMIT 1`
	}
	b := add(budget)
	from, upTo := k+" IS NOT NULL", "false"
	if after != nil {
		c := add(*after)
		from, upTo = k+" > "+c+"::text", k+" <= "+c+"::text"
	}
	busyCTE := ""
	if bn := busyNames(l); bn != "" {
		busyCTE = `busy AS MATERIALIZED (` + bn + `), `
	}
	sql := `WITH RECURSIVE ` + busyCTE + `fwd(name, k, priority, scheduled_at, created_at, n) AS (
			SELECT nn.n, h.*, 1 FROM unnest($1::text[]) AS nn(n) CROSS JOIN LATERAL (` + probe("nn.n", from) + `) h
			UNION ALL
			SELECT fwd.name, h.*, fwd.n + 1 FROM fwd CROSS JOIN LATERAL (` + probe("fwd.name", k+" > fwd.k") + `) h
			WHERE fwd.n < ` + b + `
		), wrap(name, k, priority, scheduled_at, created_at, n) AS (
			SELECT nn.n, h.*, 1 FROM unnest($1::text[]) AS nn(n) CROSS JOIN LATERAL (` + probe("nn.n", k+" IS NOT NULL AND "+upTo) + `) h
			WHERE (SELECT count(*) FROM fwd WHERE fwd.name = nn.n) < ` + b + `
			UNION ALL
			SELECT wrap.name, h.*, wrap.n + 1 FROM wrap CROSS JOIN LATERAL (` + probe("wrap.name", k+" > wrap.k AND "+upTo) + `) h
			WHERE wrap.n < ` + b + `
		), keys AS (
			SELECT DISTINCT ON (k) k, priority, scheduled_at, created_at, pass FROM (
				SELECT k, priority, scheduled_at, created_at, 0 AS pass FROM fwd
				UNION ALL SELECT k, priority, scheduled_at, created_at, 2 FROM wrap
			) v
			ORDER BY k, priority ASC, scheduled_at ASC NULLS FIRST, created_at ASC
		), nullheads AS (
			SELECT nn.n AS name, h.* FROM unnest($1::text[]) AS nn(n) CROSS JOIN LATERAL (` + probe("nn.n", k+" IS NULL") + `) h
		), nullkey AS (
			SELECT * FROM nullheads ORDER BY priority ASC, scheduled_at ASC NULLS FIRST, created_at ASC LIMIT 1
		), present AS (
			SELECT array_agg(DISTINCT v.name) AS names FROM (
				SELECT name FROM fwd UNION ALL SELECT name FROM wrap UNION ALL SELECT name FROM nullheads
			) v
		)
		SELECT * FROM (
			SELECT keys.k, keys.priority, keys.scheduled_at, keys.created_at, ` + running("keys.k") + `, ` + rateWindow + `, keys.pass,
				(SELECT names FROM present)
			FROM keys
			UNION ALL
			SELECT NULL::text, nullkey.priority, nullkey.scheduled_at, nullkey.created_at, ` + running("") + `, ` +
		strings.ReplaceAll(rateWindow, "keys.k", "NULL::text") + `, 1, (SELECT names FROM present)
			FROM nullkey
		) w ORDER BY w.pass, w.k`
	return sql, args
}

// walkRow is one key as a walk read it, before any cap is laid over it.
type walkRow struct {
	key       string
	null      bool
	priority  int
	scheduled *time.Time
	created   time.Time
	running   int // its rows processing
	claims    int // its claims in the rate window
	pass      int // 0 after the cursor, 1 the key null, 2 up to the cursor
	// present: the scope's names the walk found runnable rows of (the
	// same on every row of a walk); nil when it does not tell.
	present []string
}

// scanWalk reads a walk's rows (keyDiscovery's columns).
func scanWalk(rows pgx.Rows) ([]walkRow, error) {
	out := []walkRow{} // not nil: a walk that found nothing was read
	for rows.Next() {
		var r walkRow
		var key *string
		if err := rows.Scan(&key, &r.priority, &r.scheduled, &r.created, &r.running, &r.claims, &r.pass, &r.present); err != nil {
			return nil, err
		}
		r.null = key == nil
		if key != nil {
			r.key = *key
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// keyCaps is how l's caps stand for one key on a walk's reading.
type keyCaps struct {
	under      bool   // a row of it may be claimed
	by         string // when not: the cap that holds it ("concurrency" or "rate")
	conc, rate int    // its caps (0: none)
	left       int    // the fewest rows the caps let a claim take (0: no cap)
	leftBy     string // the cap that leaves them
}

func (r walkRow) caps(l backends.ClaimLimit) keyCaps {
	conc, rateN, _ := l.Caps(r.key, r.null)
	switch {
	case conc < 0 || (conc > 0 && r.running >= conc):
		return keyCaps{by: "concurrency"}
	case rateN > 0 && r.claims >= rateN:
		return keyCaps{by: "rate"}
	}
	c := keyCaps{under: true, conc: max(conc, 0), rate: rateN}
	if conc > 0 {
		c.left, c.leftBy = conc-r.running, "concurrency"
	}
	if rateN > 0 && (c.left == 0 || rateN-r.claims < c.left) {
		c.left, c.leftBy = rateN-r.claims, "rate"
	}
	return c
}

// walkFresh is how long a walk read at the end of a claim's transaction
// stands for the next claim. The claim recounts each key under its lock,
// so a stale reading costs a key claimed for nothing, never a cap; fresh
// enough that keys found at their caps come round again soon.
const walkFresh = time.Second

// walkCache holds, per scope and the names and queues a claim takes, the
// walk the last claim's transaction read for the next one: a claim whose
// walk is here takes one round trip instead of two.
type walkCache struct {
	mu sync.Mutex
	m  map[string]cachedWalk
}

type cachedWalk struct {
	rows   []walkRow
	at     time.Time
	budget int
}

// walkID names a walk in the cache.
func walkID(l backends.ClaimLimit, names, queues []string) string {
	return l.Scope + "\x00" + strings.Join(names, "\x01") + "\x00" + strings.Join(queues, "\x01")
}

// take removes and returns the walk of id when it is fresh at now and
// went as far as budget: a walk for fewer slots may have stopped short of
// keys this claim needs, and a claim that comes back short looks to its
// caller like a drained queue.
func (c *walkCache) take(id string, now time.Time, budget int) ([]walkRow, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w, ok := c.m[id]
	if !ok {
		return nil, false
	}
	delete(c.m, id)
	return w.rows, now.Sub(w.at) < walkFresh && w.budget >= budget
}

func (c *walkCache) put(id string, w cachedWalk) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]cachedWalk{}
	}
	c.m[id] = w
}

// queueNextWalks queues, after the claim (and the results written with
// it) in its transaction, the walk of each scope for the next claim, from
// the key after the last one this claim keeps: it sees what this claim
// took and wrote, and costs no round trip of its own.
func (b *Backend) queueNextWalks(batch *pgx.Batch, p backends.ClaimParams, plan limitPlan) {
	budget := walkBudget(p.Limit)
	for i, l := range p.Limits {
		names := claimables(l, p)
		if len(names) == 0 || i >= len(plan.walks) {
			continue
		}
		after := b.cursors.get(l.Scope)
		if len(l.Key) > 0 {
			kept := map[keyRef]int{}
			for _, k := range plan.keys {
				if k.scope == i {
					kept[keyRef{k.key, k.null}] = 1
				}
			}
			if a, move := plan.walks[i].next(kept); move {
				after = a
			}
		}
		id := walkID(l, names, p.Queues)
		sql, args := keyDiscovery(l, names, p.Queues, after, budget)
		batch.Queue(sql, args...).Query(func(rows pgx.Rows) error {
			got, err := scanWalk(rows)
			if err != nil {
				return err
			}
			b.walks.put(id, cachedWalk{rows: got, at: time.Now(), budget: budget})
			return nil
		})
	}
}
