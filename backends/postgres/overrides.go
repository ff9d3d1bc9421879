package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// SetLimit creates or replaces an override (see backends.Limits): one
// upsert; a field left unset keeps the row's value.
func (b *Backend) SetLimit(ctx context.Context, o backends.LimitOverride) (backends.LimitOverride, error) {
	key, hasKey := "", o.Key != nil
	if hasKey {
		key = *o.Key
	}
	var rateN, rateSecs *int
	if o.RateN > 0 {
		n, s := o.RateN, int(o.RatePer/time.Second)
		rateN, rateSecs = &n, &s
	}
	row := b.pool.QueryRow(ctx, `INSERT INTO soniq_sidecar_limit_overrides AS o (scope, has_key, key, concurrency, rate_n, rate_seconds)
	VALUES ($1, $2, $3, $4, $5, $6)
	ON CONFLICT (scope, has_key, key) DO UPDATE SET
		concurrency = COALESCE(EXCLUDED.concurrency, o.concurrency),
		rate_n = COALESCE(EXCLUDED.rate_n, o.rate_n),
		rate_seconds = COALESCE(EXCLUDED.rate_seconds, o.rate_seconds),
		updated_at = now()
	RETURNING `+overrideColumns, o.Scope, hasKey, key, o.Concurrency, rateN, rateSecs)
	out, err := scanOverride(row)
	if err != nil {
		return backends.LimitOverride{}, b.wrap(err, "set the limit of %s", o.Scope)
	}
	return out, nil
}

// ClearLimit deletes an override.
func (b *Backend) ClearLimit(ctx context.Context, scope string, key *string) (bool, error) {
	k := ""
	if key != nil {
		k = *key
	}
	tag, err := b.pool.Exec(ctx, `DELETE FROM soniq_sidecar_limit_overrides WHERE scope = $1 AND has_key = $2 AND key = $3`, scope, key != nil, k)
	if err != nil {
		return false, b.wrap(err, "clear the limit of %s", scope)
	}
	return tag.RowsAffected() > 0, nil
}

// LimitOverrides returns every override.
func (b *Backend) LimitOverrides(ctx context.Context) ([]backends.LimitOverride, error) {
	rows, err := b.pool.Query(ctx, `SELECT `+overrideColumns+` FROM soniq_sidecar_limit_overrides ORDER BY scope, has_key, key`)
	if err != nil {
		return nil, b.wrap(err, "read the limits' overrides")
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (backends.LimitOverride, error) { return scanOverride(r) })
	if err != nil {
		return nil, b.wrap(err, "read the limits' overrides")
	}
	return out, nil
}

const overrideColumns = `scope, has_key, key, concurrency, rate_n, rate_seconds, updated_at`

func scanOverride(row pgx.Row) (backends.LimitOverride, error) {
	var o backends.LimitOverride
	var hasKey bool
	var key string
	var rateN, rateSecs *int
	if err := row.Scan(&o.Scope, &hasKey, &key, &o.Concurrency, &rateN, &rateSecs, &o.UpdatedAt); err != nil {
		return o, err
	}
	if hasKey {
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
