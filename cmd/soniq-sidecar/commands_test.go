package main

import (
	"bytes"
	"cmp"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// asCLI makes the test binary run as soniq-sidecar itself, so a shell's
// completion script can call it as the real binary (see cliOnPath).
const asCLI = "SONIQ_SIDECAR_TEST_AS_CLI"

func TestMain(m *testing.M) {
	if os.Getenv(asCLI) == "1" {
		main()
	}
	os.Exit(m.Run())
}

// runCLI runs a command line in-process with no environment; it touches
// no database.
func runCLI(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = runMain(context.Background(), env{stdout: &out, stderr: &errb,
		lookupEnv: func(string) (string, bool) { return "", false }}, args)
	return code, out.String(), errb.String()
}

// commandPaths lists every command of the tree that a person can call, by
// the words that name it ("dead-letter list"); the root is "".
func commandPaths(t *testing.T) map[string]*cobra.Command {
	t.Helper()
	paths := map[string]*cobra.Command{}
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		if c.Hidden {
			return
		}
		paths[strings.Join(path, " ")] = c
		for _, sub := range c.Commands() {
			walk(sub, append(slices.Clone(path), sub.Name()))
		}
	}
	walk(newRootCmd(env{}), nil)
	return paths
}

// Every command and every group answers --help, -h and `help COMMAND`
// with exit 0, its synopsis and flags on stdout, nothing on stderr. The
// tree is walked, so a command added later is held to it too.
func TestEveryCommandAnswersHelp(t *testing.T) {
	paths := commandPaths(t)
	for _, want := range []string{"", "run", "manifest", "manifest check", "migrate", "enqueue", "status", "job", "cancel",
		"dead-letter", "dead-letter list", "dead-letter replay", "dead-letter purge", "dead-letter export",
		"schedule", "schedule add", "schedule list", "schedule pause", "schedule resume", "schedule remove",
		"completion", "completion bash", "completion zsh", "completion fish", "version", "help"} {
		assert.Contains(t, paths, want, "the tree has no command %q", want)
	}
	for path, c := range paths {
		words := strings.Fields(path)
		for _, args := range [][]string{append(slices.Clone(words), "--help"), append(slices.Clone(words), "-h"), append([]string{"help"}, words...)} {
			t.Run(strings.Join(args, " "), func(t *testing.T) {
				code, out, errOut := runCLI(args...)
				assert.Equal(t, exitOK, code, errOut)
				assert.Empty(t, errOut)
				assert.Contains(t, out, "Usage:\n  "+strings.TrimSpace("soniq-sidecar "+path))
				assert.Contains(t, out, "-h, --help")
				if c.Short != "" {
					assert.Contains(t, out, strings.TrimSpace(cmp.Or(c.Long, c.Short)))
				}
				for _, sub := range c.Commands() {
					if !sub.Hidden {
						assert.Contains(t, out, "\n  "+sub.Name()+" ", "a group's help lists its commands")
					}
				}
			})
		}
		t.Run(path+" says what it does", func(t *testing.T) {
			assert.NotEmpty(t, c.Short, "%q has no one-line description for the command lists", path)
			// The project's own commands show an operator an example.
			if c.Runnable() && c.HasParent() && !c.HasSubCommands() && !strings.HasPrefix(path, "completion") &&
				path != "help" && path != "version" {
				assert.NotEmpty(t, c.Example, "%q has no example", path)
			}
		})
	}
}

// The shell's word for a command: a data command's help lists the
// database flag with where its default comes from, and asks for exactly
// the flags the command takes.
func TestDataCommandHelpNamesTheDatabaseFlag(t *testing.T) {
	for _, args := range [][]string{{"status", "--help"}, {"dead-letter", "replay", "--help"}, {"schedule", "add", "--help"}} {
		code, out, _ := runCLI(args...)
		require.Equal(t, exitOK, code)
		assert.Contains(t, out, "--database-url URL")
		assert.Contains(t, out, "$SONIQ_DATABASE_URL")
		assert.Contains(t, out, "Examples:")
	}
}

