// Package pgtest gives tests a fresh, empty Postgres database on the server
// named by SONIQ_TEST_DATABASE_URL.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvVar names the server tests run against. Its user must be allowed to
// CREATE DATABASE.
const EnvVar = "SONIQ_TEST_DATABASE_URL"

// NewDatabase creates an empty database with a random name and returns its
// URL; the database is dropped (WITH FORCE, so lingering sessions do not
// block it) when the test ends. A missing EnvVar fails the test: Postgres
// tests are never skipped silently.
func NewDatabase(t testing.TB) string {
	t.Helper()
	admin := os.Getenv(EnvVar)
	if admin == "" {
		t.Fatalf("%s is not set: point it at a Postgres server whose user may CREATE DATABASE "+
			"(e.g. postgres://user@127.0.0.1:5432/postgres); Postgres tests are never skipped", EnvVar)
	}
	u, err := url.Parse(admin)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		t.Fatalf("%s must be a postgres:// URL", EnvVar)
	}
	var suffix [8]byte
	if _, err := rand.Read(suffix[:]); err != nil {
		t.Fatalf("pgtest: random database name: %v", err)
	}
	name := "soniq_test_" + hex.EncodeToString(suffix[:])

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// template0 has no connections by design, so parallel tests never
	// collide on "source database is being accessed by other users".
	exec(ctx, t, admin, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE template0")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		exec(ctx, t, admin, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	})

	u.Path = "/" + name
	return u.String()
}

// PoolerEnvVar names a PgBouncer in transaction mode in front of EnvVar's
// server (.ci/pgbouncer.sh starts one); its `*` database entry reaches every
// database there.
const PoolerEnvVar = "SONIQ_TEST_PGBOUNCER_URL"

// ThroughPooler returns dbURL (a NewDatabase URL) with its host and port
// replaced by PoolerEnvVar's, so the same database is reached through the
// pooler. A missing PoolerEnvVar fails the test, as a missing EnvVar does.
func ThroughPooler(t testing.TB, dbURL string) string {
	t.Helper()
	raw := os.Getenv(PoolerEnvVar)
	if raw == "" {
		t.Fatalf("%s is not set: start PgBouncer in transaction mode in front of %s's server with "+
			"`eval \"$(.ci/pgbouncer.sh start DIR \"$%s\")\"` (make test and .ci/run do); these tests are never skipped",
			PoolerEnvVar, EnvVar, EnvVar)
	}
	pooler, err := url.Parse(raw)
	if err != nil || (pooler.Scheme != "postgres" && pooler.Scheme != "postgresql") {
		t.Fatalf("%s must be a postgres:// URL", PoolerEnvVar)
	}
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("pgtest: parse database URL: %v", err)
	}
	u.Host = pooler.Host
	return u.String()
}

func exec(ctx context.Context, t testing.TB, adminURL, sql string) {
	t.Helper()
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		t.Fatalf("pgtest: connect to %s's server: %v", EnvVar, err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("pgtest: %s: %v", sql, err)
	}
}
