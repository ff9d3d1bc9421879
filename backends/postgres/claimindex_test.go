package postgres

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// The opt-in claim-order index: created concurrently, idempotent, valid,
// and claims keep their order with it (the planner may now use it).
func TestCreateClaimIndex(t *testing.T) {
	b, _ := openTest(t)
	ctx := t.Context()
	require.NoError(t, b.CreateClaimIndex(ctx))
	require.NoError(t, b.CreateClaimIndex(ctx), "idempotent")
	var def string
	var valid bool
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT pg_get_indexdef(i.indexrelid), i.indisvalid FROM pg_index i
		JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname = 'soniq_sidecar_claim_order'`).Scan(&def, &valid))
	assert.True(t, valid)
	assert.Contains(t, def, "(priority, scheduled_at NULLS FIRST, created_at) WHERE (status = 'queued'::text)")

	w := registerWorker(t, b, 1)
	var want []string
	for _, p := range []int{5, 1, 3} {
		j, err := b.Enqueue(ctx, backends.EnqueueParams{Name: "x", Priority: &p})
		require.NoError(t, err)
		want = append(want, j.ID)
	}
	for _, i := range []int{1, 2, 0} {
		got, err := b.Claim(ctx, backends.ClaimParams{WorkerID: w, Limit: 1})
		require.NoError(t, err)
		require.Len(t, got, 1)
		assert.Equal(t, want[i], got[0].ID, "claim order holds with the index")
	}
}

// A concurrent build that fails leaves an INVALID index under the name,
// which IF NOT EXISTS would keep for good. Here a real build fails (a
// unique index over duplicate rows) and CreateClaimIndex must replace it.
func TestCreateClaimIndexRebuildsAnInvalidIndex(t *testing.T) {
	b, _ := openTest(t)
	ctx := t.Context()
	for range 2 {
		_, err := b.Enqueue(ctx, backends.EnqueueParams{Name: "same"})
		require.NoError(t, err)
	}
	_, err := b.pool.Exec(ctx, `CREATE UNIQUE INDEX CONCURRENTLY soniq_sidecar_claim_order ON soniq_jobs (job_name)`)
	require.Error(t, err, "the build fails on the duplicate job names")
	var valid bool
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass('soniq_sidecar_claim_order')`).Scan(&valid))
	require.False(t, valid, "the failed build left an invalid index")
	has, err := b.HasClaimIndex(ctx)
	require.NoError(t, err)
	assert.False(t, has, "an invalid index is no index")

	require.NoError(t, b.CreateClaimIndex(ctx))
	var def string
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT pg_get_indexdef(i.indexrelid), i.indisvalid FROM pg_index i
		WHERE i.indexrelid = to_regclass('soniq_sidecar_claim_order')`).Scan(&def, &valid))
	assert.True(t, valid)
	assert.Contains(t, def, "(priority, scheduled_at NULLS FIRST, created_at) WHERE (status = 'queued'::text)")
	has, err = b.HasClaimIndex(ctx)
	require.NoError(t, err)
	assert.True(t, has)
}

// The index serves both claims on a deep queue: Soniq's plan is an index
// scan of it (no sort of every queued row), and the sidecar's claim reads it.
func TestClaimIndexServesSoniqAndSidecarClaims(t *testing.T) {
	b, _ := openTest(t)
	ctx := t.Context()
	has, err := b.HasClaimIndex(ctx)
	require.NoError(t, err)
	require.False(t, has, "Migrate alone creates exactly Soniq's schema")
	require.NoError(t, b.CreateClaimIndex(ctx))
	_, err = b.pool.Exec(ctx, `INSERT INTO soniq_jobs (id, job_name, args, status, priority, queue)
		SELECT gen_random_uuid(), 'x', '{}', CASE WHEN g % 4 = 0 THEN 'queued' ELSE 'done' END, 100, 'default'
		FROM generate_series(1, 20000) g`)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `ANALYZE soniq_jobs`)
	require.NoError(t, err)

	rows, err := b.pool.Query(ctx, `EXPLAIN `+soniqClaim)
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	plan := strings.Join(lines, "\n")
	assert.Contains(t, plan, "soniq_sidecar_claim_order", "Soniq's claim uses the index:\n%s", plan)
	assert.NotContains(t, plan, "Sort", "no sort of the queued rows:\n%s", plan)

	// The sidecar's claim, explained with the arguments it would send.
	sql, args := claimStatement(backends.ClaimParams{WorkerID: registerWorker(t, b, 1), Limit: 64, Names: []string{"x"}})
	rows, err = b.pool.Query(ctx, `EXPLAIN `+sql, args...)
	require.NoError(t, err)
	lines, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	plan = strings.Join(lines, "\n")
	assert.Contains(t, plan, "soniq_sidecar_claim_order", "the sidecar's claim uses the index:\n%s", plan)
}

// A queue table whose statistics are stale (never analysed since it was
// filled, as after a TRUNCATE and a burst of enqueues) must still be
// claimed through the claim-order index, not by sorting every queued row
// and hashing the table, and the update must find its rows by primary key.
func TestClaimPlanIgnoresStaleStatistics(t *testing.T) {
	b, _ := openTest(t)
	ctx := t.Context()
	require.NoError(t, b.CreateClaimIndex(ctx))
	_, err := b.pool.Exec(ctx, `INSERT INTO soniq_jobs (id, job_name, args, status, priority, queue)
		SELECT gen_random_uuid(), 'x', '{}', 'queued', 100, 'default' FROM generate_series(1, 20000)`)
	require.NoError(t, err)
	var tuples float64
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT reltuples FROM pg_class WHERE oid = 'soniq_jobs'::regclass`).Scan(&tuples))
	require.Less(t, tuples, 1000.0, "the statistics do not know the rows yet")

	sql, args := claimStatement(backends.ClaimParams{WorkerID: registerWorker(t, b, 1), Limit: 64, Names: []string{"x"}})
	plan := explainAsClaimed(t, b, sql, args)
	assert.Contains(t, plan, "Index Scan using soniq_sidecar_claim_order", plan)
	assert.Contains(t, plan, "Index Scan using soniq_jobs_pkey", plan)
	assert.NotContains(t, plan, "Hash", plan)
	assert.NotContains(t, plan, "Bitmap", plan)
	assert.NotContains(t, plan, "Seq Scan", plan)
	assert.Equal(t, 1, strings.Count(plan, "Sort Key"), "only the 64 claimed rows are sorted:\n%s", plan)
}

