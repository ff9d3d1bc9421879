package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends/postgres/pgtest"
)

// cli runs the command line in-process, in a fresh working directory, with
// only the given environment.
type cli struct {
	t   *testing.T
	dir string
	env map[string]string
}

func newCLI(t *testing.T, env map[string]string) cli {
	dir := t.TempDir()
	t.Chdir(dir)
	return cli{t: t, dir: dir, env: env}
}

func (c cli) run(args ...string) (code int, stdout, stderr string) {
	c.t.Helper()
	var out, errb bytes.Buffer
	code = runMain(context.Background(), env{stdout: &out, stderr: &errb, lookupEnv: func(k string) (string, bool) {
		v, ok := c.env[k]
		return v, ok
	}}, args)
	return code, out.String(), errb.String()
}

// The "done when": in an empty directory with no environment set,
// enqueue then status --json prints exactly the six keys in canonical order.
func TestEnqueueThenStatusOnTheDefaultSQLiteFile(t *testing.T) {
	c := newCLI(t, nil)
	code, out, errOut := c.run("enqueue", "demo.hello", "--args", `{"a":1}`)
	require.Equal(t, 0, code, errOut)
	id := strings.TrimSpace(out)
	assert.Regexp(t, `^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`, id)
	assert.FileExists(t, c.dir+"/soniq.db", "the default database is sqlite:soniq.db in the working directory")

	code, out, errOut = c.run("status", "--json")
	require.Equal(t, 0, code, errOut)
	assert.Equal(t, `{"total":1,"queued":1,"processing":0,"done":0,"dead_letter":0,"cancelled":0}`+"\n", out)

	code, out, _ = c.run("status")
	require.Equal(t, 0, code)
	var keys []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		keys = append(keys, strings.Fields(line)[0])
	}
	assert.Equal(t, []string{"total", "queued", "processing", "done", "dead_letter", "cancelled"}, keys)
}

func TestEnqueueJSONPrintsTheRow(t *testing.T) {
	c := newCLI(t, nil)
	code, out, errOut := c.run("enqueue", "--queue", "mail", "--priority", "5", "--max-attempts", "7", "--delay", "1m", "--dedup-key", "k1", "--json", "send.mail", "--args", `{"to":"x"}`)
	require.Equal(t, 0, code, errOut)
	var row map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &row))
	assert.Equal(t, "send.mail", row["job_name"])
	assert.Equal(t, "mail", row["queue"])
	assert.EqualValues(t, 5, row["priority"])
	assert.EqualValues(t, 7, row["max_attempts"])
	assert.Equal(t, "k1", row["dedup_key"])
	assert.NotNil(t, row["scheduled_at"])
	assert.Equal(t, map[string]any{"to": "x"}, row["args"])

	// The same dedup key while queued returns the existing job.
	code, out2, _ := c.run("enqueue", "send.mail", "--dedup-key", "k1")
	require.Equal(t, 0, code)
	assert.Equal(t, row["id"], strings.TrimSpace(out2))
}

