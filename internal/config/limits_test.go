package config

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestManifestLimits(t *testing.T) {
	path := writeManifest(t, `version: 1
limits:
  - {group: stripe, concurrency: 10, rate: 25/1s}
handlers:
  - name: app
    command: [python3, -m, app]
    jobs:
      - name: emails.send
        cancellable: true
        limit: {concurrency: 5, rate: 100/1m, key: args.tenant.id}
      - {name: stripe.charge, cancellable: false, limit: {group: stripe}}
      - {name: stripe.refund, cancellable: true, limit: {group: stripe}}
      - {name: plain, cancellable: true}
`)
	m, err := LoadManifest(path)
	require.NoError(t, err)
	require.Len(t, m.Limits, 1)
	assert.Equal(t, Limit{Scope: "stripe", Group: true, Concurrency: 10, Rate: &Rate{N: 25, Per: time.Second}, Line: 3}, m.Limits[0])
	jobs := m.Handlers[0].Jobs
	assert.Equal(t, &Limit{Scope: "emails.send", Concurrency: 5, Rate: &Rate{N: 100, Per: time.Minute}, Key: []string{"tenant", "id"}, Line: 10}, jobs[0].Limit)
	assert.Equal(t, "args.tenant.id", jobs[0].Limit.KeyString())
	assert.Equal(t, m.Limits[0], *jobs[1].Limit, "a group's jobs get its caps")
	assert.Equal(t, m.Limits[0], *jobs[2].Limit)
	assert.Nil(t, jobs[3].Limit)
}

func TestManifestLimitErrorsNameFileLineAndField(t *testing.T) {
	const head = "version: 1\n"
	const handler = "handlers:\n  - name: app\n    command: [python3, -m, app]\n    jobs:\n"
	for _, tc := range []struct {
		name, body string
		line       int
		field, msg string
	}{
		{"neither cap", handler + "      - {name: a, cancellable: true, limit: {key: args.t}}\n", 6, "handlers[0].jobs[0].limit", "needs a cap"},
		{"concurrency 0", handler + "      - {name: a, cancellable: true, limit: {concurrency: 0}}\n", 6, "handlers[0].jobs[0].limit.concurrency", "at least 1"},
		{"concurrency negative", handler + "      - {name: a, cancellable: true, limit: {concurrency: -2}}\n", 6, "handlers[0].jobs[0].limit.concurrency", "at least 1"},
		{"concurrency a string", handler + "      - {name: a, cancellable: true, limit: {concurrency: five}}\n", 6, "handlers[0].jobs[0].limit.concurrency", "expected an integer"},
		{"rate without a window", handler + "      - {name: a, cancellable: true, limit: {rate: 100}}\n", 6, "handlers[0].jobs[0].limit.rate", "not N/DURATION"},
		{"rate of 0", handler + "      - {name: a, cancellable: true, limit: {rate: 0/1s}}\n", 6, "handlers[0].jobs[0].limit.rate", "at least 1"},
		{"rate under 1s", handler + "      - {name: a, cancellable: true, limit: {rate: 10/500ms}}\n", 6, "handlers[0].jobs[0].limit.rate", "at least 1s"},
		{"rate window not a duration", handler + "      - {name: a, cancellable: true, limit: {rate: 10/fortnight}}\n", 6, "handlers[0].jobs[0].limit.rate", "not a duration"},
		{"key without args.", handler + "      - {name: a, cancellable: true, limit: {concurrency: 1, key: tenant_id}}\n", 6, "handlers[0].jobs[0].limit.key", "must be args."},
		{"key args. alone", handler + "      - {name: a, cancellable: true, limit: {concurrency: 1, key: args.}}\n", 6, "handlers[0].jobs[0].limit.key", "must be args."},
		{"key bad segment", handler + "      - {name: a, cancellable: true, limit: {concurrency: 1, key: \"args.a b\"}}\n", 6, "handlers[0].jobs[0].limit.key", "not a field name"},
		{"key empty segment", handler + "      - {name: a, cancellable: true, limit: {concurrency: 1, key: args.a..b}}\n", 6, "handlers[0].jobs[0].limit.key", "not a field name"},
		{"unknown field", handler + "      - {name: a, cancellable: true, limit: {concurrency: 1, burst: 3}}\n", 6, "handlers[0].jobs[0].limit.burst", ""},
		{"unknown group", handler + "      - {name: a, cancellable: true, limit: {group: nope}}\n", 6, "handlers[0].jobs[0].limit.group", `unknown limit group "nope"`},
		{"group and own caps", "limits:\n  - {group: g, concurrency: 1}\n" + handler + "      - {name: a, cancellable: true, limit: {group: g, concurrency: 2}}\n", 8, "handlers[0].jobs[0].limit.concurrency", "not both"},
		{"group declared twice", "limits:\n  - {group: g, concurrency: 1}\n  - {group: g, rate: 1/1s}\n" + handler + "      - {name: a, cancellable: true}\n", 4, "limits[1].group", "declared twice"},
		{"group without a name", "limits:\n  - {concurrency: 1}\n" + handler + "      - {name: a, cancellable: true}\n", 3, "limits[0].group", "required"},
		{"group without a cap", "limits:\n  - {group: g}\n" + handler + "      - {name: a, cancellable: true}\n", 3, "limits[0]", "needs a cap"},
		{"limits not a list", "limits: {group: g}\n" + handler + "      - {name: a, cancellable: true}\n", 2, "limits", "expected a list"},
		{"group named like a limited job", "limits:\n  - {group: a, concurrency: 1}\n" + handler + "      - {name: a, cancellable: true, limit: {concurrency: 2}}\n", 3, "limits", "rename the group"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeManifest(t, head+tc.body)
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

func TestParseRate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Rate
		err  string
	}{
		{"100/1m", Rate{N: 100, Per: time.Minute}, ""},
		{"25/1s", Rate{N: 25, Per: time.Second}, ""},
		{"25/s", Rate{N: 25, Per: time.Second}, ""},
		{"5/90s", Rate{N: 5, Per: 90 * time.Second}, ""},
		{"1/1h", Rate{N: 1, Per: time.Hour}, ""},
		{"1/1500ms", Rate{}, "whole seconds"},
		{"x/1s", Rate{}, "whole number"},
		{"", Rate{}, "not N/DURATION"},
	} {
		got, err := ParseRate(tc.in)
		if tc.err != "" {
			assert.ErrorContains(t, err, tc.err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, got, tc.in)
	}
}
