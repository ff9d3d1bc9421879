package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every duration of `run` takes a bare number of seconds as well as a Go
// duration, on the command line and (seconds) in the environment: these
// get past the settings to the manifest, which is missing. A bad value is
// a usage error naming the flag or the variable.
func TestRunDurationsTakeBareSeconds(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"--database-wait in seconds", []string{"--database-wait", "60"}, nil, "cannot read manifest"},
		{"--database-wait as a duration", []string{"--database-wait", "60s"}, nil, "cannot read manifest"},
		{"--metrics-final-scrape-wait in seconds", []string{"--metrics-final-scrape-wait", "20"}, nil, "cannot read manifest"},
		{"an engine setting in seconds", []string{"--shutdown-timeout", "45"}, nil, "cannot read manifest"},
		{"--claim-ahead in seconds", []string{"--claim-ahead", "0.05"}, nil, "cannot read manifest"},
		{"--claim-ahead 0", []string{"--claim-ahead", "0"}, nil, "cannot read manifest"},
		{"SONIQ_DATABASE_WAIT in seconds", nil, map[string]string{"SONIQ_DATABASE_WAIT": "1.5"}, "cannot read manifest"},
		{"--database-wait not a duration", []string{"--database-wait", "soon"}, nil,
			`run: invalid value "soon" for flag -database-wait: invalid duration "soon"`},
		{"SONIQ_DATABASE_WAIT as a Go duration", nil, map[string]string{"SONIQ_DATABASE_WAIT": "60s"},
			`SONIQ_DATABASE_WAIT="60s": invalid duration: want a number of seconds`},
		{"SONIQ_METRICS_FINAL_SCRAPE_WAIT negative", nil, map[string]string{"SONIQ_METRICS_FINAL_SCRAPE_WAIT": "-1"},
			`SONIQ_METRICS_FINAL_SCRAPE_WAIT="-1": duration "-1" must not be negative`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCLI(t, tt.env)
			args := append([]string{"run", "--manifest", "missing.yaml", "--metrics-addr", ""}, tt.args...)
			code, _, errOut := c.run(args...)
			assert.Equal(t, exitUsage, code, errOut)
			assert.Contains(t, errOut, tt.want)
		})
	}
}

// The instance name comes from --instance, else SONIQ_INSTANCE, and is
// checked whichever gave it.
func TestRunChecksTheInstanceName(t *testing.T) {
	for _, tt := range []struct {
		name string
		args []string
		env  map[string]string
	}{
		{"flag", []string{"--instance", "a b"}, nil},
		{"environment", nil, map[string]string{"SONIQ_INSTANCE": "a/b"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newCLI(t, tt.env)
			code, _, errOut := c.run(append([]string{"run", "--manifest", "missing.yaml", "--metrics-addr", ""}, tt.args...)...)
			assert.Equal(t, exitUsage, code, errOut)
			assert.Contains(t, errOut, "--instance / SONIQ_INSTANCE: instance name")
		})
	}
}

// claim_ahead_max is a number of rows, > 0, from any layer; a bad one is a
// usage error naming the flag, the variable, or the manifest's file, line
// and field, before the database is touched.
func TestRunChecksClaimAheadMax(t *testing.T) {
	const manifest = `version: 1
settings:
  claim_ahead_max: %s
handlers:
  - name: py
    command: [python3, -m, app]
    jobs:
      - {name: app.one, cancellable: true}
`
	tests := []struct {
		name   string
		inFile string
		args   []string
		env    map[string]string
		want   string
	}{
		{name: "the flag, not a number", inFile: "5", args: []string{"--claim-ahead-max", "lots"},
			want: `run: invalid value "lots" for flag -claim-ahead-max: invalid number "lots" (want a whole number, like 500)`},
		{name: "the flag, no rows", inFile: "5", args: []string{"--claim-ahead-max", "0"},
			want: `--claim-ahead-max="0": must be greater than zero`},
		{name: "the environment, negative", inFile: "5", env: map[string]string{"SONIQ_CLAIM_AHEAD_MAX": "-1"},
			want: `SONIQ_CLAIM_AHEAD_MAX="-1": must not be negative`},
		{name: "the manifest, no rows", inFile: "0",
			want: `m.yaml:3: settings.claim_ahead_max: must be greater than zero, got 0`},
		{name: "the manifest, a string", inFile: `"500"`,
			want: `m.yaml:3: settings.claim_ahead_max: expected an integer, got string "500"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCLI(t, tt.env)
			require.NoError(t, os.WriteFile(filepath.Join(c.dir, "m.yaml"), []byte(fmt.Sprintf(manifest, tt.inFile)), 0o600))
			args := append([]string{"run", "--manifest", "m.yaml", "--metrics-addr", "", "--database-url", "sqlite:db.sqlite"}, tt.args...)
			code, _, errOut := c.run(args...)
			assert.Equal(t, exitUsage, code, errOut)
			assert.Contains(t, errOut, tt.want)
			assert.NoFileExists(t, filepath.Join(c.dir, "db.sqlite"), "refused before the database is created")
		})
	}
}
