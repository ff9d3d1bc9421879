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

const usage = `soniq-sidecar — run Soniq jobs in Python and Node handler processes

Usage:
  soniq-sidecar run        [--manifest FILE (default ./manifest.yaml)] [--database-url URL] [--queues a,b] [--metrics-addr ADDR]
                           [--log-format auto|text|json] [--instance NAME] [--database-wait DUR] [--once] [--dead-letter-unknown]
                           [--database-pooler session|transaction] [--listen-url URL] [--scheduler=false]
  soniq-sidecar migrate    [--database-url URL] [--no-claim-index]
  soniq-sidecar enqueue    NAME [--args JSON] [--queue Q] [--priority N] [--max-attempts N] [--delay DUR] [--dedup-key K] [--unique] [--json]
  soniq-sidecar status     [--json]
  soniq-sidecar job        ID [--json]              (a job's status, attempts, last error and result)
  soniq-sidecar cancel     ID [--wait DUR]          (a queued job at once; a running async job by its sidecar)
  soniq-sidecar dead-letter list   [SELECTORS] [--limit N] [--json]
  soniq-sidecar dead-letter replay ID | replay (--all | SELECTORS) [--dry-run] [--yes]
  soniq-sidecar dead-letter purge  ID | purge  (--all | SELECTORS) [--dry-run] [--yes]
  soniq-sidecar dead-letter export [SELECTORS] [--format csv|json] [--output FILE]
                           SELECTORS: --job-name NAME, --queue Q (each repeatable), --since DUR, --older-than DUR
  soniq-sidecar schedule   add NAME (--every DUR | --cron EXPR) [--args JSON] [--queue Q] [--priority N] [--max-attempts N]
  soniq-sidecar schedule   list [--json] | pause NAME | resume NAME | remove NAME
  soniq-sidecar manifest check FILE
  soniq-sidecar version

The database is --database-url, else $SONIQ_DATABASE_URL, else sqlite:soniq.db in the
working directory. postgres:// and postgresql:// select Postgres; sqlite:PATH (or a
path ending in .db) selects SQLite. On Postgres only migrate changes the schema.
Behind PgBouncer in transaction mode set SONIQ_DATABASE_POOLER=transaction (and
optionally SONIQ_DATABASE_LISTEN_URL); migrate needs a direct URL.
`

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

// runMain dispatches a command line and returns the exit code.
func runMain(ctx context.Context, e env, args []string) int {
	err := dispatch(ctx, e, args)
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

func dispatch(ctx context.Context, e env, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(e.stderr, usage)
		return exitCodeError{code: exitUsage}
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "migrate":
		return cmdMigrate(ctx, e, rest)
	case "enqueue":
		return cmdEnqueue(ctx, e, rest)
	case "status":
		return cmdStatus(ctx, e, rest)
	case "job":
		return cmdJob(ctx, e, rest)
	case "cancel":
		return cmdCancel(ctx, e, rest)
	case "dead-letter":
		return cmdDeadLetter(ctx, e, rest)
	case "schedule":
		return cmdSchedule(ctx, e, rest)
	case "run":
		return cmdRun(ctx, e, rest)
	case "manifest":
		return cmdManifest(ctx, e, rest)
	case "version", "--version", "-v":
		fmt.Fprintf(e.stdout, "soniq-sidecar %s\n", version)
		return nil
	case "help", "-h", "--help":
		fmt.Fprint(e.stdout, usage)
		return nil
	default:
		fmt.Fprint(e.stderr, usage)
		return usageErrorf("unknown command %q", cmd)
	}
}
