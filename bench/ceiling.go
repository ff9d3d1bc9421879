package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/backends/postgres"
)

// openRegistered opens the backend and registers a bench worker (role names
// it in its hostname) that claims up to concurrency rows; the caller closes
// the backend.
func openRegistered(ctx context.Context, url, role string, concurrency int) (*postgres.Backend, string, error) {
	b, err := postgres.Open(ctx, url)
	if err != nil {
		return nil, "", err
	}
	workerID := backends.NewID()
	host, _ := os.Hostname()
	if err := b.RegisterWorker(ctx, backends.Worker{ID: workerID, Hostname: host + "-bench-" + role + "-" + workerID[:8], PID: os.Getpid(),
		Concurrency: concurrency, Version: "bench"}); err != nil {
		b.Close()
		return nil, "", err
	}
	return b, workerID, nil
}

// ceilingRun drains the queue with the sidecar's own statements and no
// handler at all: one claim in flight at a time, limit = batch (the most the
// supervisor claims for a pool: its free capacity), and a concurrent writer
// that completes whatever is pending in batches of up to 500 (as
// internal/completer/completer.go does). It returns when every job is written; ready
// runs before the first claim and finished after the last write, while the
// pool's server processes are still alive to be measured.
func ceilingRun(ctx context.Context, url string, batch int, ready, finished func()) error {
	b, workerID, err := openRegistered(ctx, url, "ceiling", batch)
	if err != nil {
		return err
	}
	defer b.Close()
	// Warm the pool's connections so the first statements do not pay for them.
	if _, err := b.Claim(ctx, backends.ClaimParams{WorkerID: workerID, Names: []string{"bench.none"}, Limit: 1}); err != nil {
		return err
	}
	ready()

	var (
		mu      sync.Mutex
		pending []backends.Completion
		closed  bool
		wake    = make(chan struct{}, 1)
		werr    error
		wdone   = make(chan struct{})
	)
	signal := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	go func() {
		defer close(wdone)
		for {
			mu.Lock()
			cs, c := pending, closed
			mu.Unlock()
			if len(cs) == 0 {
				if c {
					return
				}
				<-wake
				continue
			}
			cs = cs[:min(len(cs), 500):min(len(cs), 500)]
			if _, err := b.Complete(ctx, workerID, cs); err != nil {
				werr = err
				return
			}
			mu.Lock()
			pending = pending[len(cs):]
			mu.Unlock()
		}
	}()
	null := json.RawMessage("null")
	for {
		jobs, err := b.Claim(ctx, backends.ClaimParams{WorkerID: workerID,
			Names: []string{"bench.noop", "bench.latency", "bench.sleep"}, Limit: batch})
		if err != nil {
			return err
		}
		mu.Lock()
		for _, j := range jobs {
			// What the supervisor writes for a handler that returned None.
			pending = append(pending, backends.Completion{JobID: j.ID, Attempts: j.Attempts, Outcome: backends.OutcomeDone, Result: null, ResultTTL: 300 * time.Second})
		}
		if len(jobs) == 0 {
			closed = true
		}
		mu.Unlock()
		signal()
		if len(jobs) == 0 {
			break
		}
	}
	<-wdone
	if werr == nil {
		finished()
	}
	return werr
}

// floorBatch is the floor's claim and completion size: graphile-worker's
// claim size, and the result writer's largest batch.
const floorBatch = 500

// floorRun drains the queue doing the least Soniq's row contract allows,
// to price the rows themselves: per round trip, one statement completes the
// previous claim's rows (status done, expires_at, updated_at, guarded by
// status and worker as every worker's completion must be) and the next
// claims up to floorBatch rows in the claim order (status processing,
// attempts + 1, worker_id, updated_at, returning the columns a worker reads
// to run a job). The planner settings the sidecar needs against stale
// statistics are set once on the floor's own connection; nothing else runs
// per transaction: no proof of life, no final sort. What the sidecar spends
// beyond this per job is its own, and the physical limit is computed from
// it. Like ceilingRun, ready runs before the first claim and finished after
// the last write.
func floorRun(ctx context.Context, url string, ready, finished func()) error {
	// The worker row the claimed rows' foreign key points at.
	b, workerID, err := openRegistered(ctx, url, "floor", floorBatch)
	if err != nil {
		return err
	}
	defer b.Close()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("floor: connect: %w", err)
	}
	defer conn.Close(context.Background())
	for _, s := range []string{"enable_sort", "enable_bitmapscan", "enable_seqscan", "enable_hashjoin", "enable_mergejoin", "jit"} {
		if _, err := conn.Exec(ctx, "SET "+s+" = off"); err != nil {
			return fmt.Errorf("floor: set %s: %w", s, err)
		}
	}
	const claim = `WITH picked AS (
	SELECT id FROM soniq_jobs
	WHERE status = 'queued' AND (scheduled_at IS NULL OR scheduled_at <= now())
	ORDER BY priority ASC, scheduled_at ASC NULLS FIRST, created_at ASC
	LIMIT $2
	FOR UPDATE SKIP LOCKED
)
UPDATE soniq_jobs j
SET status = 'processing', attempts = COALESCE(j.attempts, 0) + 1, worker_id = $1::uuid, updated_at = now()
FROM picked WHERE j.id = picked.id
RETURNING j.id, j.job_name, j.args, j.attempts, j.max_attempts, j.queue, j.priority`
	const complete = `UPDATE soniq_jobs
SET status = 'done', expires_at = now() + interval '300 seconds', updated_at = now()
WHERE id = ANY($1::uuid[]) AND status = 'processing' AND worker_id = $2::uuid`
	// Warm the connection (both statements prepared) before the clock.
	if _, err := conn.Exec(ctx, complete, []pgtype.UUID{}, workerID); err != nil {
		return fmt.Errorf("floor: warm-up: %w", err)
	}
	ready()
	var prev []pgtype.UUID
	for {
		batch := &pgx.Batch{}
		if len(prev) > 0 {
			batch.Queue(complete, prev, workerID)
		}
		var next []pgtype.UUID
		batch.Queue(claim, workerID, floorBatch).Query(func(rows pgx.Rows) error {
			var (
				id                         pgtype.UUID
				name, queue                pgtype.Text
				args                       []byte
				attempts, maxAttempts, pri pgtype.Int4
			)
			_, err := pgx.ForEachRow(rows, []any{&id, &name, &args, &attempts, &maxAttempts, &queue, &pri}, func() error {
				next = append(next, id)
				return nil
			})
			return err
		})
		if err := conn.SendBatch(ctx, batch).Close(); err != nil {
			return fmt.Errorf("floor: complete %d and claim %d: %w", len(prev), floorBatch, err)
		}
		if len(next) == 0 {
			break
		}
		prev = next
	}
	finished()
	return nil
}
