package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
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
