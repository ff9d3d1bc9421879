package postgres

// Limited claims (backends.ClaimLimit): a scope's caps, per key value, held
// across every claimer of the database.
//
// A claim with limits takes two round trips. The first, a plain read,
// walks the keys of each scope that have a runnable queued row: a loose
// index scan (one probe per key over the index PrepareLimitKeys makes per
// key path, never a walk of a key's backlog), round-robin and bounded by
// the claim's slots: it goes on from the key after the last one this
// backend took, wrapping round to the smallest, and reads each visited
// key's first row, its rows processing and its claims in the rate window.
// The keys under their caps on that reading are kept, as many as the
// claim has slots. The second round trip, one implicit transaction,
// takes a transaction-scoped advisory lock per kept key (in one order, so
// claimers never deadlock), then, in a statement whose snapshot follows
// the locks, counts each key's processing rows again and takes at most
// what its caps leave, the keys' rows in turns. Every claimer of a key
// counts after the previous one committed, so no interleaving passes a
// cap; the locks end with the transaction, so nothing is kept on the
// session (transaction pooling works) and a crash leaves nothing to
// repair: the count comes from the rows.

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// keyExpr is the SQL of a row's key for path: the value's text when it is a
// string, a number or a boolean, NULL otherwise; NULL without a path. It
// is written the same way everywhere (the key indexes match it).
func keyExpr(path []string) string {
	if len(path) == 0 {
		return "NULL::text"
	}
	p := "'{" + strings.Join(path, ",") + "}'"
	return "(CASE WHEN jsonb_typeof(args #> " + p + ") IN ('string', 'number', 'boolean') THEN args #>> " + p + " END)"
}