func TestUsageErrorsExitTwo(t *testing.T) {
	c := newCLI(t, nil)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no command", nil, "Usage:"},
		{"unknown command", []string{"frobnicate"}, `unknown command "frobnicate"`},
		{"malformed args names the offset", []string{"enqueue", "x", "--args", `{"a":1,}`}, "offset 8"},
		{"truncated args names the offset", []string{"enqueue", "x", "--args", `{"a":`}, "offset 5"},
		{"args not an object", []string{"enqueue", "x", "--args", `[1,2]`}, "must be a JSON object"},
		{"trailing data", []string{"enqueue", "x", "--args", `{} {}`}, "offset 2: trailing data"},
		{"no job name", []string{"enqueue"}, "exactly one job NAME"},
		{"bad delay", []string{"enqueue", "x", "--delay", "soon"}, `--delay "soon"`},
		{"bad max attempts", []string{"enqueue", "x", "--max-attempts", "0"}, "--max-attempts must be at least 1"},
		{"unknown flag", []string{"status", "--colour"}, "flag provided but not defined: -colour"},
		{"dead-letter without subcommand", []string{"dead-letter"}, "want a subcommand"},
		{"replay without id", []string{"dead-letter", "replay"}, "want one job ID, or --all, or selectors"},
		{"unknown dead-letter subcommand", []string{"dead-letter", "delete"}, `unknown subcommand "delete"`},
		{"id and selection", []string{"dead-letter", "purge", "x", "--queue", "q"}, "give one job ID or a selection"},
		{"dry run of one id", []string{"dead-letter", "replay", "x", "--dry-run"}, "--dry-run applies to a selection"},
		{"negative age", []string{"dead-letter", "replay", "--since", "-1h"}, "must not be negative"},
		{"zero days", []string{"dead-letter", "purge", "--older-than", "0d"}, "want a positive number of days"},
		{"zero age", []string{"dead-letter", "purge", "--older-than", "0s"}, "must be more than zero"},
		{"empty job name", []string{"dead-letter", "purge", "--job-name", ""}, "must not be empty"},
		{"export format", []string{"dead-letter", "export", "--format", "xml"}, `--format "xml": want csv or json`},
		{"negative list limit", []string{"dead-letter", "list", "--limit", "-1"}, "--limit must not be negative"},
		{"unsupported database URL", []string{"status", "--database-url", "foo"}, `unsupported database URL "foo"`},
		{"unparsable postgres URL", []string{"status", "--database-url", "postgres://x@127.0.0.1:notaport/db"}, "invalid port"},
		{"run without manifest", []string{"run"}, "no manifest: give --manifest FILE"},
		{"manifest check of a missing file", []string{"manifest", "check", "nope.yaml"}, "nope.yaml"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errOut := c.run(tc.args...)
			assert.Equal(t, 2, code, errOut)
			assert.Contains(t, errOut, tc.want)
		})
	}
	// Bad input loses nothing: none of the failed enqueues wrote a row.
	code, out, _ := c.run("status", "--json")
	require.Equal(t, 0, code)
	assert.Contains(t, out, `"total":0`)
}

func TestDeadLetterListReplayPurge(t *testing.T) {
	c := newCLI(t, map[string]string{"SONIQ_DATABASE_URL": "sqlite:dlq.db"})
	// Put a row in the DLQ the way the sidecar does: claim and dead-letter it.
	code, out, errOut := c.run("enqueue", "bad.job", "--args", `{"n":1}`)
	require.Equal(t, 0, code, errOut)
	id := strings.TrimSpace(out)
	deadLetter(t, c.dir+"/dlq.db", id)

	code, out, _ = c.run("dead-letter", "list")
	require.Equal(t, 0, code)
	assert.Contains(t, out, id)
	assert.Contains(t, out, "max_retries_exceeded")

	code, out, _ = c.run("dead-letter", "replay", id)
	require.Equal(t, 0, code)
	newID := strings.TrimSpace(out)
	assert.NotEqual(t, id, newID, "replay makes a new job")

	code, out, _ = c.run("dead-letter", "list", "--json")
	require.Equal(t, 0, code)
	var dl map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &dl))
	assert.EqualValues(t, 1, dl["resurrection_count"])

	code, _, _ = c.run("dead-letter", "purge", id)
	require.Equal(t, 0, code)
	code, out, _ = c.run("status", "--json")
	require.Equal(t, 0, code)
	assert.Equal(t, `{"total":1,"queued":1,"processing":0,"done":0,"dead_letter":0,"cancelled":0}`+"\n", out)

	code, _, errOut = c.run("dead-letter", "purge", id)
	assert.Equal(t, 1, code, "purging a missing id fails (exit 1); the command line itself was right")
	assert.Contains(t, errOut, id)
}

func TestVersion(t *testing.T) {
	c := newCLI(t, nil)
	code, out, _ := c.run("version")
	require.Equal(t, 0, code)
	assert.True(t, strings.HasPrefix(out, "soniq-sidecar "), out)
}

func TestMigrateClaimIndexIsPostgresOnly(t *testing.T) {
	c := newCLI(t, nil)
	code, _, errOut := c.run("migrate", "--claim-index")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "only the Postgres backend")
}

