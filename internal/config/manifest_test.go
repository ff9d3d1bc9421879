package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const manifestDir = "testdata/manifests"

// manifestErrors flattens an errors.Join tree into its ManifestErrors and
// fails the test if any leaf is of another type.
func manifestErrors(t *testing.T, err error) []*ManifestError {
	t.Helper()
	var out []*ManifestError
	var walk func(error)
	walk = func(e error) {
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, c := range j.Unwrap() {
				walk(c)
			}
			return
		}
		var me *ManifestError
		require.True(t, errors.As(e, &me), "error %q (%T) is not a *ManifestError", e, e)
		out = append(out, me)
	}
	walk(err)
	return out
}

func manifestPtr[T any](v T) *T { return &v }

func TestLoadManifestFull(t *testing.T) {
	path := filepath.Join(manifestDir, "good", "full.yaml")
	m, err := LoadManifest(path)
	require.NoError(t, err)

	abs, err := filepath.Abs(path)
	require.NoError(t, err)
	assert.Equal(t, abs, m.Path)
	assert.Equal(t, filepath.Dir(abs), m.Dir)
	assert.Equal(t, 1, m.Version)

	s := m.Settings
	assert.Equal(t, manifestPtr(45*time.Second), s.ShutdownTimeout)
	assert.Equal(t, manifestPtr(10*time.Second), s.SyncHandlerGrace)
	assert.Equal(t, manifestPtr(2*time.Minute), s.JobTimeout)
	assert.Equal(t, manifestPtr(2500*time.Millisecond), s.HeartbeatInterval)
	assert.Equal(t, manifestPtr(60*time.Second), s.HeartbeatTimeout)
	assert.Equal(t, manifestPtr(time.Minute), s.CleanupInterval)
	assert.Equal(t, manifestPtr(500*time.Millisecond), s.PollInterval)
	assert.Equal(t, manifestPtr(50*time.Millisecond), s.ClaimAhead)
	assert.Equal(t, manifestPtr(200), s.ClaimAheadMax)
	assert.Equal(t, manifestPtr(time.Duration(0)), s.ResultTTL)
	assert.Equal(t, []string{"billing", "default"}, s.Queues)

	require.Len(t, m.Handlers, 2)
	py := m.Handlers[0]
	assert.Equal(t, Handler{
		Name:            "billing-py",
		Command:         []string{"python3", "-m", "billing.handlers"},
		Transport:       TransportStdio,
		Processes:       2,
		Concurrency:     16,
		SyncConcurrency: 4,
		Env:             map[string]string{"LOG_LEVEL": "info", "PYTHONUNBUFFERED": "1"},
		StartupTimeout:  15 * time.Second,
		MaxJobs:         1000,
		MaxMemoryMB:     512,
		Workdir:         filepath.Join(m.Dir, "app"),
		Line:            16,
		Jobs: []JobSpec{
			{
				Name: "billing.invoices.send.v2", Cancellable: true, Timeout: 60 * time.Second, TimeoutSet: true,
				Retry: RetryPolicy{Delays: []time.Duration{time.Second}, Backoff: true, MaxDelay: 5 * time.Minute, MaxDelaySet: true, Jitter: true},
				Line:  28,
			},
			{Name: "billing.pdf.render", Cancellable: false, Retry: DefaultRetryPolicy(), Line: 32},
		},
	}, py)

	node := m.Handlers[1]
	assert.Equal(t, []string{filepath.Join(m.Dir, "bin", "handler.js"), "--verbose"}, node.Command,
		"a relative program path resolves against the manifest's directory; arguments stay as given")
	assert.Equal(t, TransportUnix, node.Transport)
	assert.Equal(t, m.Dir, node.Workdir, "workdir defaults to the manifest's directory")
	require.Len(t, node.Jobs, 1)
	hook := node.Jobs[0]
	assert.True(t, hook.TimeoutSet)
	assert.Zero(t, hook.Timeout, "timeout: 0 means no timeout for this job, not the default")
	assert.Equal(t, RetryPolicy{Delays: []time.Duration{time.Second, 5 * time.Second, 30 * time.Second}}, hook.Retry)
}

