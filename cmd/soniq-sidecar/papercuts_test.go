package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// `run` in a directory holding manifest.yaml needs no --manifest; with none
// anywhere it says the three ways to give one.
func TestRunReadsTheManifestInTheWorkingDirectory(t *testing.T) {
	c := newCLI(t, nil)
	code, _, errOut := c.run("run", "--metrics-addr", "", "--once")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, "no manifest: give --manifest FILE, set SONIQ_MANIFEST, or put one at ./manifest.yaml")

	// A manifest whose command cannot start: the error now names it, so
	// the manifest was found and read.
	require.NoError(t, os.WriteFile("manifest.yaml", []byte(`version: 1
handlers:
  - name: py
    command: [no-such-interpreter-here, app.py]
    jobs:
      - name: demo.hello
        cancellable: true
`), 0o644))
	code, _, errOut = c.run("run", "--metrics-addr", "", "--once")
	assert.Equal(t, exitUsage, code, errOut)
	assert.Contains(t, errOut, "handler py")
}

// A handler command that can never start is refused before anything is
// written: no database file, no worker row; one error, said once.
func TestRunRefusesABadCommandBeforeTouchingTheDatabase(t *testing.T) {
	for _, tc := range []struct{ name, command, want string }{
		{"not on PATH", `[no-such-interpreter-here, app.py]`, `executable file not found in $PATH`},
		{"missing file", `[./missing.sh]`, `no such file or directory`},
		{"not executable", `[./notexec.sh]`, `permission denied`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCLI(t, nil)
			require.NoError(t, os.WriteFile("notexec.sh", []byte("#!/bin/sh\n"), 0o644))
			require.NoError(t, os.WriteFile("m.yaml", []byte("version: 1\nhandlers:\n  - name: py\n    command: "+tc.command+
				"\n    jobs:\n      - name: demo.hello\n        cancellable: true\n"), 0o644))
			code, _, errOut := c.run("run", "--manifest", "m.yaml", "--metrics-addr", "")
			assert.Equal(t, exitUsage, code, errOut)
			assert.Contains(t, errOut, tc.want)
			assert.Equal(t, 1, strings.Count(errOut, "handler py"), "the handler is named once: %s", errOut)
			assert.NoFileExists(t, filepath.Join(c.dir, "soniq.db"), "nothing was created")
		})
	}
}

// `job ID` shows what became of a job: its status, attempts and result.
func TestJobShowsTheRow(t *testing.T) {
	c := newCLI(t, nil)
	code, out, errOut := c.run("enqueue", "demo.hello", "--args", `{"a":1}`)
	require.Equal(t, 0, code, errOut)
	id := strings.TrimSpace(out)
	deadLetter(t, filepath.Join(c.dir, "soniq.db"), id)

	code, out, errOut = c.run("job", id)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "status      dead_letter (max_retries_exceeded")
	assert.Contains(t, out, "attempts    1 of 3")
	code, out, errOut = c.run("job", id, "--json")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, `"id":"`+id+`"`)

	code, _, errOut = c.run("job", "3f1e1f7e-2a51-4c36-9d1e-8a1b2c3d4e5f")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "no job 3f1e1f7e-2a51-4c36-9d1e-8a1b2c3d4e5f")
	code, _, _ = c.run("job")
	assert.Equal(t, exitUsage, code)
}

// An error names what failed once: "open sqlite database X: opening sqlite
// database X for writing: …" said it twice.
func TestOpenErrorsDoNotStutter(t *testing.T) {
	c := newCLI(t, nil)
	code, _, errOut := c.run("status", "--database-url", "sqlite:"+filepath.Join(c.dir, "no", "such", "dir", "x.db"))
	assert.Equal(t, 1, code)
	assert.Equal(t, 1, strings.Count(errOut, "sqlite database"), errOut)
	code, _, errOut = c.run("status", "--database-url", "postgres://nobody@127.0.0.1:1/x?connect_timeout=2")
	assert.Equal(t, 1, code)
	assert.Equal(t, 1, strings.Count(errOut, "postgres"), errOut)
}
