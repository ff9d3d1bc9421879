package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
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