func TestLoadManifestDefaults(t *testing.T) {
	m, err := LoadManifest(filepath.Join(manifestDir, "good", "minimal.yaml"))
	require.NoError(t, err)
	assert.Equal(t, ManifestSettings{}, m.Settings, "no settings block: every setting unset")
	require.Len(t, m.Handlers, 1)
	h := m.Handlers[0]
	assert.Equal(t, TransportStdio, h.Transport)
	assert.Equal(t, 1, h.Processes)
	assert.Equal(t, 8, h.Concurrency)
	assert.Equal(t, 4, h.SyncConcurrency)
	assert.Equal(t, map[string]string{}, h.Env)
	assert.Equal(t, 10*time.Second, h.StartupTimeout)
	assert.Zero(t, h.MaxJobs)
	assert.Zero(t, h.MaxMemoryMB)
	assert.Equal(t, m.Dir, h.Workdir)
	assert.Equal(t, []string{"python3", "-m", "app"}, h.Command, "bare program names are left for PATH lookup")
	require.Len(t, h.Jobs, 1)
	j := h.Jobs[0]
	assert.False(t, j.TimeoutSet)
	assert.Equal(t, RetryPolicy{Jitter: true}, j.Retry, "Soniq's decorator defaults")
}

func TestLoadManifestJSON(t *testing.T) {
	m, err := LoadManifest(filepath.Join(manifestDir, "good", "minimal.json"))
	require.NoError(t, err)
	assert.Equal(t, []string{"default"}, m.Settings.Queues, "top-level queues land in Settings.Queues")
	h := m.Handlers[0]
	assert.Equal(t, 2, h.Concurrency)
	assert.Equal(t, 2, h.SyncConcurrency, "the sync default is capped by a smaller concurrency")
	assert.Equal(t, []string{"node", "examples.js"}, h.Command,
		"arguments are not resolved: the child runs in workdir")
	assert.Equal(t, 1500*time.Millisecond, h.Jobs[0].Timeout, "plain numbers are seconds")
	assert.Equal(t, RetryPolicy{Delays: []time.Duration{2 * time.Second}, Backoff: true, Jitter: true}, h.Jobs[1].Retry)
	assert.Equal(t, 11, h.Jobs[1].Line)
}

func TestLoadManifestAnchors(t *testing.T) {
	m, err := LoadManifest(filepath.Join(manifestDir, "good", "anchors.yaml"))
	require.NoError(t, err)
	want := RetryPolicy{Delays: []time.Duration{10 * time.Second}, Backoff: true, MaxDelay: 10 * time.Minute, MaxDelaySet: true, Jitter: true}
	assert.Equal(t, want, m.Handlers[0].Jobs[0].Retry)
	assert.Equal(t, want, m.Handlers[0].Jobs[1].Retry)
}

// TestLoadManifestFromAnotherDirectory checks that paths resolve against the
// manifest, not the working directory.
func TestLoadManifestFromAnotherDirectory(t *testing.T) {
	dir, err := filepath.Abs(filepath.Join(manifestDir, "good"))
	require.NoError(t, err)
	t.Chdir(t.TempDir())
	m, err := LoadManifest(filepath.Join(dir, "full.yaml"))
	require.NoError(t, err)
	assert.Equal(t, dir, m.Dir)
	assert.Equal(t, filepath.Join(dir, "app"), m.Handlers[0].Workdir)
	assert.Equal(t, filepath.Join(dir, "bin", "handler.js"), m.Handlers[1].Command[0])
}

