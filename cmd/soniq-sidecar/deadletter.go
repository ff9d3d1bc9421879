package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/internal/config"
)

// bulkConfirmAbove is the selection size above which replay and purge ask
// before they act (or, with no terminal to ask on, insist on --yes).
const bulkConfirmAbove = 100

// dryRunShown is how many rows a dry run lists before it says "and N more".
const dryRunShown = 10

const deadLetterUsage = `dead-letter: want a subcommand:
  dead-letter list   [SELECTORS] [--limit N] [--json]
  dead-letter replay ID | replay (--all | SELECTORS) [--dry-run] [--yes]
  dead-letter purge  ID | purge  (--all | SELECTORS) [--dry-run] [--yes]
  dead-letter export [SELECTORS] [--format csv|json] [--output FILE]
SELECTORS (ANDed; each of --job-name and --queue may repeat):
  --job-name NAME  --queue Q  --since DUR (moved within DUR)  --older-than DUR (moved more than DUR ago)`

// listFlag collects a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Type() string { return "strings" }

func (l *listFlag) Set(v string) error {
	v = strings.TrimSpace(v)
	if v == "" {
		return errors.New("must not be empty")
	}
	*l = append(*l, v)
	return nil
}

// ageFlag reads a duration as every duration is read (30m, 2h, plain
// seconds), plus whole or fractional days ("7d"), the unit Soniq's
// cleanup --days counts in. It keeps the text given, for messages.
type ageFlag struct {
	d    time.Duration
	text string
}

func (a *ageFlag) String() string {
	if a == nil {
		return ""
	}
	return a.text
}

func (a *ageFlag) Type() string { return "duration" }

func (a *ageFlag) Set(v string) error {
	v = strings.TrimSpace(v)
	if days, ok := strings.CutSuffix(v, "d"); ok {
		n, err := strconv.ParseFloat(days, 64)
		if err != nil || n <= 0 || n > 100000 {
			return fmt.Errorf("%q: want a positive number of days such as 7d", v)
		}
		a.d, a.text = time.Duration(n*float64(24*time.Hour)), v
		return nil
	}
	d, err := config.ParseDuration(v)
	if err != nil {
		return err
	}
	if d <= 0 {
		return fmt.Errorf("%q: must be more than zero", v)
	}
	a.d, a.text = d, v
	return nil
}

// selectors are the flags that choose dead-letter rows.
type selectors struct {
	names, queues    listFlag
	since, olderThan ageFlag
}

func (s *selectors) register(fs *pflag.FlagSet) {
	fs.Var(&s.names, "job-name", "select rows of this job `NAME` (repeat for several)")
	fs.Var(&s.queues, "queue", "select rows of queue `Q` (repeat for several)")
	fs.Var(&s.since, "since", "select rows moved to the dead-letter table within the last `DUR` (30m, 2h, 7d)")
	fs.Var(&s.olderThan, "older-than", "select rows moved more than `DUR` ago (as Soniq's cleanup --days)")
}

func (s *selectors) any() bool {
	return len(s.names) > 0 || len(s.queues) > 0 || s.since.d > 0 || s.olderThan.d > 0
}

func (s *selectors) filter() backends.DeadLetterFilter {
	return backends.DeadLetterFilter{JobNames: s.names, Queues: s.queues, Since: s.since.d, OlderThan: s.olderThan.d}
}

// describe names the selection for people: "every dead-letter job", or
// the conditions it was given.
func (s *selectors) describe() string {
	var parts []string
	if len(s.names) > 0 {
		parts = append(parts, "job name "+strings.Join(s.names, " or "))
	}
	if len(s.queues) > 0 {
		parts = append(parts, "queue "+strings.Join(s.queues, " or "))
	}
	if s.since.d > 0 {
		parts = append(parts, "moved within the last "+s.since.text)
	}
	if s.olderThan.d > 0 {
		parts = append(parts, "moved more than "+s.olderThan.text+" ago")
	}
	if len(parts) == 0 {
		return "dead-letter jobs (all)"
	}
	return "dead-letter jobs (" + strings.Join(parts, "; ") + ")"
}

