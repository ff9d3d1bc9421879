package integration

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// enqueueCLI runs `enqueue NAME --args ARGS EXTRA...` and returns the id printed.
func enqueueCLI(t *testing.T, url, name, args string, extra ...string) string {
	t.Helper()
	r := runCLI(t, url, nil, append([]string{"enqueue", name, "--args", args}, extra...)...).ok(t)
	return strings.TrimSpace(r.stdout)
}

// TestEnqueueUniqueCLI: on both databases, `enqueue --unique` returns the
// queued row with the same name and args (however the JSON is spelled)
// instead of adding one, and only a queued row counts.
func TestEnqueueUniqueCLI(t *testing.T) {
	t.Parallel()
	for _, d := range dlDatabases {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			db := d.open(t)
			first := enqueueCLI(t, db.url, "u.job", `{"b":[1,2.5,"ü"],"a":1.0}`, "--unique")
			again := enqueueCLI(t, db.url, "u.job", `{ "a": 1.0, "b": [1, 2.50, "\u00fc"] }`, "--unique")
			assert.Equal(t, first, again, "the same args in another spelling are the same job")
			assert.NotEqual(t, first, enqueueCLI(t, db.url, "u.job", `{"a":1,"b":[1,2.5,"ü"]}`, "--unique"),
				"1 and 1.0 are different args, as in Python")
			assert.NotEqual(t, first, enqueueCLI(t, db.url, "u.other", `{"b":[1,2.5,"ü"],"a":1.0}`, "--unique"), "another name")
			assert.NotEqual(t, first, enqueueCLI(t, db.url, "u.job", `{"b":[1,2.5,"ü"],"a":1.0}`), "without --unique a duplicate is added")

			var row backends.Job
			r := runCLI(t, db.url, nil, "enqueue", "u.job", "--args", `{"a":1.0,"b":[1,2.5,"ü"]}`, "--unique", "--json").ok(t)
			require.NoError(t, json.Unmarshal([]byte(r.stdout), &row))
			assert.Equal(t, first, row.ID)
			assert.True(t, row.UniqueJob)
			require.NotNil(t, row.ArgsHash)
			assert.Len(t, *row.ArgsHash, 64, "a SHA-256 hex digest")

			// Only a queued row counts: once it is claimed, a new one is queued.
			w := backends.Worker{ID: backends.NewID(), Hostname: "unique", PID: 1}
			require.NoError(t, db.b.RegisterWorker(t.Context(), w))
			claimed, err := db.b.Claim(t.Context(), backends.ClaimParams{WorkerID: w.ID, Names: []string{"u.job"}, Limit: 10})
			require.NoError(t, err)
			require.Len(t, claimed, 3)
			next := enqueueCLI(t, db.url, "u.job", `{"b":[1,2.5,"ü"],"a":1.0}`, "--unique")
			assert.NotEqual(t, first, next)
			assert.Equal(t, next, enqueueCLI(t, db.url, "u.job", `{"a":1.0,"b":[1,2.5,"ü"]}`, "--unique"))
		})
	}
}

