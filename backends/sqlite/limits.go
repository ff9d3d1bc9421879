package sqlite

// Limited claims (backends.ClaimLimit). SQLite runs one write transaction
// at a time, across every process sharing the file, so a claim counts each
// key's rows and takes what its caps leave with no other claimer between
// the two: the caps hold across the sidecars sharing a file. Unlike the
// Postgres backend, the rows of the limited names are read in claim order
// until the claim's slots are filled, so a key at its cap with a deep
// backlog is walked past (SQLite is for one machine's queues).

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// keyExpr is the SQL of a row's key for path: the value's text when it is a
// string, a number or a boolean (true and false as words, as Postgres and
// the memory backend write them), NULL otherwise; NULL without a path.
func keyExpr(path []string) string {
	if len(path) == 0 {
		return "NULL"
	}
	var p strings.Builder
	p.WriteString("'$")
	for _, s := range path {
		p.WriteString(`."` + strings.ReplaceAll(strings.ReplaceAll(s, `"`, ``), `'`, ``) + `"`)
	}
	p.WriteString("'")
	x := "json_extract(args, " + p.String() + ")"
	return "(CASE json_type(args, " + p.String() + ") WHEN 'text' THEN " + x + " WHEN 'integer' THEN CAST(" + x +
		" AS TEXT) WHEN 'real' THEN CAST(" + x + " AS TEXT) WHEN 'true' THEN 'true' WHEN 'false' THEN 'false' END)"
}

// inList is " IN (?, ?, …)" for values, appended to args.
func inList(values []string, args *[]any) string {
	var b strings.Builder
	b.WriteString("(")
	for i, v := range values {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('?')
		*args = append(*args, v)
	}
	b.WriteString(")")
	return b.String()
}

// orderRow is a row's place in the claim order.
type orderRow struct {
	id        string
	priority  int
	scheduled sql.NullString
	created   sql.NullString
	rowid     int64
	scope     int
	key       sql.NullString
}

func (x orderRow) before(y orderRow) bool {
	if x.priority != y.priority {
		return x.priority < y.priority
	}
	if x.scheduled.Valid != y.scheduled.Valid {
		return !x.scheduled.Valid // NULLS FIRST
	}
	if x.scheduled.String != y.scheduled.String {
		return x.scheduled.String < y.scheduled.String
	}
	if x.created.String != y.created.String {
		return x.created.String < y.created.String
	}
	return x.rowid < y.rowid
}

// limitedPicks reads, in tx, the limited rows the claim may take: per
// scope, its runnable rows in claim order, each key's first row taken
// while the key is under its caps, until the claim's slots are filled.
func limitedPicks(ctx context.Context, tx *sql.Tx, p backends.ClaimParams, ts string, at time.Time) ([]orderRow, []backends.Deferral, error) {
	var picks []orderRow
	var deferred []backends.Deferral
	deferKey := func(scope, limit string) {
		for i := range deferred {
			if deferred[i].Scope == scope && deferred[i].Limit == limit {
				deferred[i].Keys++
				return
			}
		}
		deferred = append(deferred, backends.Deferral{Scope: scope, Limit: limit, Keys: 1})
	}
	for i, l := range p.Limits {
		names := l.Names
		if len(p.Names) > 0 {
			names = nil
			for _, n := range l.Names {
				if slices.Contains(p.Names, n) {
					names = append(names, n)
				}
			}
		}
		if len(names) == 0 || p.Limit == 0 {
			continue
		}
		kx := keyExpr(l.Key)
		args := []any{ts}
		q := `SELECT id, COALESCE(priority, 100), scheduled_at, created_at, rowid, ` + kx + ` FROM soniq_jobs INDEXED BY soniq_sidecar_claim_order
			WHERE status = 'queued' AND (scheduled_at IS NULL OR scheduled_at <= ?) AND job_name IN ` + inList(names, &args)
		if len(p.Queues) > 0 {
			q += ` AND queue IN ` + inList(p.Queues, &args)
		}
		q += ` ORDER BY priority, scheduled_at NULLS FIRST, created_at, rowid`
		rows, err := tx.QueryContext(ctx, q, args...)
		if err != nil {
			return nil, nil, fmt.Errorf("reading the queued rows of limited scope %s: %w", l.Scope, err)
		}
		var cands []orderRow
		for rows.Next() {
			r := orderRow{scope: i}
			if err := rows.Scan(&r.id, &r.priority, &r.scheduled, &r.created, &r.rowid, &r.key); err != nil {
				rows.Close()
				return nil, nil, fmt.Errorf("reading the queued rows of limited scope %s: %w", l.Scope, err)
			}
			cands = append(cands, r)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, nil, fmt.Errorf("reading the queued rows of limited scope %s: %w", l.Scope, err)
		}
		left := map[sql.NullString]int{}  // what each key's caps leave
		by := map[sql.NullString]string{} // the cap that leaves the fewest
		taken := 0
		for _, r := range cands {
			if taken == p.Limit {
				break
			}
			n, seen := left[r.key]
			if !seen {
				n, by[r.key], err = keyRoom(ctx, tx, l, kx, r.key, at, deferKey)
				if err != nil {
					return nil, nil, err
				}
			}
			if n <= 0 {
				if seen && left[r.key] == 0 && by[r.key] != "" {
					// This claim filled the key to a cap, and rows of it
					// wait: reported as a key found at it would be.
					deferKey(l.Scope, by[r.key])
					by[r.key] = ""
				}
				left[r.key] = 0
				continue
			}
			left[r.key] = n - 1
			picks = append(picks, r)
			taken++
		}
	}
	return picks, deferred, nil
}

