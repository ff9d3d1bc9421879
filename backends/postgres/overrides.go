package postgres

import (
	"context"
	"fmt"
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

// LimitUsage reads a scope's rows (see backends.Limits) in one statement:
// the rows of its names queued and processing, grouped by key, are read
// once into a work table (Postgres spills it to disk past work_mem, so
// memory stays bounded however many keys there are), then summed, the
// busiest keys taken by a top-N sort, and the asked keys looked up.
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
	// A key's cap is its own override's when it sets a concurrency, else
	// the scope's (backends.ClaimLimit.Caps).
	rows, err := b.pool.Query(ctx, `WITH o AS (
	SELECT * FROM unnest($2::text[], $3::bool[], $4::int4[]) WITH ORDINALITY AS o(k, nullkey, cap, n)
), keys AS (
	SELECT s.k, s.running, s.queued,
		CASE WHEN c.cap < 0 OR (c.cap > 0 AND s.running >= c.cap) THEN s.runnable ELSE 0 END AS deferred
	FROM (
		SELECT `+keyExpr(l.Key)+` AS k,
			count(*) FILTER (WHERE status = 'processing') AS running,
			count(*) FILTER (WHERE status = 'queued') AS queued,
			count(*) FILTER (WHERE status = 'queued' AND (scheduled_at IS NULL OR scheduled_at <= now())) AS runnable
		FROM soniq_jobs WHERE job_name = ANY($1::text[]) AND status IN ('queued', 'processing')
		GROUP BY 1
	) s
	CROSS JOIN LATERAL (SELECT COALESCE((SELECT o.cap FROM o WHERE o.cap <> 0
		AND CASE WHEN o.nullkey THEN s.k IS NULL ELSE o.k = s.k END ORDER BY o.n DESC LIMIT 1), $5::int4) AS cap) c
)
SELECT 0, NULL::text, false, COALESCE(sum(running), 0)::int8, COALESCE(sum(queued), 0)::int8, COALESCE(sum(deferred), 0)::int8, 0::int8 FROM keys
UNION ALL
SELECT 1, * FROM (
	SELECT k, k IS NULL, running, queued, deferred, 0::int8 FROM keys
	ORDER BY running DESC, queued DESC, k COLLATE "C" ASC NULLS LAST LIMIT $6
) t
UNION ALL
SELECT 2, * FROM (
	SELECT o.k, o.nullkey, COALESCE(keys.running, 0), COALESCE(keys.queued, 0), COALESCE(keys.deferred, 0), o.n
	FROM o LEFT JOIN keys ON CASE WHEN o.nullkey THEN keys.k IS NULL ELSE keys.k = o.k END
) k`, l.Names, keys, nulls, caps, int32(l.Concurrency), top)
	if err != nil {
		return out, b.wrap(err, "read the rows of limited scope %s", l.Scope)
	}
	defer rows.Close()
	if len(l.Keys) > 0 {
		out.Keys = make([]backends.KeyUsage, len(l.Keys))
	}
	for rows.Next() {
		var part int
		var n int64
		var key *string
		var u backends.KeyUsage
		if err := rows.Scan(&part, &key, &u.Null, &u.Running, &u.Queued, &u.Deferred, &n); err != nil {
			return out, b.wrap(err, "read the rows of limited scope %s", l.Scope)
		}
		if key != nil {
			u.Key = *key
		}
		switch part {
		case 0:
			out.Running, out.Queued, out.Deferred = u.Running, u.Queued, u.Deferred
		case 1:
			out.Busiest = append(out.Busiest, u)
		default:
			if n < 1 || n > int64(len(out.Keys)) {
				return out, fmt.Errorf("read the rows of limited scope %s: key %d of %d", l.Scope, n, len(out.Keys))
			}
			out.Keys[n-1] = u
		}
	}
	if err := rows.Err(); err != nil {
		return out, b.wrap(err, "read the rows of limited scope %s", l.Scope)
	}
	// A UNION ALL promises no order: each part is put in its own here.
	slices.SortStableFunc(out.Busiest, backends.LessBusy)
	return out, nil
}
