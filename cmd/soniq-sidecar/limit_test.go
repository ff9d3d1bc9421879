package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/backends/sqlite"
)

// The limit commands on a SQLite file: exit codes, output, and bad values
// refused with exit 2 before anything changes.
func TestLimitCommands(t *testing.T) {
	c := newCLI(t, nil)
	run := c.run
	code, out, errOut := run("limit", "set", "emails.send", "--key", "acme", "--concurrency", "0")
	require.Equal(t, 0, code, errOut)
	assert.Equal(t, "limit emails.send key \"acme\" set: paused (concurrency 0); running sidecars apply it within one poll interval\n", out)
	code, _, errOut = run("limit", "set", "stripe", "--rate", "10/1s")
	require.Equal(t, 0, code, errOut)
	code, out, _ = run("limit", "set", "stripe", "--concurrency", "4")
	require.Equal(t, 0, code)
	assert.Contains(t, out, "limit stripe set: concurrency 4, rate 10/1s", "the rate set before is kept")

	for _, bad := range [][]string{
		{"limit", "set", "stripe"},
		{"limit", "set", "stripe", "--concurrency", "-1"},
		{"limit", "set", "stripe", "--rate", "10"},
		{"limit", "set", "stripe", "--rate", "10/500ms"},
		{"limit", "set", "--concurrency", "1"},
		{"limit", "set", "a", "b", "--concurrency", "1"},
		{"limit", "clear"},
		{"limit"},
		{"limit", "raise"},
	} {
		code, _, errOut := run(bad...)
		assert.Equal(t, 2, code, "%v: %s", bad, errOut)
	}

	code, out, _ = run("limit", "list", "--json")
	require.Equal(t, 0, code)
	var rows []limitRow
	require.NoError(t, json.Unmarshal([]byte(out), &rows))
	require.Len(t, rows, 2, "the bad values changed nothing: %s", out)
	assert.Equal(t, "emails.send", rows[0].Scope)
	assert.Equal(t, "acme", *rows[0].Key)
	assert.True(t, rows[0].Paused)
	assert.Equal(t, "stripe", rows[1].Scope)
	assert.Nil(t, rows[1].Key)
	assert.Equal(t, "concurrency 4, rate 10/1s", *rows[1].Override)

	code, out, _ = run("limit", "list")
	require.Equal(t, 0, code)
	assert.Contains(t, out, "SCOPE")
	assert.Contains(t, out, "paused (concurrency 0)")

	code, out, _ = run("limit", "clear", "emails.send", "--key", "acme")
	require.Equal(t, 0, code)
	assert.Contains(t, out, "limit emails.send key \"acme\" cleared")
	code, out, _ = run("limit", "clear", "emails.send", "--key", "acme")
	require.Equal(t, 0, code)
	assert.Equal(t, "limit emails.send key \"acme\" had no override\n", out)
}

// limit list joins what the running sidecars declare (their worker rows'
// metadata) with the overrides, and counts each declared scope's rows.
func TestLimitRowsJoinDeclaredCapsAndOverrides(t *testing.T) {
	four := 4
	workers := []backends.Worker{
		{Metadata: []byte(`{"limits":{"stripe":{"names":["stripe.charge"],"concurrency":10}}}`)},
		{Metadata: []byte(`{"limits":{"stripe":{"names":["stripe.charge","stripe.refund"],"concurrency":8}}}`)},
		{Metadata: []byte(`{}`)},
	}
	rows := limitRows([]backends.LimitOverride{{Scope: "stripe", Concurrency: &four}}, workers)
	require.Len(t, rows, 1)
	assert.Equal(t, []string{"concurrency 10", "concurrency 8"}, rows[0].Declared, "the sidecars disagree: both values")
	assert.Equal(t, "concurrency 4", *rows[0].Override)
	assert.Equal(t, []string{"stripe.charge", "stripe.refund"}, rows[0].names)
	rows = limitRows(nil, workers[:1])
	require.Len(t, rows, 1, "a declared scope without an override is listed")
	assert.Nil(t, rows[0].Override)
}