func TestLoadManifestPaths(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "sub", "work"), 0o755))
	abs := t.TempDir()
	tests := []struct {
		name        string
		command     string
		workdir     string
		wantProgram string
		wantWorkdir string
	}{
		{"bare name stays for PATH", "node", "", "node", filepath.Join(dir, "sub")},
		{"relative path joins manifest dir", "./bin/run", "", filepath.Join(dir, "sub", "bin", "run"), filepath.Join(dir, "sub")},
		{"parent-relative path", "../tools/run", "", filepath.Join(dir, "tools", "run"), filepath.Join(dir, "sub")},
		{"absolute path kept", "/usr/bin/env", "", "/usr/bin/env", filepath.Join(dir, "sub")},
		{"relative workdir", "node", "work", "node", filepath.Join(dir, "sub", "work")},
		{"parent workdir", "node", "..", "node", dir},
		{"absolute workdir", "node", abs, "node", abs},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := fmt.Sprintf("version: 1\nhandlers:\n  - name: h\n    command: [%q, x.js]\n", tt.command)
			if tt.workdir != "" {
				body += fmt.Sprintf("    workdir: %q\n", tt.workdir)
			}
			body += "    jobs: [{name: j, cancellable: false}]\n"
			path := filepath.Join(dir, "sub", "m.yaml")
			require.NoError(t, os.WriteFile(path, []byte(body), 0o644))
			m, err := LoadManifest(path)
			require.NoError(t, err)
			assert.Equal(t, []string{tt.wantProgram, "x.js"}, m.Handlers[0].Command)
			assert.Equal(t, tt.wantWorkdir, m.Handlers[0].Workdir)
		})
	}
}

