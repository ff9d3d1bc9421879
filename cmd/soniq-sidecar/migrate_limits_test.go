package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends/postgres/pgtest"
)

const limitsManifest = `version: 1
limits:
  - {group: payments-api, concurrency: 10, rate: 25/1s}
handlers:
  - name: app
    command: [python3, -m, app]
    jobs:
      - name: emails.send
        cancellable: true
        limit: {concurrency: 5, rate: 100/1m, key: args.tenant_id}
      - {name: payments.charge, cancellable: false, limit: {group: payments-api}}
      - {name: reports.build, cancellable: true, limit: {concurrency: 2, key: args.account.id}}
      - {name: plain, cancellable: true}
`

// limitIndexes is every index of the limits on soniq_jobs: its definition
// by name, and whether it is valid.
func limitIndexes(t *testing.T, url string) (defs map[string]string, valid map[string]bool) {
	t.Helper()
	ctx := context.Background()
	db, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer db.Close(ctx)
	rows, err := db.Query(ctx, `SELECT c.relname, pg_get_indexdef(i.indexrelid), i.indisvalid
		FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
		WHERE i.indrelid = 'soniq_jobs'::regclass AND c.relname LIKE 'soniq_sidecar_limit_%'`)
	require.NoError(t, err)
	defs, valid = map[string]string{}, map[string]bool{}
	for rows.Next() {
		var name, def string
		var ok bool
		require.NoError(t, rows.Scan(&name, &def, &ok))
		defs[name], valid[name] = def, ok
	}
	require.NoError(t, rows.Err())
	return defs, valid
}

// migrate --manifest builds the limits' indexes a sidecar running the
// manifest would build at its start, valid; without the flag migrate
// builds none; an index an interrupted build left invalid is built again.
func TestMigrateWithAManifestBuildsTheLimitsIndexes(t *testing.T) {
	url := pgtest.NewDatabase(t)
	c := newCLI(t, map[string]string{"SONIQ_DATABASE_URL": url})
	path := filepath.Join(c.dir, "manifest.yaml")
	require.NoError(t, os.WriteFile(path, []byte(limitsManifest), 0o644))

	code, _, errOut := c.run("migrate")
	require.Equal(t, 0, code, errOut)
	defs, _ := limitIndexes(t, url)
	assert.Empty(t, defs, "migrate without --manifest builds no limits' index")

	code, out, errOut := c.run("migrate", "--manifest", path)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "by key args.tenant_id, args.account.id: present and valid")
	defs, valid := limitIndexes(t, url)
	require.Len(t, defs, 6, "queued and processing, by name and per key path: %v", defs)
	var tenant, account int
	for name, def := range defs {
		assert.True(t, valid[name], "%s is valid", name)
		switch {
		case strings.Contains(def, "'{tenant_id}'"):
			tenant++
		case strings.Contains(def, "'{account,id}'"):
			account++
		}
	}
	assert.Equal(t, [2]int{2, 2}, [2]int{tenant, account}, "a queued and a processing index per key path: %v", defs)

	// An invalid index (as an interrupted concurrent build leaves one) is
	// dropped and built again.
	ctx := context.Background()
	db, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer db.Close(ctx)
	_, err = db.Exec(ctx, `UPDATE pg_index SET indisvalid = false WHERE indexrelid = 'soniq_sidecar_limit_queued'::regclass`)
	require.NoError(t, err)
	code, _, errOut = c.run("migrate", "--manifest", path, "--no-claim-index")
	require.Equal(t, 0, code, errOut)
	_, valid = limitIndexes(t, url)
	assert.True(t, valid["soniq_sidecar_limit_queued"], "built again")

	code, _, errOut = c.run("migrate", "--manifest", filepath.Join(c.dir, "missing.yaml"))
	assert.Equal(t, 2, code, errOut)
}

// On SQLite there is no limits' index to build: --manifest is refused.
func TestMigrateWithAManifestOnSQLiteExitsTwo(t *testing.T) {
	c := newCLI(t, nil)
	path := filepath.Join(c.dir, "manifest.yaml")
	require.NoError(t, os.WriteFile(path, []byte(limitsManifest), 0o644))
	code, _, errOut := c.run("migrate", "--manifest", path)
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "only the Postgres backend indexes the limits' keys")
}
