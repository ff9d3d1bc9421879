package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// Stats reads one GROUP BY over soniq_jobs and the dead-letter count in a
// single read transaction, so both come from the same snapshot.
func (b *Backend) Stats(ctx context.Context) (backends.Stats, error) {
	var s backends.Stats
	tx, err := b.read.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return s, fmt.Errorf("reading queue stats: beginning transaction: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	rows, err := tx.QueryContext(ctx, `SELECT status, COUNT(*) FROM soniq_jobs GROUP BY status`)
	if err != nil {
		return s, fmt.Errorf("reading queue stats: counting jobs: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			status string
			n      int64
		)
		if err := rows.Scan(&status, &n); err != nil {
			return s, fmt.Errorf("reading queue stats: %w", err)
		}
		s.Count(status, n)
	}
	if err := rows.Err(); err != nil {
		return s, fmt.Errorf("reading queue stats: %w", err)
	}
	var dead int64
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM soniq_dead_letter_jobs`).Scan(&dead); err != nil {
		return s, fmt.Errorf("reading queue stats: counting dead-letter jobs: %w", err)
	}
	s.Count("dead_letter", dead)
	return s, nil
}

// RecoverStaleWorkers stops every worker silent for longer than olderThan,
// whatever its status, and requeues its processing rows, in one
// transaction. A NULL last_heartbeat is never stale, as in Soniq's
// cleanup_stale_workers.
func (b *Backend) RecoverStaleWorkers(ctx context.Context, olderThan time.Duration, except string) (int, int, error) {
	t := now()
	threshold := formatTime(t.Add(-olderThan))
	var workers, jobs int
	err := b.inWriteTx(ctx, "recovering stale workers", func(tx *sql.Tx) error {
		silent, err := queryIDs(ctx, tx, `SELECT w.id FROM soniq_workers w
			WHERE w.last_heartbeat < ? AND w.id <> ?
			  AND (w.status <> 'stopped'
			       OR EXISTS (SELECT 1 FROM soniq_jobs j WHERE j.worker_id = w.id AND j.status = 'processing'))`, threshold, except)
		if err != nil {
			return fmt.Errorf("finding silent workers: %w", err)
		}
		workers = len(silent)
		if workers == 0 {
			return nil
		}
		silentJSON, err := json.Marshal(silent)
		if err != nil {
			return fmt.Errorf("encoding silent worker ids: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE soniq_workers SET status = 'stopped'
			WHERE status <> 'stopped' AND id IN (SELECT value FROM json_each(?))`, string(silentJSON)); err != nil {
			return fmt.Errorf("stopping silent workers: %w", err)
		}
		res, err := tx.ExecContext(ctx, `UPDATE soniq_jobs SET status = 'queued', worker_id = NULL, updated_at = ?
			WHERE status = 'processing' AND worker_id IN (SELECT value FROM json_each(?))`,
			formatTime(t), string(silentJSON))
		if err != nil {
			return fmt.Errorf("requeueing jobs of silent workers: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("requeueing jobs of silent workers: %w", err)
		}
		jobs = int(n)
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	return workers, jobs, nil
}

// DeleteExpired deletes done rows whose expires_at has passed.
func (b *Backend) DeleteExpired(ctx context.Context) (int, error) {
	var n int64
	err := b.inWriteTx(ctx, "deleting expired jobs", func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM soniq_jobs WHERE status = 'done' AND expires_at < ?`,
			formatTime(now()))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return int(n), err
}

// subscriber is one Subscribe channel.
type subscriber struct {
	ch   chan string
	stop func() bool // stops the context.AfterFunc that closes ch
}

// Subscribe delivers the queue of every job enqueued (or replayed) through
// this Backend. SQLite has no cross-process notification; other producers'
// jobs are found by polling. No goroutine is started: context.AfterFunc
// closes the channel once ctx is done.
func (b *Backend) Subscribe(ctx context.Context) (<-chan string, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("subscribing to new jobs: %w", err)
	}
	s := &subscriber{ch: make(chan string, subscriberBuffer)}
	b.subsMu.Lock()
	defer b.subsMu.Unlock()
	if b.closed {
		return nil, fmt.Errorf("subscribing to new jobs: backend closed")
	}
	b.subs[s] = struct{}{}
	s.stop = context.AfterFunc(ctx, func() { b.unsubscribe(s) })
	return s.ch, nil
}

func (b *Backend) unsubscribe(s *subscriber) {
	b.subsMu.Lock()
	defer b.subsMu.Unlock()
	if _, ok := b.subs[s]; ok {
		delete(b.subs, s)
		close(s.ch)
	}
}

// notify wakes every subscriber without blocking; a full buffer already
// holds a pending wake-up, so dropping coalesces.
func (b *Backend) notify(queue string) {
	b.subsMu.Lock()
	defer b.subsMu.Unlock()
	for s := range b.subs {
		select {
		case s.ch <- queue:
		default:
		}
	}
}

func (b *Backend) closeSubscribers() {
	b.subsMu.Lock()
	defer b.subsMu.Unlock()
	b.closed = true
	for s := range b.subs {
		s.stop()
		delete(b.subs, s)
		close(s.ch)
	}
}
