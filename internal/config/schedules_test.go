package config

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const scheduleHandlers = `version: 1
handlers:
  - name: node
    command: [node, h.js]
    jobs:
      - {name: report.daily, cancellable: true}
`

func TestManifestSchedules(t *testing.T) {
	path := writeManifest(t, scheduleHandlers+`settings:
  scheduler: false
schedules:
  - name: report.daily
    cron: "0 6 * * 1-5"
    args: {region: eu, ids: [1, 2], nested: {x: 1.5}}
    queue: reports
    priority: 10
    max_attempts: 5
  - name: heartbeat.ping
    every: 30s
  - name: hourly
    every: 3600
`)
	m, err := LoadManifest(path)
	require.NoError(t, err)
	require.Len(t, m.Schedules, 3)
	r := m.Schedules[0]
	assert.Equal(t, "report.daily", r.Name)
	assert.Equal(t, "0 6 * * 1-5", r.Cron)
	assert.Zero(t, r.Every)
	assert.JSONEq(t, `{"region":"eu","ids":[1,2],"nested":{"x":1.5}}`, string(r.Args))
	assert.Equal(t, "reports", r.Queue)
	assert.Equal(t, 10, *r.Priority)
	assert.Equal(t, 5, *r.MaxAttempts)
	assert.Equal(t, 10, r.Line)
	p := m.Schedules[1]
	assert.Equal(t, 30*time.Second, p.Every)
	assert.Empty(t, p.Cron)
	assert.Nil(t, p.Args)
	assert.Nil(t, p.Priority)
	assert.Nil(t, p.MaxAttempts)
	assert.Equal(t, time.Hour, m.Schedules[2].Every)
	spec, err := ScheduleSpec(p)
	require.NoError(t, err)
	assert.Equal(t, "30", spec.Value)

	s, err := ResolveSettings(m, nil, SettingOverrides{})
	require.NoError(t, err)
	assert.False(t, s.Scheduler, "settings.scheduler: false")
	s, err = ResolveSettings(m, lookupFromMap(map[string]string{"SONIQ_SCHEDULER": "1"}), SettingOverrides{})
	require.NoError(t, err)
	assert.True(t, s.Scheduler, "SONIQ_SCHEDULER over the manifest")
	_, err = ResolveSettings(m, lookupFromMap(map[string]string{"SONIQ_SCHEDULER": "often"}), SettingOverrides{})
	var se *SettingError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, "SONIQ_SCHEDULER", se.Name)
}

func TestManifestScheduleErrorsNameFileLineAndField(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		line       int
		field, msg string
	}{
		{"bad cron", "  - name: a\n    cron: \"61 * * * *\"\n", 9, "schedules[0].cron", "invalid cron expression"},
		{"six fields", "  - name: a\n    cron: \"0 0 * * * *\"\n", 9, "schedules[0].cron", "want 5 fields"},
		{"cron not a string", "  - name: a\n    cron: 5\n", 9, "schedules[0].cron", "expected a string"},
		{"both", "  - name: a\n    every: 5s\n    cron: \"* * * * *\"\n", 10, "schedules[0].cron", "not both"},
		{"neither", "  - name: a\n    queue: q\n", 8, "schedules[0]", "every (an interval"},
		{"sub-second", "  - name: a\n    every: 1500ms\n", 9, "schedules[0].every", "whole number of seconds"},
		{"zero", "  - name: a\n    every: 0\n", 9, "schedules[0].every", "at least 1s"},
		{"no name", "  - every: 5s\n", 8, "schedules[0].name", "required"},
		{"duplicate", "  - {name: a, every: 5s}\n  - {name: a, every: 6s}\n", 9, "schedules[1].name", "declared twice"},
		{"args not a mapping", "  - name: a\n    every: 5s\n    args: [1]\n", 10, "schedules[0].args", "expected a mapping"},
		{"max_attempts", "  - name: a\n    every: 5s\n    max_attempts: 0\n", 10, "schedules[0].max_attempts", "at least 1"},
		{"unknown key", "  - name: a\n    every: 5s\n    timezone: UTC\n", 10, "schedules[0].timezone", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeManifest(t, scheduleHandlers+"schedules:\n"+tc.body)
			_, err := LoadManifest(path)
			var me *ManifestError
			require.True(t, errors.As(err, &me), "want a ManifestError, got %v", err)
			assert.Equal(t, path, me.File)
			assert.Equal(t, tc.line, me.Line, "%v", err)
			assert.Equal(t, tc.field, me.Field, "%v", err)
			assert.Contains(t, me.Msg, tc.msg)
		})
	}
}
