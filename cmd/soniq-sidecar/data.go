package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/backends/connect"
	"github.com/soniq-dev/soniq-sidecar/internal/config"
	"github.com/soniq-dev/soniq-sidecar/supervisor"
)

func newMigrateCmd(e env) *cobra.Command {
	var claimIndex, noClaimIndex bool
	var manifestPath string
	var keyPaths [][]string
	return dataCommand(e, dataSpec{
		use:   "migrate [--manifest FILE]",
		short: "Create Soniq's tables (and the claim-order index on Postgres)",
		long: `Create Soniq's tables if they are missing; on Postgres also the claim-order index
(additive to Soniq's schema; see docs/operations.md). Safe to run again. Behind
PgBouncer in transaction mode, give migrate a direct URL.

With --manifest FILE (Postgres), also build the indexes a sidecar running that
manifest makes at its start for its limits (docs/limits.md, Indexes): one of
the queued and one of the processing rows per job name, and per key path its
limits declare, each built concurrently (claims and enqueues go on) and built
again when an interrupted build left it invalid. On a large table, run it
before rolling out a manifest that adds a limit's key.`,
		example: `  soniq-sidecar migrate --database-url postgres://soniq@db:5432/app
  SONIQ_DATABASE_URL=postgres://soniq@db:5432/app soniq-sidecar migrate --no-claim-index
  soniq-sidecar migrate --manifest manifest.yaml`,
		flags: func(fs *pflag.FlagSet) {
			fs.BoolVar(&claimIndex, "claim-index", false, "Postgres: create the claim-order index (the default; an error on other backends)")
			fs.BoolVar(&noClaimIndex, "no-claim-index", false, "Postgres: do not create the claim-order index (additive to Soniq's schema; see docs/operations.md)")
			fs.StringVar(&manifestPath, "manifest", "", "Postgres: also build the indexes of the limits the manifest `FILE` declares, as a sidecar running it would at its start")
		},
		check: func([]string) error {
			if claimIndex && noClaimIndex {
				return usageErrorf("migrate: --claim-index and --no-claim-index contradict each other")
			}
			if manifestPath != "" {
				m, err := loadManifest(manifestPath)
				if err != nil {
					return err
				}
				keyPaths = supervisor.LimitKeyPaths(m)
			}
			return nil
		},
		plainOpen: true,
		run: func(ctx context.Context, d dataRun) error {
			if err := d.b.Migrate(ctx); err != nil {
				return fmt.Errorf("creating Soniq's tables: %w", err)
			}
			fmt.Fprintf(d.stdout, "migrated %s\n", connect.Redact(d.url()))
			ci, ok := d.b.(backends.ClaimIndexer)
			switch {
			case noClaimIndex:
			case !ok && claimIndex:
				return usageErrorf("migrate --claim-index: only the Postgres backend has it (SQLite queues stay small enough to sort)")
			case ok:
				if err := ci.CreateClaimIndex(ctx); err != nil {
					return err
				}
				fmt.Fprintln(d.stdout, "claim-order index soniq_sidecar_claim_order on soniq_jobs (priority, scheduled_at NULLS FIRST, created_at) WHERE status = 'queued': present (skip with --no-claim-index)")
			}
			if manifestPath != "" {
				return migrateLimitIndexes(ctx, d, manifestPath, keyPaths)
			}
			return nil
		},
	})
}

// migrateLimitIndexes is `migrate --manifest`: the limits' indexes of the
// manifest's key paths, as a sidecar running it builds them at its start.
func migrateLimitIndexes(ctx context.Context, d dataRun, manifestPath string, paths [][]string) error {
	li, ok := d.b.(backends.LimitIndexer)
	if !ok {
		return usageErrorf("migrate --manifest: only the Postgres backend indexes the limits' keys (SQLite claims read the rows in claim order)")
	}
	if len(paths) == 0 {
		fmt.Fprintf(d.stdout, "%s declares no limits: no limits' index to build\n", manifestPath)
		return nil
	}
	if err := li.PrepareLimitKeys(ctx, paths); err != nil {
		return fmt.Errorf("building the limits' indexes of %s: %w", manifestPath, err)
	}
	var keys []string
	for _, p := range paths {
		if len(p) > 0 {
			keys = append(keys, backends.KeyPath(p))
		}
	}
	what := "the limits' indexes of the queued and processing rows by job name"
	if len(keys) > 0 {
		what += ", and by key " + strings.Join(keys, ", ")
	}
	fmt.Fprintf(d.stdout, "%s: present and valid\n", what)
	return nil
}