// keyRoom is how many rows of one key of l may be claimed now: its
// concurrency cap less its rows processing, its rate less its claims in
// the window, and the cap that leaves the fewest ("" for none); a key with
// none left is reported as deferred.
func keyRoom(ctx context.Context, tx *sql.Tx, l backends.ClaimLimit, kx string, key sql.NullString, at time.Time, deferKey func(scope, limit string)) (int, string, error) {
	conc, rateN, ratePer := l.Caps(key.String, !key.Valid)
	room, by := int(^uint(0)>>1), ""
	if conc < 0 {
		deferKey(l.Scope, "concurrency")
		return 0, "", nil
	}
	match, margs := kx+" IS NULL", []any(nil)
	if key.Valid {
		match, margs = kx+" = ?", []any{key.String}
	}
	if conc > 0 {
		args := []any{}
		q := `SELECT count(*) FROM soniq_jobs WHERE status = 'processing' AND job_name IN ` + inList(l.Names, &args) + ` AND ` + match
		var running int
		if err := tx.QueryRowContext(ctx, q, append(args, margs...)...).Scan(&running); err != nil {
			return 0, "", fmt.Errorf("counting the rows processing of limited scope %s: %w", l.Scope, err)
		}
		if running >= conc {
			deferKey(l.Scope, "concurrency")
			return 0, "", nil
		}
		room, by = conc-running, "concurrency"
	}
	if rateN > 0 {
		var claims int
		err := tx.QueryRowContext(ctx, `SELECT count(*) FROM soniq_sidecar_limit_claims WHERE scope = ? AND key IS ? AND claimed_at > ?`,
			l.Scope, key, at.Add(-ratePer).UnixMicro()).Scan(&claims)
		if err != nil {
			return 0, "", fmt.Errorf("counting the claims of limited scope %s: %w", l.Scope, err)
		}
		if claims >= rateN {
			deferKey(l.Scope, "rate")
			return 0, "", nil
		}
		if rateN-claims < room {
			room, by = rateN-claims, "rate"
		}
	}
	return room, by, nil
}

// logLimitedClaims records the claims of rate-limited keys and drops the
// log's rows older than their window.
func logLimitedClaims(ctx context.Context, tx *sql.Tx, p backends.ClaimParams, taken []orderRow, at time.Time) error {
	for _, r := range taken {
		l := p.Limits[r.scope]
		_, rateN, ratePer := l.Caps(r.key.String, !r.key.Valid)
		if rateN == 0 {
			continue
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM soniq_sidecar_limit_claims WHERE scope = ? AND key IS ? AND claimed_at <= ?`,
			l.Scope, r.key, at.Add(-ratePer).UnixMicro()); err != nil {
			return fmt.Errorf("pruning the claims of limited scope %s: %w", l.Scope, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO soniq_sidecar_limit_claims (scope, key, claimed_at) VALUES (?, ?, ?)`,
			l.Scope, r.key, at.UnixMicro()); err != nil {
			return fmt.Errorf("logging a claim of limited scope %s: %w", l.Scope, err)
		}
	}
	return nil
}

