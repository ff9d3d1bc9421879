package config

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

func writeManifest(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "manifest.yaml")
	require.NoError(t, os.WriteFile(path, []byte(body), 0o600))
	return path
}

func TestLoadManifestAttach(t *testing.T) {
	path := writeManifest(t, `version: 1
handlers:
  - name: py
    attach: [/run/soniq/py.sock, sockets/worker-*.sock]
    concurrency: 4
    jobs:
      - name: a
        cancellable: true
  - name: one
    attach: /run/soniq/one.sock
    transport: unix
    jobs:
      - name: b
        cancellable: false
`)
	m, err := LoadManifest(path)
	require.NoError(t, err)
	py := m.Handlers[0]
	assert.True(t, py.Attached())
	assert.Equal(t, []string{"/run/soniq/py.sock", filepath.Join(filepath.Dir(path), "sockets/worker-*.sock")}, py.Attach)
	assert.Equal(t, TransportUnix, py.Transport)
	assert.Equal(t, 1, py.Processes, "one literal endpoint; a glob's endpoints are found at run time")
	assert.Equal(t, 4, py.Concurrency)
	assert.Nil(t, py.Command)
	assert.Equal(t, []string{"/run/soniq/one.sock"}, m.Handlers[1].Attach)
	assert.False(t, (&Handler{Command: []string{"x"}}).Attached())
}

func TestLoadManifestAttachBad(t *testing.T) {
	head := "version: 1\nhandlers:\n  - name: py\n"
	jobs := "    jobs:\n      - name: a\n        cancellable: true\n"
	tests := []struct {
		name  string
		body  string
		line  int
		field string
		msg   string
	}{
		{"with command", "    attach: /s.sock\n    command: [python3]\n", 5, "handlers[0].command", "command and attach are alternatives"},
		{"with max_jobs", "    attach: /s.sock\n    max_jobs: 10\n", 5, "handlers[0].max_jobs", "recycling does not apply to attached processes"},
		{"with max_memory_mb", "    attach: /s.sock\n    max_memory_mb: 100\n", 5, "handlers[0].max_memory_mb", "recycling does not apply to attached processes"},
		{"with processes", "    attach: /s.sock\n    processes: 2\n", 5, "handlers[0].processes", "each attach endpoint is one process"},
		{"with env", "    attach: /s.sock\n    env: {A: b}\n", 5, "handlers[0].env", "sets none of their environment"},
		{"with env_from", "    attach: /s.sock\n    env_from: [A]\n", 5, "handlers[0].env_from", "passes none of their environment"},
		{"stdio", "    attach: /s.sock\n    transport: stdio\n", 5, "handlers[0].transport", "speaks the unix transport"},
		{"empty list", "    attach: []\n", 4, "handlers[0].attach", "must not be empty"},
		{"empty path", "    attach: [\"\"]\n", 4, "handlers[0].attach[0]", "must not be empty"},
		{"mapping", "    attach: {path: /s.sock}\n", 4, "handlers[0].attach", "expected a socket path or a list of them, got a mapping"},
		{"directory", "    attach: /run/soniq/\n", 4, "handlers[0].attach", "names a directory"},
		{"bad glob", "    attach: /run/[soniq.sock\n", 4, "handlers[0].attach", "bad glob"},
		{"too long", "    attach: /" + strings.Repeat("s", 120) + ".sock\n", 4, "handlers[0].attach", "shorter than 108"},
		{"typo", "    atach: /s.sock\n", 4, "handlers[0].atach", `did you mean "attach"?`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadManifest(writeManifest(t, head+tc.body+jobs))
			require.Error(t, err)
			var found bool
			for _, me := range manifestErrors(t, err) {
				if me.Field == tc.field {
					found = true
					assert.Equal(t, tc.line, me.Line, "line of %s", me)
					assert.Contains(t, me.Msg, tc.msg)
				}
			}
			assert.True(t, found, "no error on %s in %v", tc.field, err)
		})
	}
}

// The manifest deploy/kubernetes/attach.yaml ships in its ConfigMap loads.
func TestDeployAttachManifest(t *testing.T) {
	b, err := os.ReadFile("../../deploy/kubernetes/attach.yaml")
	require.NoError(t, err)
	var cm struct {
		Kind string            `yaml:"kind"`
		Data map[string]string `yaml:"data"`
	}
	// The ConfigMap is the first document.
	require.NoError(t, yaml.NewDecoder(bytes.NewReader(b)).Decode(&cm))
	require.Equal(t, "ConfigMap", cm.Kind)
	m, err := LoadManifest(writeManifest(t, cm.Data["soniq-handlers.yaml"]))
	require.NoError(t, err)
	require.Len(t, m.Handlers, 1)
	assert.Equal(t, []string{"/run/soniq/billing.sock"}, m.Handlers[0].Attach)
	assert.Contains(t, string(b), `"--listen", "/run/soniq/billing.sock"`, "the worker listens where the manifest attaches")
}
