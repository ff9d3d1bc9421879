package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// Soniq's defaults for a job nobody configured.
const (
	defaultQueue       = "default"
	defaultPriority    = 100
	defaultMaxAttempts = 3
)

// jobColumns is the column list every job read selects, in scanJob's order.
const jobColumns = `id, job_name, args, args_hash, status, attempts, max_attempts, queue,
	priority, unique_job, dedup_key, scheduled_at, expires_at, last_error, result,
	producer_id, created_at, updated_at, worker_id`

// rowScanner is *sql.Row or *sql.Rows.
type rowScanner interface {
	Scan(dest ...any) error
}

// scanJob reads one row selected with jobColumns (plus any extra
// destinations appended after them).
func scanJob(r rowScanner, extra ...any) (backends.Job, error) {
	var (
		j                                       backends.Job
		args                                    string
		argsHash, dedupKey, lastErr, result     sql.NullString
		producer, worker, queue                 sql.NullString
		scheduled, expires, created, updated    sql.NullString
		attempts, maxAttempts, priority, unique sql.NullInt64
	)
	dest := []any{&j.ID, &j.Name, &args, &argsHash, &j.Status, &attempts, &maxAttempts, &queue,
		&priority, &unique, &dedupKey, &scheduled, &expires, &lastErr, &result,
		&producer, &created, &updated, &worker}
	if err := r.Scan(append(dest, extra...)...); err != nil {
		return backends.Job{}, err
	}
	j.Args = json.RawMessage(args)
	j.ArgsHash = nullString(argsHash)
	j.Attempts = int(attempts.Int64)
	j.MaxAttempts = int(maxAttempts.Int64)
	if !maxAttempts.Valid {
		j.MaxAttempts = defaultMaxAttempts
	}
	j.Queue = queue.String
	if !queue.Valid {
		j.Queue = defaultQueue
	}
	j.Priority = int(priority.Int64)
	if !priority.Valid {
		j.Priority = defaultPriority
	}
	j.UniqueJob = unique.Int64 != 0
	j.DedupKey = nullString(dedupKey)
	j.LastError = nullString(lastErr)
	if result.Valid {
		j.Result = json.RawMessage(result.String)
	}
	j.ProducerID = nullString(producer)
	j.WorkerID = nullString(worker)
	var err error
	if j.ScheduledAt, err = parseNullTime(scheduled, "scheduled_at"); err != nil {
		return backends.Job{}, err
	}
	if j.ExpiresAt, err = parseNullTime(expires, "expires_at"); err != nil {
		return backends.Job{}, err
	}
	if t, err := parseNullTime(created, "created_at"); err != nil {
		return backends.Job{}, err
	} else if t != nil {
		j.CreatedAt = *t
	}
	if t, err := parseNullTime(updated, "updated_at"); err != nil {
		return backends.Job{}, err
	} else if t != nil {
		j.UpdatedAt = *t
	}
	return j, nil
}

func nullString(s sql.NullString) *string {
	if !s.Valid {
		return nil
	}
	v := s.String
	return &v
}

// normaliseArgs returns the args to store: {} for nil, an error unless a JSON object.
func normaliseArgs(args json.RawMessage) (json.RawMessage, error) {
	trimmed := bytes.TrimSpace(args)
	if len(trimmed) == 0 {
		return json.RawMessage("{}"), nil
	}
	if trimmed[0] != '{' || !json.Valid(trimmed) {
		return nil, errors.New("args must be a JSON object")
	}
	return trimmed, nil
}