// run refuses a connection pool of one before it claims anything (it would
// stall at the first maintenance pass); the one-shot commands work with it.
func TestRunRefusesAPoolOfOne(t *testing.T) {
	url := pgtest.NewDatabase(t) + "&pool_max_conns=1" // the URL has ?sslmode=
	manifest, err := filepath.Abs(exampleManifest())
	require.NoError(t, err)
	c := newCLI(t, map[string]string{"SONIQ_DATABASE_URL": url})
	code, _, errOut := c.run("migrate")
	require.Equal(t, 0, code, errOut)
	code, _, errOut = c.run("enqueue", "examples.add", "--args", `{"a":1,"b":2}`)
	require.Equal(t, 0, code, errOut)

	code, _, errOut = c.run("run", "--manifest", manifest, "--metrics-addr", "")
	assert.Equal(t, 2, code, errOut)
	assert.Contains(t, errOut, "pool_max_conns=1 is too small for run: the sidecar needs at least 2 connections")
	code, out, _ := c.run("status", "--json")
	require.Equal(t, 0, code)
	assert.Contains(t, out, `"queued":1`, "nothing was claimed")
}

// On Postgres, plain `migrate` builds the claim-order index (and again is a
// no-op); --no-claim-index leaves Soniq's schema exactly as Soniq makes it.
func TestMigrateCreatesTheClaimIndexByDefault(t *testing.T) {
	tests := []struct {
		name  string
		args  []string
		index bool
	}{
		{"default", []string{"migrate"}, true},
		{"skipped", []string{"migrate", "--no-claim-index"}, false},
		{"explicit", []string{"migrate", "--claim-index"}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			url := pgtest.NewDatabase(t)
			c := newCLI(t, map[string]string{"SONIQ_DATABASE_URL": url})
			db, err := pgx.Connect(t.Context(), url)
			require.NoError(t, err)
			t.Cleanup(func() { _ = db.Close(context.Background()) })
			for run := range 2 { // idempotent
				code, out, errOut := c.run(tc.args...)
				require.Equal(t, 0, code, "run %d: %s", run, errOut)
				var valid []bool
				rows, err := db.Query(t.Context(), `SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass('soniq_sidecar_claim_order')`)
				require.NoError(t, err)
				valid, err = pgx.CollectRows(rows, pgx.RowTo[bool])
				require.NoError(t, err)
				if tc.index {
					assert.Equal(t, []bool{true}, valid, "run %d: one valid index", run)
					assert.Contains(t, out, "soniq_sidecar_claim_order")
				} else {
					assert.Empty(t, valid, "run %d: no index", run)
				}
			}
		})
	}
}

// On Postgres only `migrate` changes the schema: the other commands leave a
// database without Soniq's tables alone and say what to run.
func TestPostgresSchemaIsChangedOnlyByMigrate(t *testing.T) {
	url := pgtest.NewDatabase(t)
	c := newCLI(t, map[string]string{"SONIQ_DATABASE_URL": url})
	for _, args := range [][]string{{"status"}, {"enqueue", "x"}, {"dead-letter", "list"}} {
		code, _, errOut := c.run(args...)
		assert.Equal(t, 1, code, "%v: %s", args, errOut)
		assert.Contains(t, errOut, "run `soniq-sidecar migrate`", "%v", args)
	}
	db, err := pgx.Connect(context.Background(), url)
	require.NoError(t, err)
	defer db.Close(context.Background())
	var tables int
	require.NoError(t, db.QueryRow(context.Background(), `SELECT count(*) FROM pg_tables WHERE tablename LIKE 'soniq_%'`).Scan(&tables))
	assert.Zero(t, tables, "no command but migrate created a table")

	code, out, errOut := c.run("migrate")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "migrated postgres://")
	code, out, _ = c.run("status", "--json")
	require.Equal(t, 0, code)
	assert.Equal(t, `{"total":0,"queued":0,"processing":0,"done":0,"dead_letter":0,"cancelled":0}`+"\n", out)
}

