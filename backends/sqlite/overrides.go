package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// SetLimit creates or replaces an override (see backends.Limits).
func (b *Backend) SetLimit(ctx context.Context, o backends.LimitOverride) (backends.LimitOverride, error) {
	key, hasKey := "", o.Key != nil || o.NullKey
	if o.Key != nil && !o.NullKey {
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
		row := tx.QueryRowContext(ctx, `INSERT INTO soniq_sidecar_limit_overrides (scope, has_key, null_key, key, concurrency, rate_n, rate_seconds, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (scope, has_key, null_key, key) DO UPDATE SET
				concurrency = COALESCE(excluded.concurrency, concurrency),
				rate_n = COALESCE(excluded.rate_n, rate_n),
				rate_seconds = COALESCE(excluded.rate_seconds, rate_seconds),
				updated_at = excluded.updated_at
			RETURNING `+overrideColumns, o.Scope, hasKey, o.NullKey, key, conc, rateN, rateSecs, formatTime(now()))
		var err error
		out, err = scanOverride(row)
		return err
	})
	return out, err
}

// ClearLimit deletes an override.
func (b *Backend) ClearLimit(ctx context.Context, scope string, key *string, nullKey bool) (bool, error) {
	k := ""
	if key != nil && !nullKey {
		k = *key
	}
	var n int64
	err := b.inWriteTx(ctx, "clearing the limit of "+scope, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM soniq_sidecar_limit_overrides WHERE scope = ? AND has_key = ? AND null_key = ? AND key = ?`,
			scope, key != nil || nullKey, nullKey, k)
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
	rows, err := b.read.QueryContext(ctx, `SELECT `+overrideColumns+` FROM soniq_sidecar_limit_overrides`)
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
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading the limits' overrides: %w", err)
	}
	backends.SortOverrides(out)
	return out, nil
}

const overrideColumns = `scope, has_key, null_key, key, concurrency, rate_n, rate_seconds, updated_at`

func scanOverride(row interface{ Scan(...any) error }) (backends.LimitOverride, error) {
	var o backends.LimitOverride
	var hasKey bool
	var key, updated string
	var conc, rateN, rateSecs sql.NullInt64
	if err := row.Scan(&o.Scope, &hasKey, &o.NullKey, &key, &conc, &rateN, &rateSecs, &updated); err != nil {
		return o, err
	}
	if hasKey && !o.NullKey {
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

// LimitUsage reads a scope's rows (see backends.Limits) in one statement:
// the rows of its names queued and processing grouped by key (SQLite's
// grouping sorter spills to a temporary file, so memory stays bounded
// however many keys there are), then summed, the busiest keys taken by an
// ORDER BY … LIMIT, and the asked keys looked up.
func (b *Backend) LimitUsage(ctx context.Context, l backends.ClaimLimit, top int) (backends.ScopeUsage, error) {
	var out backends.ScopeUsage
	if len(l.Names) == 0 {
		out.Keys = make([]backends.KeyUsage, len(l.Keys))
		for i, kc := range l.Keys {
			out.Keys[i] = backends.KeyUsage{Key: kc.Key, Null: kc.Null}
		}
		return out, nil
	}
	if len(l.Key) == 0 {
		top = 0
	}
	type asked struct {
		K    string `json:"k"`
		Null bool   `json:"null"`
		Cap  int    `json:"cap"`
	}
	os := make([]asked, len(l.Keys))
	for i, kc := range l.Keys {
		os[i] = asked{K: kc.Key, Null: kc.Null, Cap: kc.Concurrency}
	}
	oj, err := json.Marshal(os)
	if err != nil {
		return out, fmt.Errorf("reading the rows of limited scope %s: %w", l.Scope, err)
	}
	args := []any{string(oj), formatTime(now())}
	names := inList(l.Names, &args)
	args = append(args, l.Concurrency, top)
	// A key's cap is its own override's when it sets a concurrency, else
	// the scope's (backends.ClaimLimit.Caps); the last such override wins.
	q := `WITH o AS (
	SELECT json_extract(value, '$.k') AS k, json_extract(value, '$.null') AS nullkey, json_extract(value, '$.cap') AS cap, CAST(key AS INTEGER) + 1 AS n
	FROM json_each(?1)
), s AS (
	SELECT ` + keyExpr(l.Key) + ` AS k,
		SUM(status = 'processing') AS running,
		SUM(status = 'queued') AS queued,
		SUM(status = 'queued' AND (scheduled_at IS NULL OR scheduled_at <= ?2)) AS runnable
	FROM soniq_jobs WHERE job_name IN ` + names + ` AND status IN ('queued', 'processing')
	GROUP BY 1
), c AS (
	SELECT s.*, COALESCE((SELECT o.cap FROM o WHERE o.cap <> 0
		AND CASE WHEN o.nullkey THEN s.k IS NULL ELSE o.k = s.k END ORDER BY o.n DESC LIMIT 1), ?) AS cap
	FROM s
), keys AS (
	SELECT k, running, queued, CASE WHEN cap < 0 OR (cap > 0 AND running >= cap) THEN runnable ELSE 0 END AS deferred FROM c
)
SELECT 0, NULL, 0, COALESCE(SUM(running), 0), COALESCE(SUM(queued), 0), COALESCE(SUM(deferred), 0), 0 FROM keys
UNION ALL
SELECT * FROM (
	SELECT 1, k, k IS NULL, running, queued, deferred, 0 FROM keys
	ORDER BY running DESC, queued DESC, k IS NULL, k LIMIT ?
)
UNION ALL
SELECT 2, o.k, o.nullkey, COALESCE(keys.running, 0), COALESCE(keys.queued, 0), COALESCE(keys.deferred, 0), o.n
FROM o LEFT JOIN keys ON CASE WHEN o.nullkey THEN keys.k IS NULL ELSE keys.k = o.k END`
	rows, err := b.read.QueryContext(ctx, q, args...)
	if err != nil {
		return out, fmt.Errorf("reading the rows of limited scope %s: %w", l.Scope, err)
	}
	defer rows.Close()
	if len(l.Keys) > 0 {
		out.Keys = make([]backends.KeyUsage, len(l.Keys))
	}
	for rows.Next() {
		var part int
		var n int64
		var key sql.NullString
		var u backends.KeyUsage
		if err := rows.Scan(&part, &key, &u.Null, &u.Running, &u.Queued, &u.Deferred, &n); err != nil {
			return out, fmt.Errorf("reading the rows of limited scope %s: %w", l.Scope, err)
		}
		u.Key = key.String
		if err := out.AddRow(part, n, u); err != nil {
			return out, fmt.Errorf("reading the rows of limited scope %s: %w", l.Scope, err)
		}
	}
	if err := rows.Err(); err != nil {
		return out, fmt.Errorf("reading the rows of limited scope %s: %w", l.Scope, err)
	}
	// A UNION ALL promises no order: the busiest are put in theirs here.
	slices.SortStableFunc(out.Busiest, backends.LessBusy)
	return out, nil
}

// upgradeOverrides gives an overrides table made before the key null's
// overrides existed their null_key column, in its primary key: SQLite
// cannot change a primary key in place, so the table is made again and
// its rows copied. A table that has the column is left as it is.
func upgradeOverrides(ctx context.Context, tx *sql.Tx) error {
	var has int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_info('soniq_sidecar_limit_overrides') WHERE name = 'null_key'`).Scan(&has); err != nil {
		return fmt.Errorf("reading the columns of soniq_sidecar_limit_overrides: %w", err)
	}
	if has > 0 {
		return nil
	}
	_, err := tx.ExecContext(ctx, `ALTER TABLE soniq_sidecar_limit_overrides RENAME TO soniq_sidecar_limit_overrides_old;
`+limitsDDL+`
INSERT INTO soniq_sidecar_limit_overrides (scope, has_key, null_key, key, concurrency, rate_n, rate_seconds, updated_at)
	SELECT scope, has_key, 0, key, concurrency, rate_n, rate_seconds, updated_at FROM soniq_sidecar_limit_overrides_old;
DROP TABLE soniq_sidecar_limit_overrides_old;`)
	if err != nil {
		return fmt.Errorf("adding null_key to soniq_sidecar_limit_overrides: %w", err)
	}
	return nil
}
