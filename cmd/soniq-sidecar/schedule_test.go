package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestScheduleAddOptions(t *testing.T) {
	now := time.Date(2026, 5, 1, 10, 0, 30, 0, time.UTC)
	for _, tc := range []struct {
		name, every, cron, args, queue string
		maxAttempts                    int
		wantType, wantValue, err       string
		wantNext                       time.Time
	}{
		{name: "a", every: "90s", args: "{}", queue: "q", maxAttempts: 3, wantType: "interval", wantValue: "90", wantNext: now.Add(90 * time.Second)},
		{name: "a", every: "2", args: "{}", queue: "q", maxAttempts: 3, wantType: "interval", wantValue: "2", wantNext: now.Add(2 * time.Second)},
		{name: " a ", cron: "*/15 * * * *", args: `{"x":1}`, queue: "q", maxAttempts: 1, wantType: "cron", wantValue: "*/15 * * * *",
			wantNext: time.Date(2026, 5, 1, 10, 15, 0, 0, time.UTC)},
		{name: "a", args: "{}", queue: "q", maxAttempts: 3, err: "give --every DUR or --cron EXPR"},
		{name: "a", every: "1s", cron: "* * * * *", args: "{}", queue: "q", maxAttempts: 3, err: "not both"},
		{name: "a", every: "0.5", args: "{}", queue: "q", maxAttempts: 3, err: `--every "0.5": interval 500ms must be at least 1s`},
		{name: "a", every: "soon", args: "{}", queue: "q", maxAttempts: 3, err: `--every "soon"`},
		{name: "a", cron: "* * *", args: "{}", queue: "q", maxAttempts: 3, err: "--cron: invalid cron expression"},
		{name: "a", every: "1s", args: "[1]", queue: "q", maxAttempts: 3, err: "--args must be a JSON object"},
		{name: "a", every: "1s", args: "{}", queue: "q", maxAttempts: 0, err: "--max-attempts must be at least 1"},
		{name: "a", every: "1s", args: "{}", queue: " ", maxAttempts: 3, err: "--queue must not be empty"},
		{name: "a b", every: "1s", args: "{}", queue: "q", maxAttempts: 3, err: "must not contain spaces"},
	} {
		p, err := scheduleParams(tc.name, tc.every, tc.cron, tc.args, tc.queue, 5, tc.maxAttempts, now)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, "%+v", tc)
			continue
		}
		require.NoError(t, err, "%+v", tc)
		assert.Equal(t, "a", p.Name)
		assert.Equal(t, tc.wantType, p.Type)
		assert.Equal(t, tc.wantValue, p.Value)
		assert.Equal(t, tc.wantNext, p.NextRun)
		assert.Equal(t, 5, *p.Priority)
		assert.Equal(t, tc.maxAttempts, *p.MaxAttempts)
	}
}

// The schedule commands on a SQLite file: exit codes and output.
func TestScheduleCommands(t *testing.T) {
	c := newCLI(t, nil)
	run := c.run
	code, out, errOut := run("schedule", "add", "tick", "--every", "30s")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "schedule tick added: every 30s, status active, next run ")
	code, out, _ = run("schedule", "add", "tick", "--every", "30s", "--queue", "other")
	require.Equal(t, 0, code)
	assert.Contains(t, out, "schedule tick updated")
	code, out, _ = run("schedule", "pause", "tick")
	require.Equal(t, 0, code)
	assert.Equal(t, "schedule tick paused\n", out)
	code, out, _ = run("schedule", "list")
	require.Equal(t, 0, code)
	assert.Regexp(t, `(?m)^tick +every 30s +paused +\S+ +- +0 +other$`, out)
	code, out, _ = run("schedule", "list", "--json")
	require.Equal(t, 0, code)
	assert.Contains(t, out, `"job_name":"tick"`)
	assert.Contains(t, out, `"status":"paused"`)
	code, _, _ = run("schedule", "resume", "tick")
	require.Equal(t, 0, code)
	code, _, errOut = run("schedule", "remove", "nope")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, `no schedule named "nope"`)
	code, _, _ = run("schedule", "remove", "tick")
	require.Equal(t, 0, code)
	code, out, _ = run("schedule", "list", "--json")
	require.Equal(t, 0, code)
	assert.Equal(t, "[]\n", out)
	for _, bad := range [][]string{{"schedule"}, {"schedule", "frobnicate"}, {"schedule", "pause"}, {"schedule", "list", "x"},
		{"schedule", "add", "x", "--cron", "bad"}} {
		code, _, _ := run(bad...)
		assert.Equal(t, 2, code, "%v", bad)
	}
}