// One exit-code table for every command (README "Exit codes"): 0 success
// (asking for --help included), 2 the command line or configuration is
// wrong, 1 the operation failed (a missing id, a database that fails).
func TestExitCodes(t *testing.T) {
	c := newCLI(t, nil)
	missing := "3f1e1f7e-2a51-4c36-9d1e-8a1b2c3d4e5f"
	tests := []struct {
		name string
		args []string
		code int
		want string // in stdout when help was asked for (exit 0), else in stderr
	}{
		{"top-level help", []string{"--help"}, 0, ""},
		{"run --help", []string{"run", "--help"}, 0, "-manifest"},
		{"status -h", []string{"status", "-h"}, 0, "-json"},
		{"enqueue --help", []string{"enqueue", "--help"}, 0, "-args"},
		{"dead-letter list --help", []string{"dead-letter", "list", "--help"}, 0, "-limit"},
		{"migrate --help", []string{"migrate", "--help"}, 0, "-claim-index"},
		{"replay of a missing id", []string{"dead-letter", "replay", missing}, 1, "replaying dead-letter job " + missing + ": not found"},
		{"purge of a missing id", []string{"dead-letter", "purge", missing}, 1, "purging dead-letter job " + missing + ": not found"},
		{"bad flag value", []string{"dead-letter", "list", "--limit", "x"}, 2, "invalid value"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := c.run(tc.args...)
			assert.Equal(t, tc.code, code, errOut)
			if tc.code == 0 {
				assert.Contains(t, out, tc.want)
			} else {
				assert.Contains(t, errOut, tc.want)
			}
			assert.NotContains(t, errOut, "help requested")
		})
	}
}

// status says which database it read, and a SQLite file it had to create
// (a command run in the wrong directory) is announced, not silently empty.
func TestStatusNamesTheDatabase(t *testing.T) {
	c := newCLI(t, nil)
	code, out, errOut := c.run("status", "--json")
	require.Equal(t, 0, code, errOut)
	assert.Equal(t, `{"total":0,"queued":0,"processing":0,"done":0,"dead_letter":0,"cancelled":0}`+"\n", out, "stdout stays the data")
	assert.Contains(t, errOut, "created sqlite:soniq.db ("+c.dir+"/soniq.db): no database file was there")
	assert.Contains(t, errOut, "database sqlite:soniq.db ("+c.dir+"/soniq.db)")

	code, _, errOut = c.run("status")
	require.Equal(t, 0, code, errOut)
	assert.NotContains(t, errOut, "created", "the file exists now")
	assert.Contains(t, errOut, "database sqlite:soniq.db")
}

// Errors name what failed once, not once per layer.
func TestErrorsDoNotStutter(t *testing.T) {
	url := pgtest.NewDatabase(t)
	c := newCLI(t, map[string]string{"SONIQ_DATABASE_URL": url})
	for _, args := range [][]string{{"status"}, {"enqueue", "x"}, {"dead-letter", "list"}, {"dead-letter", "purge", "3f1e1f7e-2a51-4c36-9d1e-8a1b2c3d4e5f"}} {
		code, _, errOut := c.run(args...)
		assert.Equal(t, 1, code, "%v: %s", args, errOut)
		for _, w := range []string{"stats", "enqueue", "dead-letter", "purg"} {
			assert.LessOrEqual(t, strings.Count(errOut, w), 1, "%v: %q said twice: %s", args, w, errOut)
		}
	}
}

func TestDeadLetterAges(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
	}{
		{"30m", 30 * time.Minute},
		{"2h", 2 * time.Hour},
		{"90", 90 * time.Second},
		{"7d", 7 * 24 * time.Hour},
		{"1.5d", 36 * time.Hour},
	}
	for _, tc := range tests {
		var a ageFlag
		require.NoError(t, a.Set(tc.in), tc.in)
		assert.Equal(t, tc.want, a.d, tc.in)
		assert.Equal(t, tc.in, a.String(), "messages repeat what was typed")
	}
	for _, bad := range []string{"", "d", "-1d", "0", "soon", "1e9d"} {
		var a ageFlag
		assert.Error(t, a.Set(bad), "%q", bad)
	}
}
