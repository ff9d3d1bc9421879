package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/internal/config"
	"github.com/soniq-dev/soniq-sidecar/internal/schedule"
)

const scheduleUsage = "schedule: want a subcommand: add NAME (--every DUR | --cron EXPR), list, pause NAME, resume NAME or remove NAME"

// cmdSchedule is `schedule add|list|pause|resume|remove`: the recurring
// schedules of soniq_recurring_jobs, which `run` (and Soniq's own
// scheduler) fire.
func cmdSchedule(ctx context.Context, e env, args []string) error {
	if len(args) == 0 {
		return usageErrorf(scheduleUsage)
	}
	sub, rest := args[0], args[1:]
	fs := newFlagSet(e, "schedule "+sub)
	db := config.RegisterFlags(fs, config.CommandData)
	var (
		every, cron, argsJSON, queue *string
		priority, maxAttempts        *int
		asJSON                       *bool
	)
	switch sub {
	case "add":
		every = fs.String("every", "", "run every DUR (30s, 1h, or seconds; whole seconds, at least 1s)")
		cron = fs.String("cron", "", "run on a five-field cron `expression` in UTC, like \"*/5 * * * *\"")
		argsJSON = fs.String("args", "{}", "the job's arguments, a JSON object")
		queue = fs.String("queue", "default", "the job's queue")
		priority = fs.Int("priority", 100, "the job's priority (lower runs first)")
		maxAttempts = fs.Int("max-attempts", 3, "the job's maximum attempts")
	case "list":
		asJSON = fs.Bool("json", false, "print a JSON array of the rows, keyed by the table's column names")
	case "pause", "resume", "remove":
	default:
		return usageErrorf("schedule: unknown subcommand %q (%s)", sub, strings.TrimPrefix(scheduleUsage, "schedule: "))
	}
	pos, err := parseInterspersed(fs, rest)
	if err != nil {
		return err
	}
	opts, err := db.Options(e.lookupEnv)
	if err != nil {
		return usageError{err}
	}
	var p backends.ScheduleParams
	switch sub {
	case "list":
		if len(pos) > 0 {
			return usageErrorf("schedule list: unexpected argument %q", pos[0])
		}
	default:
		if len(pos) != 1 || strings.TrimSpace(pos[0]) == "" {
			return usageErrorf("schedule %s: want exactly one job NAME, got %d arguments", sub, len(pos))
		}
	}
	if sub == "add" {
		if p, err = scheduleParams(pos[0], *every, *cron, *argsJSON, *queue, *priority, *maxAttempts, time.Now()); err != nil {
			return usageError{err}
		}
	}
	b, err := openForCommand(ctx, e, opts)
	if err != nil {
		return err
	}
	defer b.Close()
	switch sub {
	case "add":
		s, created, err := b.UpsertSchedule(ctx, p)
		if err != nil {
			return err
		}
		verb := "updated"
		if created {
			verb = "added"
		}
		fmt.Fprintf(e.stdout, "schedule %s %s: %s, status %s, next run %s\n", s.Name, verb, describeSchedule(s), s.Status, formatWhen(s.NextRun))
		return nil
	case "list":
		list, err := b.ListSchedules(ctx)
		if err != nil {
			return err
		}
		if *asJSON {
			if list == nil {
				list = []backends.Schedule{}
			}
			return writeJSON(e.stdout, list)
		}
		tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tSCHEDULE\tSTATUS\tNEXT RUN\tLAST RUN\tRUNS\tQUEUE")
		for _, s := range list {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", s.Name, describeSchedule(s), s.Status,
				formatWhen(s.NextRun), formatWhen(s.LastRun), s.RunCount, s.Queue)
		}
		return tw.Flush()
	case "remove":
		if err := b.RemoveSchedule(ctx, pos[0]); err != nil {
			return scheduleNotFound(err, pos[0])
		}
		fmt.Fprintf(e.stdout, "schedule %s removed\n", pos[0])
		return nil
	default: // pause, resume
		status := backends.SchedulePaused
		if sub == "resume" {
			status = backends.ScheduleActive
		}
		if err := b.SetScheduleStatus(ctx, pos[0], status); err != nil {
			return scheduleNotFound(err, pos[0])
		}
		fmt.Fprintf(e.stdout, "schedule %s %s\n", pos[0], status)
		return nil
	}
}