func TestLoadManifestBad(t *testing.T) {
	tests := []struct {
		file  string
		line  int
		field string
		msg   string
	}{
		{"version_unsupported.yaml", 1, "version", "unsupported version 2"},
		{"version_missing.yaml", 1, "version", "required"},
		{"version_string.yaml", 1, "version", `expected an integer, got string "one"`},
		{"handlers_missing.yaml", 1, "handlers", "required"},
		{"handlers_empty.yaml", 2, "handlers", "at least one handler"},
		{"handlers_not_list.yaml", 3, "handlers", "expected a list of handlers, got a mapping"},
		{"unknown_top_key.yaml", 2, "handler", `unknown key (did you mean "handlers"?)`},
		{"unknown_handler_key.yaml", 5, "handlers[0].replicas", "unknown key"},
		{"unknown_job_key_max_attempts.yaml", 8, "handlers[0].jobs[0].max_attempts", "lives on each job row"},
		{"duplicate_key.yaml", 6, "handlers[0].processes", "duplicate key (first at line 5)"},
		{"handler_name_duplicate.yaml", 7, "handlers[1].name", `duplicate handler name "py" (first at handlers[0], line 3)`},
		{"handler_name_empty.yaml", 3, "handlers[0].name", "must not be empty"},
		{"handler_name_missing.yaml", 3, "handlers[0].name", "required"},
		{"handler_name_invalid.yaml", 3, "handlers[0].name", `invalid name "Billing Py"`},
		{"command_missing.yaml", 3, "handlers[0].command", "required"},
		{"command_empty.yaml", 4, "handlers[0].command", "must not be empty"},
		{"command_not_list.yaml", 4, "handlers[0].command", "expected a list (argv)"},
		{"command_empty_program.yaml", 4, "handlers[0].command[0]", "program must not be empty"},
		{"command_number_arg.yaml", 4, "handlers[0].command[1]", `expected a string, got integer 10 (quote it: "10")`},
		{"transport_unknown.yaml", 5, "handlers[0].transport", `unknown transport "grpc"`},
		{"processes_zero.yaml", 5, "handlers[0].processes", "must be at least 1, got 0"},
		{"processes_string.yaml", 5, "handlers[0].processes", `expected an integer, got string "two"`},
		{"processes_float.yaml", 5, "handlers[0].processes", "expected an integer, got number 1.5"},
		{"concurrency_zero.yaml", 5, "handlers[0].concurrency", "must be at least 1"},
		{"sync_concurrency_zero.yaml", 5, "handlers[0].sync_concurrency", "must be at least 1"},
		{"sync_concurrency_exceeds.yaml", 6, "handlers[0].sync_concurrency", "3 exceeds concurrency 2"},
		{"env_not_mapping.yaml", 5, "handlers[0].env", "expected a mapping, got a list"},
		{"env_value_not_string.yaml", 7, "handlers[0].env.DEBUG", `expected a string, got boolean true (quote it: "true")`},
		{"env_name_invalid.yaml", 6, "handlers[0].env.1LOG-LEVEL", "invalid environment variable name"},
		{"env_reserved.yaml", 7, "handlers[0].env.SONIQ_DATABASE_URL", "reserved"},
		{"env_from_reserved.yaml", 5, "handlers[0].env_from[1]", "must not reach handlers"},
		{"env_from_not_list.yaml", 5, "handlers[0].env_from", "expected a list"},
		{"env_from_duplicate.yaml", 5, "handlers[0].env_from[1]", `duplicate name "API_TOKEN"`},
		{"startup_timeout_invalid.yaml", 5, "handlers[0].startup_timeout", `invalid duration "soon"`},
		{"startup_timeout_zero.yaml", 5, "handlers[0].startup_timeout", "must be greater than zero"},
		{"max_jobs_negative.yaml", 5, "handlers[0].max_jobs", "must not be negative"},
		{"max_memory_mb_negative.yaml", 5, "handlers[0].max_memory_mb", "must not be negative"},
		{"workdir_missing_dir.yaml", 5, "handlers[0].workdir", "no such file or directory"},
		{"workdir_is_file.yaml", 5, "handlers[0].workdir", "is not a directory"},
		{"jobs_missing.yaml", 3, "handlers[0].jobs", "required"},
		{"jobs_empty.yaml", 5, "handlers[0].jobs", "at least one job"},
		{"job_name_empty.yaml", 6, "handlers[0].jobs[0].name", "must not be empty"},
		{"job_name_missing.yaml", 6, "handlers[0].jobs[0].name", "required"},
		{"job_name_space.yaml", 6, "handlers[0].jobs[0].name", "must not contain spaces"},
		{"job_name_duplicate_across_handlers.yaml", 13, "handlers[1].jobs[1].name",
			`job "billing.invoices.send" is already declared by handler "billing-py" at handlers[0].jobs[0] (line 6)`},
		{"job_name_duplicate_same_handler.yaml", 8, "handlers[0].jobs[1].name",
			`job "app.one" is already declared by handler "py" at handlers[0].jobs[0] (line 6)`},
		{"cancellable_missing.yaml", 6, "handlers[0].jobs[0].cancellable", "required: declare whether"},
		{"cancellable_not_bool.yaml", 7, "handlers[0].jobs[0].cancellable", `expected true or false, got string "yes"`},
		{"timeout_invalid.yaml", 11, "handlers[0].jobs[1].timeout", `invalid duration "6O s"`},
		{"timeout_negative.yaml", 8, "handlers[0].jobs[0].timeout", `duration "-5" must not be negative`},
		{"timeout_bool.yaml", 8, "handlers[0].jobs[0].timeout", "expected a duration"},
		{"retry_unknown_key.yaml", 8, "handlers[0].jobs[0].retry.max_delya", `did you mean "max_delay"?`},
		{"retry_backoff_not_bool.yaml", 9, "handlers[0].jobs[0].retry.backoff", "expected true or false"},
		{"retry_delay_invalid.yaml", 9, "handlers[0].jobs[0].retry.delay[1]", `invalid duration "2 minutes"`},
		{"retry_max_delay_negative.yaml", 9, "handlers[0].jobs[0].retry.max_delay", "must not be negative"},
		{"settings_unknown_key.yaml", 4, "settings.concurrency", "unknown key"},
		{"settings_bad_duration.yaml", 3, "settings.job_timeout", `invalid duration "forever"`},
		{"settings_shutdown_zero.yaml", 3, "settings.shutdown_timeout", "must be greater than zero"},
		{"settings_not_mapping.yaml", 2, "settings", "expected a mapping"},
		{"settings_claim_ahead_negative.yaml", 4, "settings.claim_ahead", `duration "-1" must not be negative`},
		{"settings_claim_ahead_max_zero.yaml", 4, "settings.claim_ahead_max", "must be greater than zero, got 0"},
		{"settings_claim_ahead_max_negative.yaml", 4, "settings.claim_ahead_max", "must not be negative, got -5"},
		{"settings_claim_ahead_max_not_number.yaml", 4, "settings.claim_ahead_max", `expected an integer, got string "lots"`},
		{"settings_claim_ahead_max_fraction.yaml", 4, "settings.claim_ahead_max", "expected an integer, got"},
		{"queues_both.yaml", 4, "queues", "given twice: here and as settings.queues (line 3)"},
		{"queues_empty.yaml", 2, "queues", "leave queues out to serve all queues"},
		{"queues_bad_name.yaml", 2, "queues[1]", "must not contain commas"},
		{"queues_duplicate.yaml", 3, "settings.queues[2]", `duplicate queue "default"`},
		{"syntax_error.yaml", 4, "", "invalid YAML: did not find expected ',' or ']'"},
		// go-yaml places some syntax errors at the start of the enclosing block.
		{"syntax_indent.yaml", 3, "", "invalid YAML: did not find expected '-' indicator"},
		{"syntax_list_indent.yaml", 3, "", "invalid YAML: did not find expected key"},
		{"syntax_tab.yaml", 3, "", "invalid YAML: found a tab character that violates indentation"},
		{"empty.yaml", 0, "", "empty manifest"},
		{"comments_only.yaml", 0, "", "empty manifest"},
		{"two_documents.yaml", 8, "", "found a second"},
		{"not_mapping.yaml", 1, "", "expected a mapping, got a list"},
		{"timeout_invalid.json", 8, "handlers[0].jobs[0].timeout", `invalid duration "6O s"`},
		{"unknown_key.json", 8, "handlers[0].concurency", `did you mean "concurrency"?`},
	}
	seen := map[string]bool{}
	for _, tt := range tests {
		seen[tt.file] = true
		t.Run(tt.file, func(t *testing.T) {
			path := filepath.Join(manifestDir, "bad", tt.file)
			m, err := LoadManifest(path)
			require.Error(t, err)
			assert.Nil(t, m)
			var found *ManifestError
			for _, me := range manifestErrors(t, err) {
				assert.Equal(t, path, me.File)
				if me.Field == tt.field && strings.Contains(me.Msg, tt.msg) {
					found = me
				}
			}
			require.NotNil(t, found, "no error for field %q containing %q in:\n%v", tt.field, tt.msg, err)
			assert.Equal(t, tt.line, found.Line, "line of %v", found)
			want := path + ":"
			if tt.line > 0 {
				want += fmt.Sprint(tt.line) + ":"
			}
			if tt.field != "" {
				want += " " + tt.field + ":"
			}
			assert.True(t, strings.HasPrefix(found.Error(), want), "%q should start with %q", found.Error(), want)
		})
	}

	// Every bad manifest in testdata must be covered by the table.
	entries, err := os.ReadDir(filepath.Join(manifestDir, "bad"))
	require.NoError(t, err)
	for _, e := range entries {
		if e.Name() != "several_errors.yaml" {
			assert.True(t, seen[e.Name()], "testdata bad/%s has no table entry", e.Name())
		}
	}
}

