package postgres

import (
	"context"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// SetLimit creates or replaces an override (see backends.Limits): one
// upsert; a field left unset keeps the row's value.
func (b *Backend) SetLimit(ctx context.Context, o backends.LimitOverride) (backends.LimitOverride, error) {
	key, hasKey := "", o.Key != nil || o.NullKey
	if o.Key != nil && !o.NullKey {
		key = *o.Key
	}
	var rateN, rateSecs *int
	if o.RateN > 0 {
		n, s := o.RateN, int(o.RatePer/time.Second)
		rateN, rateSecs = &n, &s
	}
	row := b.pool.QueryRow(ctx, `INSERT INTO soniq_sidecar_limit_overrides AS o (scope, has_key, null_key, key, concurrency, rate_n, rate_seconds)
	VALUES ($1, $2, $7, $3, $4, $5, $6)
	ON CONFLICT (scope, has_key, null_key, key) DO UPDATE SET
		concurrency = COALESCE(EXCLUDED.concurrency, o.concurrency),
		rate_n = COALESCE(EXCLUDED.rate_n, o.rate_n),
		rate_seconds = COALESCE(EXCLUDED.rate_seconds, o.rate_seconds),
		updated_at = now()
	RETURNING `+overrideColumns, o.Scope, hasKey, key, o.Concurrency, rateN, rateSecs, o.NullKey)
	out, err := scanOverride(row)
	if err != nil {
		return backends.LimitOverride{}, b.wrap(err, "set the limit of %s", o.Scope)
	}
	return out, nil
}

// ClearLimit deletes an override.
func (b *Backend) ClearLimit(ctx context.Context, scope string, key *string, nullKey bool) (bool, error) {
	k := ""
	if key != nil && !nullKey {
		k = *key
	}
	tag, err := b.pool.Exec(ctx, `DELETE FROM soniq_sidecar_limit_overrides WHERE scope = $1 AND has_key = $2 AND null_key = $3 AND key = $4`,
		scope, key != nil || nullKey, nullKey, k)
	if err != nil {
		return false, b.wrap(err, "clear the limit of %s", scope)
	}
	return tag.RowsAffected() > 0, nil
}

// LimitOverrides returns every override.
func (b *Backend) LimitOverrides(ctx context.Context) ([]backends.LimitOverride, error) {
	rows, err := b.pool.Query(ctx, `SELECT `+overrideColumns+` FROM soniq_sidecar_limit_overrides`)
	if err != nil {
		return nil, b.wrap(err, "read the limits' overrides")
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (backends.LimitOverride, error) { return scanOverride(r) })
	if err != nil {
		return nil, b.wrap(err, "read the limits' overrides")
	}
	backends.SortOverrides(out)
	return out, nil
}

const overrideColumns = `scope, has_key, null_key, key, concurrency, rate_n, rate_seconds, updated_at`

func scanOverride(row pgx.Row) (backends.LimitOverride, error) {
	var o backends.LimitOverride
	var hasKey bool
	var key string
	var rateN, rateSecs *int
	if err := row.Scan(&o.Scope, &hasKey, &o.NullKey, &key, &o.Concurrency, &rateN, &rateSecs, &o.UpdatedAt); err != nil {
		return o, err
	}
	if hasKey && !o.NullKey {
		o.Key = &key
	}
	if rateN != nil && rateSecs != nil {
		o.RateN, o.RatePer = *rateN, time.Duration(*rateSecs)*time.Second
	}
	return o, nil
}

// CountByStatus counts the rows of names queued and processing.
func (b *Backend) CountByStatus(ctx context.Context, names []string) (queued, processing int64, err error) {
	err = b.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'queued'), count(*) FILTER (WHERE status = 'processing')
	FROM soniq_jobs WHERE job_name = ANY($1::text[]) AND status IN ('queued', 'processing')`, names).Scan(&queued, &processing)
	if err != nil {
		return 0, 0, b.wrap(err, "count the jobs of %v", names)
	}
	return queued, processing, nil
}

// LimitUsage reads a scope's rows (see backends.Limits) in one statement
// (limitUsageSQL), bounded in memory however many keys there are.
func (b *Backend) LimitUsage(ctx context.Context, l backends.ClaimLimit, top int) (backends.ScopeUsage, error) {
	var out backends.ScopeUsage
	if err := checkKeyPath(l.Key); err != nil {
		return out, err
	}
	if len(l.Key) == 0 {
		top = 0
	}
	keys, nulls, caps := make([]string, len(l.Keys)), make([]bool, len(l.Keys)), make([]int32, len(l.Keys))
	for i, kc := range l.Keys {
		keys[i], nulls[i], caps[i] = kc.Key, kc.Null, int32(kc.Concurrency)
	}
	if len(l.Keys) > 0 {
		out.Keys = make([]backends.KeyUsage, len(l.Keys))
	}
	if len(l.Names) == 0 {
		for i, kc := range l.Keys {
			out.Keys[i] = backends.KeyUsage{Key: kc.Key, Null: kc.Null}
		}
		return out, nil
	}
	batch := &pgx.Batch{}
	// In the statement's transaction: each name's queued rows grouped in
	// the order of its key index, never in a hash table or a scan of the
	// table.
	batch.Queue(usagePlannerHints)
	batch.Queue(limitUsageSQL(l.Key, l.Names), keys, nulls, caps, int32(l.Concurrency), top, l.Names).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var part int
			var n int64
			var key *string
			var u backends.KeyUsage
			if err := rows.Scan(&part, &key, &u.Null, &u.Running, &u.Queued, &u.Deferred, &n); err != nil {
				return err
			}
			if key != nil {
				u.Key = *key
			}
			if err := out.AddRow(part, n, u); err != nil {
				return err
			}
		}
		return rows.Err()
	})
	if err := b.pool.SendBatch(ctx, batch).Close(); err != nil {
		return out, b.wrap(err, "read the rows of limited scope %s", l.Scope)
	}
	// A UNION ALL promises no order: each part is put in its own here.
	slices.SortStableFunc(out.Busiest, backends.LessBusy)
	return out, nil
}

// usagePlannerHints are the planner settings of LimitUsage's statement.
const usagePlannerHints = `SELECT set_config('enable_hashagg', 'off', true), set_config('enable_seqscan', 'off', true),
	set_config('enable_bitmapscan', 'off', true), set_config('jit', 'off', true)`

// limitUsageSQL is LimitUsage's statement for a key path and the scope's
// names: $1, $2 and $3 the asked keys, whether each is the key null, and
// its concurrency cap (0: the scope's), $4 the scope's cap, $5 how many of
// the busiest keys, $6 the names.
//
// Keys are unbounded, so nothing here holds them all in memory: each
// name's queued rows are counted by key in one walk of its key index (in
// key order, a group at a time; a scope of several names then sums its
// names' counts by a sort that spills to disk past work_mem), the
// processing rows (no more than the fleet has slots) are counted by key
// and joined in, and the per-key counts are kept in a work table that
// spills to disk too, for the sums, the busiest keys (a top-N sort) and
// the asked keys.
func limitUsageSQL(path []string, names []string) string {
	k := keyExpr(path)
	queuedOf := func(n string) string {
		return `SELECT ` + k + ` AS k, count(*) AS queued,
			count(*) FILTER (WHERE scheduled_at IS NULL OR scheduled_at <= now()) AS runnable
		FROM soniq_jobs WHERE job_name = ` + n + ` AND status = 'queued' GROUP BY 1`
	}
	queued := `SELECT k, sum(queued)::int8 AS queued, sum(runnable)::int8 AS runnable FROM (` + eachName(names, queuedOf) + `) qq GROUP BY k`
	if len(names) == 1 {
		queued = eachName(names, queuedOf)
	}
	return `WITH o AS (
	SELECT * FROM unnest($1::text[], $2::bool[], $3::int4[]) WITH ORDINALITY AS o(k, nullkey, cap, n)
), q AS (
	` + queued + `
), p AS (
	SELECT ` + k + ` AS k, count(*) AS running FROM soniq_jobs
	WHERE job_name = ANY($6::text[]) AND status = 'processing' GROUP BY 1
), s AS (
	SELECT q.k, COALESCE(p.running, 0) AS running, q.queued, q.runnable
	FROM q LEFT JOIN p ON (q.k IS NULL) = (p.k IS NULL) AND COALESCE(q.k, '') = COALESCE(p.k, '')
	UNION ALL
	SELECT p.k, p.running, 0, 0 FROM p
	WHERE CASE WHEN p.k IS NULL
		THEN NOT EXISTS (SELECT 1 FROM soniq_jobs WHERE job_name = ANY($6::text[]) AND status = 'queued' AND ` + k + ` IS NULL)
		ELSE NOT EXISTS (SELECT 1 FROM soniq_jobs WHERE job_name = ANY($6::text[]) AND status = 'queued' AND ` + k + ` = p.k) END
), keys AS (
	SELECT s.k, s.running, s.queued,
		CASE WHEN c.cap < 0 OR (c.cap > 0 AND s.running >= c.cap) THEN s.runnable ELSE 0 END AS deferred
	FROM s
	CROSS JOIN LATERAL (SELECT COALESCE((SELECT o.cap FROM o WHERE o.cap <> 0
		AND CASE WHEN o.nullkey THEN s.k IS NULL ELSE o.k = s.k END ORDER BY o.n DESC LIMIT 1), $4::int4) AS cap) c
)
SELECT 0, NULL::text, false, COALESCE(sum(running), 0)::int8, COALESCE(sum(queued), 0)::int8, COALESCE(sum(deferred), 0)::int8, 0::int8 FROM keys
UNION ALL
SELECT 1, * FROM (
	SELECT k, k IS NULL, running, queued, deferred, 0::int8 FROM keys
	ORDER BY running DESC, queued DESC, k COLLATE "C" ASC NULLS LAST LIMIT $5
) t
UNION ALL
SELECT 2, * FROM (
	SELECT o.k, o.nullkey, COALESCE(keys.running, 0), COALESCE(keys.queued, 0), COALESCE(keys.deferred, 0), o.n
	FROM o LEFT JOIN keys ON CASE WHEN o.nullkey THEN keys.k IS NULL ELSE keys.k = o.k END
) k`
}
