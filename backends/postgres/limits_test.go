package postgres

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// limitsWorker registers a worker for the limits tests.
func limitsWorker(t *testing.T, b *Backend, id string) string {
	t.Helper()
	require.NoError(t, b.RegisterWorker(t.Context(), backends.Worker{ID: id, Hostname: "limits-test", PID: 1, Queues: []string{"default"},
		Concurrency: 4, Version: "test", Metadata: []byte(`{}`)}))
	return id
}

// enqueueKeyed enqueues n rows of name for each of keys keys (k00, k01,
// ... with width digits), key by key: the first key's rows are the oldest.
func enqueueKeyed(t *testing.T, b *Backend, name string, keys, width, n int) {
	t.Helper()
	for i := range keys {
		k := fmt.Sprintf("k%0*d", width, i)
		for range n {
			_, err := b.Enqueue(t.Context(), backends.EnqueueParams{Name: name, Args: []byte(fmt.Sprintf(`{"t":%q}`, k)), Queue: "default"})
			require.NoError(t, err)
		}
	}
}

// On Postgres a claim walks the keys round-robin and shares its slots among
// the keys it finds, in turns: with every key's rows queued behind the
// first key's, ten slots go to ten keys, not to the oldest key's backlog,
// and the next claim goes on with the keys after them.
func TestLimitedClaimSharesSlotsAmongKeysInTurns(t *testing.T) {
	b, _ := openTest(t)
	const name = "lim.turns"
	enqueueKeyed(t, b, name, 30, 2, 5)
	w := limitsWorker(t, b, "0b7b5a4e-2222-4333-8444-555566667777")
	lim := []backends.ClaimLimit{{Scope: name, Names: []string{name}, Key: []string{"t"}, Concurrency: 5}}
	claimKeys := func() map[string]int {
		jobs, err := b.Claim(t.Context(), backends.ClaimParams{WorkerID: w, Names: []string{name}, Limit: 10, Limits: lim})
		require.NoError(t, err)
		require.Len(t, jobs, 10)
		got := map[string]int{}
		var cs []backends.Completion
		for _, j := range jobs {
			k, _ := backends.LimitKey(j.Args, []string{"t"})
			got[k]++
			cs = append(cs, backends.Completion{JobID: j.ID, Attempts: j.Attempts, Outcome: backends.OutcomeDone})
		}
		_, err = b.Complete(t.Context(), w, cs)
		require.NoError(t, err)
		return got
	}
	first := claimKeys()
	assert.Len(t, first, 10, "one row of each of ten keys: %v", first)
	second := claimKeys()
	assert.Len(t, second, 10, "one row of each of ten more keys: %v", second)
	for k := range second {
		assert.NotContains(t, first, k, "the second claim goes on after the keys of the first")
	}
	third := claimKeys()
	for k := range third {
		assert.NotContains(t, first, k)
		assert.NotContains(t, second, k)
	}
	// The walk comes round again: the fourth claim starts over at the
	// smallest keys.
	fourth := claimKeys()
	assert.Contains(t, fourth, "k00", "a new lap: %v", fourth)
}

// A claim's walk is bounded by its slots, not by the number of keys with
// rows: with a thousand keys queued, a claim of four slots reads a few
// dozen of them (the statement's cost then follows the slots).
func TestLimitedClaimWalkIsBounded(t *testing.T) {
	b, _ := openTest(t)
	const name = "lim.bounded"
	_, err := b.pool.Exec(t.Context(), `INSERT INTO soniq_jobs (id, job_name, args, status, priority, max_attempts, queue, created_at, updated_at, attempts)
		SELECT gen_random_uuid(), $1, jsonb_build_object('t', 'key-' || lpad(i::text, 4, '0')), 'queued', 100, 3, 'default', now(), now(), 0
		FROM generate_series(1, 1000) i`, name)
	require.NoError(t, err)
	lim := backends.ClaimLimit{Scope: name, Names: []string{name}, Key: []string{"t"}, Concurrency: 1}
	sql, args := keyDiscovery(lim, lim.Names, nil, nil, walkBudget(4))
	rows, err := b.pool.Query(t.Context(), sql, args...)
	require.NoError(t, err)
	n := 0
	for rows.Next() {
		n++
	}
	require.NoError(t, rows.Err())
	assert.Equal(t, walkBudget(4), n, "keys read by one walk")
}

// A claim plans from the walk the previous claim's transaction read only
// when that walk went as far as this claim needs: one read for a claim of
// four slots must not leave a claim of forty short, which its caller would
// take for a drained queue and wait for the poll.
func TestLimitedClaimForMoreSlotsThanTheLastWalkTakesThemAll(t *testing.T) {
	b, _ := openTest(t)
	const name = "lim.grow"
	enqueueKeyed(t, b, name, 100, 3, 1)
	w := limitsWorker(t, b, "1c8c6b5f-3333-4444-8555-666677778888")
	lim := []backends.ClaimLimit{{Scope: name, Names: []string{name}, Key: []string{"t"}, Concurrency: 1}}
	small, err := b.Claim(t.Context(), backends.ClaimParams{WorkerID: w, Names: []string{name}, Limit: 4, Limits: lim})
	require.NoError(t, err)
	require.Len(t, small, 4)
	big, err := b.Claim(t.Context(), backends.ClaimParams{WorkerID: w, Names: []string{name}, Limit: 40, Limits: lim})
	require.NoError(t, err)
	assert.Equal(t, 40, len(big), "every slot filled: 96 keys have a row")
}

// A limited claim's pick of a key's rows goes through the key's index
// whatever the statistics say (here those of one key's backlog, analysed:
// the key then looks no more selective than the name). The plan is made
// once per connection; drains were seen (auto_explain) whose connections
// had planned the pick through the index of the name alone, filtering
// every queued row of the name for each key: 25 ms for a claim of 32 rows.
// The pick now orders by the key, which the name's index cannot give
// without a sort the claim's settings forbid.
func TestLimitedClaimPicksThroughTheKeyIndexOnAnyStatistics(t *testing.T) {
	b, _ := openTest(t)
	ctx := t.Context()
	const name = "lim.plan"
	path := []string{"t"}
	require.NoError(t, b.PrepareLimitKeys(ctx, [][]string{path}))
	_, err := b.pool.Exec(ctx, `INSERT INTO soniq_jobs (id, job_name, args, status, priority, queue)
	SELECT gen_random_uuid(), $1, '{"t": "hot"}', 'queued', 100, 'default' FROM generate_series(1, 20000) i`, name)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `ANALYZE soniq_jobs`)
	require.NoError(t, err)
	enqueueKeyed(t, b, name, 3, 1, 2)
	w := limitsWorker(t, b, "0b7b5a4e-2222-4333-8444-55556666aaaa")
	p := backends.ClaimParams{WorkerID: w, Names: []string{name}, Limit: 8,
		Limits: []backends.ClaimLimit{{Scope: name, Names: []string{name}, Key: path, Concurrency: 2}}}
	plan, err := b.planLimits(ctx, p)
	require.NoError(t, err)
	require.NotEmpty(t, plan.keys)
	sql, args := limitedClaimStatement(p, plan)
	explained := explainAsClaimed(t, b, sql, args)
	assert.Contains(t, explained, "Index Scan using "+keyIndexName(path, "q"), explained)
	assert.NotContains(t, explained, "soniq_sidecar_limit_queued", "no key's rows are picked through the index of the name alone:\n%s", explained)
}