// TestSoniqInteropEnqueueUniqueCLI: the CLI's --unique and Soniq 0.1.0's
// enqueue(unique=True) compute the same args_hash, so each finds the
// other's queued row and returns its id, in both directions.
func TestSoniqInteropEnqueueUniqueCLI(t *testing.T) {
	t.Parallel()
	py := soniqPython(t)
	db := openDLPostgres(t)
	args := `{"b":[1,2.5,"ü",{"z":null,"y":true}],"a":1.0,"s":"line\nbreak \"q\" \u2603 \ud83d\ude00"}`
	var soniq struct{ ID string }

	// Soniq first, then the CLI.
	py.run(t, "enqueue", db.url, map[string]any{"name": "interop.cli.unique", "args": json.RawMessage(args), "unique": true}, &soniq)
	cli := enqueueCLI(t, db.url, "interop.cli.unique", `{"s":"line\nbreak \"q\" ☃ 😀","a":1.0,"b":[1,2.50,"\u00fc",{"y":true,"z":null}]}`, "--unique")
	assert.Equal(t, soniq.ID, cli, "the CLI returns Soniq's queued row")

	// The CLI first, then Soniq.
	cli = enqueueCLI(t, db.url, "interop.cli.unique2", args, "--unique")
	py.run(t, "enqueue", db.url, map[string]any{"name": "interop.cli.unique2", "args": json.RawMessage(args), "unique": true}, &soniq)
	assert.Equal(t, cli, soniq.ID, "Soniq returns the CLI's queued row")

	// Both wrote the same hash for the same args.
	conn, err := pgx.Connect(t.Context(), db.url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(t.Context()) })
	var hashes []string
	rows, err := conn.Query(t.Context(), `SELECT DISTINCT args_hash FROM soniq_jobs WHERE job_name LIKE 'interop.cli.unique%'`)
	require.NoError(t, err)
	hashes, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	assert.Len(t, hashes, 1, "one args_hash for both producers' rows")

	// A row that is no longer queued does not count, for either side.
	_, err = conn.Exec(t.Context(), `UPDATE soniq_jobs SET status = 'done' WHERE id = $1`, cli)
	require.NoError(t, err)
	py.run(t, "enqueue", db.url, map[string]any{"name": "interop.cli.unique2", "args": json.RawMessage(args), "unique": true}, &soniq)
	assert.NotEqual(t, cli, soniq.ID, "Soniq queues anew once the row is done")
	assert.Equal(t, soniq.ID, enqueueCLI(t, db.url, "interop.cli.unique2", args, "--unique"), "and the CLI finds Soniq's new row")
}

// TestSoniqInteropDeadLetterCLI: rows Soniq 0.1.0's own worker
// dead-lettered (a name it does not know: job_not_found) are selected by
// the CLI's selectors, exported, replayed in bulk as Soniq's replay would
// (Soniq then reports the resurrection and queues the copies) and purged.
func TestSoniqInteropDeadLetterCLI(t *testing.T) {
	t.Parallel()
	py := soniqPython(t)
	db := openDLPostgres(t)
	var job struct{ ID string }
	soniqIDs := map[string]bool{}
	for i := range 3 {
		py.run(t, "enqueue", db.url, map[string]any{"name": "interop.cli.unknown", "args": map[string]any{"i": i}, "queue": "dlcli"}, &job)
		soniqIDs[job.ID] = true
	}
	py.run(t, "work_once", db.url, map[string]any{"queues": []string{"dlcli"}}, nil)

	r := runCLI(t, db.url, nil, "dead-letter", "export", "--format", "json", "--job-name", "interop.cli.unknown", "--since", "1h").ok(t)
	var exported []map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &exported), r.stdout)
	require.Len(t, exported, 3, "the rows Soniq's worker dead-lettered")
	for _, row := range exported {
		assert.True(t, soniqIDs[row["id"].(string)], "the original ids")
		assert.Equal(t, "job_not_found", row["dead_letter_reason"])
		assert.Equal(t, "Job interop.cli.unknown not registered.", row["last_error"])
		assert.Equal(t, "dlcli", row["queue"])
	}

	r = runCLI(t, db.url, nil, "dead-letter", "replay", "--job-name", "interop.cli.unknown", "--queue", "dlcli").ok(t)
	assert.Equal(t, "replayed 3 dead-letter jobs (job name interop.cli.unknown; queue dlcli)\n", r.stdout)
	var dls []struct {
		ID                string `json:"id"`
		ResurrectionCount int    `json:"resurrection_count"`
	}
	py.run(t, "dead_letters", db.url, nil, &dls)
	require.Len(t, dls, 3)
	for _, d := range dls {
		assert.Equal(t, 1, d.ResurrectionCount, "Soniq sees the resurrection of %s", d.ID)
	}
	stats := py.stats(t, db.url)
	assert.Equal(t, int64(3), stats["queued"], "Soniq counts the replayed copies as queued")

	// Soniq's worker dead-letters the copies again (new ids), and one purge clears all six.
	py.run(t, "work_once", db.url, map[string]any{"queues": []string{"dlcli"}}, nil)
	r = runCLI(t, db.url, nil, "dead-letter", "purge", "--job-name", "interop.cli.unknown").ok(t)
	assert.Equal(t, "purged 6 dead-letter jobs (job name interop.cli.unknown)\n", r.stdout)
	py.run(t, "dead_letters", db.url, nil, &dls)
	assert.Empty(t, dls)
}
