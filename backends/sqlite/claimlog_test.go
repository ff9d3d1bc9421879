package sqlite

import (
	"fmt"
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
	at := time.Now()
	ago := func(d time.Duration) int64 { return at.Add(-d).UnixMicro() }
	insert := func(scope string, key any, claimed int64) {
		t.Helper()
		_, err := b.write.ExecContext(ctx, `INSERT INTO soniq_sidecar_limit_claims (scope, key, claimed_at) VALUES (?, ?, ?)`, scope, key, claimed)
		require.NoError(t, err)
	}
	insert("idle", "k", ago(25*time.Hour))
	insert("idle", nil, ago(25*time.Hour))
	insert("idle", "k", ago(23*time.Hour))
	insert("long", "k", ago(48*time.Hour))
	insert("long", "k", ago(73*time.Hour))
	insert("short", "x", ago(2*time.Hour))
	insert("short", "x", ago(0))
	remaining := func() map[string]int {
		rows, err := b.read.QueryContext(ctx, `SELECT scope, COALESCE(key, '<null>'), claimed_at FROM soniq_sidecar_limit_claims`)
		require.NoError(t, err)
		defer rows.Close()
		out := map[string]int{}
		for rows.Next() {
			var scope, key string
			var claimed int64
			require.NoError(t, rows.Scan(&scope, &key, &claimed))
			out[fmt.Sprintf("%s:%s:%d", scope, key, at.Sub(time.UnixMicro(claimed)).Round(time.Hour)/time.Hour)]++
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

	for i := range 5 {
		insert("gone", fmt.Sprint("t", i), ago(30*24*time.Hour))
	}
	p.Max = 3
	n, err = b.PruneLimitClaims(ctx, p)
	require.NoError(t, err)
	assert.Equal(t, 3, n, "at most Max a call")
	n, err = b.PruneLimitClaims(ctx, p)
	require.NoError(t, err)
	assert.Equal(t, 2, n, "the rest at the next")
	assert.Len(t, remaining(), 4)
}
