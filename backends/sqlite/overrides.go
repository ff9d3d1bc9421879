package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// SetLimit creates or replaces an override (see backends.Limits).
func (b *Backend) SetLimit(ctx context.Context, o backends.LimitOverride) (backends.LimitOverride, error) {
	key, hasKey := "", o.Key != nil
	if hasKey {
		key = *o.Key
	}
	var rateN, rateSecs any
	if o.RateN > 0 {
		rateN, rateSecs = o.RateN, int(o.RatePer/time.Second)
	}
	var conc any
	if o.Concurrency != nil {
		conc = *o.Concurrency
	}
	var out backends.LimitOverride
	err := b.inWriteTx(ctx, "setting the limit of "+o.Scope, func(tx *sql.Tx) error {
		row := tx.QueryRowContext(ctx, `INSERT INTO soniq_sidecar_limit_overrides (scope, has_key, key, concurrency, rate_n, rate_seconds, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (scope, has_key, key) DO UPDATE SET
				concurrency = COALESCE(excluded.concurrency, concurrency),
				rate_n = COALESCE(excluded.rate_n, rate_n),
				rate_seconds = COALESCE(excluded.rate_seconds, rate_seconds),
				updated_at = excluded.updated_at
			RETURNING `+overrideColumns, o.Scope, hasKey, key, conc, rateN, rateSecs, formatTime(now()))
		var err error
		out, err = scanOverride(row)
		return err
	})
	return out, err
}

// ClearLimit deletes an override.
func (b *Backend) ClearLimit(ctx context.Context, scope string, key *string) (bool, error) {
	k := ""
	if key != nil {
		k = *key
	}
	var n int64
	err := b.inWriteTx(ctx, "clearing the limit of "+scope, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM soniq_sidecar_limit_overrides WHERE scope = ? AND has_key = ? AND key = ?`, scope, key != nil, k)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n > 0, err
}

// LimitOverrides returns every override.
func (b *Backend) LimitOverrides(ctx context.Context) ([]backends.LimitOverride, error) {
	rows, err := b.read.QueryContext(ctx, `SELECT `+overrideColumns+` FROM soniq_sidecar_limit_overrides ORDER BY scope, has_key, key`)
	if err != nil {
		return nil, fmt.Errorf("reading the limits' overrides: %w", err)
	}
	defer rows.Close()
	var out []backends.LimitOverride
	for rows.Next() {
		o, err := scanOverride(rows)
		if err != nil {
			return nil, fmt.Errorf("reading the limits' overrides: %w", err)
		}
		out = append(out, o)
	}
	return out, rows.Err()
}

const overrideColumns = `scope, has_key, key, concurrency, rate_n, rate_seconds, updated_at`

func scanOverride(row interface{ Scan(...any) error }) (backends.LimitOverride, error) {
	var o backends.LimitOverride
	var hasKey bool
	var key, updated string
	var conc, rateN, rateSecs sql.NullInt64
	if err := row.Scan(&o.Scope, &hasKey, &key, &conc, &rateN, &rateSecs, &updated); err != nil {
		return o, err
	}
	if hasKey {
		o.Key = &key
	}
	if conc.Valid {
		c := int(conc.Int64)
		o.Concurrency = &c
	}
	if rateN.Valid && rateSecs.Valid {
		o.RateN, o.RatePer = int(rateN.Int64), time.Duration(rateSecs.Int64)*time.Second
	}
	t, err := parseTime(updated)
	if err != nil {
		return o, err
	}
	o.UpdatedAt = t
	return o, nil
}

// CountByStatus counts the rows of names queued and processing.
func (b *Backend) CountByStatus(ctx context.Context, names []string) (queued, processing int64, err error) {
	if len(names) == 0 {
		return 0, 0, nil
	}
	args := []any{}
	q := `SELECT COALESCE(SUM(status = 'queued'), 0), COALESCE(SUM(status = 'processing'), 0) FROM soniq_jobs WHERE job_name IN ` + inList(names, &args)
	if err := b.read.QueryRowContext(ctx, q, args...).Scan(&queued, &processing); err != nil {
		return 0, 0, fmt.Errorf("counting the jobs of %v: %w", names, err)
	}
	return queued, processing, nil
}
