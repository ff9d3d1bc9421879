package postgres

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// The claim log's rows written as an earlier release's claims left them
// (keys that stopped getting jobs) are deleted past their scope's horizon,
// in batches, at most Max a call; the rows a window may still count stay.
func TestPruneLimitClaimsDeletesOnlyRowsPastEveryWindow(t *testing.T) {
	b, _ := openTest(t)
	ctx := t.Context()
	_, err := b.pool.Exec(ctx, `INSERT INTO soniq_sidecar_limit_claims (scope, key, claimed_at) VALUES
		('idle', 'k', now() - interval '25 hours'),
		('idle', NULL, now() - interval '25 hours'),
		('idle', 'k', now() - interval '23 hours'),
		('long', 'k', now() - interval '48 hours'),
		('long', 'k', now() - interval '73 hours'),
		('short', 'x', now() - interval '2 hours'),
		('short', 'x', now())`)
	require.NoError(t, err)
	remaining := func() map[string]int {
		rows, err := b.pool.Query(ctx, `SELECT scope || ':' || COALESCE(key, '<null>') || ':' || round(extract(epoch FROM now() - claimed_at) / 3600)::int
			FROM soniq_sidecar_limit_claims`)
		require.NoError(t, err)
		defer rows.Close()
		out := map[string]int{}
		for rows.Next() {
			var s string
			require.NoError(t, rows.Scan(&s))
			out[s]++
		}
		require.NoError(t, rows.Err())
		return out
	}
	p := backends.ClaimLogPrune{Horizons: map[string]time.Duration{"long": 72 * time.Hour, "short": time.Hour},
		Floor: 24 * time.Hour, Batch: 2, Max: 100}
	n, err := b.PruneLimitClaims(ctx, p)
	require.NoError(t, err)
	assert.Equal(t, 3, n, "two statements of 2, then 1")
	assert.Equal(t, map[string]int{"idle:k:23": 1, "long:k:48": 1, "short:x:2": 1, "short:x:0": 1}, remaining(),
		"a scope's horizon is never under the floor")

	_, err = b.pool.Exec(ctx, `INSERT INTO soniq_sidecar_limit_claims (scope, key, claimed_at)
		SELECT 'gone', 't' || i, now() - interval '30 days' FROM generate_series(1, 5) AS i`)
	require.NoError(t, err)
	p.Max = 3
	n, err = b.PruneLimitClaims(ctx, p)
	require.NoError(t, err)
	assert.Equal(t, 3, n, "at most Max a call")
	n, err = b.PruneLimitClaims(ctx, p)
	require.NoError(t, err)
	assert.Equal(t, 2, n, "the rest at the next")
	assert.Len(t, remaining(), 4)
}