// limitsDDL is the claim log of rate-limited scopes (the Postgres schema's
// 9001_sidecar_limit_claims.sql; times in microseconds since the epoch).
const limitsDDL = `
CREATE TABLE IF NOT EXISTS soniq_sidecar_limit_claims (
    scope TEXT NOT NULL,
    key TEXT,
    claimed_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS soniq_sidecar_limit_claims_window
    ON soniq_sidecar_limit_claims (scope, key, claimed_at);
CREATE TABLE IF NOT EXISTS soniq_sidecar_limit_overrides (
    scope TEXT NOT NULL,
    has_key INTEGER NOT NULL,
    null_key INTEGER NOT NULL DEFAULT 0,
    key TEXT NOT NULL DEFAULT '',
    concurrency INTEGER,
    rate_n INTEGER,
    rate_seconds INTEGER,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (scope, has_key, null_key, key)
);
`

// claimLimited is the claim with limits, in Claim's write transaction:
// the slots filled in claim order from the unlimited names and the limited
// rows under their caps, the reserve from the unlimited names only. collect
// runs an UPDATE … RETURNING of claimed rows.
func (b *Backend) claimLimited(ctx context.Context, tx *sql.Tx, p backends.ClaimParams, collect func(string, ...any) error) ([]backends.Deferral, error) {
	at := now()
	ts := formatTime(at)
	picks, deferred, err := limitedPicks(ctx, tx, p, ts, at)
	if err != nil {
		return nil, err
	}
	limitedNames := backends.LimitedNames(p.Limits)
	free := p
	free.Limits, free.Names = nil, nil
	for _, n := range p.Names {
		if !slices.Contains(limitedNames, n) {
			free.Names = append(free.Names, n)
		}
	}
	free.ExcludeNames = append(slices.Clone(p.ExcludeNames), limitedNames...)
	unlimited := len(p.Names) == 0 || len(free.Names) > 0
	cands := slices.Clone(picks)
	if unlimited && p.Limit > 0 {
		args := []any{ts}
		q := `SELECT id, COALESCE(priority, 100), scheduled_at, created_at, rowid FROM soniq_jobs INDEXED BY soniq_sidecar_claim_order
			WHERE status = 'queued' AND (scheduled_at IS NULL OR scheduled_at <= ?)`
		if len(p.Queues) > 0 {
			q += ` AND queue IN ` + inList(p.Queues, &args)
		}
		if len(free.Names) > 0 {
			q += ` AND job_name IN ` + inList(free.Names, &args)
		}
		q += ` AND job_name NOT IN ` + inList(free.ExcludeNames, &args) + ` ORDER BY priority, scheduled_at NULLS FIRST, created_at, rowid LIMIT ?`
		rows, err := tx.QueryContext(ctx, q, append(args, p.Limit)...)
		if err != nil {
			return nil, fmt.Errorf("reading the unlimited rows: %w", err)
		}
		for rows.Next() {
			r := orderRow{scope: -1}
			if err := rows.Scan(&r.id, &r.priority, &r.scheduled, &r.created, &r.rowid); err != nil {
				rows.Close()
				return nil, fmt.Errorf("reading the unlimited rows: %w", err)
			}
			cands = append(cands, r)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("reading the unlimited rows: %w", err)
		}
	}
	slices.SortStableFunc(cands, func(x, y orderRow) int {
		switch {
		case x.before(y):
			return -1
		case y.before(x):
			return 1
		}
		return 0
	})
	if len(cands) > p.Limit {
		cands = cands[:p.Limit]
	}
	var taken []orderRow
	slots := 0
	for _, r := range cands {
		if r.scope < 0 {
			slots++
		} else {
			taken = append(taken, r)
		}
	}
	if unlimited && slots+p.Ahead > 0 {
		free.Limit = slots
		q, args := claimQuery(free, ts)
		if err := collect(q, args...); err != nil {
			return nil, err
		}
	}
	if len(taken) > 0 {
		args := []any{p.WorkerID, ts}
		ids := make([]string, len(taken))
		for i, r := range taken {
			ids[i] = r.id
		}
		q := `UPDATE soniq_jobs SET status = 'processing', attempts = COALESCE(attempts, 0) + 1, worker_id = ?, updated_at = ?
			WHERE status = 'queued' AND id IN ` + inList(ids, &args) + ` RETURNING ` + jobColumns + `, rowid`
		if err := collect(q, args...); err != nil {
			return nil, err
		}
		if err := logLimitedClaims(ctx, tx, p, taken, at); err != nil {
			return nil, err
		}
	}
	return deferred, nil
}