// Enqueue inserts a queued job, or returns the queued row a unique_job or
// dedup_key conflict points at (checked in that order, as Soniq does).
// The check and the insert share one IMMEDIATE transaction, which is what
// makes them atomic across processes (Soniq's SQLite schema has no unique
// indexes to lean on).
func (b *Backend) Enqueue(ctx context.Context, p backends.EnqueueParams) (backends.Job, error) {
	if p.Name == "" {
		return backends.Job{}, errors.New("enqueueing job: empty job name")
	}
	args, err := normaliseArgs(p.Args)
	if err != nil {
		return backends.Job{}, fmt.Errorf("enqueueing job %q: %w", p.Name, err)
	}
	queue := p.Queue
	if queue == "" {
		queue = defaultQueue
	}
	priority := defaultPriority
	if p.Priority != nil {
		priority = *p.Priority
	}
	maxAttempts := defaultMaxAttempts
	if p.MaxAttempts != nil {
		maxAttempts = *p.MaxAttempts
	}
	var hash any
	if p.UniqueJob {
		h, err := backends.ArgsHash(args)
		if err != nil {
			return backends.Job{}, fmt.Errorf("enqueueing job %q: %w", p.Name, err)
		}
		hash = h
	}
	id := p.ID
	if id == "" {
		id = backends.NewID()
	} else if !backends.IsUUID(id) {
		return backends.Job{}, fmt.Errorf("enqueueing job %q: id %q is not a uuid", p.Name, id)
	}
	ts := now()
	var scheduled any
	if p.Delay > 0 {
		scheduled = formatTime(ts.Add(p.Delay))
	}

	var (
		job      backends.Job
		inserted bool
	)
	err = b.inWriteTx(ctx, fmt.Sprintf("enqueueing job %q", p.Name), func(tx *sql.Tx) error {
		if p.UniqueJob {
			j, err := scanJob(tx.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM soniq_jobs
				WHERE job_name = ? AND args_hash = ? AND status = 'queued' AND unique_job = 1
				LIMIT 1`, p.Name, hash))
			if err == nil {
				job = j
				return nil
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("looking up unique job: %w", err)
			}
		}
		if p.DedupKey != "" {
			j, err := scanJob(tx.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM soniq_jobs
				WHERE dedup_key = ? AND status = 'queued' LIMIT 1`, p.DedupKey))
			if err == nil {
				job = j
				return nil
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("looking up dedup key: %w", err)
			}
		}
		j, err := scanJob(tx.QueryRowContext(ctx, `INSERT INTO soniq_jobs
			(id, job_name, args, args_hash, status, attempts, max_attempts, priority, queue,
			 unique_job, dedup_key, scheduled_at, producer_id, created_at, updated_at)
			VALUES (?, ?, ?, ?, 'queued', 0, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			RETURNING `+jobColumns,
			id, p.Name, string(args), hash, maxAttempts, priority, queue,
			boolInt(p.UniqueJob), nullIfEmpty(p.DedupKey), scheduled, nullIfEmpty(p.ProducerID),
			formatTime(ts), formatTime(ts)))
		if err != nil {
			return fmt.Errorf("inserting: %w", err)
		}
		job, inserted = j, true
		return nil
	})
	if err != nil {
		return backends.Job{}, err
	}
	if inserted {
		b.notify(job.Queue)
	}
	return job, nil
}

func boolInt(v bool) int {
	if v {
		return 1
	}
	return 0
}

func nullIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// Get returns one job row.
func (b *Backend) Get(ctx context.Context, id string) (backends.Job, error) {
	j, err := scanJob(b.read.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM soniq_jobs WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return backends.Job{}, fmt.Errorf("getting job %s: %w", id, backends.ErrNotFound)
	}
	if err != nil {
		return backends.Job{}, fmt.Errorf("getting job %s: %w", id, err)
	}
	return j, nil
}

