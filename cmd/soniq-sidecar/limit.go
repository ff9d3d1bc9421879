package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/internal/config"
)

const limitUsage = "limit: want a subcommand: set SCOPE [--key VALUE] [--concurrency N] [--rate N/DUR], clear SCOPE [--key VALUE] or list"

const limitLong = `Override the caps of a limited scope (a job's own limit, or a group of the
manifest's limits:) for the whole fleet, without a restart: every running
sidecar applies a change within one poll interval. An override of a scope
replaces the manifests' caps; one with --key replaces them for that key value
only. --concurrency 0 pauses the scope, or the key: its rows stay queued.
Overrides apply to scopes the running manifests declare (docs/limits.md).`

// newLimitCmd is `limit set|clear|list`.
func newLimitCmd(e env) *cobra.Command {
	return newGroup("limit", "Override, pause or list the fleet-wide limits of jobs", limitLong,
		limitUsage, strings.TrimPrefix(limitUsage, "limit: want "),
		newLimitSetCmd(e), newLimitClearCmd(e), newLimitListCmd(e))
}

// limitScope is the argument check of the limit commands that take one
// SCOPE.
func limitScope(sub string) func(pos []string) error {
	return func(pos []string) error {
		if len(pos) != 1 || strings.TrimSpace(pos[0]) == "" {
			return usageErrorf("limit %s: want exactly one SCOPE (a job name, or a group of the manifest's limits:), got %d arguments", sub, len(pos))
		}
		return nil
	}
}

func newLimitSetCmd(e env) *cobra.Command {
	var (
		key, rate   string
		concurrency int
		o           backends.LimitOverride
	)
	var fs *pflag.FlagSet
	return dataCommand(e, dataSpec{
		use:   "set SCOPE [--key VALUE] [--concurrency N] [--rate N/DUR]",
		short: "Set the caps of a scope, or of one key value of it (0 pauses)",
		long: `Set the caps of SCOPE for the whole fleet, or with --key those of one value of
the scope's key. A cap not given keeps its earlier override, or the
manifests' value. --concurrency 0 pauses: the rows stay queued until the
override is set higher or cleared.`,
		example: `  soniq-sidecar limit set emails.send --key acme --concurrency 0
  soniq-sidecar limit set stripe --concurrency 4 --rate 10/1s`,
		flags: func(f *pflag.FlagSet) {
			fs = f
			f.StringVar(&key, "key", "", "the key `VALUE` the caps are for (as the job's args hold it: tenant-42, 7, true); none: the scope")
			f.IntVar(&concurrency, "concurrency", 0, "at most `N` rows processing at once; 0 pauses")
			f.StringVar(&rate, "rate", "", "at most N claims in any window of DUR, like 100/1m or 25/1s (`N/DUR`)")
		},
		args: limitScope("set"),
		check: func(pos []string) error {
			o = backends.LimitOverride{Scope: pos[0]}
			if fs.Changed("key") {
				o.Key = &key
			}
			if !fs.Changed("concurrency") && !fs.Changed("rate") {
				return usageErrorf("limit set: give --concurrency N, --rate N/DUR or both")
			}
			if fs.Changed("concurrency") {
				if concurrency < 0 {
					return usageErrorf("limit set: --concurrency must be 0 (paused) or more, got %d", concurrency)
				}
				o.Concurrency = &concurrency
			}
			if fs.Changed("rate") {
				r, err := config.ParseRate(rate)
				if err != nil {
					return usageErrorf("limit set: --rate: %v", err)
				}
				o.RateN, o.RatePer = r.N, r.Per
			}
			return nil
		},
		run: func(ctx context.Context, d dataRun) error {
			got, err := d.b.SetLimit(ctx, o)
			if err != nil {
				return err
			}
			fmt.Fprintf(d.stdout, "limit %s set: %s; running sidecars apply it within one poll interval\n", overrideTarget(got), overrideCaps(got))
			return nil
		},
	})
}

func newLimitClearCmd(e env) *cobra.Command {
	var key string
	var fs *pflag.FlagSet
	return dataCommand(e, dataSpec{
		use:     "clear SCOPE [--key VALUE]",
		short:   "Remove the override of a scope, or of one key value (the manifests' caps hold again)",
		example: "  soniq-sidecar limit clear emails.send --key acme\n  soniq-sidecar limit clear stripe",
		flags: func(f *pflag.FlagSet) {
			fs = f
			f.StringVar(&key, "key", "", "the key `VALUE` whose override to remove; none: the scope's own")
		},
		args: limitScope("clear"),
		run: func(ctx context.Context, d dataRun) error {
			var k *string
			if fs.Changed("key") {
				k = &key
			}
			target := overrideTarget(backends.LimitOverride{Scope: d.args[0], Key: k})
			cleared, err := d.b.ClearLimit(ctx, d.args[0], k)
			if err != nil {
				return err
			}
			if !cleared {
				fmt.Fprintf(d.stdout, "limit %s had no override\n", target)
				return nil
			}
			fmt.Fprintf(d.stdout, "limit %s cleared: the manifests' caps hold again within one poll interval\n", target)
			return nil
		},
	})
}