// parseArgsJSON validates --args: a JSON object. Errors name the byte offset.
func parseArgsJSON(s string) (json.RawMessage, error) {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return nil, fmt.Errorf("--args is not valid JSON at offset %d: %v", se.Offset, se)
		}
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("--args is empty: want a JSON object such as '{\"a\":1}'")
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("--args is not valid JSON at offset %d: unexpected end of input", len(s))
		}
		return nil, fmt.Errorf("--args is not valid JSON: %v", err)
	}
	if off := dec.InputOffset(); strings.TrimSpace(s[off:]) != "" {
		return nil, fmt.Errorf("--args is not valid JSON at offset %d: trailing data after the object", off)
	}
	if _, ok := v.(map[string]any); !ok {
		return nil, fmt.Errorf("--args must be a JSON object (job arguments are keyword arguments), got %s", jsonKind(v))
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, []byte(s)); err != nil {
		return nil, fmt.Errorf("--args: %w", err)
	}
	return buf.Bytes(), nil
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case []any:
		return "an array"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	}
	return fmt.Sprintf("%T", v)
}

// parseDelay reads --delay as every duration is read: a Go duration
// ("90s", "5m") or plain seconds ("0.5").
func parseDelay(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := config.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("--delay %q: %w", s, err)
	}
	return d, nil
}

func newEnqueueCmd(e env) *cobra.Command {
	var (
		argsJSON, queue, delay, dedup string
		priority, maxAttempts         int
		unique, asJSON                bool
		rawArgs                       json.RawMessage
		d                             time.Duration
	)
	return dataCommand(e, dataSpec{
		use:   "enqueue NAME",
		short: "Queue one job; prints its id",
		long: `Queue one job named NAME with --args (a JSON object) and print its id. With
--dedup-key or --unique, a job already queued under the same key (or the same
name and args) is not queued again: its id is printed instead.`,
		example: `  soniq-sidecar enqueue send.mail --args '{"to":"a@example.com"}'
  soniq-sidecar enqueue report.build --queue reports --delay 5m --json
  soniq-sidecar enqueue invoice.sync --args '{"tenant":42}' --unique`,
		flags: func(fs *pflag.FlagSet) {
			fs.StringVar(&argsJSON, "args", "{}", "job arguments, a `JSON` object")
			fs.StringVar(&queue, "queue", "default", "queue")
			fs.IntVar(&priority, "priority", 100, "priority (lower runs first)")
			fs.IntVar(&maxAttempts, "max-attempts", 3, "maximum attempts")
			fs.StringVar(&delay, "delay", "", "run no earlier than now + `DUR` (30s, 5m, or seconds)")
			fs.StringVar(&dedup, "dedup-key", "", "at most one queued job per `KEY`")
			fs.BoolVar(&unique, "unique", false, "at most one queued job with this name and these args (Soniq's unique_job, matched by args_hash); a duplicate prints the queued job's id")
			fs.BoolVar(&asJSON, "json", false, "print the whole row as JSON")
		},
		args: func(pos []string) error {
			if len(pos) != 1 {
				return usageErrorf("enqueue: want exactly one job NAME, got %d arguments", len(pos))
			}
			if strings.TrimSpace(pos[0]) == "" {
				return usageErrorf("enqueue: the job NAME is empty")
			}
			return nil
		},
		check: func([]string) (err error) {
			if rawArgs, err = parseArgsJSON(argsJSON); err != nil {
				return err
			}
			if d, err = parseDelay(delay); err != nil {
				return err
			}
			if maxAttempts < 1 {
				return usageErrorf("--max-attempts must be at least 1, got %d", maxAttempts)
			}
			if queue == "" {
				return usageErrorf("--queue must not be empty")
			}
			return nil
		},
		run: func(ctx context.Context, r dataRun) error {
			job, err := r.b.Enqueue(ctx, backends.EnqueueParams{
				Name: strings.TrimSpace(r.args[0]), Args: rawArgs, Queue: queue, Priority: &priority,
				MaxAttempts: &maxAttempts, Delay: d, DedupKey: dedup, UniqueJob: unique,
			})
			if err != nil {
				return err // the backend names the job and the database
			}
			if asJSON {
				return writeJSON(r.stdout, job)
			}
			fmt.Fprintln(r.stdout, job.ID)
			return nil
		},
	})
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("writing JSON: %w", err)
	}
	return nil
}

