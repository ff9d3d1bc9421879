package postgres

import (
	"context"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// The guarded writes pair the rows they read with the elements of the
// arrays they were given. Under their planner settings and on a plan made
// once per connection, the rows must be read through the primary key by
// their ids and paired by a hash join: a nested loop compares every row
// with every element, 125,000 comparisons for a write of 500, which made
// such a write cost 2 to 3 times the hashed plan. Each statement's generic
// plan is read here, on a table with rows and statistics, as the sidecar's
// connections make it (the plans made on an empty table's statistics:
// TestResultWritePlansMadeOnAnEmptyQueueUpdateByPrimaryKey).
func TestGuardedWritesPairTheirRowsByHash(t *testing.T) {
	b, url := openTest(t)
	ctx := t.Context()
	_, err := b.pool.Exec(ctx, `INSERT INTO soniq_jobs (id, job_name, args, status, attempts)
		SELECT gen_random_uuid(), 'x', '{}', CASE WHEN g % 4 = 0 THEN 'processing' ELSE 'queued' END, g % 2
		FROM generate_series(1, 20000) AS g`)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `ANALYZE soniq_jobs`)
	require.NoError(t, err)

	pairing := regexp.MustCompile(`\b[a-z]\.id = [a-z]\.id\b`)
	for _, tt := range []struct{ name, sql string }{
		{"done", doneStatement},
		{"delete", deleteStatement},
		{"retry", retryStatement},
		{"snooze", snoozeStatement},
		{"dead letter", deadStatement},
		{"cancelled", cancelStatement},
		{"done with children", childKeptStatement},
		{"deleted with children", childDeletedStatement},
		{"return to the queue", returnStatement},
	} {
		t.Run(tt.name, func(t *testing.T) {
			plan := genericPlan(t, url, tt.sql)
			var byID, hashed int
			walkPlan(plan, func(n map[string]any) {
				assert.NotRegexp(t, pairing, str(n["Join Filter"]), "rows paired with the ids by comparing every pair:\n%s", planText(plan))
				if n["Relation Name"] == "soniq_jobs" && n["Node Type"] != "ModifyTable" {
					assert.Equal(t, "soniq_jobs_pkey", n["Index Name"], "soniq_jobs read other than by id:\n%s", planText(plan))
					assert.Equal(t, "(id = ANY ($1))", n["Index Cond"], "soniq_jobs read other than by id:\n%s", planText(plan))
					byID++
				}
				if n["Node Type"] == "Hash Join" && pairing.MatchString(str(n["Hash Cond"])) {
					hashed++
				}
			})
			assert.Equal(t, 1, byID, "the rows read once, by their ids:\n%s", planText(plan))
			assert.Equal(t, 1, hashed, "the rows paired with the ids by a hash join:\n%s", planText(plan))
		})
	}
}

// genericPlan is the plan Postgres makes once for sql under the claim's
// planner settings (force_generic_plan among them), whatever its arguments.
func genericPlan(t *testing.T, url, sql string) map[string]any {
	t.Helper()
	ctx := t.Context()
	// A connection of its own: the statement prepared here stays with it.
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer func() { _ = conn.Close(context.Background()) }()
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, writePlannerHints)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "PREPARE plan_under_test AS "+sql)
	require.NoError(t, err)
	params := 0
	for _, m := range regexp.MustCompile(`\$(\d+)`).FindAllStringSubmatch(sql, -1) {
		n, _ := strconv.Atoi(m[1])
		params = max(params, n)
	}
	args := strings.TrimSuffix(strings.Repeat("NULL, ", params), ", ")
	var out string
	require.NoError(t, tx.QueryRow(ctx, "EXPLAIN (FORMAT JSON) EXECUTE plan_under_test("+args+")").Scan(&out))
	var plans []struct {
		Plan map[string]any `json:"Plan"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &plans))
	require.Len(t, plans, 1)
	return plans[0].Plan
}

// walkPlan calls f for every node of the plan.
func walkPlan(n map[string]any, f func(map[string]any)) {
	f(n)
	kids, _ := n["Plans"].([]any)
	for _, k := range kids {
		if m, ok := k.(map[string]any); ok {
			walkPlan(m, f)
		}
	}
}

func str(v any) string { s, _ := v.(string); return s }

// planText is the plan's nodes, one a line, for a failure's message.
func planText(plan map[string]any) string {
	var sb strings.Builder
	walkPlan(plan, func(n map[string]any) {
		sb.WriteString(str(n["Node Type"]))
		for _, k := range []string{"Relation Name", "Index Name", "Index Cond", "Hash Cond", "Join Filter", "Filter"} {
			if v := str(n[k]); v != "" {
				sb.WriteString(" " + k + ": " + v)
			}
		}
		sb.WriteString("\n")
	})
	return sb.String()
}

// A claim does not send back the status and worker id it wrote itself;
// its jobs must still read as the rows are: processing, the worker's id as
// Postgres writes a uuid (lower case, whatever case the claimer gave), and
// every other column as a read of the row returns it. With and without
// claim-ahead, and with a limit (the statement built for limited names).
func TestClaimedJobsReadAsTheirRows(t *testing.T) {
	b, _ := openTest(t)
	ctx := t.Context()
	wid := strings.ToUpper(backends.NewID())
	require.NoError(t, b.RegisterWorker(ctx, backends.Worker{ID: wid, Hostname: "pg-test", PID: 4243}))
	prio := 7
	for i := range 6 {
		_, err := b.Enqueue(ctx, backends.EnqueueParams{Name: "claim.cols", Args: json.RawMessage(`{"i":` + strconv.Itoa(i) + `}`),
			Queue: "cols", Priority: &prio, DedupKey: "d" + strconv.Itoa(i)})
		require.NoError(t, err)
	}
	for _, p := range []backends.ClaimParams{
		{WorkerID: wid, Names: []string{"claim.cols"}, Limit: 2},
		{WorkerID: wid, Names: []string{"claim.cols"}, Limit: 1, Ahead: 1},
		{WorkerID: wid, Names: []string{"claim.cols"}, Limit: 2, Limits: []backends.ClaimLimit{{Scope: "claim.cols", Names: []string{"claim.cols"}, Key: []string{"i"}, Concurrency: 5}}},
	} {
		jobs, err := b.Claim(ctx, p)
		require.NoError(t, err)
		require.Len(t, jobs, 2)
		for _, j := range jobs {
			row, err := b.Get(ctx, j.ID)
			require.NoError(t, err)
			assert.Equal(t, row, j)
			assert.Equal(t, backends.StatusProcessing, j.Status)
			require.NotNil(t, j.WorkerID)
			assert.Equal(t, strings.ToLower(wid), *j.WorkerID)
		}
	}
}