const deadLetterLong = `The dead-letter table holds the jobs that failed their last attempt (or were
dead-lettered by a handler). list and export read it; replay queues rows again as
new jobs; purge deletes them. A selection is --all or SELECTORS, ANDed; each of
--job-name and --queue may repeat:
  --job-name NAME  --queue Q  --since DUR (moved within DUR)  --older-than DUR (moved more than DUR ago)
DUR is 30m, 2h, 7d or seconds. Replay and purge of more than 100 rows ask first,
or need --yes when standard input is not a terminal.`

func newDeadLetterCmd(e env) *cobra.Command {
	return newGroup("dead-letter", "List, replay, purge or export dead-lettered jobs", deadLetterLong,
		deadLetterUsage, "list, replay, purge or export",
		newDeadLetterListCmd(e), newDeadLetterBulkCmd(e, "replay"), newDeadLetterBulkCmd(e, "purge"), newDeadLetterExportCmd(e))
}

func newDeadLetterListCmd(e env) *cobra.Command {
	var (
		sel    selectors
		limit  int
		asJSON bool
	)
	return dataCommand(e, dataSpec{
		use:   "list [SELECTORS]",
		short: "List dead-letter jobs, newest first",
		long:  "List the dead-letter jobs the selectors choose (all when none is given), at most --limit of them.",
		example: `  soniq-sidecar dead-letter list --since 1h
  soniq-sidecar dead-letter list --job-name send.mail --queue mail --limit 0 --json`,
		flags: func(fs *pflag.FlagSet) {
			sel.register(fs)
			fs.IntVar(&limit, "limit", 100, "at most N rows (0 = all)")
			fs.BoolVar(&asJSON, "json", false, "print JSON lines")
		},
		check: func([]string) error {
			if limit < 0 {
				return usageErrorf("dead-letter list: --limit must not be negative, got %d", limit)
			}
			return nil
		},
		run: func(ctx context.Context, d dataRun) error {
			return listDeadLetters(ctx, d.env, d.b, sel.filter(), limit, asJSON)
		},
	})
}