// Cancel cancels a queued job.
func (b *Backend) Cancel(ctx context.Context, id string) (bool, error) {
	var n int64
	err := b.inWriteTx(ctx, "cancelling job "+id, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE soniq_jobs SET status = 'cancelled', updated_at = ?
			WHERE id = ? AND status = 'queued'`, formatTime(now()), id)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return false, err
	}
	return n > 0, nil
}

// Claim claims up to p.Limit runnable rows in one UPDATE … WHERE id IN
// (SELECT … ORDER BY … LIMIT n) RETURNING, inside a BEGIN IMMEDIATE
// transaction: the file's write lock is taken before the SELECT reads, so no
// other connection or process can claim the same rows (SQLite's stand-in for
// SKIP LOCKED). rowid breaks created_at ties in insertion order.
func (b *Backend) Claim(ctx context.Context, p backends.ClaimParams) ([]backends.Job, error) {
	if p.Limit < 0 || p.Ahead < 0 || p.Limit+p.Ahead <= 0 {
		return nil, fmt.Errorf("claiming jobs: limit %d and ahead %d must not be negative and must add up to more than 0", p.Limit, p.Ahead)
	}
	if p.WorkerID == "" {
		return nil, errors.New("claiming jobs: empty worker id")
	}
	query, args := claimQuery(p, formatTime(now()))

	type claimed struct {
		job   backends.Job
		rowid int64
	}
	var out []claimed
	var deferred []backends.Deferral
	err := b.inWriteTx(ctx, "claiming jobs for worker "+p.WorkerID, func(tx *sql.Tx) error {
		// A claim is proof of life (see backends.Backend.Claim): only an
		// active row claims, and its heartbeat is refreshed.
		var status sql.NullString
		err := tx.QueryRowContext(ctx, `UPDATE soniq_workers SET last_heartbeat = CASE WHEN status = 'active' THEN ? ELSE last_heartbeat END
			WHERE id = ? RETURNING status`, formatTime(now()), p.WorkerID).Scan(&status)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("its worker row is gone: %w", backends.ErrNotFound)
		case err != nil:
			return fmt.Errorf("refreshing the worker's heartbeat: %w", err)
		case status.String != backends.WorkerActive:
			return fmt.Errorf("its status is %q: %w", status.String, backends.ErrWorkerNotActive)
		}
		collect := func(query string, args ...any) error {
			rows, err := tx.QueryContext(ctx, query, args...)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var c claimed
				if c.job, err = scanJob(rows, &c.rowid); err != nil {
					return fmt.Errorf("reading claimed row: %w", err)
				}
				out = append(out, c)
			}
			return rows.Err()
		}
		if len(p.Limits) == 0 {
			return collect(query, args...)
		}
		var err2 error
		deferred, err2 = b.claimLimited(ctx, tx, p, collect)
		return err2
	})
	if err != nil {
		return nil, err
	}
	if p.Report != nil && len(deferred) > 0 {
		p.Report(deferred)
	}
	// RETURNING order is unspecified; hand rows back in claim order.
	sort.Slice(out, func(i, k int) bool {
		a, b := out[i].job, out[k].job
		if a.Priority != b.Priority {
			return a.Priority < b.Priority
		}
		switch {
		case a.ScheduledAt == nil && b.ScheduledAt != nil:
			return true
		case a.ScheduledAt != nil && b.ScheduledAt == nil:
			return false
		case a.ScheduledAt != nil && !a.ScheduledAt.Equal(*b.ScheduledAt):
			return a.ScheduledAt.Before(*b.ScheduledAt)
		}
		if !a.CreatedAt.Equal(b.CreatedAt) {
			return a.CreatedAt.Before(b.CreatedAt)
		}
		return out[i].rowid < out[k].rowid
	})
	jobs := make([]backends.Job, len(out))
	for i, c := range out {
		jobs[i] = c.job
	}
	return jobs, nil
}

// claimQuery is Claim's statement and its arguments. The inner SELECT reads
// the claim-order index (soniq_sidecar_claim_order, which Migrate creates
// on every open of an embedded file) in order and stops at the limit, so a
// claim costs the same at any queue depth. INDEXED BY, because SQLite's
// planner otherwise prefers Soniq's (status, priority) or (queue, status)
// index and sorts every queued row behind it.
func claimQuery(p backends.ClaimParams, ts string) (string, []any) {
	var where strings.Builder
	args := []any{p.WorkerID, ts, ts}
	where.WriteString(`status = 'queued' AND (scheduled_at IS NULL OR scheduled_at <= ?)`)
	addIn := func(column, op string, values []string) {
		if len(values) == 0 {
			return
		}
		where.WriteString(" AND " + column + " " + op + " (")
		for i, v := range values {
			if i > 0 {
				where.WriteString(", ")
			}
			where.WriteByte('?')
			args = append(args, v)
		}
		where.WriteByte(')')
	}
	addIn("queue", "IN", p.Queues)
	addIn("job_name", "IN", p.Names)
	addIn("job_name", "NOT IN", p.ExcludeNames)
	const set = `UPDATE soniq_jobs
		SET status = 'processing', attempts = COALESCE(attempts, 0) + 1, worker_id = ?, updated_at = ?`
	const order = `ORDER BY priority, scheduled_at NULLS FIRST, created_at, rowid`
	if p.Ahead == 0 {
		args = append(args, p.Limit)
		return set + `
		WHERE id IN (
			SELECT id FROM soniq_jobs INDEXED BY soniq_sidecar_claim_order WHERE ` + where.String() + `
			` + order + `
			LIMIT ?)
		RETURNING ` + jobColumns + `, rowid`, args
	}
	// The reserve's rows follow the slots' in claim order, less those on
	// their last attempt (backends.ClaimParams.Ahead).
	args = append(args, p.Limit+p.Ahead, p.Limit)
	return set + `
		WHERE id IN (
			SELECT id FROM (
				SELECT id, attempts, max_attempts, row_number() OVER (` + order + `) AS n
				FROM soniq_jobs INDEXED BY soniq_sidecar_claim_order WHERE ` + where.String() + `
				` + order + `
				LIMIT ?)
			WHERE n <= ? OR COALESCE(attempts, 0) + 1 < max_attempts)
		RETURNING ` + jobColumns + `, rowid`, args
}