// limit list counts each declared scope's rows running, queued and
// deferred, lists its busiest keys (--keys of them) and gives an
// overridden key its own counts, as a table and as JSON.
func TestLimitListShowsTheBusiestKeysAndWhatIsDeferred(t *testing.T) {
	c := newCLI(t, nil)
	ctx := context.Background()
	b, err := sqlite.Open(ctx, filepath.Join(c.dir, "soniq.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	require.NoError(t, b.Migrate(ctx))
	worker := backends.NewID()
	require.NoError(t, b.RegisterWorker(ctx, backends.Worker{ID: worker, Hostname: "test", PID: 1,
		Metadata: []byte(`{"limits":{"emails.send":{"names":["emails.send"],"key":"args.tenant","concurrency":1}}}`)}))
	enqueue := func(args string) {
		t.Helper()
		code, _, errOut := c.run("enqueue", "emails.send", "--args", args)
		require.Equal(t, 0, code, errOut)
	}
	enqueue(`{"tenant":"a"}`)
	jobs, err := b.Claim(ctx, backends.ClaimParams{WorkerID: worker, Limit: 1})
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	for _, a := range []string{`{"tenant":"a"}`, `{"tenant":"a"}`, `{"tenant":"b"}`, `{"tenant":"b"}`, `{"tenant":"b"}`, `{"tenant":"c"}`, `{}`} {
		enqueue(a)
	}
	code, _, errOut := c.run("limit", "set", "emails.send", "--key", "c", "--concurrency", "0")
	require.Equal(t, 0, code, errOut)

	code, out, errOut := c.run("limit", "list", "--keys", "2", "--json")
	require.Equal(t, 0, code, errOut)
	var rows []limitRow
	require.NoError(t, json.Unmarshal([]byte(out), &rows), out)
	require.Len(t, rows, 2, out)
	scope, key := rows[0], rows[1]
	assert.Equal(t, "emails.send", scope.Scope)
	assert.Equal(t, [3]int64{1, 7, 2 + 1}, [3]int64{*scope.Running, *scope.Queued, *scope.Deferred},
		"a at its cap of 1: its 2 queued deferred; c paused: its 1")
	a, bb := "a", "b"
	assert.Equal(t, []limitKeyRow{{Key: &a, Running: 1, Queued: 2, Deferred: 2}, {Key: &bb, Queued: 3}}, scope.Busiest,
		"most running, then most queued: 2 of them")
	assert.Equal(t, "c", *key.Key)
	assert.Equal(t, [3]int64{0, 1, 1}, [3]int64{*key.Running, *key.Queued, *key.Deferred})

	code, out, errOut = c.run("limit", "list")
	require.Equal(t, 0, code, errOut)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 1+2+3, out)
	assert.Equal(t, []string{"SCOPE", "KEY", "DECLARED", "OVERRIDE", "RUNNING", "QUEUED", "DEFERRED"}, strings.Fields(lines[0]))
	assert.Equal(t, []string{"emails.send", "-", "concurrency", "1", "-", "1", "7", "3"}, strings.Fields(lines[1]))
	assert.Equal(t, []string{"emails.send", "c", "-", "paused", "(concurrency", "0)", "0", "1", "1"}, strings.Fields(lines[2]))
	assert.Equal(t, []string{"emails.send", "a", "-", "-", "1", "2", "2"}, strings.Fields(lines[3]), "the busiest keys follow")
	assert.Equal(t, []string{"emails.send", "b", "-", "-", "0", "3", "0"}, strings.Fields(lines[4]))
	assert.Equal(t, []string{"emails.send", "null", "-", "-", "0", "1", "0"}, strings.Fields(lines[5]),
		"c, listed above with its override, is not listed twice; the key null last")

	code, out, errOut = c.run("limit", "list", "--keys", "0", "--json")
	require.Equal(t, 0, code, errOut)
	rows = nil
	require.NoError(t, json.Unmarshal([]byte(out), &rows), out)
	assert.Empty(t, rows[0].Busiest)
	code, _, errOut = c.run("limit", "list", "--keys", "-1")
	assert.Equal(t, 2, code, errOut)
}

// --null-key names the key null for set and clear, apart from the scope
// and from the key ""; with --key it is refused with exit 2, changing
// nothing.
func TestLimitNullKeyCommands(t *testing.T) {
	c := newCLI(t, nil)
	for _, bad := range [][]string{
		{"limit", "set", "emails.send", "--null-key", "--key", "x", "--concurrency", "0"},
		{"limit", "clear", "emails.send", "--null-key", "--key", ""},
	} {
		code, _, errOut := c.run(bad...)
		assert.Equal(t, 2, code, "%v", bad)
		assert.Contains(t, errOut, "--key and --null-key name two different keys", "%v", bad)
	}
	code, out, errOut := c.run("limit", "set", "emails.send", "--null-key", "--concurrency", "0")
	require.Equal(t, 0, code, errOut)
	assert.Equal(t, "limit emails.send key null set: paused (concurrency 0); running sidecars apply it within one poll interval\n", out)
	code, _, errOut = c.run("limit", "set", "emails.send", "--key", "", "--concurrency", "2")
	require.Equal(t, 0, code, errOut)

	code, out, _ = c.run("limit", "list", "--json")
	require.Equal(t, 0, code)
	var rows []limitRow
	require.NoError(t, json.Unmarshal([]byte(out), &rows))
	require.Len(t, rows, 2, out)
	assert.True(t, rows[0].NullKey)
	assert.Nil(t, rows[0].Key)
	assert.True(t, rows[0].Paused)
	assert.Contains(t, out, `"null_key":true`)
	assert.False(t, rows[1].NullKey)
	assert.Equal(t, "", *rows[1].Key)
	code, out, _ = c.run("limit", "list")
	require.Equal(t, 0, code)
	assert.Regexp(t, `(?m)^emails\.send\s+null\s+-\s+paused \(concurrency 0\)`, out)

	code, out, _ = c.run("limit", "clear", "emails.send", "--null-key")
	require.Equal(t, 0, code)
	assert.Equal(t, "limit emails.send key null cleared: the manifests' caps hold again within one poll interval\n", out)
	code, out, _ = c.run("limit", "list", "--json")
	require.Equal(t, 0, code)
	rows = nil
	require.NoError(t, json.Unmarshal([]byte(out), &rows))
	require.Len(t, rows, 1, "the key \"\" is left: %s", out)
	assert.Equal(t, "", *rows[0].Key)
}