func newStatusCmd(e env) *cobra.Command {
	var asJSON bool
	return dataCommand(e, dataSpec{
		use:   "status",
		short: "Count the jobs by status",
		long: `Count the jobs by status: total, queued, processing, done, dead_letter and
cancelled. The database it read is named on stderr.`,
		example: `  soniq-sidecar status
  soniq-sidecar status --json | jq .queued`,
		flags: func(fs *pflag.FlagSet) {
			fs.BoolVar(&asJSON, "json", false, "print the six canonical keys as one JSON object")
		},
		run: func(ctx context.Context, d dataRun) error {
			st, err := d.b.Stats(ctx)
			if err != nil {
				return err // the backend says what it was reading
			}
			fmt.Fprintf(d.stderr, "database %s\n", describeDatabase(d.url()))
			if asJSON {
				// Stats marshals its six keys in the canonical order (docs/compatibility.md).
				out, err := json.Marshal(st)
				if err != nil {
					return fmt.Errorf("encoding stats: %w", err)
				}
				fmt.Fprintln(d.stdout, string(out))
				return nil
			}
			tw := tabwriter.NewWriter(d.stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
			values := [...]int64{st.Total, st.Queued, st.Processing, st.Done, st.DeadLetter, st.Cancelled}
			for i, k := range backends.StatsKeys {
				fmt.Fprintf(tw, "%s\t%d\t\n", k, values[i])
			}
			return tw.Flush()
		},
	})
}

// describeDatabase names a database for people: the URL without its
// password, and for a SQLite file its absolute path.
func describeDatabase(url string) string {
	if path, ok := connect.SQLitePath(url); ok {
		if abs, err := filepath.Abs(path); err == nil && abs != path {
			return url + " (" + abs + ")"
		}
	}
	return connect.Redact(url)
}

func firstLine(s *string, max int) string {
	if s == nil {
		return "-"
	}
	line, _, _ := strings.Cut(*s, "\n")
	if len(line) > max {
		line = line[:max] + "…"
	}
	return line
}

// newJobCmd is `job ID`: one job's row, its status, attempts, last error
// and result.
func newJobCmd(e env) *cobra.Command {
	var asJSON bool
	return dataCommand(e, dataSpec{
		use:   "job ID",
		short: "Show one job: status, attempts, last error and result",
		long: `Show what became of one job: its status, attempts, last error and result. A job
in the dead-letter table is shown from there, with the command that replays it.`,
		example: `  soniq-sidecar job 3f1e1f7e-2a51-4c36-9d1e-8a1b2c3d4e5f
  soniq-sidecar job 3f1e1f7e-2a51-4c36-9d1e-8a1b2c3d4e5f --json`,
		flags: func(fs *pflag.FlagSet) {
			fs.BoolVar(&asJSON, "json", false, "print the whole row as one JSON object")
		},
		args: func(pos []string) error {
			if len(pos) != 1 {
				return usageErrorf("job: want one job id, got %d arguments", len(pos))
			}
			return nil
		},
		run: func(ctx context.Context, d dataRun) error {
			j, err := d.b.Get(ctx, d.args[0])
			if errors.Is(err, backends.ErrNotFound) {
				// A dead-lettered job has left soniq_jobs for the dead-letter table.
				return printDeadLetterJob(ctx, d.env, d.b, d.args[0], asJSON, d.url())
			}
			if err != nil {
				return err
			}
			if asJSON {
				out, err := json.Marshal(j)
				if err != nil {
					return fmt.Errorf("encoding job %s: %w", j.ID, err)
				}
				fmt.Fprintln(d.stdout, string(out))
				return nil
			}
			tw := tabwriter.NewWriter(d.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintf(tw, "id\t%s\njob_name\t%s\nqueue\t%s\nstatus\t%s\nattempts\t%d of %d\n", j.ID, j.Name, j.Queue, j.Status, j.Attempts, j.MaxAttempts)
			if j.LastError != nil {
				fmt.Fprintf(tw, "last_error\t%s\n", strings.ReplaceAll(*j.LastError, "\n", "\n\t"))
			}
			if j.Result != nil {
				fmt.Fprintf(tw, "result\t%s\n", j.Result)
			}
			return tw.Flush()
		},
	})
}

func printDeadLetterJob(ctx context.Context, e env, b backends.Backend, id string, asJSON bool, url string) error {
	// Streamed, so a large dead-letter table is searched in bounded memory.
	var (
		d     backends.DeadLetterJob
		found = errors.New("found")
	)
	err := b.EachDeadLetter(ctx, backends.DeadLetterFilter{}, 0, func(row backends.DeadLetterJob) error {
		if strings.EqualFold(row.ID, id) {
			d = row
			return found
		}
		return nil
	})
	switch {
	case err == nil:
		return fmt.Errorf("no job %s in %s (done rows are deleted after their result_ttl)", id, describeDatabase(url))
	case !errors.Is(err, found):
		return err
	}
	if asJSON {
		out, err := json.Marshal(struct {
			Status string `json:"status"`
			backends.DeadLetterJob
		}{"dead_letter", d})
		if err != nil {
			return fmt.Errorf("encoding dead-letter job %s: %w", d.ID, err)
		}
		fmt.Fprintln(e.stdout, string(out))
		return nil
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "id\t%s\njob_name\t%s\nqueue\t%s\nstatus\tdead_letter (%s, moved %s; replay with: dead-letter replay %s)\nattempts\t%d of %d\n",
		d.ID, d.Name, d.Queue, d.Reason, d.MovedAt.Format(time.RFC3339), d.ID, d.Attempts, d.MaxAttempts)
	if d.LastError != nil {
		fmt.Fprintf(tw, "last_error\t%s\n", strings.ReplaceAll(*d.LastError, "\n", "\n\t"))
	}
	return tw.Flush()
}