// A word that names no command, at the top or in a group, exits 2 with a
// message naming it and where the commands are listed; nothing else runs.
func TestUnknownCommandsExitTwo(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"frobnicate"}, `unknown command "frobnicate" (soniq-sidecar --help lists the commands)`},
		{[]string{"stauts"}, `unknown command "stauts"; did you mean status?`},
		{[]string{"dead-letter", "lst"}, `dead-letter: unknown subcommand "lst" (want list, replay, purge or export); did you mean list?`},
		{[]string{"schedule", "delete"}, `schedule: unknown subcommand "delete" (want a subcommand: add NAME`},
		{[]string{"manifest", "lint"}, `manifest: unknown subcommand "lint" (want check FILE)`},
		{[]string{"completion", "tcsh"}, `completion: unknown subcommand "tcsh" (want bash, zsh, fish or powershell)`},
		{[]string{"completion"}, `completion: want a shell`},
		{[]string{"schedule"}, `schedule: want a subcommand`},
		{[]string{"manifest"}, `manifest: usage: soniq-sidecar manifest check FILE`},
		{[]string{"help", "frobnicate"}, `help: soniq-sidecar has no command "frobnicate"`},
		{[]string{"help", "schedule", "drop"}, `help: soniq-sidecar schedule has no command "drop"`},
		{[]string{"version", "now"}, `unknown command "now"`},
		{[]string{"schedule", "list", "--colour"}, `schedule list: flag provided but not defined: -colour (see soniq-sidecar schedule list --help)`},
		{[]string{"status", "-colour"}, `status: flag provided but not defined: -colour`},
		{[]string{"enqueue", "x", "--priority", "high"}, `enqueue: invalid value "high" for flag -priority: parse error`},
		{[]string{"enqueue", "x", "--json=maybe"}, `enqueue: invalid boolean value "maybe" for -json`},
		{[]string{"cancel", "x", "--wait"}, `cancel: flag needs an argument: -wait`},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, errOut := runCLI(tc.args...)
			assert.Equal(t, exitUsage, code, errOut)
			assert.Empty(t, out)
			assert.Contains(t, errOut, "soniq-sidecar: "+tc.want)
			assert.Equal(t, 1, strings.Count(errOut, "soniq-sidecar: "), "one error line: %s", errOut)
		})
	}
}

// The flag package the CLI was first written on took -name for --name;
// scripts written then keep working. A -x that names no flag is still an
// error, and after "--" nothing is rewritten.
func TestLongFlagsWithOneDash(t *testing.T) {
	root := newRootCmd(env{})
	assert.Equal(t, []string{"status", "--json", "--database-url=x"}, longFlagsWithOneDash(root, []string{"status", "-json", "-database-url=x"}))
	assert.Equal(t, []string{"enqueue", "-colour", "-h"}, longFlagsWithOneDash(root, []string{"enqueue", "-colour", "-h"}))
	assert.Equal(t, []string{"enqueue", "--", "-json"}, longFlagsWithOneDash(root, []string{"enqueue", "--", "-json"}))
	assert.Equal(t, []string{"--version"}, longFlagsWithOneDash(root, []string{"-version"}))

	c := newCLI(t, nil)
	code, out, errOut := c.run("status", "-json")
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out, `"total":0`)
}