// TestLoadManifestSeveralErrors checks that one load reports every problem,
// each with its own line and field.
func TestLoadManifestSeveralErrors(t *testing.T) {
	path := filepath.Join(manifestDir, "bad", "several_errors.yaml")
	_, err := LoadManifest(path)
	require.Error(t, err)
	got := map[string]int{}
	for _, me := range manifestErrors(t, err) {
		got[me.Field] = me.Line
	}
	assert.Equal(t, map[string]int{
		"handlers[0].processes":           5,
		"handlers[0].transport":           6,
		"handlers[0].jobs[0].cancellable": 8,
		"handlers[0].jobs[0].timeout":     9,
	}, got)
	assert.Contains(t, err.Error(), path+":9: handlers[0].jobs[0].timeout: invalid duration \"6O s\"")
}

func TestLoadManifestUnreadable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing.yaml")
	_, err := LoadManifest(path)
	var me *ManifestError
	require.ErrorAs(t, err, &me)
	assert.Equal(t, path+": cannot read manifest: no such file or directory", me.Error())
}

func TestManifestErrorString(t *testing.T) {
	tests := []struct {
		err  ManifestError
		want string
	}{
		{ManifestError{File: "examples/python/manifest.yaml", Line: 12, Field: "handlers[0].jobs[1].timeout", Msg: `invalid duration "6O s"`},
			`examples/python/manifest.yaml:12: handlers[0].jobs[1].timeout: invalid duration "6O s"`},
		{ManifestError{File: "m.yaml", Line: 3, Msg: "invalid YAML: x"}, "m.yaml:3: invalid YAML: x"},
		{ManifestError{File: "m.yaml", Msg: "empty manifest"}, "m.yaml: empty manifest"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, tt.err.Error())
	}
}