// limitRow is one line of `limit list`.
type limitRow struct {
	Scope    string   `json:"scope"`
	Key      *string  `json:"key"`
	Declared []string `json:"declared"`
	Override *string  `json:"override"`
	Paused   bool     `json:"paused"`
	// Running and Queued count the scope's rows (nil for a key's row, and
	// for a scope no running sidecar declares: its job names are unknown).
	Running *int64 `json:"running"`
	Queued  *int64 `json:"queued"`
	names   []string
}

func newLimitListCmd(e env) *cobra.Command {
	var asJSON bool
	return dataCommand(e, dataSpec{
		use:   "list",
		short: "List the limited scopes: the caps the running sidecars declare, the overrides, rows running and queued",
		long: `List each scope the running sidecars declare, with their caps (more than one
value: the sidecars disagree, and the smaller holds), its rows running and
queued, and each override, of a scope or of one key value.`,
		example: "  soniq-sidecar limit list\n  soniq-sidecar limit list --json",
		flags: func(fs *pflag.FlagSet) {
			fs.BoolVar(&asJSON, "json", false, "print a JSON array of the scopes and overridden keys")
		},
		run: func(ctx context.Context, d dataRun) error {
			overrides, err := d.b.LimitOverrides(ctx)
			if err != nil {
				return err
			}
			// The sidecars that beat within the longest heartbeat timeout
			// the settings allow are the running ones.
			workers, err := d.b.LiveWorkers(ctx, 10*time.Minute)
			if err != nil {
				return err
			}
			rows := limitRows(overrides, workers)
			for i := range rows {
				if rows[i].Key != nil || len(rows[i].names) == 0 {
					continue
				}
				q, p, err := d.b.CountByStatus(ctx, rows[i].names)
				if err != nil {
					return err
				}
				rows[i].Queued, rows[i].Running = &q, &p
			}
			if asJSON {
				return writeJSON(d.stdout, rows)
			}
			tw := tabwriter.NewWriter(d.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "SCOPE\tKEY\tDECLARED\tOVERRIDE\tRUNNING\tQUEUED")
			for _, r := range rows {
				k, ov, running, queued := "-", "-", "-", "-"
				if r.Key != nil {
					k = *r.Key
				}
				if r.Running != nil {
					running, queued = fmt.Sprint(*r.Running), fmt.Sprint(*r.Queued)
				}
				if r.Override != nil {
					ov = *r.Override
				}
				decl := strings.Join(r.Declared, " | ")
				if decl == "" {
					decl = "-"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Scope, k, decl, ov, running, queued)
			}
			return tw.Flush()
		},
	})
}

// limitRows joins the declared caps and the overrides by scope, then key.
func limitRows(overrides []backends.LimitOverride, workers []backends.Worker) []limitRow {
	declared := map[string][]string{}
	names := map[string][]string{}
	for _, w := range workers {
		for scope, c := range backends.DeclaredLimits(w.Metadata) {
			text := declaredText(c)
			if !slices.Contains(declared[scope], text) {
				declared[scope] = append(declared[scope], text)
			}
			for _, n := range c.Names {
				if !slices.Contains(names[scope], n) {
					names[scope] = append(names[scope], n)
				}
			}
		}
	}
	rows := []limitRow{}
	seen := map[string]bool{}
	for _, o := range overrides {
		if o.Key == nil {
			seen[o.Scope] = true
		}
	}
	for scope := range declared {
		if !seen[scope] {
			overrides = append(overrides, backends.LimitOverride{Scope: scope, Concurrency: nil})
		}
	}
	backends.SortOverrides(overrides)
	for _, o := range overrides {
		r := limitRow{Scope: o.Scope, Key: o.Key, Declared: declared[o.Scope], names: names[o.Scope]}
		if o.Key != nil {
			r.Declared, r.names = nil, nil
		}
		if o.Concurrency != nil || o.RateN > 0 {
			text := overrideCaps(o)
			r.Override = &text
			r.Paused = o.Concurrency != nil && *o.Concurrency == 0
		}
		slices.Sort(r.Declared)
		if r.Declared == nil {
			r.Declared = []string{}
		}
		rows = append(rows, r)
	}
	return rows
}

// overrideTarget names an override: SCOPE, or SCOPE key VALUE.
func overrideTarget(o backends.LimitOverride) string {
	if o.Key == nil {
		return o.Scope
	}
	return fmt.Sprintf("%s key %q", o.Scope, *o.Key)
}

// overrideCaps is an override's caps as the command line writes them.
func overrideCaps(o backends.LimitOverride) string {
	var parts []string
	if o.Concurrency != nil {
		if *o.Concurrency == 0 {
			parts = append(parts, "paused (concurrency 0)")
		} else {
			parts = append(parts, fmt.Sprintf("concurrency %d", *o.Concurrency))
		}
	}
	if o.RateN > 0 {
		parts = append(parts, fmt.Sprintf("rate %d/%s", o.RateN, o.RatePer))
	}
	return strings.Join(parts, ", ")
}

// declaredText is a sidecar's declared caps as the manifest writes them.
func declaredText(c backends.DeclaredCaps) string {
	var parts []string
	if c.Concurrency > 0 {
		parts = append(parts, fmt.Sprintf("concurrency %d", c.Concurrency))
	}
	if c.RateN > 0 {
		parts = append(parts, fmt.Sprintf("rate %d/%s", c.RateN, time.Duration(c.RateSeconds)*time.Second))
	}
	return strings.Join(parts, ", ")
}