// explainAsClaimed is the plan of sql with args in a transaction with the
// planner settings every claim sets first.
func explainAsClaimed(t *testing.T, b *Backend, sql string, args []any) string {
	t.Helper()
	return explainUnder(t, b, claimPlannerHints, sql, args)
}

// explainUnder is the plan of sql after the planner settings hints.
func explainUnder(t *testing.T, b *Backend, hints, sql string, args []any) string {
	t.Helper()
	ctx := t.Context()
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	_, err = tx.Exec(ctx, hints)
	require.NoError(t, err)
	rows, err := tx.Query(ctx, `EXPLAIN `+sql, args...)
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return strings.Join(lines, "\n")
}

// A claim's plan is made once per connection (plan_cache_mode), so a
// sidecar that starts on an empty queue keeps the plan made for it when a
// burst fills the queue. That plan must still find the rows it updates by
// their primary key: one made on an empty table's statistics joined them
// by scanning the whole primary-key index instead (a claim of 64 rows
// among 10,000 took 236 ms, and grew with the table) until an autovacuum's
// analyse made it plan again. Every form of the claim, with and without a
// reserve and limits.
func TestClaimPlanMadeOnAnEmptyQueueUpdatesByPrimaryKey(t *testing.T) {
	b, _ := openTest(t)
	ctx := t.Context()
	require.NoError(t, b.CreateClaimIndex(ctx))
	_, err := b.pool.Exec(ctx, `ANALYZE soniq_jobs`)
	require.NoError(t, err)
	w := registerWorker(t, b, 1)
	lim := []backends.ClaimLimit{{Scope: "k", Names: []string{"k"}, Key: []string{"t"}, Concurrency: 2}}
	limited := backends.ClaimParams{WorkerID: w, Limit: 64, Names: []string{"x", "k"}, Ahead: 64, Limits: lim}
	plan := limitPlan{keys: []limitKey{{key: "a", cap: 2}}, walks: make([]keyWalk, 1)}
	lsql, largs := limitedClaimStatement(limited, plan)
	for _, c := range []struct {
		name string
		sql  string
		args []any
	}{
		{"slots", "", nil},
		{"slots and a reserve", "", nil},
		{"limited", lsql, largs},
	} {
		t.Run(c.name, func(t *testing.T) {
			sql, args := c.sql, c.args
			if sql == "" {
				p := backends.ClaimParams{WorkerID: w, Limit: 64, Names: []string{"x"}}
				if c.name == "slots and a reserve" {
					p.Ahead = 64
				}
				sql, args = claimStatement(p)
			}
			plan := explainAsClaimed(t, b, sql, args)
			assert.NotContains(t, plan, "Join Filter: (j.id =", "the claimed rows are joined by scanning the table's primary key:\n%s", plan)
			assert.Regexp(t, `Index Scan using soniq_jobs_pkey on soniq_jobs j[^\n]*\n\s+Index Cond: \(id = `, plan)
		})
	}
}

// The result writes, like the claim, find their rows by primary key on a
// plan made on an empty queue's statistics: each joined its batch with the
// table by scanning the whole primary-key index. The ids, as an array
// condition of their own, bound every plan to the batch's rows.
func TestResultWritePlansMadeOnAnEmptyQueueUpdateByPrimaryKey(t *testing.T) {
	b, _ := openTest(t)
	ctx := t.Context()
	_, err := b.pool.Exec(ctx, `ANALYZE soniq_jobs`)
	require.NoError(t, err)
	w := registerWorker(t, b, 1)
	id := func() string { return backends.NewID() }
	batch := &pgx.Batch{}
	_, err = queueCompletions(batch, w, []backends.Completion{
		{JobID: id(), Attempts: 1, Outcome: backends.OutcomeDone, ResultTTL: time.Minute},
		{JobID: id(), Attempts: 1, Outcome: backends.OutcomeDone},
		{JobID: id(), Attempts: 1, Outcome: backends.OutcomeRetry, Error: "e", Delay: time.Second},
		{JobID: id(), Attempts: 1, Outcome: backends.OutcomeDeadLetter, Error: "e", Reason: "r"},
	})
	require.NoError(t, err)
	require.NotEmpty(t, batch.QueuedQueries)
	for i, q := range batch.QueuedQueries {
		plan := explainUnder(t, b, writePlannerHints, q.SQL, q.Arguments)
		if !strings.Contains(plan, "soniq_jobs") || strings.HasPrefix(q.SQL, "SELECT set_config") {
			continue
		}
		assert.NotRegexp(t, `Index Scan using soniq_jobs_pkey on soniq_jobs j[^\n]*\n\s+->`, plan, "statement %d scans the whole primary key:\n%s\n%s", i, q.SQL, plan)
		assert.NotContains(t, plan, "Join Filter: (j.id =", "statement %d:\n%s\n%s", i, q.SQL, plan)
	}
}
