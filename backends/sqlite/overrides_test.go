package sqlite

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// An overrides table made before the key null's overrides existed is
// made again by migrate, once, its rows kept: the key null's override is
// then a row of its own beside the key "".
func TestMigrateUpgradesTheOverridesTableForTheKeyNull(t *testing.T) {
	b, _ := openTest(t)
	ctx := t.Context()
	_, err := b.write.ExecContext(ctx, `DROP TABLE soniq_sidecar_limit_overrides;
CREATE TABLE soniq_sidecar_limit_overrides (
    scope TEXT NOT NULL,
    has_key INTEGER NOT NULL,
    key TEXT NOT NULL DEFAULT '',
    concurrency INTEGER,
    rate_n INTEGER,
    rate_seconds INTEGER,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (scope, has_key, key)
);
INSERT INTO soniq_sidecar_limit_overrides (scope, has_key, key, concurrency, updated_at)
VALUES ('s', 0, '', 4, '2026-01-01 00:00:00.000000'), ('s', 1, '', 0, '2026-01-01 00:00:00.000000');`)
	require.NoError(t, err)
	_, err = b.SetLimit(ctx, backends.LimitOverride{Scope: "s", NullKey: true, Concurrency: new(int)})
	require.Error(t, err, "the old table has no null_key")

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
	var old int
	require.NoError(t, b.read.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE name = 'soniq_sidecar_limit_overrides_old'`).Scan(&old))
	assert.Zero(t, old)
}