func TestParseManifestDuration(t *testing.T) {
	tests := []struct {
		in      string
		want    time.Duration
		wantErr string
	}{
		{"30s", 30 * time.Second, ""},
		{"1m30s", 90 * time.Second, ""},
		{"250ms", 250 * time.Millisecond, ""},
		{"30", 30 * time.Second, ""},
		{"0.5", 500 * time.Millisecond, ""},
		{"0", 0, ""},
		{"1e3", 1000 * time.Second, ""},
		{" 5s ", 5 * time.Second, ""},
		{"6O s", 0, `invalid duration "6O s"`},
		{"", 0, `invalid duration ""`},
		{"-1s", 0, "must not be negative"},
		{"-0.5", 0, "must not be negative"},
		{"NaN", 0, "invalid duration"},
		{"inf", 0, "too large"},
		{"1e300", 0, "too large"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseDuration(tt.in)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestManifestLookups(t *testing.T) {
	m, err := LoadManifest(filepath.Join(manifestDir, "good", "full.yaml"))
	require.NoError(t, err)

	h, j := m.Job("billing.pdf.render")
	require.NotNil(t, h)
	require.NotNil(t, j)
	assert.Equal(t, "billing-py", h.Name)
	assert.False(t, j.Cancellable)

	h, j = m.Job("billing.webhooks.deliver")
	require.NotNil(t, j)
	assert.Equal(t, "billing-node", h.Name)

	h, j = m.Job("nope")
	assert.Nil(t, h)
	assert.Nil(t, j)

	assert.Equal(t, []string{"billing.invoices.send.v2", "billing.pdf.render"}, m.Handlers[0].JobNames())
	assert.Nil(t, m.Handlers[0].Job("billing.webhooks.deliver"))
}

func TestJobSpecEffectiveTimeout(t *testing.T) {
	s := DefaultSettings()
	s.JobTimeout = 7 * time.Second
	tests := []struct {
		name string
		job  JobSpec
		want time.Duration
	}{
		{"unset uses settings", JobSpec{}, 7 * time.Second},
		{"own timeout", JobSpec{Timeout: time.Minute, TimeoutSet: true}, time.Minute},
		{"own zero means none", JobSpec{TimeoutSet: true}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.job.EffectiveTimeout(s))
		})
	}
}

// TestManifestDocExample keeps the full example in docs/manifest.md valid.
func TestManifestDocExample(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "manifest.md"))
	require.NoError(t, err)
	blocks := strings.Split(string(doc), "```yaml\n")
	require.Greater(t, len(blocks), 1, "no yaml block in docs/manifest.md")
	example, _, found := strings.Cut(blocks[len(blocks)-1], "```")
	require.True(t, found)

	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "billing"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(root, "deploy", "sidecar"), 0o755))
	path := filepath.Join(root, "deploy", "sidecar", "manifest.yaml")
	require.NoError(t, os.WriteFile(path, []byte(example), 0o644))

	m, err := LoadManifest(path)
	require.NoError(t, err)
	require.Len(t, m.Handlers, 2)
	assert.Equal(t, filepath.Join(root, "billing"), m.Handlers[0].Workdir)
	assert.Equal(t, filepath.Join(root, "deploy", "sidecar", "bin", "node"), m.Handlers[1].Command[0])
	assert.Equal(t, []string{"billing", "default"}, m.Settings.Queues)

	s, err := ResolveSettings(m, nil, SettingOverrides{})
	require.NoError(t, err)
	assert.Equal(t, 5*time.Minute, m.Handlers[0].Job("billing.pdf.render").EffectiveTimeout(s))
	assert.Equal(t, time.Minute, s.SyncHandlerGrace)
}
