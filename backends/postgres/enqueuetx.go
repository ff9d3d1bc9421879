package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// EnqueueTx enqueues a job inside tx, a transaction of the caller's own
// (any pgx connection to the same database: the application's pool, a
// direct connection, PgBouncer in transaction mode): the job exists if and
// only if tx commits. It writes exactly what Enqueue writes (the same
// statement, defaults, dedup_key and unique_job answers, and
// pg_notify('soniq_new_job', queue), which Postgres delivers at the
// commit, so no worker wakes up for a job it cannot see yet). A dedup or
// unique hit returns the queued duplicate, including one enqueued earlier
// in tx. The caller commits or rolls back; the backend's own pool is not
// used.
//
// A duplicate that another transaction has enqueued but not yet committed
// makes this one wait for it, as Postgres does for any unique insert: keep
// the transaction short.
func (b *Backend) EnqueueTx(ctx context.Context, tx pgx.Tx, p backends.EnqueueParams) (backends.Job, error) {
	if tx == nil {
		return backends.Job{}, fmt.Errorf("enqueue %s in a transaction: the transaction is nil", p.Name)
	}
	r, err := newEnqueueRow(p)
	if err != nil {
		return backends.Job{}, err
	}
	return b.enqueueRowTx(ctx, tx, r)
}

// EnqueueManyTx enqueues jobs inside tx as EnqueueTx does, in one round
// trip (one notification per queue), and returns the rows in the order of
// ps. Nothing is sent unless every element is valid; an invalid one is
// named by its index. Jobs that set both a dedup_key and unique_job are
// written one by one (each may need the read EnqueueTx does on a clash).
func (b *Backend) EnqueueManyTx(ctx context.Context, tx pgx.Tx, ps []backends.EnqueueParams) ([]backends.Job, error) {
	if tx == nil {
		return nil, errors.New("enqueue many in a transaction: the transaction is nil")
	}
	if len(ps) == 0 {
		return nil, nil
	}
	rows := make([]enqueueRow, len(ps))
	oneByOne := false
	for i, p := range ps {
		r, err := newEnqueueRow(p)
		if err != nil {
			return nil, fmt.Errorf("enqueue many, job %d: %w", i, err)
		}
		rows[i] = r
		oneByOne = oneByOne || r.bothKeys
	}
	if oneByOne {
		jobs := make([]backends.Job, len(rows))
		for i, r := range rows {
			j, err := b.enqueueRowTx(ctx, tx, r)
			if err != nil {
				return nil, fmt.Errorf("enqueue many, job %d: %w", i, err)
			}
			jobs[i] = j
		}
		return jobs, nil
	}
	jobs, err := sendEnqueue(ctx, tx, rows)
	if err != nil {
		return nil, b.wrap(err, "enqueue %d jobs in a transaction", len(rows))
	}
	return jobs, nil
}

// enqueueRowTx writes r inside tx. The one conflict Soniq's insert leaves
// unresolved (uniqueClash) raises an error, which would abort the caller's
// transaction: that insert runs under a savepoint, rolled back on the
// clash before the queued twin is read.
func (b *Backend) enqueueRowTx(ctx context.Context, tx pgx.Tx, r enqueueRow) (backends.Job, error) {
	if !r.bothKeys {
		jobs, err := sendEnqueue(ctx, tx, []enqueueRow{r})
		if err != nil {
			return backends.Job{}, b.wrap(err, "enqueue %s on queue %s in a transaction", r.name, r.queue)
		}
		return jobs[0], nil
	}
	sp, err := tx.Begin(ctx) // SAVEPOINT
	if err != nil {
		return backends.Job{}, b.wrap(err, "enqueue %s on queue %s in a transaction: savepoint", r.name, r.queue)
	}
	jobs, err := sendEnqueue(ctx, sp, []enqueueRow{r})
	if err == nil {
		if err := sp.Commit(ctx); err != nil { // RELEASE SAVEPOINT
			return backends.Job{}, b.wrap(err, "enqueue %s on queue %s in a transaction: release savepoint", r.name, r.queue)
		}
		return jobs[0], nil
	}
	if rbErr := sp.Rollback(ctx); rbErr != nil { // ROLLBACK TO SAVEPOINT
		return backends.Job{}, b.wrap(errors.Join(err, rbErr), "enqueue %s on queue %s in a transaction: roll back to savepoint", r.name, r.queue)
	}
	if r.uniqueClash(err) {
		return b.queuedUnique(ctx, tx, r)
	}
	return backends.Job{}, b.wrap(err, "enqueue %s on queue %s in a transaction", r.name, r.queue)
}