// scheduleParams checks `schedule add`'s options; its errors name the flag.
func scheduleParams(name, every, cron, argsJSON, queue string, priority, maxAttempts int, now time.Time) (backends.ScheduleParams, error) {
	name = strings.TrimSpace(name)
	if strings.IndexFunc(name, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
		return backends.ScheduleParams{}, fmt.Errorf("schedule add: job name %q must not contain spaces or control characters", name)
	}
	var spec schedule.Spec
	switch {
	case every != "" && cron != "":
		return backends.ScheduleParams{}, errors.New("schedule add: give --every or --cron, not both")
	case every == "" && cron == "":
		return backends.ScheduleParams{}, errors.New("schedule add: give --every DUR or --cron EXPR")
	case every != "":
		d, err := config.ParseDuration(every)
		if err != nil {
			return backends.ScheduleParams{}, fmt.Errorf("--every %q: %w", every, err)
		}
		if spec, err = schedule.Every(d); err != nil {
			return backends.ScheduleParams{}, fmt.Errorf("--every %q: %w", every, err)
		}
	default:
		var err error
		if spec, err = schedule.Cron(cron); err != nil {
			return backends.ScheduleParams{}, fmt.Errorf("--cron: %w", err)
		}
	}
	args, err := parseArgsJSON(argsJSON)
	if err != nil {
		return backends.ScheduleParams{}, err
	}
	if maxAttempts < 1 {
		return backends.ScheduleParams{}, fmt.Errorf("--max-attempts must be at least 1, got %d", maxAttempts)
	}
	if strings.TrimSpace(queue) == "" {
		return backends.ScheduleParams{}, errors.New("--queue must not be empty")
	}
	return backends.ScheduleParams{Name: name, Type: spec.Type, Value: spec.Value, Args: args,
		Queue: queue, Priority: &priority, MaxAttempts: &maxAttempts, NextRun: spec.Next(now)}, nil
}

func scheduleNotFound(err error, name string) error {
	if errors.Is(err, backends.ErrNotFound) {
		return fmt.Errorf("no schedule named %q (see schedule list)", name)
	}
	return err
}

func describeSchedule(s backends.Schedule) string {
	if s.Type == schedule.TypeInterval {
		return "every " + s.Value + "s"
	}
	return "cron " + s.Value
}

func formatWhen(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// declareSchedules declares the manifest's schedules at start, as Soniq's
// scheduler declares its @periodic registrations: a schedule declared
// again keeps its id, status and run count, and its next run while its
// timing is unchanged.
func declareSchedules(ctx context.Context, b backends.Schedules, m *config.Manifest, log *slog.Logger) error {
	for _, s := range m.Schedules {
		spec, err := config.ScheduleSpec(s)
		if err != nil {
			// LoadManifest refused it already; this is only a guard.
			return usageErrorf("%s:%d: schedules: %v", m.Path, s.Line, err)
		}
		row, created, err := b.UpsertSchedule(ctx, backends.ScheduleParams{Name: s.Name, Type: spec.Type, Value: spec.Value,
			Args: s.Args, Queue: s.Queue, Priority: s.Priority, MaxAttempts: s.MaxAttempts, NextRun: spec.Next(time.Now())})
		if err != nil {
			return fmt.Errorf("declaring the manifest's schedule %s (%s:%d): %w", s.Name, m.Path, s.Line, err)
		}
		log.Info("schedule declared", "job_name", row.Name, "schedule_type", row.Type, "schedule_value", row.Value,
			"new", created, "status", row.Status, "next_run", formatWhen(row.NextRun))
	}
	return nil
}