func newDeadLetterExportCmd(e env) *cobra.Command {
	var (
		sel            selectors
		format, output string
	)
	cmd := dataCommand(e, dataSpec{
		use:   "export [SELECTORS]",
		short: "Write dead-letter jobs as CSV or JSON",
		long: `Write the dead-letter jobs the selectors choose (all when none is given) as CSV
(Soniq's export columns) or a JSON array, streamed in bounded memory. With --output
the file is replaced only once the export is complete. A line on stderr says how
many rows were written.`,
		example: `  soniq-sidecar dead-letter export --older-than 7d --output old.csv
  soniq-sidecar dead-letter export --queue mail --format json | jq length`,
		flags: func(fs *pflag.FlagSet) {
			sel.register(fs)
			fs.StringVar(&format, "format", "csv", "csv or json")
			fs.StringVar(&output, "output", "", "write to `FILE` (replaced whole once complete) instead of standard output")
		},
		check: func([]string) error {
			if format != "csv" && format != "json" {
				return usageErrorf("dead-letter export: --format %q: want csv or json", format)
			}
			return nil
		},
		run: func(ctx context.Context, d dataRun) error {
			return exportDeadLetters(ctx, d.env, d.b, &sel, format, output)
		},
	})
	_ = cmd.RegisterFlagCompletionFunc("format", cobra.FixedCompletions([]cobra.Completion{"csv", "json"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// newDeadLetterBulkCmd is replay or purge (sub): one row by its ID, or a
// selection.
func newDeadLetterBulkCmd(e env, sub string) *cobra.Command {
	var (
		sel            selectors
		all, dry, yes  bool
		bulk           bool
		short, example string
	)
	if sub == "replay" {
		short = "Queue dead-letter jobs again as new jobs"
		example = `  soniq-sidecar dead-letter replay 3f1e1f7e-2a51-4c36-9d1e-8a1b2c3d4e5f
  soniq-sidecar dead-letter replay --job-name send.mail --since 2h --dry-run
  soniq-sidecar dead-letter replay --job-name send.mail --since 2h --yes`
	} else {
		short = "Delete dead-letter jobs for good"
		example = `  soniq-sidecar dead-letter purge 3f1e1f7e-2a51-4c36-9d1e-8a1b2c3d4e5f
  soniq-sidecar dead-letter purge --older-than 30d --dry-run
  soniq-sidecar dead-letter purge --older-than 30d --yes`
	}
	return dataCommand(e, dataSpec{
		use:   sub + " (ID | --all | SELECTORS)",
		short: short,
		long: short + `: one row by its ID, or a selection (--all, or SELECTORS: see
soniq-sidecar dead-letter --help) in one transaction. --dry-run lists what a
selection would ` + sub + ` and changes nothing. More than 100 rows ask for
confirmation on a terminal, and need --yes otherwise.`,
		example: example,
		flags: func(fs *pflag.FlagSet) {
			sel.register(fs)
			fs.BoolVar(&all, "all", false, "select every dead-letter job (the selectors narrow it)")
			fs.BoolVar(&dry, "dry-run", false, "say what would be "+pastTense(sub)+" and change nothing")
			fs.BoolVar(&yes, "yes", false, fmt.Sprintf("act on more than %d rows without asking (required when standard input is not a terminal)", bulkConfirmAbove))
		},
		args: func(pos []string) error {
			bulk = all || sel.any()
			switch {
			case bulk && len(pos) > 0:
				return usageErrorf("dead-letter %s: give one job ID or a selection (--all, --job-name, --queue, --since, --older-than), not both", sub)
			case !bulk && len(pos) != 1:
				return usageErrorf("dead-letter %s: want one job ID, or --all, or selectors (--job-name, --queue, --since, --older-than)", sub)
			case !bulk && dry:
				return usageErrorf("dead-letter %s: --dry-run applies to a selection; `soniq-sidecar job %s` shows one row", sub, pos[0])
			}
			return nil
		},
		run: func(ctx context.Context, d dataRun) error {
			switch {
			case bulk:
				return bulkDeadLetters(ctx, d.env, d.b, sub, &sel, dry, yes)
			case sub == "replay":
				id, err := d.b.ReplayDeadLetter(ctx, d.args[0])
				if err != nil {
					return err // names the job; not found is a failure (exit 1), not a usage error
				}
				fmt.Fprintln(d.stdout, id)
				return nil
			default: // purge ID
				if err := d.b.PurgeDeadLetter(ctx, d.args[0]); err != nil {
					return err
				}
				fmt.Fprintf(d.stdout, "purged %s\n", d.args[0])
				return nil
			}
		},
	})
}

func pastTense(sub string) string {
	if sub == "replay" {
		return "replayed"
	}
	return "purged"
}

func listDeadLetters(ctx context.Context, e env, b backends.Backend, f backends.DeadLetterFilter, limit int, asJSON bool) error {
	if asJSON {
		w := bufio.NewWriter(e.stdout)
		err := b.EachDeadLetter(ctx, f, limit, func(d backends.DeadLetterJob) error { return writeJSON(w, d) })
		if ferr := w.Flush(); err == nil && ferr != nil {
			err = fmt.Errorf("writing JSON: %w", ferr)
		}
		return err
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tJOB\tQUEUE\tATTEMPTS\tREASON\tMOVED AT\tREPLAYS\tLAST ERROR")
	err := b.EachDeadLetter(ctx, f, limit, func(r backends.DeadLetterJob) error {
		_, err := fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%s\t%s\t%d\t%s\n", r.ID, r.Name, r.Queue, r.Attempts, r.MaxAttempts,
			r.Reason, r.MovedAt.UTC().Format(time.RFC3339), r.ResurrectionCount, firstLine(r.LastError, 60))
		return err
	})
	if err != nil {
		return err
	}
	return tw.Flush()
}

// bulkDeadLetters replays or purges a selection: it counts the rows, lists
// them for a dry run, asks above bulkConfirmAbove rows, then acts in one
// transaction.
func bulkDeadLetters(ctx context.Context, e env, b backends.Backend, sub string, sel *selectors, dry, yes bool) error {
	f := sel.filter()
	what := sel.describe()
	n, err := b.CountDeadLetters(ctx, f)
	if err != nil {
		return err
	}
	if n == 0 {
		fmt.Fprintf(e.stdout, "no rows: nothing to %s (%s)\n", sub, what)
		return nil
	}
	if dry {
		fmt.Fprintf(e.stdout, "dry run: would %s %d %s; nothing changed\n", sub, n, what)
		tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tJOB\tQUEUE\tREASON\tMOVED AT\tREPLAYS")
		err := b.EachDeadLetter(ctx, f, dryRunShown, func(r backends.DeadLetterJob) error {
			_, err := fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\n", r.ID, r.Name, r.Queue, r.Reason,
				r.MovedAt.UTC().Format(time.RFC3339), r.ResurrectionCount)
			return err
		})
		if err != nil {
			return err
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if n > dryRunShown {
			fmt.Fprintf(e.stdout, "… and %d more\n", n-dryRunShown)
		}
		return nil
	}
	if n > bulkConfirmAbove && !yes {
		if !e.stdinTerminal {
			return usageErrorf("dead-letter %s: %d rows match (%s), more than %d: standard input is not a terminal to confirm on, "+
				"so pass --yes to %s them (--dry-run lists them)", sub, n, what, bulkConfirmAbove, sub)
		}
		if !confirm(e, bulkPrompt(sub, n, what)) {
			return exitCodeError{code: exitError, msg: fmt.Sprintf("dead-letter %s: not confirmed; nothing %s", sub, pastTense(sub))}
		}
	}
	var done int64
	if sub == "replay" {
		done, err = b.ReplayDeadLetters(ctx, f)
	} else {
		done, err = b.PurgeDeadLetters(ctx, f)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "%s %d %s\n", pastTense(sub), done, what)
	if done != n {
		fmt.Fprintf(e.stderr, "soniq-sidecar: %d rows matched when counted, %d when %s: the table changed meanwhile\n", n, done, pastTense(sub))
	}
	return nil
}

func bulkPrompt(sub string, n int64, what string) string {
	if sub == "replay" {
		return fmt.Sprintf("Replay %d %s? Each is queued again as a new job; if what failed them is not fixed they will fail again. [y/N] ", n, what)
	}
	return fmt.Sprintf("Purge %d %s? They are deleted for good. [y/N] ", n, what)
}

// confirm asks on the terminal (the prompt on stderr, so it shows when
// stdout is piped) and reads one line: only y or yes agree.
func confirm(e env, prompt string) bool {
	fmt.Fprint(e.stderr, prompt)
	line, err := bufio.NewReader(e.stdin).ReadString('\n')
	if err != nil && line == "" {
		fmt.Fprintln(e.stderr)
		return false
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true
	}
	return false
}

// deadLetterCSVHeader is the CSV export's header: the table's column
// names, in Soniq's export order, then created_at.
var deadLetterCSVHeader = []string{"id", "job_name", "args", "queue", "priority", "max_attempts", "attempts",
	"last_error", "dead_letter_reason", "original_created_at", "moved_to_dead_letter_at",
	"resurrection_count", "last_resurrection_at", "tags", "created_at"}

// exportDeadLetters writes the selected rows as they are read: one CSV
// record or one JSON array element at a time through a buffered writer,
// so memory stays bounded however many rows there are. With --output the
// rows go to a temporary file beside FILE that replaces it only once the
// export is complete.
func exportDeadLetters(ctx context.Context, e env, b backends.Backend, sel *selectors, format, output string) (err error) {
	out := e.stdout
	var tmp *os.File
	if output != "" {
		tmp, err = os.CreateTemp(filepath.Dir(output), "."+filepath.Base(output)+".*.partial")
		if err != nil {
			return fmt.Errorf("dead-letter export: creating the output beside %s: %w", output, err)
		}
		defer func() {
			if err != nil {
				_ = tmp.Close()
				_ = os.Remove(tmp.Name())
			}
		}()
		// A new file gets the usual mode (CreateTemp makes it private);
		// a replaced one keeps its own.
		mode := os.FileMode(0o644)
		if st, err := os.Stat(output); err == nil {
			mode = st.Mode().Perm()
		}
		if err := tmp.Chmod(mode); err != nil {
			return fmt.Errorf("dead-letter export: creating the output beside %s: %w", output, err)
		}
		out = tmp
	}
	w := bufio.NewWriterSize(out, 64*1024)
	var n int64
	switch format {
	case "json":
		n, err = exportJSON(ctx, w, b, sel.filter())
	default:
		n, err = exportCSV(ctx, w, b, sel.filter())
	}
	if err != nil {
		return fmt.Errorf("dead-letter export after %d rows: %w", n, err)
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("dead-letter export: writing: %w", err)
	}
	dest := "standard output"
	if tmp != nil {
		if err := tmp.Sync(); err != nil {
			return fmt.Errorf("dead-letter export: writing %s: %w", output, err)
		}
		if err := tmp.Close(); err != nil {
			return fmt.Errorf("dead-letter export: writing %s: %w", output, err)
		}
		if err := os.Rename(tmp.Name(), output); err != nil {
			return fmt.Errorf("dead-letter export: replacing %s: %w", output, err)
		}
		dest = output
	}
	fmt.Fprintf(e.stderr, "exported %d %s to %s (%s)\n", n, sel.describe(), dest, format)
	return nil
}

func exportJSON(ctx context.Context, w *bufio.Writer, b backends.Backend, f backends.DeadLetterFilter) (int64, error) {
	var (
		n   int64
		buf bytes.Buffer
	)
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if _, err := w.WriteString("[\n"); err != nil {
		return 0, err
	}
	err := b.EachDeadLetter(ctx, f, 0, func(d backends.DeadLetterJob) error {
		if n > 0 {
			if _, err := w.WriteString(",\n"); err != nil {
				return err
			}
		}
		buf.Reset()
		if err := enc.Encode(d); err != nil {
			return fmt.Errorf("encoding dead-letter job %s: %w", d.ID, err)
		}
		if _, err := w.Write(bytes.TrimSuffix(buf.Bytes(), []byte("\n"))); err != nil {
			return err
		}
		n++
		return nil
	})
	if err != nil {
		return n, err
	}
	if n > 0 {
		if err := w.WriteByte('\n'); err != nil {
			return n, err
		}
	}
	_, err = w.WriteString("]\n")
	return n, err
}

func exportCSV(ctx context.Context, w io.Writer, b backends.Backend, f backends.DeadLetterFilter) (int64, error) {
	cw := csv.NewWriter(w)
	if err := cw.Write(deadLetterCSVHeader); err != nil {
		return 0, err
	}
	var n int64
	record := make([]string, len(deadLetterCSVHeader))
	err := b.EachDeadLetter(ctx, f, 0, func(d backends.DeadLetterJob) error {
		record[0], record[1], record[2], record[3] = d.ID, d.Name, string(d.Args), d.Queue
		record[4], record[5], record[6] = strconv.Itoa(d.Priority), strconv.Itoa(d.MaxAttempts), strconv.Itoa(d.Attempts)
		record[7], record[8] = deref(d.LastError), d.Reason
		record[9], record[10] = csvTime(&d.OriginalCreatedAt), csvTime(&d.MovedAt)
		record[11], record[12] = strconv.Itoa(d.ResurrectionCount), csvTime(d.LastResurrectionAt)
		record[13], record[14] = string(d.Tags), csvTime(&d.CreatedAt)
		if err := cw.Write(record); err != nil {
			return err
		}
		n++
		return nil
	})
	if err != nil {
		return n, err
	}
	cw.Flush()
	return n, cw.Error()
}

// csvTime renders a timestamp as RFC 3339 in UTC, or "" for NULL (and for
// the zero time a NULL created_at reads as).
func csvTime(t *time.Time) string {
	if t == nil || t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
