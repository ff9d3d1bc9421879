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
	RegisterFlags(fs, CommandRun)
	for _, sp := range settingTable {
		f := fs.Lookup(strings.TrimPrefix(sp.flag, "--"))
		if assert.NotNil(t, f, "setting %s has no flag", sp.key) {
			assert.Contains(t, f.Usage, sp.env, "the flag's help names the environment variable")
			if sp.engine() {
				assert.Contains(t, f.Usage, sp.key, "the flag's help names the manifest key")
			}
		}
	}
	assert.NotNil(t, fs.Lookup("queues"))
}

// The data commands take the database URL as a flag, and nothing else of
// the table.
func TestRegisterFlagsForTheDataCommands(t *testing.T) {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	RegisterFlags(fs, CommandData)
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	assert.Equal(t, []string{"database-url"}, names)
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
		{name: "claim ahead as a Go duration", args: []string{"--claim-ahead", "250ms"},
			want: func(s *Settings) { s.ClaimAhead = 250 * time.Millisecond }},
		{name: "claim ahead 0: only free slots, over the environment", args: []string{"--claim-ahead", "0"},
			env:  map[string]string{"SONIQ_CLAIM_AHEAD": "0.5"},
			want: func(s *Settings) { s.ClaimAhead = 0 }},
		{name: "a number of rows outranks the environment", args: []string{"--claim-ahead-max=64"},
			env:  map[string]string{"SONIQ_CLAIM_AHEAD_MAX": "9"},
			want: func(s *Settings) { s.ClaimAheadMax = 64 }},
		{name: "no rows names the flag", args: []string{"--claim-ahead-max", "0"},
			wantErr: `--claim-ahead-max="0": must be greater than zero`},
		{name: "negative rows name the flag", args: []string{"--claim-ahead-max", "-3"},
			wantErr: `--claim-ahead-max="-3": must not be negative`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("run", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			f := RegisterFlags(fs, CommandRun)
			require.NoError(t, fs.Parse(tt.args))
			s, err := ResolveSettings(nil, lookupFromMap(tt.env), f.Overrides())
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

func TestRegisterFlagsRejectsABadValue(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--result-ttl", "soon"}, `invalid value "soon" for flag -result-ttl: invalid duration "soon"`},
		{[]string{"--claim-ahead", "-1ms"}, `invalid value "-1ms" for flag -claim-ahead: duration "-1ms" must not be negative`},
		{[]string{"--claim-ahead-max", "lots"}, `invalid value "lots" for flag -claim-ahead-max: invalid number "lots" (want a whole number, like 500)`},
		{[]string{"--claim-ahead-max", "1.5"}, `invalid value "1.5" for flag -claim-ahead-max: invalid number "1.5"`},
		{[]string{"--claim-ahead-max", "1e3"}, `invalid value "1e3" for flag -claim-ahead-max: invalid number "1e3"`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			fs := flag.NewFlagSet("run", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			RegisterFlags(fs, CommandRun)
			err := fs.Parse(tt.args)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

// A setting's flag help says what kind of value it takes and where the
// value comes from when the flag is not given.
func TestFlagHelpNamesTheKindAndTheDefault(t *testing.T) {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	RegisterFlags(fs, CommandRun)
	tests := []struct {
		flag, wantName, wantEnd string
	}{
		{"claim-ahead", "duration", "; a duration like 90s or 1.5 (default $SONIQ_CLAIM_AHEAD, else the manifest's claim_ahead, else 100ms)"},
		{"claim-ahead-max", "number", "; a whole number (default $SONIQ_CLAIM_AHEAD_MAX, else the manifest's claim_ahead_max, else 500)"},
	}
	for _, tt := range tests {
		f := fs.Lookup(tt.flag)
		require.NotNil(t, f, tt.flag)
		name, usage := flag.UnquoteUsage(f)
		assert.Equal(t, tt.wantName, name, tt.flag)
		assert.True(t, strings.HasSuffix(usage, tt.wantEnd), "%s: %q", tt.flag, usage)
	}
}

// The command line's own settings: flag > environment > default, every
// duration taking a Go duration or a bare number of seconds on a flag and
// seconds in the environment.
func TestOptions(t *testing.T) {
	defaults := Options{DatabaseWait: 60 * time.Second, MetricsAddr: ":9464", LogFormat: "auto"}
	tests := []struct {
		name string
		cmd  Command
		args []string
		env  map[string]string
		want func(*Options)
	}{
		{name: "nothing given: the defaults", cmd: CommandRun, want: func(*Options) {}},
		{name: "--database-wait in bare seconds", cmd: CommandRun, args: []string{"--database-wait", "60"},
			want: func(o *Options) { o.DatabaseWait = 60 * time.Second }},
		{name: "--database-wait with a fraction", cmd: CommandRun, args: []string{"--database-wait=1.5"},
			want: func(o *Options) { o.DatabaseWait = 1500 * time.Millisecond }},
		{name: "--database-wait as a Go duration", cmd: CommandRun, args: []string{"--database-wait", "2m"},
			want: func(o *Options) { o.DatabaseWait = 2 * time.Minute }},
		{name: "--database-wait 0: no wait", cmd: CommandRun, args: []string{"--database-wait", "0"},
			want: func(o *Options) { o.DatabaseWait = 0 }},
		{name: "--metrics-final-scrape-wait in bare seconds", cmd: CommandRun, args: []string{"--metrics-final-scrape-wait", "20"},
			want: func(o *Options) { o.MetricsFinalScrapeWait = 20 * time.Second }},
		{name: "SONIQ_DATABASE_WAIT in seconds", cmd: CommandRun, env: map[string]string{"SONIQ_DATABASE_WAIT": "2.5"},
			want: func(o *Options) { o.DatabaseWait = 2500 * time.Millisecond }},
		{name: "SONIQ_METRICS_FINAL_SCRAPE_WAIT in seconds", cmd: CommandRun, env: map[string]string{"SONIQ_METRICS_FINAL_SCRAPE_WAIT": "5"},
			want: func(o *Options) { o.MetricsFinalScrapeWait = 5 * time.Second }},
		{name: "a flag outranks the environment", cmd: CommandRun, args: []string{"--database-wait", "3", "--instance", "b"},
			env:  map[string]string{"SONIQ_DATABASE_WAIT": "9", "SONIQ_INSTANCE": "a"},
			want: func(o *Options) { o.DatabaseWait = 3 * time.Second; o.Instance = "b" }},
		{name: "an empty variable counts as unset", cmd: CommandRun,
			env:  map[string]string{"SONIQ_DATABASE_WAIT": " ", "SONIQ_INSTANCE": "", "SONIQ_DATABASE_URL": ""},
			want: func(*Options) {}},
		{name: "text settings, trimmed", cmd: CommandRun,
			env: map[string]string{"SONIQ_DATABASE_URL": "postgres://db/x", "SONIQ_DATABASE_POOLER": " transaction ",
				"SONIQ_DATABASE_LISTEN_URL": "postgres://direct/x", "SONIQ_MANIFEST": "m.yaml", "SONIQ_INSTANCE": " pod-a "},
			want: func(o *Options) {
				o.DatabaseURL, o.DatabasePooler, o.ListenURL = "postgres://db/x", "transaction", "postgres://direct/x"
				o.Manifest, o.Instance = "m.yaml", "pod-a"
			}},
		{name: "run's connection flags", cmd: CommandRun,
			args: []string{"--database-url", "sqlite:x.db", "--database-pooler", "transaction", "--listen-url", "postgres://l/x"},
			env:  map[string]string{"SONIQ_DATABASE_POOLER": "session"},
			want: func(o *Options) {
				o.DatabaseURL, o.DatabasePooler, o.ListenURL = "sqlite:x.db", "transaction", "postgres://l/x"
			}},
		{name: "an empty --database-url is not given", cmd: CommandRun, args: []string{"--database-url", ""},
			env:  map[string]string{"SONIQ_DATABASE_URL": "sqlite:env.db"},
			want: func(o *Options) { o.DatabaseURL = "sqlite:env.db" }},
		{name: "an empty --metrics-addr turns the server off", cmd: CommandRun, args: []string{"--metrics-addr", ""},
			want: func(o *Options) { o.MetricsAddr = "" }},
		{name: "boolean flags", cmd: CommandRun, args: []string{"--once", "--dead-letter-unknown=true", "--log-format", "json"},
			want: func(o *Options) { o.Once, o.DeadLetterUnknown, o.LogFormat = true, true, "json" }},
		{name: "the data commands read the database settings only", cmd: CommandData, args: []string{"--database-url", "sqlite:d.db"},
			env: map[string]string{"SONIQ_DATABASE_POOLER": "transaction", "SONIQ_DATABASE_WAIT": "not read", "SONIQ_INSTANCE": "not read"},
			want: func(o *Options) {
				*o = Options{DatabaseURL: "sqlite:d.db", DatabasePooler: "transaction"}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("cmd", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			f := RegisterFlags(fs, tt.cmd)
			require.NoError(t, fs.Parse(tt.args))
			got, err := f.Options(lookupFromMap(tt.env))
			require.NoError(t, err)
			want := defaults
			tt.want(&want)
			assert.Equal(t, want, got)
		})
	}
}

// A bad value names the flag (refused as the flag set parses) or the
// variable (a *SettingError), with what was wrong.
func TestOptionsErrors(t *testing.T) {
	flagTests := []struct {
		args []string
		want string
	}{
		{[]string{"--database-wait", "soon"}, `invalid value "soon" for flag -database-wait: invalid duration "soon"`},
		{[]string{"--database-wait", "-1"}, `invalid value "-1" for flag -database-wait: duration "-1" must not be negative`},
		{[]string{"--metrics-final-scrape-wait", "-5s"}, `invalid value "-5s" for flag -metrics-final-scrape-wait: duration "-5s" must not be negative`},
		{[]string{"--once=maybe"}, `invalid boolean value "maybe" for -once`},
	}
	for _, tt := range flagTests {
		fs := flag.NewFlagSet("run", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		RegisterFlags(fs, CommandRun)
		err := fs.Parse(tt.args)
		require.Error(t, err, "%v", tt.args)
		assert.Contains(t, err.Error(), tt.want)
	}

	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	f := RegisterFlags(fs, CommandRun)
	require.NoError(t, fs.Parse(nil))
	_, err := f.Options(lookupFromMap(map[string]string{
		"SONIQ_DATABASE_WAIT":             "60s",
		"SONIQ_METRICS_FINAL_SCRAPE_WAIT": "-1",
	}))
	require.Error(t, err)
	assert.Equal(t, `SONIQ_DATABASE_WAIT="60s": invalid duration: want a number of seconds, like 30 or 0.5`+"\n"+
		`SONIQ_METRICS_FINAL_SCRAPE_WAIT="-1": duration "-1" must not be negative`, err.Error())
	var se *SettingError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, "SONIQ_DATABASE_WAIT", se.Name)
}

// Every duration flag of the table takes a bare number of seconds, and a
// Go duration, to the same value.
func TestEveryDurationFlagTakesBareSeconds(t *testing.T) {
	for _, sp := range settingTable {
		if sp.kind != kindDuration || sp.flag == "" {
			continue
		}
		for _, form := range []string{"90", "90s", "1m30s", "90.0"} {
			t.Run(sp.flag+"="+form, func(t *testing.T) {
				fs := flag.NewFlagSet("run", flag.ContinueOnError)
				fs.SetOutput(io.Discard)
				f := RegisterFlags(fs, CommandRun)
				require.NoError(t, fs.Parse([]string{sp.flag, form}))
				var got time.Duration
				if sp.engine() {
					o := f.Overrides()
					got = **sp.override(&o)
				} else {
					o, err := f.Options(nil)
					require.NoError(t, err)
					got = *sp.option(&o).(*time.Duration)
				}
				assert.Equal(t, 90*time.Second, got)
			})
		}
	}
}

// Every number flag of the table takes a whole number, spaces around it
// trimmed.
func TestEveryNumberFlagTakesAWholeNumber(t *testing.T) {
	var n int
	for _, sp := range settingTable {
		if sp.kind != kindInt {
			continue
		}
		n++
		for _, form := range []string{"64", " 64 ", "+64", "064"} {
			t.Run(sp.flag+"="+form, func(t *testing.T) {
				fs := flag.NewFlagSet("run", flag.ContinueOnError)
				fs.SetOutput(io.Discard)
				f := RegisterFlags(fs, CommandRun)
				require.NoError(t, fs.Parse([]string{sp.flag, form}))
				o := f.Overrides()
				require.NotNil(t, *sp.intOverride(&o))
				assert.Equal(t, 64, **sp.intOverride(&o))
			})
		}
	}
	assert.NotZero(t, n, "the table has no number setting")
}
