// Command soniq-sidecar claims Soniq jobs and runs them in long-lived Python
// or Node handler processes. See README.md and docs/.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/term"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// Exit codes (README.md, "Exit codes").
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// usageError marks errors that exit with status 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// env is the process environment as the commands see it; tests supply their own.
type env struct {
	stdout, stderr io.Writer
	lookupEnv      func(string) (string, bool)
	// stdin answers confirmation prompts, which are only asked when
	// stdinTerminal says a person can answer them.
	stdin         io.Reader
	stdinTerminal bool
}

func main() {
	e := env{stdout: os.Stdout, stderr: os.Stderr, lookupEnv: os.LookupEnv,
		stdin: os.Stdin, stdinTerminal: term.IsTerminal(int(os.Stdin.Fd()))}
	// No signal context here: `run` handles SIGTERM/SIGINT itself (a second
	// signal means something different from the first), and the short data
	// commands keep the default behaviour of dying on a signal.
	os.Exit(runMain(context.Background(), e, os.Args[1:]))
}

// runMain runs a command line and returns the exit code. Errors are
// printed here, once: a usage error exits 2, an exitCodeError its own
// code, anything else 1.
func runMain(ctx context.Context, e env, args []string) int {
	root := newRootCmd(e)
	root.SetArgs(longFlagsWithOneDash(root, args))
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(e.stderr, "soniq-sidecar: %v\n", err)
		return exitUsage
	}
	var ce exitCodeError
	if errors.As(err, &ce) {
		if ce.msg != "" {
			fmt.Fprintf(e.stderr, "soniq-sidecar: %s\n", ce.msg)
		}
		return ce.code
	}
	fmt.Fprintf(e.stderr, "soniq-sidecar: %v\n", err)
	return exitError
}

// exitCodeError carries an explicit exit code (e.g. `manifest check` → 2).
type exitCodeError struct {
	code int
	msg  string
}

func (e exitCodeError) Error() string { return e.msg }
