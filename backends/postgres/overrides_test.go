package postgres

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// An overrides table made before the key null's overrides existed is
// upgraded by migrate, once, its rows kept: the key null's override is
// then a row of its own beside the key "".
func TestMigrateUpgradesTheOverridesTableForTheKeyNull(t *testing.T) {
	b, _ := openTest(t)
	ctx := t.Context()
	_, err := b.pool.Exec(ctx, `DROP TABLE soniq_sidecar_limit_overrides;
CREATE TABLE soniq_sidecar_limit_overrides (
  scope TEXT NOT NULL,
  has_key BOOLEAN NOT NULL,
  key TEXT NOT NULL DEFAULT '',
  concurrency INTEGER,
  rate_n INTEGER,
  rate_seconds INTEGER,
  updated_at TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT now(),
  PRIMARY KEY (scope, has_key, key)
);
INSERT INTO soniq_sidecar_limit_overrides (scope, has_key, key, concurrency) VALUES ('s', false, '', 4), ('s', true, '', 0);`)
	require.NoError(t, err)
	_, err = b.SetLimit(ctx, backends.LimitOverride{Scope: "s", NullKey: true, Concurrency: new(int)})
	require.Error(t, err, "the old table cannot hold the key null's row")

	require.NoError(t, b.Migrate(ctx))
	require.NoError(t, b.Migrate(ctx), "again: nothing left to do")
	_, err = b.SetLimit(ctx, backends.LimitOverride{Scope: "s", NullKey: true, Concurrency: new(int)})
	require.NoError(t, err)
	got, err := b.LimitOverrides(ctx)
	require.NoError(t, err)
	require.Len(t, got, 3)
	assert.Nil(t, got[0].Key)
	assert.Equal(t, 4, *got[0].Concurrency, "the scope's row kept")
	assert.True(t, got[1].NullKey)
	require.NotNil(t, got[2].Key)
	assert.Equal(t, "", *got[2].Key, "the key \"\"'s row kept, apart from the key null's")
	var pk string
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT pg_get_constraintdef(oid) FROM pg_constraint
		WHERE conrelid = 'soniq_sidecar_limit_overrides'::regclass AND contype = 'p'`).Scan(&pk))
	assert.Equal(t, "PRIMARY KEY (scope, has_key, null_key, key)", pk)
}

// limit list's statement reads each name's queued rows through its key
// index, grouped in the index's order: never a hash table of every key
// nor a scan of the whole table (keys are unbounded).
func TestLimitUsageGroupsTheQueuedRowsInKeyIndexOrder(t *testing.T) {
	b, _ := openTest(t)
	ctx := t.Context()
	_, err := b.pool.Exec(ctx, `INSERT INTO soniq_jobs (id, job_name, args, status, priority, queue)
	SELECT gen_random_uuid(), CASE WHEN i % 3 = 0 THEN 'use.b' ELSE 'use.a' END, jsonb_build_object('t', 'k' || (i % 2000)), 'queued', 100, 'default'
	FROM generate_series(1, 20000) i`)
	require.NoError(t, err)
	path := []string{"t"}
	require.NoError(t, b.PrepareLimitKeys(ctx, [][]string{path}))
	_, err = b.pool.Exec(ctx, `ANALYZE soniq_jobs`)
	require.NoError(t, err)
	for _, names := range [][]string{{"use.a"}, {"use.a", "use.b"}} {
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, usagePlannerHints)
		require.NoError(t, err)
		rows, err := tx.Query(ctx, "EXPLAIN "+limitUsageSQL(path, names), []string{}, []bool{}, []int32{}, int32(2), 5, names)
		require.NoError(t, err)
		var plan strings.Builder
		for rows.Next() {
			var line string
			require.NoError(t, rows.Scan(&line))
			plan.WriteString(line + "\n")
		}
		require.NoError(t, rows.Err())
		require.NoError(t, tx.Rollback(ctx))
		assert.Contains(t, plan.String(), "Index Scan using "+keyIndexName(path, "q"), "%v:\n%s", names, plan.String())
		assert.NotContains(t, plan.String(), "HashAggregate", "%v:\n%s", names, plan.String())
		assert.NotContains(t, plan.String(), "Seq Scan on soniq_jobs", "%v:\n%s", names, plan.String())
	}
	u, err := b.LimitUsage(ctx, backends.ClaimLimit{Scope: "use", Names: []string{"use.a", "use.b"}, Key: path}, 3)
	require.NoError(t, err)
	assert.Equal(t, int64(20000), u.Queued)
	assert.Len(t, u.Busiest, 3)
	assert.Equal(t, int64(10), u.Busiest[0].Queued, "2,000 keys of 10 rows each")
}
