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

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/internal/config"
	"github.com/soniq-dev/soniq-sidecar/internal/schedule"
)

const scheduleUsage = "schedule: want a subcommand: add NAME (--every DUR | --cron EXPR), list, pause NAME, resume NAME or remove NAME"

const scheduleLong = `The recurring schedules of soniq_recurring_jobs, which run (with --scheduler,
the default) and Soniq's own scheduler fire. A schedule is named by its job's
NAME: adding one that exists updates it. Schedules the manifest declares are
declared again at every start.`

// newScheduleCmd is `schedule add|list|pause|resume|remove`.
func newScheduleCmd(e env) *cobra.Command {
	return newGroup("schedule", "Add, list, pause, resume or remove recurring schedules", scheduleLong,
		scheduleUsage, strings.TrimPrefix(scheduleUsage, "schedule: want "),
		newScheduleAddCmd(e), newScheduleListCmd(e),
		newScheduleStatusCmd(e, "pause", backends.SchedulePaused, "Stop firing a schedule (it keeps its run count and timing)"),
		newScheduleStatusCmd(e, "resume", backends.ScheduleActive, "Fire a paused schedule again"),
		newScheduleRemoveCmd(e))
}

// scheduleName is the argument check of the schedule commands that take
// one job NAME.
func scheduleName(sub string) func(pos []string) error {
	return func(pos []string) error {
		if len(pos) != 1 || strings.TrimSpace(pos[0]) == "" {
			return usageErrorf("schedule %s: want exactly one job NAME, got %d arguments", sub, len(pos))
		}
		return nil
	}
}

func newScheduleAddCmd(e env) *cobra.Command {
	var (
		every, cron, argsJSON, queue string
		priority, maxAttempts        int
		p                            backends.ScheduleParams
	)
	return dataCommand(e, dataSpec{
		use:   "add NAME (--every DUR | --cron EXPR)",
		short: "Add or update the schedule of job NAME",
		long: `Add the schedule of job NAME, or update it if it exists: every DUR (whole seconds,
at least 1s) or on a five-field cron expression in UTC. Its next run is printed.`,
		example: `  soniq-sidecar schedule add reports.nightly --cron "0 3 * * *" --queue reports
  soniq-sidecar schedule add cache.refresh --every 5m --args '{"region":"eu"}'`,
		flags: func(fs *pflag.FlagSet) {
			fs.StringVar(&every, "every", "", "run every `DUR` (30s, 1h, or seconds; whole seconds, at least 1s)")
			fs.StringVar(&cron, "cron", "", "run on a five-field cron `expression` in UTC, like \"*/5 * * * *\"")
			fs.StringVar(&argsJSON, "args", "{}", "the job's arguments, a `JSON` object")
			fs.StringVar(&queue, "queue", "default", "the job's queue")
			fs.IntVar(&priority, "priority", 100, "the job's priority (lower runs first)")
			fs.IntVar(&maxAttempts, "max-attempts", 3, "the job's maximum attempts")
		},
		args: scheduleName("add"),
		check: func(pos []string) (err error) {
			p, err = scheduleParams(pos[0], every, cron, argsJSON, queue, priority, maxAttempts, time.Now())
			return err
		},
		run: func(ctx context.Context, d dataRun) error {
			s, created, err := d.b.UpsertSchedule(ctx, p)
			if err != nil {
				return err
			}
			verb := "updated"
			if created {
				verb = "added"
			}
			fmt.Fprintf(d.stdout, "schedule %s %s: %s, status %s, next run %s\n", s.Name, verb, describeSchedule(s), s.Status, formatWhen(s.NextRun))
			return nil
		},
	})
}

func newScheduleListCmd(e env) *cobra.Command {
	var asJSON bool
	return dataCommand(e, dataSpec{
		use:     "list",
		short:   "List the schedules: timing, status, next and last run",
		example: "  soniq-sidecar schedule list\n  soniq-sidecar schedule list --json",
		flags: func(fs *pflag.FlagSet) {
			fs.BoolVar(&asJSON, "json", false, "print a JSON array of the rows, keyed by the table's column names")
		},
		run: func(ctx context.Context, d dataRun) error {
			list, err := d.b.ListSchedules(ctx)
			if err != nil {
				return err
			}
			if asJSON {
				if list == nil {
					list = []backends.Schedule{}
				}
				return writeJSON(d.stdout, list)
			}
			tw := tabwriter.NewWriter(d.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tSCHEDULE\tSTATUS\tNEXT RUN\tLAST RUN\tRUNS\tQUEUE")
			for _, s := range list {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", s.Name, describeSchedule(s), s.Status,
					formatWhen(s.NextRun), formatWhen(s.LastRun), s.RunCount, s.Queue)
			}
			return tw.Flush()
		},
	})
}

// newScheduleStatusCmd is pause or resume (sub): it sets the schedule's
// status.
func newScheduleStatusCmd(e env, sub, status, short string) *cobra.Command {
	return dataCommand(e, dataSpec{
		use:     sub + " NAME",
		short:   short,
		example: "  soniq-sidecar schedule " + sub + " reports.nightly",
		args:    scheduleName(sub),
		run: func(ctx context.Context, d dataRun) error {
			if err := d.b.SetScheduleStatus(ctx, d.args[0], status); err != nil {
				return scheduleNotFound(err, d.args[0])
			}
			fmt.Fprintf(d.stdout, "schedule %s %s\n", d.args[0], status)
			return nil
		},
	})
}

func newScheduleRemoveCmd(e env) *cobra.Command {
	return dataCommand(e, dataSpec{
		use:     "remove NAME",
		short:   "Delete a schedule (a manifest's schedule comes back at the next start)",
		example: "  soniq-sidecar schedule remove reports.nightly",
		args:    scheduleName("remove"),
		run: func(ctx context.Context, d dataRun) error {
			if err := d.b.RemoveSchedule(ctx, d.args[0]); err != nil {
				return scheduleNotFound(err, d.args[0])
			}
			fmt.Fprintf(d.stdout, "schedule %s removed\n", d.args[0])
			return nil
		},
	})
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
