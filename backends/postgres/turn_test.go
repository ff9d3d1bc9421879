package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/backends/postgres/pgtest"
)

// holdTurn stands in for a claimer stopped mid-claim (SIGSTOP between its
// prelude and its commit): a transaction holding the turns of queues
// until the test ends.
func holdTurn(t *testing.T, url string, queues []string) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	tx, err := conn.Begin(t.Context())
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	for _, id := range claimTurnIDs(queues) {
		_, err = tx.Exec(t.Context(), `SELECT pg_advisory_xact_lock($1::int4, $2::int4)`, claimTurnSpace, id)
		require.NoError(t, err)
	}
}

// A claimer that stopped holding its turn delays the others' reserve claims
// by the bound on the wait, no more: each then claims without a turn, and the
// results carried with a claim are written all the same. Directly and
// through PgBouncer in transaction mode (nothing of the turn stays on the
// session). The wait is timed only against its bound (100 ms), with room
// for a loaded machine above it.
func TestAClaimerHoldingItsTurnDelaysOthersOnlyByTheBound(t *testing.T) {
	bound, err := time.ParseDuration(claimTurnWait)
	require.NoError(t, err)
	for _, pooled := range []bool{false, true} {
		name := map[bool]string{false: "direct", true: "pgbouncer"}[pooled]
		t.Run(name, func(t *testing.T) {
			b, url := openTest(t)
			if pooled {
				var err error
				b, err = OpenWith(t.Context(), pgtest.ThroughPooler(t, url), Options{TransactionPooling: true})
				require.NoError(t, err)
				t.Cleanup(func() { _ = b.Close() })
			}
			ctx := t.Context()
			w := registerWorker(t, b, 1)
			for range 9 {
				_, err := b.Enqueue(ctx, backends.EnqueueParams{Name: "turn.job", Queue: "default"})
				require.NoError(t, err)
			}
			first, err := b.Claim(ctx, backends.ClaimParams{WorkerID: w, Queues: []string{"default"}, Limit: 1, Ahead: 1})
			require.NoError(t, err)
			require.Len(t, first, 2, "a slot and a reserve")

			holdTurn(t, url, []string{"default"})
			start := time.Now()
			jobs, err := b.Claim(ctx, backends.ClaimParams{WorkerID: w, Queues: []string{"default"}, Limit: 1, Ahead: 1})
			waited := time.Since(start)
			require.NoError(t, err)
			assert.Len(t, jobs, 2, "claimed without the turn")
			assert.GreaterOrEqual(t, waited, bound, "the claim waited for the turn")
			assert.Less(t, waited, bound+5*time.Second, "the wait is bounded")

			start = time.Now()
			applied, jobs, claimErr, err := b.CompleteAndClaim(ctx, w, []backends.Completion{{JobID: first[0].ID, Attempts: first[0].Attempts, Outcome: backends.OutcomeDone}},
				backends.ClaimParams{WorkerID: w, Queues: []string{"default"}, Limit: 1, Ahead: 1})
			waited = time.Since(start)
			require.NoError(t, err)
			require.NoError(t, claimErr)
			assert.Equal(t, []string{first[0].ID}, applied, "the carried result was written")
			assert.Len(t, jobs, 2)
			assert.GreaterOrEqual(t, waited, bound)
			assert.Less(t, waited, bound+5*time.Second)

			// A claim of free slots alone, and another queue's claim, do not
			// wait: a claim that waits for a held turn never returns within
			// the bound, so one of three returning within it says so (three,
			// so that a slow claim on a loaded machine is not taken for a wait).
			fastest := func(p backends.ClaimParams) time.Duration {
				best := time.Hour
				for range 3 {
					start := time.Now()
					jobs, err := b.Claim(ctx, p)
					best = min(best, time.Since(start))
					require.NoError(t, err)
					require.NotEmpty(t, jobs)
				}
				return best
			}
			assert.Less(t, fastest(backends.ClaimParams{WorkerID: w, Queues: []string{"default"}, Limit: 1}), bound,
				"a claim of free slots alone waited for the turn")
			for range 6 {
				_, err = b.Enqueue(ctx, backends.EnqueueParams{Name: "turn.job", Queue: "other"})
				require.NoError(t, err)
			}
			assert.Less(t, fastest(backends.ClaimParams{WorkerID: w, Queues: []string{"other"}, Limit: 1, Ahead: 1}), bound,
				"another queue's claim waited for this queue's turn")
		})
	}
}

// The turn's bound on lock waits is the prelude's alone: the rest of the
// claim's transaction runs under the session's own lock_timeout.
func TestTheTurnPutsTheSessionsLockTimeoutBack(t *testing.T) {
	_, url := openTest(t)
	conn, err := pgx.Connect(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	_, err = conn.Exec(t.Context(), `SET lock_timeout = '7s'`)
	require.NoError(t, err)
	tx, err := conn.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	var status *string
	require.NoError(t, tx.QueryRow(t.Context(), claimTurnPrelude, backends.NewID(), claimTurnIDs(nil), claimTurnWait, claimTurnSpace).Scan(&status))
	var held int
	require.NoError(t, tx.QueryRow(t.Context(), `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()
		AND classid = $1::int4::oid AND objsubid = 2`, claimTurnSpace).Scan(&held))
	assert.Equal(t, 1, held, "the turn is held")
	var timeout, sort string
	require.NoError(t, tx.QueryRow(t.Context(), `SELECT current_setting('lock_timeout'), current_setting('enable_sort')`).Scan(&timeout, &sort))
	assert.Equal(t, "7s", timeout)
	assert.Equal(t, "off", sort, "the planner settings are set as before")
}

func TestClaimTurnIDs(t *testing.T) {
	assert.Equal(t, claimTurnIDs([]string{"b", "a", "b"}), claimTurnIDs([]string{"a", "b"}), "ascending, once each")
	assert.Len(t, claimTurnIDs([]string{"b", "a", "b"}), 2)
	assert.NotEqual(t, claimTurnIDs(nil), claimTurnIDs([]string{""}), "every queue's turn is not the queue \"\"'s")
}
