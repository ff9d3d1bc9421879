package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/backends/connect"
	"github.com/soniq-dev/soniq-sidecar/internal/config"
)

// newFlagSet returns a FlagSet whose errors become usage errors.
func newFlagSet(e env, name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	return fs
}

// parseInterspersed parses flags and positional arguments in any order
// (`enqueue NAME --args …` and `enqueue --args … NAME` both work).
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				// The flag package printed the flags; asking is not an error.
				return nil, exitCodeError{code: exitOK}
			}
			return nil, usageError{fmt.Errorf("%s: %w", fs.Name(), err)}
		}
		args = fs.Args()
		if len(args) == 0 {
			return positional, nil
		}
		positional = append(positional, args[0])
		args = args[1:]
	}
}

func cmdMigrate(ctx context.Context, e env, args []string) error {
	fs := newFlagSet(e, "migrate")
	db := config.RegisterFlags(fs, config.CommandData)
	claimIndex := fs.Bool("claim-index", false, "Postgres: create the claim-order index (the default; an error on other backends)")
	noClaimIndex := fs.Bool("no-claim-index", false, "Postgres: do not create the claim-order index (additive to Soniq's schema; see docs/operations.md)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	opts, err := db.Options(e.lookupEnv)
	if err != nil {
		return usageError{err}
	}
	if len(pos) > 0 {
		return usageErrorf("migrate: unexpected argument %q", pos[0])
	}
	b, err := openBackend(ctx, opts)
	if err != nil {
		return err
	}
	defer b.Close()
	if err := b.Migrate(ctx); err != nil {
		return fmt.Errorf("creating Soniq's tables: %w", err)
	}
	fmt.Fprintf(e.stdout, "migrated %s\n", connect.Redact(databaseURL(opts)))
	if *claimIndex && *noClaimIndex {
		return usageErrorf("migrate: --claim-index and --no-claim-index contradict each other")
	}
	ci, ok := b.(backends.ClaimIndexer)
	switch {
	case *noClaimIndex:
	case !ok && *claimIndex:
		return usageErrorf("migrate --claim-index: only the Postgres backend has it (SQLite queues stay small enough to sort)")
	case ok:
		if err := ci.CreateClaimIndex(ctx); err != nil {
			return err
		}
		fmt.Fprintln(e.stdout, "claim-order index soniq_sidecar_claim_order on soniq_jobs (priority, scheduled_at NULLS FIRST, created_at) WHERE status = 'queued': present (skip with --no-claim-index)")
	}
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

func cmdEnqueue(ctx context.Context, e env, args []string) error {
	fs := newFlagSet(e, "enqueue")
	db := config.RegisterFlags(fs, config.CommandData)
	argsJSON := fs.String("args", "{}", "job arguments, a JSON object")
	queue := fs.String("queue", "default", "queue")
	priority := fs.Int("priority", 100, "priority (lower runs first)")
	maxAttempts := fs.Int("max-attempts", 3, "maximum attempts")
	delay := fs.String("delay", "", "run no earlier than now + DUR (30s, 5m, or seconds)")
	dedup := fs.String("dedup-key", "", "at most one queued job per key")
	unique := fs.Bool("unique", false, "at most one queued job with this name and these args (Soniq's unique_job, matched by args_hash); a duplicate prints the queued job's id")
	asJSON := fs.Bool("json", false, "print the whole row as JSON")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	opts, err := db.Options(e.lookupEnv)
	if err != nil {
		return usageError{err}
	}
	if len(pos) != 1 {
		return usageErrorf("enqueue: want exactly one job NAME, got %d arguments", len(pos))
	}
	name := strings.TrimSpace(pos[0])
	if name == "" {
		return usageErrorf("enqueue: the job NAME is empty")
	}
	rawArgs, err := parseArgsJSON(*argsJSON)
	if err != nil {
		return usageError{err}
	}
	d, err := parseDelay(*delay)
	if err != nil {
		return usageError{err}
	}
	if *maxAttempts < 1 {
		return usageErrorf("--max-attempts must be at least 1, got %d", *maxAttempts)
	}
	if *queue == "" {
		return usageErrorf("--queue must not be empty")
	}
	b, err := openForCommand(ctx, e, opts)
	if err != nil {
		return err
	}
	defer b.Close()
	job, err := b.Enqueue(ctx, backends.EnqueueParams{
		Name: name, Args: rawArgs, Queue: *queue, Priority: priority,
		MaxAttempts: maxAttempts, Delay: d, DedupKey: *dedup, UniqueJob: *unique,
	})
	if err != nil {
		return err // the backend names the job and the database
	}
	if *asJSON {
		return writeJSON(e.stdout, job)
	}
	fmt.Fprintln(e.stdout, job.ID)
	return nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("writing JSON: %w", err)
	}
	return nil
}

func cmdStatus(ctx context.Context, e env, args []string) error {
	fs := newFlagSet(e, "status")
	db := config.RegisterFlags(fs, config.CommandData)
	asJSON := fs.Bool("json", false, "print the six canonical keys as one JSON object")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	opts, err := db.Options(e.lookupEnv)
	if err != nil {
		return usageError{err}
	}
	if len(pos) > 0 {
		return usageErrorf("status: unexpected argument %q", pos[0])
	}
	b, err := openForCommand(ctx, e, opts)
	if err != nil {
		return err
	}
	defer b.Close()
	st, err := b.Stats(ctx)
	if err != nil {
		return err // the backend says what it was reading
	}
	fmt.Fprintf(e.stderr, "database %s\n", describeDatabase(databaseURL(opts)))
	if *asJSON {
		// Stats marshals its six keys in the canonical order (docs/compatibility.md).
		out, err := json.Marshal(st)
		if err != nil {
			return fmt.Errorf("encoding stats: %w", err)
		}
		fmt.Fprintln(e.stdout, string(out))
		return nil
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	values := [...]int64{st.Total, st.Queued, st.Processing, st.Done, st.DeadLetter, st.Cancelled}
	for i, k := range backends.StatsKeys {
		fmt.Fprintf(tw, "%s\t%d\t\n", k, values[i])
	}
	return tw.Flush()
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

// cmdJob prints one job's row: its status, attempts, last error and result.
func cmdJob(ctx context.Context, e env, args []string) error {
	fs := newFlagSet(e, "job")
	db := config.RegisterFlags(fs, config.CommandData)
	asJSON := fs.Bool("json", false, "print the whole row as one JSON object")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	opts, err := db.Options(e.lookupEnv)
	if err != nil {
		return usageError{err}
	}
	if len(pos) != 1 {
		return usageErrorf("job: want one job id, got %d arguments", len(pos))
	}
	b, err := openForCommand(ctx, e, opts)
	if err != nil {
		return err
	}
	defer b.Close()
	j, err := b.Get(ctx, pos[0])
	if errors.Is(err, backends.ErrNotFound) {
		// A dead-lettered job has left soniq_jobs for the dead-letter table.
		return printDeadLetterJob(ctx, e, b, pos[0], *asJSON, databaseURL(opts))
	}
	if err != nil {
		return err
	}
	if *asJSON {
		out, err := json.Marshal(j)
		if err != nil {
			return fmt.Errorf("encoding job %s: %w", j.ID, err)
		}
		fmt.Fprintln(e.stdout, string(out))
		return nil
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "id\t%s\njob_name\t%s\nqueue\t%s\nstatus\t%s\nattempts\t%d of %d\n", j.ID, j.Name, j.Queue, j.Status, j.Attempts, j.MaxAttempts)
	if j.LastError != nil {
		fmt.Fprintf(tw, "last_error\t%s\n", strings.ReplaceAll(*j.LastError, "\n", "\n\t"))
	}
	if j.Result != nil {
		fmt.Fprintf(tw, "result\t%s\n", j.Result)
	}
	return tw.Flush()
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