// checkKeyPath refuses a path the manifest could not have given: its
// segments are written into SQL.
func checkKeyPath(path []string) error {
	for _, s := range path {
		if s == "" || strings.IndexFunc(s, func(r rune) bool {
			return !(r == '_' || r == '-' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9'))
		}) >= 0 {
			return fmt.Errorf("limit key %q: %q is not a field name", backends.KeyPath(path), s)
		}
	}
	return nil
}

// keyIndexName is the name of a key path's index.
func keyIndexName(path []string, suffix string) string {
	h := fnv.New32a()
	h.Write([]byte(strings.Join(path, ".")))
	return fmt.Sprintf("soniq_sidecar_limit_key_%08x_%s", h.Sum32(), suffix)
}

// PrepareLimitKeys makes, for each key path, the indexes a limited claim
// reads: the queued rows by name, key and claim order (the loose scan of
// the keys and each key's rows), and the processing rows by name and key
// (each key's count). CONCURRENTLY: claims and enqueues go on while they
// build. Idempotent (see backends.LimitIndexer).
func (b *Backend) PrepareLimitKeys(ctx context.Context, paths [][]string) error {
	// The scopes without a key: their queued rows by name in claim order,
	// their processing rows by name.
	names := []string{"soniq_sidecar_limit_queued", "soniq_sidecar_limit_processing"}
	stmts := []string{
		`CREATE INDEX CONCURRENTLY IF NOT EXISTS soniq_sidecar_limit_queued ON soniq_jobs
			(job_name, priority, scheduled_at NULLS FIRST, created_at) WHERE status = 'queued'`,
		`CREATE INDEX CONCURRENTLY IF NOT EXISTS soniq_sidecar_limit_processing ON soniq_jobs (job_name) WHERE status = 'processing'`,
	}
	for _, path := range paths {
		if len(path) == 0 {
			continue
		}
		if err := checkKeyPath(path); err != nil {
			return err
		}
		k := keyExpr(path)
		names = append(names, keyIndexName(path, "q"), keyIndexName(path, "p"))
		stmts = append(stmts,
			`CREATE INDEX CONCURRENTLY IF NOT EXISTS `+keyIndexName(path, "q")+` ON soniq_jobs (job_name, `+k+
				`, priority, scheduled_at NULLS FIRST, created_at) WHERE status = 'queued'`,
			`CREATE INDEX CONCURRENTLY IF NOT EXISTS `+keyIndexName(path, "p")+` ON soniq_jobs (job_name, `+k+
				`) WHERE status = 'processing'`)
	}
	var valid int
	if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM pg_index i WHERE i.indisvalid
		AND i.indexrelid IN (SELECT to_regclass(n) FROM unnest($1::text[]) AS n)`, names).Scan(&valid); err != nil {
		return b.wrap(err, "look up the limits' indexes")
	}
	if valid == len(names) {
		return nil
	}
	conn, err := b.pool.Acquire(ctx)
	if err != nil {
		return b.wrap(err, "acquire a connection to index the limits' keys")
	}
	defer conn.Release()
	if !b.opts.TransactionPooling {
		// One builder at a time, and no waiting for it: a sidecar that
		// waited for the lock would hold a snapshot the concurrent build
		// waits out, each waiting for the other. One that does not get
		// the lock claims without the indexes until its next start.
		var got bool
		if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", migrationLockKey).Scan(&got); err != nil {
			return b.wrap(err, "take migration lock")
		}
		if !got {
			return fmt.Errorf("index the limits' keys: another session (a migrate, or another sidecar starting) holds the migration lock; not built by this one")
		}
		defer func() {
			unlockCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if _, err := conn.Exec(unlockCtx, "SELECT pg_advisory_unlock($1)", migrationLockKey); err != nil {
				_ = conn.Conn().Close(unlockCtx)
			}
		}()
	}
	for i, stmt := range stmts {
		// An interrupted concurrent build leaves an invalid index that IF
		// NOT EXISTS would keep for good: dropped and built again, unless
		// a session is building it right now.
		var valid, building bool
		err := conn.QueryRow(ctx, `SELECT i.indisvalid,
			EXISTS (SELECT 1 FROM pg_stat_progress_create_index p WHERE p.index_relid = i.indexrelid)
			FROM pg_index i WHERE i.indexrelid = to_regclass($1)`, names[i]).Scan(&valid, &building)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return b.wrap(err, "look up the limits' index %s", names[i])
		case valid:
			continue
		case building:
			return fmt.Errorf("create the limits' index %s: another session is building it right now; try again once it has finished", names[i])
		default:
			if _, err := conn.Exec(ctx, `DROP INDEX CONCURRENTLY IF EXISTS `+names[i]); err != nil {
				return b.wrap(err, "drop the invalid limits' index %s left by an interrupted build", names[i])
			}
		}
		if _, err := conn.Exec(ctx, stmt); err != nil {
			return b.wrap(err, "create the limits' index %s", names[i])
		}
	}
	return nil
}

// rated reports whether l has a rate cap, its own or a key's, and the
// longest window of them.
func rated(l backends.ClaimLimit) (bool, time.Duration) {
	on, per := l.RateN > 0, l.RatePer
	for _, kc := range l.Keys {
		if kc.RateN > 0 {
			on, per = true, max(per, kc.RatePer)
		}
	}
	return on, per
}

// limitKey is one key of one scope found by the first round trip.
type limitKey struct {
	scope int // index into ClaimParams.Limits
	key   string
	null  bool
	cap   int // what the concurrency cap allows in all; 0 = no cap
	rate  int // what the rate cap allows in its window; 0 = no cap
	// left is the fewest rows the caps let a claim take of the key on the
	// walk's reading (0: no cap): a claim that took that many filled it.
	left      int
	leftBy    string // the cap that leaves the fewest: "concurrency" or "rate"
	priority  int
	scheduled *time.Time
	created   time.Time
}

// limitPlan is the keys a limited claim locks and takes from.
type limitPlan struct {
	keys     []limitKey
	deferred []backends.Deferral
	walks    []keyWalk // per scope of ClaimParams.Limits
}

// claimables is the names of l the claim may take.
func claimables(l backends.ClaimLimit, p backends.ClaimParams) []string {
	if len(p.Names) == 0 {
		return l.Names
	}
	var out []string
	for _, n := range l.Names {
		if slices.Contains(p.Names, n) {
			out = append(out, n)
		}
	}
	return out
}

// planLimits is the first part of a limited claim: for each scope, keys
// with runnable rows in the order of a walk (limitwalk.go), those under
// their caps on its reading kept, at most p.Limit in all; with several
// scopes, the kept keys of all of them by their first row. The walk is
// the one the previous claim's transaction read for this claim (no round
// trip of its own) while it is fresh and finds a key under its caps, and
// one read now otherwise.
func (b *Backend) planLimits(ctx context.Context, p backends.ClaimParams) (limitPlan, error) {
	var plan limitPlan
	if p.Limit == 0 {
		return plan, nil
	}
	budget := walkBudget(p.Limit)
	raws := make([][]walkRow, len(p.Limits))
	var batch *pgx.Batch
	for i, l := range p.Limits {
		if err := checkKeyPath(l.Key); err != nil {
			return plan, err
		}
		names := claimables(l, p)
		if len(names) == 0 {
			continue
		}
		if rows, ok := b.walks.take(walkID(l, names, p.Queues), time.Now(), budget); ok && slices.ContainsFunc(rows, func(r walkRow) bool {
			return r.caps(l).under
		}) {
			raws[i] = rows
			continue
		}
		if batch == nil {
			batch = &pgx.Batch{}
			// The planner settings of the claim (jobs.go) for this
			// transaction too: stale statistics must not turn a probe per
			// key into a scan.
			batch.Queue(claimPlannerHints)
		}
		sql, args := keyDiscovery(l, names, p.Queues, b.cursors.get(l.Scope), budget)
		batch.Queue(sql, args...).Query(func(rows pgx.Rows) error {
			var err error
			raws[i], err = scanWalk(rows)
			return err
		})
	}
	if batch != nil {
		if err := b.pool.SendBatch(ctx, batch).Close(); err != nil {
			return plan, b.wrap(err, "list the limited keys with queued jobs for worker %s", p.WorkerID)
		}
	}
	plan.walks = make([]keyWalk, len(p.Limits))
	var found []limitKey
	for i, l := range p.Limits {
		if raws[i] == nil {
			continue
		}
		plan.walks[i] = plan.walkOf(i, l, raws[i], budget)
		found = append(found, plan.walks[i].kept(p.Limit)...)
	}
	if len(p.Limits) > 1 {
		slices.SortStableFunc(found, claimOrder)
	}
	if len(found) > p.Limit {
		found = found[:p.Limit]
	}
	plan.keys = found
	return plan, nil
}

// walkOf is scope i's walk with l's caps laid over what it read; keys at a
// cap are counted as deferred.
func (plan *limitPlan) walkOf(i int, l backends.ClaimLimit, rows []walkRow, budget int) keyWalk {
	var w keyWalk
	if len(rows) > 0 {
		w.present = rows[0].present
	}
	var nullKey *limitKey
	for _, r := range rows {
		k := limitKey{scope: i, key: r.key, null: r.null, priority: r.priority, scheduled: r.scheduled, created: r.created}
		c := r.caps(l)
		if c.under {
			k.cap, k.rate, k.left, k.leftBy = c.conc, c.rate, c.left, c.leftBy
		} else {
			plan.deferKey(l.Scope, c.by)
			k.cap = -1
		}
		switch {
		case k.null && len(l.Key) > 0:
			nullKey = &k
		case r.pass == 0:
			w.fwd++
			fallthrough
		default:
			w.order = append(w.order, k)
		}
	}
	w.placeNull(nullKey, budget)
	return w
}

// filled adds to the plan's deferrals the keys the claim filled to a cap
// (it took as many rows of a key as the walk's reading let it): their
// rows left queued wait for that cap as much as those of a key found at
// it, and the caller must know to claim again when a slot frees or the
// rate's window moves on.
func (plan *limitPlan) filled(p backends.ClaimParams, took []map[keyRef]int) {
	for _, k := range plan.keys {
		if k.left > 0 && took[k.scope][keyRef{k.key, k.null}] >= k.left {
			plan.deferKey(p.Limits[k.scope].Scope, k.leftBy)
		}
	}
}

// keyRef names one key of a scope (an unkeyed scope's rows are the key
// null's).
type keyRef struct {
	key  string
	null bool
}

// tookByKey counts the rows of jobs per scope of p and key, each job's
// args read once.
func tookByKey(p backends.ClaimParams, jobs []backends.Job) []map[keyRef]int {
	out := make([]map[keyRef]int, len(p.Limits))
	for _, j := range jobs {
		for i, l := range p.Limits {
			if !slices.Contains(l.Names, j.Name) {
				continue
			}
			if out[i] == nil {
				out[i] = map[keyRef]int{}
			}
			var k keyRef
			k.key, k.null = "", true
			if len(l.Key) > 0 {
				key, ok := backends.LimitKey(j.Args, l.Key)
				k = keyRef{key, !ok}
			}
			out[i][k]++
			break // a job has one scope
		}
	}
	return out
}

// claimOrder orders keys by their first row in claim order.
func claimOrder(x, y limitKey) int {
	if x.priority != y.priority {
		return x.priority - y.priority
	}
	switch {
	case x.scheduled == nil && y.scheduled != nil:
		return -1
	case x.scheduled != nil && y.scheduled == nil:
		return 1
	case x.scheduled != nil:
		if c := x.scheduled.Compare(*y.scheduled); c != 0 {
			return c
		}
	}
	return x.created.Compare(y.created)
}

// deferKey counts one key held back by a cap.
func (plan *limitPlan) deferKey(scope, limit string) {
	for i := range plan.deferred {
		if d := &plan.deferred[i]; d.Scope == scope && d.Limit == limit {
			d.Keys++
			return
		}
	}
	plan.deferred = append(plan.deferred, backends.Deferral{Scope: scope, Limit: limit, Keys: 1})
}

// runningCount is the SQL of the count of l's rows processing: those of
// the key value val (SQL; "" for the key null) when l has a key, else all
// of them (names is then the placeholder of l.Names). A key's rows are
// counted per name through the key's index: the planner, whose estimate
// of the processing rows is often far off, would otherwise take the index
// by name alone and filter every processing row of the scope, for each
// key. The order by the key, which only the key's index gives, makes it
// take that one; the key is matched by a range of one value, as an
// equality would make that order moot. busy, when not "", is the name of
// the statement's busyNames CTE for l: a name with no row processing at
// all, on the same snapshot, is skipped without a probe per key.
func runningCount(l backends.ClaimLimit, names, val, busy string) string {
	if len(l.Key) == 0 {
		return `(SELECT count(*) FROM soniq_jobs WHERE job_name = ANY(` + names + `::text[]) AND status = 'processing')`
	}
	kx := keyExpr(l.Key)
	match := kx + " IS NULL"
	if val != "" {
		match = kx + " >= " + val + " AND " + kx + " <= " + val
	}
	return `(SELECT count(*) FROM (` + eachName(l.Names, func(n string) string {
		skip := ""
		if busy != "" {
			skip = ` AND ` + n + `::text = ANY(COALESCE((SELECT names FROM ` + busy + `), '{}'::text[]))`
		}
		return `SELECT 1 FROM soniq_jobs WHERE job_name = ` + n + ` AND status = 'processing' AND ` + match + skip + ` ORDER BY ` + kx + ` LIMIT 2147483647`
	}) + `) rn)`
}

// busyNames is, for a keyed scope of several job names, the SQL of a CTE
// of the names that have a row processing (one probe each), for
// runningCount to count the others' rows per key for nothing. "" when it
// would not pay: one name, or no key.
func busyNames(l backends.ClaimLimit) string {
	if len(l.Key) == 0 || len(l.Names) < 2 {
		return ""
	}
	lits := make([]string, len(l.Names))
	for i, n := range l.Names {
		lits[i] = "'" + strings.ReplaceAll(n, "'", "''") + "'"
	}
	return `SELECT array_agg(bn.n) AS names FROM unnest(ARRAY[` + strings.Join(lits, ", ") + `]::text[]) AS bn(n)
	WHERE EXISTS (SELECT 1 FROM soniq_jobs WHERE job_name = bn.n AND status = 'processing')`
}

// eachName is body for each of names, a UNION ALL of them: each name is
// written into its statement as a literal, so the planner reads its own
// statistics for it (how many rows it has) and walks that name's rows
// alone, where a parameter, estimated as an average name, let it walk the
// claim-order index past every row of a capped scope.
func eachName(names []string, body func(lit string) string) string {
	// Each arm is a subquery of its own: a set operation's arms may not
	// lock rows themselves (FOR UPDATE), a subquery in FROM may.
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("SELECT * FROM (%s) AS n%d", body("'"+strings.ReplaceAll(n, "'", "''")+"'"), i)
	}
	return strings.Join(parts, "\nUNION ALL ")
}

// queueLimitLocks queues the advisory locks of the plan's keys, taken in
// ascending id order: two claimers sharing keys take them in one order,
// so neither waits for the other while holding what it waits for.
func queueLimitLocks(batch *pgx.Batch, p backends.ClaimParams, plan limitPlan) {
	if len(plan.keys) == 0 {
		return
	}
	ids := make([]int64, 0, len(plan.keys))
	for _, k := range plan.keys {
		ids = append(ids, backends.LimitLockID(p.Limits[k.scope].Scope, k.key, k.null))
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	batch.Queue(`SELECT count(pg_advisory_xact_lock(id)) FROM unnest($1::int8[]) WITH ORDINALITY AS l(id, n)`, ids)
}

// limitedPicks is the part of the claim statement that takes the limited
// rows: per scope, per kept key, at most what its caps leave now (counted
// on this statement's snapshot, which follows the locks), in claim order.
// It returns the CTEs and the name of the one holding (id, priority,
// scheduled_at, created_at) rows; add appends an argument and returns its
// placeholder.
func limitedPicks(p backends.ClaimParams, plan limitPlan, where string, add func(any) string) (ctes []string, union []string) {
	for i, l := range p.Limits {
		var keys []string
		var caps, rates []int32
		nullCap, nullRate, hasNull := int32(0), int32(0), false
		for _, k := range plan.keys {
			if k.scope != i {
				continue
			}
			if k.null {
				nullCap, nullRate, hasNull = int32(k.cap), int32(k.rate), true
				continue
			}
			keys, caps, rates = append(keys, k.key), append(caps, int32(k.cap)), append(rates, int32(k.rate))
		}
		if len(keys) == 0 && !hasNull {
			continue
		}
		names := claimables(l, p)
		if i < len(plan.walks) && plan.walks[i].present != nil {
			// Only the names the walk found rows of: each name is an arm
			// of every key's pick.
			names = slices.DeleteFunc(slices.Clone(names), func(n string) bool { return !slices.Contains(plan.walks[i].present, n) })
			if len(names) == 0 {
				continue
			}
		}
		all := "" // the names' placeholder, for an unkeyed count
		if len(l.Key) == 0 {
			all = add(l.Names)
		}
		kx := keyExpr(l.Key)
		// Ordered by the key first: only the key's index gives that order
		// (see keyDiscovery), and the key is matched by a range of one
		// value, as an equality would make that order moot (runningCount).
		orderKey := ""
		if len(l.Key) > 0 {
			orderKey = kx + ", "
		}
		on, per := rated(l)
		rateCount := func(match string) string {
			if !on {
				return "0"
			}
			return `(SELECT count(*) FROM soniq_sidecar_limit_claims lc WHERE lc.scope = ` + add(l.Scope) + ` AND ` + match +
				` AND lc.claimed_at > statement_timestamp() - make_interval(secs => ` + add(per.Seconds()) + `::float8))`
		}
		pick := func(name, from, match, val, cmatch string) {
			// What each key's caps leave is counted once, in a CTE of its
			// own: written into the picks' LIMITs, the counts were run again
			// for every name's arm.
			busy := ""
			if b := busyNames(l); b != "" {
				busy = name + "busy"
				ctes = append(ctes, busy+` AS MATERIALIZED (`+b+`)`)
			}
			ctes = append(ctes, name+`room AS MATERIALIZED (
	SELECT c.k, c.rate, LEAST(CASE WHEN c.cap > 0 THEN GREATEST(c.cap - r.n, 0) ELSE $2 END,
		CASE WHEN c.rate > 0 THEN GREATEST(c.rate - rc.n, 0) ELSE $2 END, $2) AS n
	FROM `+from+`
	CROSS JOIN LATERAL (SELECT `+runningCount(l, all, val, busy)+` AS n) r
	CROSS JOIN LATERAL (SELECT `+rateCount(cmatch)+` AS n) rc
)`, name+` AS (
	SELECT x.id, x.priority, x.scheduled_at, x.created_at, `+add(l.Scope)+`::text AS scope, x.k, c.rate > 0 AS rated
	FROM `+name+`room c
	CROSS JOIN LATERAL (
		SELECT y.* FROM (`+eachName(names, func(n string) string {
				return `SELECT id, priority, scheduled_at, created_at, ` + kx + ` AS k FROM soniq_jobs
			WHERE job_name = ` + n + ` AND ` + where + ` AND ` + match + `
			ORDER BY ` + orderKey + `priority ASC, scheduled_at ASC NULLS FIRST, created_at ASC
			LIMIT c.n
			FOR UPDATE SKIP LOCKED`
			})+`) y
		ORDER BY y.priority ASC, y.scheduled_at ASC NULLS FIRST, y.created_at ASC
		LIMIT c.n
	) x
	WHERE c.n > 0
)`)
			union = append(union, `SELECT id, priority, scheduled_at, created_at, scope, k, rated FROM `+name)
		}
		if on {
			// The log's rows older than the window are of no further use:
			// dropped for the keys this claim holds, as it goes.
			match := "false"
			if len(keys) > 0 {
				match = "key = ANY(" + add(keys) + "::text[])"
			}
			if hasNull {
				match += " OR key IS NULL"
			}
			ctes = append(ctes, fmt.Sprintf(`prune%d AS (
	DELETE FROM soniq_sidecar_limit_claims WHERE scope = %s AND (%s)
	AND claimed_at <= statement_timestamp() - make_interval(secs => %s::float8)
)`, i, add(l.Scope), match, add(per.Seconds())))
		}
		if len(keys) > 0 {
			from := `unnest(` + add(keys) + `::text[], ` + add(caps) + `::int4[], ` + add(rates) + `::int4[]) AS c(k, cap, rate)`
			pick(fmt.Sprintf("lim%dk", i), from, kx+" >= c.k AND "+kx+" <= c.k", "c.k", "lc.key = c.k")
		}
		if hasNull {
			from := `(SELECT NULL::text AS k, ` + add(nullCap) + `::int4 AS cap, ` + add(nullRate) + `::int4 AS rate) AS c`
			pick(fmt.Sprintf("lim%dn", i), from, kx+" IS NULL", "", "lc.key IS NULL")
		}
	}
	return ctes, union
}

// limitedClaimStatement is the claim with limits: the unlimited names as
// an unlimited claim takes them (slots, then the reserve), the limited
// rows of the plan's keys into the slots only, the slots filled in claim
// order from both, and the rate-limited claims logged.
func limitedClaimStatement(p backends.ClaimParams, plan limitPlan) (string, []any) {
	args := []any{p.WorkerID, p.Limit}
	add := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	where := "status = 'queued' AND (scheduled_at IS NULL OR scheduled_at <= now()) AND EXISTS (SELECT 1 FROM me)"
	if len(p.Queues) > 0 {
		where += " AND queue = ANY(" + add(p.Queues) + "::text[])"
	}
	limitedNames := backends.LimitedNames(p.Limits)
	var free []string
	for _, n := range p.Names {
		if !slices.Contains(limitedNames, n) {
			free = append(free, n)
		}
	}
	unlimited := len(p.Names) == 0 || len(free) > 0
	uwhere := where
	if excl := append(slices.Clone(p.ExcludeNames), limitedNames...); unlimited && len(excl) > 0 {
		uwhere += " AND job_name <> ALL(" + add(excl) + "::text[])"
	}
	const order = `ORDER BY priority ASC, scheduled_at ASC NULLS FIRST, created_at ASC`
	ctes := []string{`me AS (
	UPDATE soniq_workers SET last_heartbeat = now() WHERE id = $1::uuid AND status = 'active' RETURNING 1
)`}
	var cands []string
	// The unlimited names are read one by one, in their order by name
	// (only the name's index gives it): a walk of the claim-order index
	// filtered by name would pass every row of a capped scope first.
	perName := func(cols, limit string) string {
		if len(p.Names) == 0 {
			return `SELECT ` + cols + ` FROM soniq_jobs WHERE ` + uwhere + ` ` + order + ` LIMIT ` + limit + ` FOR UPDATE SKIP LOCKED`
		}
		return `SELECT y.* FROM (` + eachName(free, func(n string) string {
			return `SELECT ` + cols + ` FROM soniq_jobs WHERE job_name = ` + n + ` AND ` + uwhere + `
		` + order + ` LIMIT ` + limit + ` FOR UPDATE SKIP LOCKED`
		}) + `) y`
	}
	if unlimited {
		ctes = append(ctes, `free AS (
	`+perName(`id, priority, scheduled_at, created_at, NULL::text AS scope, NULL::text AS k, false AS rated`, "$2")+`
)`)
		cands = append(cands, `SELECT * FROM free`)
	}
	lctes, lunion := limitedPicks(p, plan, where, add)
	ctes = append(ctes, lctes...)
	cands = append(cands, lunion...)
	if len(cands) == 0 {
		cands = append(cands, `SELECT NULL::uuid AS id, 0 AS priority, NULL::timestamptz AS scheduled_at, NULL::timestamptz AS created_at, NULL::text AS scope, NULL::text AS k, false AS rated WHERE false`)
	}
	// The slots go to the keys in turns: within a priority, every key's
	// first row before any key's second (an unlimited row counts as a
	// first), so the keys a claim found share its slots instead of the
	// oldest key's backlog taking them all.
	ctes = append(ctes, `slots AS (
	SELECT * FROM (
		SELECT c0.*, CASE WHEN c0.scope IS NULL THEN 1 ELSE row_number() OVER (PARTITION BY c0.scope, c0.k `+order+`) END AS turn
		FROM (`+strings.Join(cands, "\n\tUNION ALL ")+`) c0
	) c
	ORDER BY priority ASC, turn ASC, scheduled_at ASC NULLS FIRST, created_at ASC
	LIMIT $2
)`)
	picked := `SELECT id FROM slots`
	if unlimited && p.Ahead > 0 {
		n := add(p.Ahead)
		uwhere += " AND id NOT IN (SELECT id FROM slots)"
		ctes = append(ctes, `ahead AS (
	SELECT id FROM (
		SELECT id, attempts, max_attempts, priority, scheduled_at, created_at FROM (`+perName(`id, attempts, max_attempts, priority, scheduled_at, created_at`, n)+`) a
		`+order+`
		LIMIT `+n+`
	) next WHERE COALESCE(next.attempts, 0) + 1 < next.max_attempts
)`)
		picked += ` UNION ALL SELECT id FROM ahead`
	}
	// Updated by their ids as one array, not by a join (buildClaimStatement).
	ctes = append(ctes, `picked AS (`+picked+`)`, `claimed AS (
	UPDATE soniq_jobs j
	SET status = 'processing', attempts = COALESCE(j.attempts, 0) + 1, worker_id = $1::uuid, updated_at = now()
	WHERE j.id = ANY(ARRAY(SELECT id FROM picked))
	RETURNING j.*
)`)
	if slices.ContainsFunc(p.Limits, func(l backends.ClaimLimit) bool { on, _ := rated(l); return on }) {
		// Each claim of a rate-limited key is logged at this statement's
		// time, under the key's lock: the next claimer counts it.
		ctes = append(ctes, `logged AS (
	INSERT INTO soniq_sidecar_limit_claims (scope, key, claimed_at)
	SELECT s.scope, s.k, statement_timestamp() FROM slots s JOIN claimed c ON c.id = s.id WHERE s.rated
)`)
	}
	return `WITH ` + strings.Join(ctes, ", ") + `
SELECT ` + claimedColumns + ` FROM claimed
` + order, args
}