// `completion SHELL` prints a script for bash, zsh and fish that the
// shell accepts, and the completions it asks the binary for are the
// commands, subcommands and flag values.
func TestCompletionScripts(t *testing.T) {
	dir := cliOnPath(t)
	for _, tc := range []struct{ shell, marker string }{
		{"bash", "complete -o default -F __start_soniq-sidecar soniq-sidecar"},
		{"zsh", "#compdef soniq-sidecar"},
		{"fish", "complete -c soniq-sidecar"},
	} {
		t.Run(tc.shell, func(t *testing.T) {
			code, script, errOut := runCLI("completion", tc.shell)
			require.Equal(t, exitOK, code, errOut)
			assert.Contains(t, script, tc.marker)
			path := filepath.Join(dir, "completion."+tc.shell)
			require.NoError(t, os.WriteFile(path, []byte(script), 0o644))
			shell := shellPath(t, tc.shell)
			out, err := exec.Command(shell, "-n", path).CombinedOutput()
			require.NoError(t, err, "%s -n: %s", tc.shell, out)
		})
	}

	t.Run("bash completes", func(t *testing.T) {
		script := filepath.Join(dir, "completion.bash")
		for _, tc := range []struct {
			line string
			want []string
		}{
			{"soniq-sidecar dead", []string{"dead-letter"}},
			{"soniq-sidecar sched", []string{"schedule"}},
			{"soniq-sidecar dead-letter ", []string{"export", "list", "purge", "replay"}},
			{"soniq-sidecar schedule p", []string{"pause"}},
			{"soniq-sidecar dead-letter export --format ", []string{"csv", "json"}},
			{"soniq-sidecar run --log-format ", []string{"auto", "json", "text"}},
			{"soniq-sidecar help dead-letter ", []string{"export", "list", "purge", "replay"}},
		} {
			got := bashComplete(t, dir, script, tc.line)
			assert.Equal(t, tc.want, got, "%q", tc.line)
		}
	})

	t.Run("fish completes", func(t *testing.T) {
		out, err := exec.Command(shellPath(t, "fish"), "--no-config", "-c",
			`set PATH $argv[1] $PATH; source $argv[2]; complete -C "soniq-sidecar dead-letter "`,
			dir, filepath.Join(dir, "completion.fish")).CombinedOutput()
		require.NoError(t, err, "%s", out)
		var got []string
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			name, _, _ := strings.Cut(line, "\t")
			got = append(got, name)
		}
		assert.Equal(t, []string{"export", "list", "purge", "replay"}, got)
	})

	t.Run("zsh registers it", func(t *testing.T) {
		out, err := exec.Command(shellPath(t, "zsh"), "-f", "-c",
			`autoload -U compinit && compinit -u -D && source "$1" && print -r -- "$_comps[soniq-sidecar]"`,
			"zsh", filepath.Join(dir, "completion.zsh")).CombinedOutput()
		require.NoError(t, err, "%s", out)
		assert.Equal(t, "_soniq-sidecar", strings.TrimSpace(string(out)))
	})
}

// cliOnPath puts a `soniq-sidecar` on a new directory that runs this test
// binary as the CLI, and returns the directory.
func cliOnPath(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	require.NoError(t, err)
	dir := t.TempDir()
	wrapper := "#!/bin/sh\n" + asCLI + "=1 exec '" + self + "' \"$@\"\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "soniq-sidecar"), []byte(wrapper), 0o755))
	return dir
}

// shellPath finds a shell; missing is a failure, never a skip (.ci/run
// installs them).
func shellPath(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found (apt-get install %s): %v", name, name, err)
	}
	return p
}

// bashCompletion is the bash-completion package's loader, which scripts
// generated for bash (cobra's among them) build on.
const bashCompletion = "/usr/share/bash-completion/bash_completion"

// bashComplete asks bash, with the bash-completion package and script
// loaded, for the completions of line as if Tab were pressed at its end.
func bashComplete(t *testing.T, dir, script, line string) []string {
	t.Helper()
	if _, err := os.Stat(bashCompletion); err != nil {
		t.Fatalf("bash-completion is not installed (apt-get install bash-completion): %v", err)
	}
	const driver = `source "$1"; source "$2"; line="$3"
COMP_LINE="$line"; COMP_POINT=${#line}
read -ra COMP_WORDS <<< "$line"
[[ "$line" == *" " ]] && COMP_WORDS+=("")
COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
COMPREPLY=()
__start_soniq-sidecar soniq-sidecar "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}" 2>/dev/null
printf '%s\n' "${COMPREPLY[@]}"`
	cmd := exec.Command(shellPath(t, "bash"), "--norc", "--noprofile", "-c", driver, "bash", bashCompletion, script, line)
	cmd.Env = append(os.Environ(), "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := cmd.Output()
	require.NoError(t, err, "bash completing %q", line)
	got := strings.Fields(string(out))
	slices.Sort(got)
	return got
}
