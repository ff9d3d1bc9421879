package config

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func lookupFromMap(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

func TestDefaultSettings(t *testing.T) {
	assert.Equal(t, Settings{
		ShutdownTimeout:      30 * time.Second,
		ShutdownWriteTimeout: 5 * time.Second,
		ClaimAhead:           100 * time.Millisecond,
		ClaimAheadMax:        500,
		MaxChildrenPerJob:    1000,
		SyncHandlerGrace:     300 * time.Second,
		JobTimeout:           300 * time.Second,
		HeartbeatInterval:    5 * time.Second,
		HeartbeatTimeout:     300 * time.Second,
		CleanupInterval:      300 * time.Second,
		AuditInterval:        60 * time.Second,
		PollInterval:         5 * time.Second,
		ResultTTL:            300 * time.Second,
		Scheduler:            true,
	}, DefaultSettings())

	s, err := ResolveSettings(nil, nil, SettingOverrides{})
	require.NoError(t, err)
	assert.Equal(t, DefaultSettings(), s, "no manifest, environment or flags: the defaults")
}

func TestResolveSettingsPrecedence(t *testing.T) {
	m, err := LoadManifest(filepath.Join(manifestDir, "good", "full.yaml"))
	require.NoError(t, err)
	env := map[string]string{
		"SONIQ_JOB_TIMEOUT":       "90",
		"SONIQ_POLL_INTERVAL":     "0.25",
		"SONIQ_SHUTDOWN_TIMEOUT":  "12.5",
		"SONIQ_QUEUES":            " urgent , default,,",
		"SONIQ_CLAIM_AHEAD":       "0.025",
		"SONIQ_CLAIM_AHEAD_MAX":   " 300 ",
		"SONIQ_CLEANUP_INTERVAL":  "",
		"SONIQ_UNRELATED_SETTING": "x",
		"SONIQ_SCHEDULER":         "false",
	}
	tests := []struct {
		name  string
		m     *Manifest
		env   map[string]string
		flags SettingOverrides
		want  Settings
	}{
		{
			name: "manifest over default",
			m:    m,
			want: Settings{
				ShutdownTimeout: 45 * time.Second, ShutdownWriteTimeout: 5 * time.Second, SyncHandlerGrace: 10 * time.Second, SyncGraceSet: true,
				JobTimeout: 2 * time.Minute, HeartbeatInterval: 2500 * time.Millisecond, HeartbeatTimeout: time.Minute,
				CleanupInterval: time.Minute, AuditInterval: time.Minute, PollInterval: 500 * time.Millisecond, ResultTTL: 0,
				ClaimAhead: 50 * time.Millisecond, ClaimAheadMax: 200, MaxChildrenPerJob: 1000,
				Queues: []string{"billing", "default"}, Scheduler: true,
			},
		},
		{
			name: "environment over manifest; empty variables count as unset",
			m:    m,
			env:  env,
			want: Settings{
				ShutdownTimeout: 12500 * time.Millisecond, ShutdownWriteTimeout: 5 * time.Second, SyncHandlerGrace: 10 * time.Second, SyncGraceSet: true,
				JobTimeout: 90 * time.Second, HeartbeatInterval: 2500 * time.Millisecond, HeartbeatTimeout: time.Minute,
				CleanupInterval: time.Minute, AuditInterval: time.Minute, PollInterval: 250 * time.Millisecond, ResultTTL: 0,
				ClaimAhead: 25 * time.Millisecond, ClaimAheadMax: 300, MaxChildrenPerJob: 1000,
				Queues: []string{"urgent", "default"},
			},
		},
		{
			name: "flags over environment",
			m:    m,
			env:  env,
			flags: SettingOverrides{
				Queues:          manifestPtr("critical"),
				JobTimeout:      manifestPtr(time.Duration(0)),
				ShutdownTimeout: manifestPtr(3 * time.Second),
				ClaimAhead:      manifestPtr(time.Duration(0)),
				ClaimAheadMax:   manifestPtr(1000),
				Scheduler:       manifestPtr(true),
			},
			want: Settings{
				ShutdownTimeout: 3 * time.Second, ShutdownWriteTimeout: 5 * time.Second, SyncHandlerGrace: 10 * time.Second, SyncGraceSet: true,
				JobTimeout: 0, HeartbeatInterval: 2500 * time.Millisecond, HeartbeatTimeout: time.Minute,
				CleanupInterval: time.Minute, AuditInterval: time.Minute, PollInterval: 250 * time.Millisecond, ResultTTL: 0,
				ClaimAhead: 0, ClaimAheadMax: 1000, MaxChildrenPerJob: 1000,
				Queues: []string{"critical"}, Scheduler: true,
			},
		},
		{
			name:  "an empty --queues leaves the lower layers",
			env:   map[string]string{"SONIQ_QUEUES": "a,b"},
			flags: SettingOverrides{Queues: manifestPtr(" ")},
			want: func() Settings {
				s := DefaultSettings()
				s.Queues = []string{"a", "b"}
				return s
			}(),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ResolveSettings(tt.m, lookupFromMap(tt.env), tt.flags)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

// claim_ahead and claim_ahead_max: flag > environment > manifest >
// default, each layer alone over the ones below it; claim_ahead takes 0
// (only free slots) in every layer.
func TestResolveSettingsClaimAhead(t *testing.T) {
	manifest := &Manifest{Settings: ManifestSettings{
		ClaimAhead: manifestPtr(time.Duration(0)), ClaimAheadMax: manifestPtr(200),
		Where: map[string]string{"claim_ahead": "m.yaml:3", "claim_ahead_max": "m.yaml:4"},
	}}
	tests := []struct {
		name    string
		m       *Manifest
		env     map[string]string
		flags   SettingOverrides
		wantFor time.Duration
		wantMax int
	}{
		{name: "the defaults", wantFor: 100 * time.Millisecond, wantMax: 500},
		{name: "the manifest", m: manifest, wantFor: 0, wantMax: 200},
		{name: "the environment over the manifest", m: manifest,
			env:     map[string]string{"SONIQ_CLAIM_AHEAD": "1.5", "SONIQ_CLAIM_AHEAD_MAX": "7"},
			wantFor: 1500 * time.Millisecond, wantMax: 7},
		{name: "0 from the environment", env: map[string]string{"SONIQ_CLAIM_AHEAD": "0"}, wantFor: 0, wantMax: 500},
		{name: "flags over the environment", m: manifest,
			env:     map[string]string{"SONIQ_CLAIM_AHEAD": "1.5", "SONIQ_CLAIM_AHEAD_MAX": "7"},
			flags:   SettingOverrides{ClaimAhead: manifestPtr(20 * time.Millisecond), ClaimAheadMax: manifestPtr(1)},
			wantFor: 20 * time.Millisecond, wantMax: 1},
		{name: "an empty variable counts as unset", m: manifest,
			env:     map[string]string{"SONIQ_CLAIM_AHEAD": " ", "SONIQ_CLAIM_AHEAD_MAX": ""},
			wantFor: 0, wantMax: 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := ResolveSettings(tt.m, lookupFromMap(tt.env), tt.flags)
			require.NoError(t, err)
			assert.Equal(t, tt.wantFor, s.ClaimAhead)
			assert.Equal(t, tt.wantMax, s.ClaimAheadMax)
		})
	}
}

func TestResolveSettingsSyncGrace(t *testing.T) {
	tests := []struct {
		name      string
		env       map[string]string
		flags     SettingOverrides
		wantGrace time.Duration
		wantSet   bool
	}{
		{"defaults to the default job timeout", nil, SettingOverrides{}, 300 * time.Second, false},
		{"follows a resolved job timeout", map[string]string{"SONIQ_JOB_TIMEOUT": "42"}, SettingOverrides{}, 42 * time.Second, false},
		{"no job timeout means no extra grace", map[string]string{"SONIQ_JOB_TIMEOUT": "0"}, SettingOverrides{}, 0, false},
		{"explicit grace wins", map[string]string{"SONIQ_JOB_TIMEOUT": "42", "SONIQ_SYNC_HANDLER_GRACE_SECONDS": "7"}, SettingOverrides{}, 7 * time.Second, true},
		{"explicit zero grace", map[string]string{"SONIQ_SYNC_HANDLER_GRACE_SECONDS": "0"}, SettingOverrides{}, 0, true},
		{"flag grace", nil, SettingOverrides{SyncHandlerGrace: manifestPtr(time.Second)}, time.Second, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := ResolveSettings(nil, lookupFromMap(tt.env), tt.flags)
			require.NoError(t, err)
			assert.Equal(t, tt.wantGrace, s.SyncHandlerGrace)
			assert.Equal(t, tt.wantSet, s.SyncGraceSet)
		})
	}
}

// settingErrors flattens joined errors into SettingErrors.
func settingErrors(t *testing.T, err error) []*SettingError {
	t.Helper()
	var out []*SettingError
	j, ok := err.(interface{ Unwrap() []error })
	require.True(t, ok, "want joined errors, got %T", err)
	for _, e := range j.Unwrap() {
		var se *SettingError
		require.True(t, errors.As(e, &se), "%v is %T", e, e)
		out = append(out, se)
	}
	return out
}

func TestResolveSettingsErrors(t *testing.T) {
	tests := []struct {
		name  string
		env   map[string]string
		flags SettingOverrides
		want  []string // exact Error() of each reported error, in order
	}{
		{
			name: "not a number",
			env:  map[string]string{"SONIQ_JOB_TIMEOUT": "5m"},
			want: []string{`SONIQ_JOB_TIMEOUT="5m": invalid duration: want a number of seconds, like 30 or 0.5`},
		},
		{
			name: "negative",
			env:  map[string]string{"SONIQ_RESULT_TTL": "-1"},
			want: []string{`SONIQ_RESULT_TTL="-1": duration "-1" must not be negative`},
		},
		{
			name: "zero where a period is needed",
			env:  map[string]string{"SONIQ_POLL_INTERVAL": "0"},
			want: []string{`SONIQ_POLL_INTERVAL="0": must be greater than zero`},
		},
		{
			name: "a number of rows that is not a number",
			env:  map[string]string{"SONIQ_CLAIM_AHEAD_MAX": "lots"},
			want: []string{`SONIQ_CLAIM_AHEAD_MAX="lots": invalid number "lots" (want a whole number, like 500)`},
		},
		{
			name: "a number of rows with a fraction",
			env:  map[string]string{"SONIQ_CLAIM_AHEAD_MAX": "2.5"},
			want: []string{`SONIQ_CLAIM_AHEAD_MAX="2.5": invalid number "2.5" (want a whole number, like 500)`},
		},
		{
			name: "no rows",
			env:  map[string]string{"SONIQ_CLAIM_AHEAD_MAX": "0"},
			want: []string{`SONIQ_CLAIM_AHEAD_MAX="0": must be greater than zero`},
		},
		{
			name: "negative rows",
			env:  map[string]string{"SONIQ_CLAIM_AHEAD_MAX": "-5"},
			want: []string{`SONIQ_CLAIM_AHEAD_MAX="-5": must not be negative`},
		},
		{
			name: "too many rows",
			env:  map[string]string{"SONIQ_CLAIM_AHEAD_MAX": "99999999999999999999"},
			want: []string{`SONIQ_CLAIM_AHEAD_MAX="99999999999999999999": number "99999999999999999999" is too large`},
		},
		{
			name: "a negative claim_ahead",
			env:  map[string]string{"SONIQ_CLAIM_AHEAD": "-0.1"},
			want: []string{`SONIQ_CLAIM_AHEAD="-0.1": duration "-0.1" must not be negative`},
		},
		{
			name: "claim_ahead as a Go duration, which the environment does not take",
			env:  map[string]string{"SONIQ_CLAIM_AHEAD": "100ms"},
			want: []string{`SONIQ_CLAIM_AHEAD="100ms": invalid duration: want a number of seconds, like 30 or 0.5`},
		},
		{
			name:  "bad claim-ahead flags",
			flags: SettingOverrides{ClaimAhead: manifestPtr(-time.Millisecond), ClaimAheadMax: manifestPtr(0)},
			want: []string{
				`--claim-ahead="-1ms": must not be negative`,
				`--claim-ahead-max="0": must be greater than zero`,
			},
		},
		{
			name:  "negative rows on a flag",
			flags: SettingOverrides{ClaimAheadMax: manifestPtr(-1)},
			want:  []string{`--claim-ahead-max="-1": must not be negative`},
		},
		{
			name: "every bad variable at once",
			env: map[string]string{
				"SONIQ_SHUTDOWN_TIMEOUT":   "soon",
				"SONIQ_HEARTBEAT_INTERVAL": "nan",
				"SONIQ_QUEUES":             "a,b c",
			},
			want: []string{
				`SONIQ_SHUTDOWN_TIMEOUT="soon": invalid duration: want a number of seconds, like 30 or 0.5`,
				`SONIQ_HEARTBEAT_INTERVAL="nan": invalid duration "nan"`,
				`SONIQ_QUEUES="a,b c": queue name "b c" must not contain commas or spaces`,
			},
		},
		{
			name:  "bad flags",
			flags: SettingOverrides{ShutdownTimeout: manifestPtr(time.Duration(0)), ResultTTL: manifestPtr(-time.Second)},
			want: []string{
				`--shutdown-timeout="0s": must be greater than zero`,
				`--result-ttl="-1s": must not be negative`,
			},
		},
		{
			name: "heartbeat timeout under two beats",
			env:  map[string]string{"SONIQ_HEARTBEAT_INTERVAL": "10", "SONIQ_HEARTBEAT_TIMEOUT": "15", AllowShortHeartbeatEnv: "true"},
			want: []string{`heartbeat_timeout="15s": (from SONIQ_HEARTBEAT_TIMEOUT) must be at least 2 × heartbeat_interval 10s ` +
				`(from SONIQ_HEARTBEAT_INTERVAL), or a live worker whose beat is late once would be recovered as stale and its jobs run twice`},
		},
		{
			name: "heartbeat timeout under Soniq's floor",
			env:  map[string]string{"SONIQ_HEARTBEAT_INTERVAL": "1", "SONIQ_HEARTBEAT_TIMEOUT": "10"},
			want: []string{`heartbeat_timeout="10s": (from SONIQ_HEARTBEAT_TIMEOUT) must be at least 1m0s: Soniq workers refuse less ` +
				`and may beat only every 1m0s, so a shorter timeout recovers live Soniq workers' jobs ` +
				`(set SONIQ_ALLOW_SHORT_HEARTBEAT_TIMEOUT=true only if no Soniq worker ever uses this database)`},
		},
		{
			name: "heartbeat interval a Soniq leader could miss",
			env:  map[string]string{"SONIQ_HEARTBEAT_INTERVAL": "45", "SONIQ_HEARTBEAT_TIMEOUT": "600"},
			want: []string{`heartbeat_interval="45s": (from SONIQ_HEARTBEAT_INTERVAL) must be at most 30s: a Soniq worker may recover ` +
				`workers silent for 1m0s, and this sidecar must beat at least 2 times in that window`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := ResolveSettings(nil, lookupFromMap(tt.env), tt.flags)
			require.Error(t, err)
			assert.Equal(t, Settings{}, s)
			var got []string
			for _, se := range settingErrors(t, err) {
				got = append(got, se.Error())
			}
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestResolveSettingsCrossFieldNamesManifest(t *testing.T) {
	m := &Manifest{Settings: ManifestSettings{
		HeartbeatTimeout: manifestPtr(3 * time.Second),
		Where:            map[string]string{"heartbeat_timeout": "m.yaml:4"},
	}}
	_, err := ResolveSettings(m, nil, SettingOverrides{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "(from manifest m.yaml:4) must be at least 2 × heartbeat_interval 5s (from the default)")
}

func TestResolveSettingsHeartbeatAccepted(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want [2]time.Duration // interval, timeout
	}{
		{"Soniq's defaults", nil, [2]time.Duration{5 * time.Second, 300 * time.Second}},
		{"Soniq's floor", map[string]string{"SONIQ_HEARTBEAT_TIMEOUT": "60"}, [2]time.Duration{5 * time.Second, time.Minute}},
		{"longest interval", map[string]string{"SONIQ_HEARTBEAT_INTERVAL": "30", "SONIQ_HEARTBEAT_TIMEOUT": "60"}, [2]time.Duration{30 * time.Second, time.Minute}},
		{"short, sidecars only", map[string]string{"SONIQ_HEARTBEAT_INTERVAL": "0.5", "SONIQ_HEARTBEAT_TIMEOUT": "1", AllowShortHeartbeatEnv: "1"},
			[2]time.Duration{500 * time.Millisecond, time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := ResolveSettings(nil, lookupFromMap(tt.env), SettingOverrides{})
			require.NoError(t, err)
			assert.Equal(t, tt.want, [2]time.Duration{s.HeartbeatInterval, s.HeartbeatTimeout})
		})
	}
}

func TestParseQueueList(t *testing.T) {
	tests := []struct {
		in      string
		want    []string
		wantErr string
	}{
		{"default", []string{"default"}, ""},
		{" a , b ,, a ", []string{"a", "b"}, ""},
		{",", nil, ""},
		{"a,b c", nil, "must not contain commas or spaces"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseQueueList(tt.in)
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.True(t, strings.Contains(err.Error(), tt.wantErr), err.Error())
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

// Every setting error is a *SettingError naming the setting and the layer
// the bad value came from, found with errors.As among joined errors.
func TestSettingErrorNamesTheSettingAndItsSource(t *testing.T) {
	zero := time.Duration(0)
	bad := "a b"
	tests := []struct {
		name      string
		m         *Manifest
		env       map[string]string
		overrides SettingOverrides
		want      []SettingError // Setting, Source and Name of each, in order
	}{
		{name: "environment", env: map[string]string{"SONIQ_JOB_TIMEOUT": "5m"},
			want: []SettingError{{Setting: "job_timeout", Source: SourceEnvironment, Name: "SONIQ_JOB_TIMEOUT"}}},
		{name: "flag", overrides: SettingOverrides{PollInterval: &zero},
			want: []SettingError{{Setting: "poll_interval", Source: SourceFlag, Name: "--poll-interval"}}},
		{name: "rows from the environment", env: map[string]string{"SONIQ_CLAIM_AHEAD_MAX": "0"},
			want: []SettingError{{Setting: "claim_ahead_max", Source: SourceEnvironment, Name: "SONIQ_CLAIM_AHEAD_MAX"}}},
		{name: "rows from a flag", overrides: SettingOverrides{ClaimAheadMax: manifestPtr(0)},
			want: []SettingError{{Setting: "claim_ahead_max", Source: SourceFlag, Name: "--claim-ahead-max"}}},
		{name: "queues from both", env: map[string]string{"SONIQ_QUEUES": "a b"}, overrides: SettingOverrides{Queues: &bad},
			want: []SettingError{
				{Setting: "queues", Source: SourceEnvironment, Name: "SONIQ_QUEUES"},
				{Setting: "queues", Source: SourceFlag, Name: "--queues"},
			}},
		{name: "a combination, from the manifest",
			m: &Manifest{Settings: ManifestSettings{HeartbeatTimeout: manifestPtr(3 * time.Second),
				Where: map[string]string{"heartbeat_timeout": "m.yaml:4"}}},
			want: []SettingError{{Setting: "heartbeat_timeout", Source: SourceManifest, Name: "heartbeat_timeout"}}},
		{name: "a combination, from the environment", env: map[string]string{"SONIQ_HEARTBEAT_INTERVAL": "45"},
			want: []SettingError{{Setting: "heartbeat_interval", Source: SourceEnvironment, Name: "heartbeat_interval"}}},
		{name: "a combination, from the default", env: map[string]string{"SONIQ_HEARTBEAT_INTERVAL": "200"},
			want: []SettingError{{Setting: "heartbeat_timeout", Source: SourceDefault, Name: "heartbeat_timeout"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ResolveSettings(tt.m, lookupFromMap(tt.env), tt.overrides)
			require.Error(t, err)
			var first *SettingError
			require.ErrorAs(t, err, &first)
			var got []SettingError
			for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
				var se *SettingError
				require.ErrorAs(t, e, &se)
				got = append(got, SettingError{Setting: se.Setting, Source: se.Source, Name: se.Name})
			}
			assert.Equal(t, tt.want, got)
		})
	}
}
