package config

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every setting of the table is a flag, and a flag outranks the
// environment and the manifest.
func TestRegisterFlagsCoversEverySetting(t *testing.T) {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	RegisterFlags(fs)
	for _, sp := range settingTable {
		f := fs.Lookup(strings.TrimPrefix(sp.flag, "--"))
		if assert.NotNil(t, f, "setting %s has no flag", sp.key) {
			assert.Contains(t, f.Usage, sp.env, "the flag's help names the environment variable")
			assert.Contains(t, f.Usage, sp.key, "the flag's help names the manifest key")
		}
	}
	assert.NotNil(t, fs.Lookup("queues"))
}

func TestRegisterFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    func(*Settings)
		wantErr string
	}{
		{name: "none given: the defaults", want: func(*Settings) {}},
		{name: "a Go duration", args: []string{"--shutdown-timeout", "90s"},
			want: func(s *Settings) { s.ShutdownTimeout = 90 * time.Second }},
		{name: "seconds, fractions allowed", args: []string{"--poll-interval=1.5"},
			want: func(s *Settings) { s.PollInterval = 1500 * time.Millisecond }},
		{name: "the flag outranks the environment", args: []string{"--job-timeout", "7s"},
			env:  map[string]string{"SONIQ_JOB_TIMEOUT": "42"},
			want: func(s *Settings) { s.JobTimeout = 7 * time.Second; s.SyncHandlerGrace = 7 * time.Second }},
		{name: "queues", args: []string{"--queues", "a, b"},
			want: func(s *Settings) { s.Queues = []string{"a", "b"} }},
		{name: "a zero that is not allowed names the flag", args: []string{"--poll-interval", "0"},
			wantErr: `--poll-interval="0s": must be greater than zero`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("run", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			o := RegisterFlags(fs)
			require.NoError(t, fs.Parse(tt.args))
			s, err := ResolveSettings(nil, lookupFromMap(tt.env), *o)
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				return
			}
			require.NoError(t, err)
			want := DefaultSettings()
			tt.want(&want)
			assert.Equal(t, want, s)
		})
	}
}

func TestRegisterFlagsRejectsABadDuration(t *testing.T) {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	RegisterFlags(fs)
	err := fs.Parse([]string{"--result-ttl", "soon"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "result-ttl")
}
