package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// childRow is one child of a done completion, checked and with its
// values resolved before the write transaction.
type childRow struct {
	parent            string
	id, name, args    string
	queue             string
	hash, scheduled   any
	priority, attempt int
	p                 backends.EnqueueParams
}

// buildChildren checks the children of cs's done completions as Enqueue
// checks a job; a child it cannot write fails the batch.
func buildChildren(cs []backends.Completion, ts time.Time) ([]childRow, error) {
	var out []childRow
	for _, c := range cs {
		if c.Outcome != backends.OutcomeDone {
			continue
		}
		for _, p := range c.Children {
			r, err := childOf(c.JobID, p, ts)
			if err != nil {
				return nil, fmt.Errorf("job %s: child %q: %w", c.JobID, p.Name, err)
			}
			out = append(out, r)
		}
	}
	return out, nil
}

func childOf(parent string, p backends.EnqueueParams, ts time.Time) (childRow, error) {
	if p.Name == "" {
		return childRow{}, errors.New("empty job name")
	}
	args, err := normaliseArgs(p.Args)
	if err != nil {
		return childRow{}, err
	}
	r := childRow{parent: parent, id: p.ID, name: p.Name, args: string(args), queue: p.Queue,
		priority: defaultPriority, attempt: defaultMaxAttempts, p: p}
	if r.id == "" {
		r.id = backends.NewID()
	} else if !backends.IsUUID(r.id) {
		return childRow{}, fmt.Errorf("id %q is not a uuid", r.id)
	}
	if r.queue == "" {
		r.queue = defaultQueue
	}
	if p.Priority != nil {
		r.priority = *p.Priority
	}
	if p.MaxAttempts != nil {
		r.attempt = *p.MaxAttempts
	}
	if p.UniqueJob {
		h, err := backends.ArgsHash(args)
		if err != nil {
			return childRow{}, err
		}
		r.hash = h
	}
	if p.Delay > 0 {
		r.scheduled = formatTime(ts.Add(p.Delay))
	}
	return r, nil
}

// writeChildren inserts, inside the completion's transaction, the children
// of the parents whose done write matched its guard (done: their ids). A
// child that conflicts with a queued row (its dedup key, a unique
// duplicate) or whose id is taken is skipped. It returns the queues of the
// children written, to notify once the transaction commits.
func writeChildren(ctx context.Context, tx *sql.Tx, kids []childRow, done []string, ts string) ([]string, error) {
	passed := make(map[string]bool, len(done))
	for _, id := range done {
		passed[id] = true
	}
	var queues []string
	for _, k := range kids {
		if !passed[k.parent] {
			continue
		}
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM soniq_jobs WHERE status = 'queued' AND (
				(?1 IS NOT NULL AND unique_job = 1 AND job_name = ?2 AND args_hash = ?1)
				OR (?3 IS NOT NULL AND dedup_key = ?3)) LIMIT 1`,
			k.hash, k.name, nullIfEmpty(k.p.DedupKey)).Scan(&one)
		if err == nil {
			continue // a queued duplicate
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("looking up a duplicate of child %s: %w", k.id, err)
		}
		res, err := tx.ExecContext(ctx, `INSERT INTO soniq_jobs
			(id, job_name, args, args_hash, status, attempts, max_attempts, priority, queue,
			 unique_job, dedup_key, scheduled_at, producer_id, created_at, updated_at)
			VALUES (?, ?, ?, ?, 'queued', 0, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT DO NOTHING`,
			k.id, k.name, k.args, k.hash, k.attempt, k.priority, k.queue,
			boolInt(k.p.UniqueJob), nullIfEmpty(k.p.DedupKey), k.scheduled, nullIfEmpty(k.p.ProducerID), ts, ts)
		if err != nil {
			return nil, fmt.Errorf("inserting child %s of job %s: %w", k.id, k.parent, err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			queues = append(queues, k.queue)
		}
	}
	return queues, nil
}
