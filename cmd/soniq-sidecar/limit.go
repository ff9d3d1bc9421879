package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/internal/config"
)

const limitUsage = "limit: want a subcommand: set SCOPE [--key VALUE | --null-key] [--concurrency N] [--rate N/DUR], clear SCOPE [--key VALUE | --null-key] or list"

const limitLong = `Override the caps of a limited scope (a job's own limit, or a group of the
manifest's limits:) for the whole fleet, without a restart: every running
sidecar applies a change within one poll interval. An override of a scope
replaces the manifests' caps; one with --key replaces them for that key value
only, one with --null-key for the key null (the rows whose key field is
missing, null, an object or an array). --concurrency 0 pauses the scope, or
the key: its rows stay queued.
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
		nullKey     bool
		concurrency int
		o           backends.LimitOverride
	)
	var fs *pflag.FlagSet
	return dataCommand(e, dataSpec{
		use:   "set SCOPE [--key VALUE | --null-key] [--concurrency N] [--rate N/DUR]",
		short: "Set the caps of a scope, or of one key value of it (0 pauses)",
		long: `Set the caps of SCOPE for the whole fleet, or with --key those of one value of
the scope's key, or with --null-key those of the key null (the rows whose key
field is missing, null, an object or an array). A cap not given keeps its
earlier override, or the manifests' value. --concurrency 0 pauses: the rows
stay queued until the override is set higher or cleared.`,
		example: `  soniq-sidecar limit set emails.send --key acme --concurrency 0
  soniq-sidecar limit set emails.send --null-key --concurrency 0
  soniq-sidecar limit set stripe --concurrency 4 --rate 10/1s`,
		flags: func(f *pflag.FlagSet) {
			fs = f
			f.StringVar(&key, "key", "", "the key `VALUE` the caps are for (as the job's args hold it: tenant-42, 7, true); none: the scope")
			f.BoolVar(&nullKey, "null-key", false, "the caps are for the key null (the key field missing, null, an object or an array)")
			f.IntVar(&concurrency, "concurrency", 0, "at most `N` rows processing at once; 0 pauses")
			f.StringVar(&rate, "rate", "", "at most N claims in any window of DUR, like 100/1m or 25/1s (`N/DUR`)")
		},
		args: limitScope("set"),
		check: func(pos []string) error {
			o = backends.LimitOverride{Scope: pos[0], NullKey: nullKey}
			if err := oneKey("set", fs, nullKey); err != nil {
				return err
			}
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
	var nullKey bool
	var fs *pflag.FlagSet
	return dataCommand(e, dataSpec{
		use:     "clear SCOPE [--key VALUE | --null-key]",
		short:   "Remove the override of a scope, or of one key value (the manifests' caps hold again)",
		example: "  soniq-sidecar limit clear emails.send --key acme\n  soniq-sidecar limit clear emails.send --null-key\n  soniq-sidecar limit clear stripe",
		flags: func(f *pflag.FlagSet) {
			fs = f
			f.StringVar(&key, "key", "", "the key `VALUE` whose override to remove; none: the scope's own")
			f.BoolVar(&nullKey, "null-key", false, "remove the override of the key null")
		},
		args: limitScope("clear"),
		check: func([]string) error {
			return oneKey("clear", fs, nullKey)
		},
		run: func(ctx context.Context, d dataRun) error {
			var k *string
			if fs.Changed("key") {
				k = &key
			}
			target := overrideTarget(backends.LimitOverride{Scope: d.args[0], Key: k, NullKey: nullKey})
			cleared, err := d.b.ClearLimit(ctx, d.args[0], k, nullKey)
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
	Scope string  `json:"scope"`
	Key   *string `json:"key"`
	// NullKey marks the row of the key null (Key is then null too).
	NullKey  bool     `json:"null_key"`
	Declared []string `json:"declared"`
	Override *string  `json:"override"`
	Paused   bool     `json:"paused"`
	// Running, Queued and Deferred count the rows of the scope, or of the
	// key (nil for a scope no running sidecar declares: its job names are
	// unknown). Deferred: the runnable rows its concurrency cap (or a
	// pause) holds back now.
	Running  *int64 `json:"running"`
	Queued   *int64 `json:"queued"`
	Deferred *int64 `json:"deferred"`
	// Busiest are a scope's keys with the most rows processing, then
	// queued (--keys of them); none for a key's row or a scope without a
	// key.
	Busiest []limitKeyRow `json:"busiest,omitempty"`
	names   []string
	keyPath string
	// concurrency is the smallest concurrency cap the running sidecars
	// declare (0: none), the one their claims hold.
	concurrency int
}

// limitKeyRow is one of a scope's busiest keys.
type limitKeyRow struct {
	Key      *string `json:"key"`
	NullKey  bool    `json:"null_key"`
	Running  int64   `json:"running"`
	Queued   int64   `json:"queued"`
	Deferred int64   `json:"deferred"`
}

func newLimitListCmd(e env) *cobra.Command {
	var asJSON bool
	var top int
	return dataCommand(e, dataSpec{
		use:   "list [--keys N] [--json]",
		short: "List the limited scopes: declared caps, overrides, the busiest keys, rows running, queued and deferred",
		long: `List each scope the running sidecars declare, with their caps (more than one
value: the sidecars disagree, and the smaller holds), its rows running, queued
and deferred, and each override, of a scope or of one key value (the key null
is listed as null). Below a scope with a key come its busiest keys (most rows
running, then most queued; --keys of them), each with its rows; an overridden
key's row has its own. DEFERRED is the queued rows ready to run that a cap holds
back right now: those of a paused scope or key, or of a key with as many rows
running as its concurrency cap allows (a rate cap's deferrals come and go
within its window and are not counted). The rows are counted in the database,
reading every queued and running row of the scope once.`,
		example: "  soniq-sidecar limit list\n  soniq-sidecar limit list --keys 20\n  soniq-sidecar limit list --json",
		flags: func(fs *pflag.FlagSet) {
			fs.BoolVar(&asJSON, "json", false, "print a JSON array of the scopes and overridden keys, each scope with its busiest keys")
			fs.IntVar(&top, "keys", 5, "list the `N` busiest keys of each scope with a key; 0 for none")
		},
		check: func([]string) error {
			if top < 0 {
				return usageErrorf("limit list: --keys must be 0 or more, got %d", top)
			}
			return nil
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
			if err := countLimitRows(ctx, d.b, rows, overrides, top); err != nil {
				return err
			}
			if asJSON {
				return writeJSON(d.stdout, rows)
			}
			return writeLimitTable(d.stdout, rows)
		},
	})
}

// countLimitRows reads the rows of each declared scope, its busiest keys
// and its overridden keys, into rows.
func countLimitRows(ctx context.Context, b backends.Backend, rows []limitRow, overrides []backends.LimitOverride, top int) error {
	for i := range rows {
		r := &rows[i]
		if r.Key != nil || r.NullKey || len(r.names) == 0 {
			continue
		}
		l := backends.ClaimLimit{Scope: r.Scope, Names: r.names, Concurrency: r.concurrency}
		if r.keyPath != "" {
			path, err := config.ParseLimitKey(r.keyPath)
			if err != nil {
				return fmt.Errorf("limit list: scope %s: the key a running sidecar declares: %w", r.Scope, err)
			}
			l.Key = path
		}
		l = backends.ApplyOverrides(l, overrides)
		u, err := b.LimitUsage(ctx, l, top)
		if err != nil {
			return err
		}
		r.Running, r.Queued, r.Deferred = &u.Running, &u.Queued, &u.Deferred
		for _, k := range u.Busiest {
			r.Busiest = append(r.Busiest, limitKeyRow{Key: keyText(k), NullKey: k.Null, Running: k.Running, Queued: k.Queued, Deferred: k.Deferred})
		}
		for _, k := range u.Keys {
			for j := range rows {
				kr := &rows[j]
				if kr.Scope != r.Scope || kr.Running != nil || !sameKey(*kr, k) {
					continue
				}
				kr.Running, kr.Queued, kr.Deferred = &k.Running, &k.Queued, &k.Deferred
			}
		}
	}
	return nil
}

// keyText is a key as the JSON writes it: nil for the key null.
func keyText(k backends.KeyUsage) *string {
	if k.Null {
		return nil
	}
	return &k.Key
}

// sameKey reports whether a key's row is the key k.
func sameKey(r limitRow, k backends.KeyUsage) bool {
	if k.Null {
		return r.NullKey
	}
	return r.Key != nil && *r.Key == k.Key
}

// writeLimitTable prints rows as a table: each scope, then its overridden
// keys, then its busiest keys that are not among them.
func writeLimitTable(w io.Writer, rows []limitRow) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCOPE\tKEY\tDECLARED\tOVERRIDE\tRUNNING\tQUEUED\tDEFERRED")
	count := func(n *int64) string {
		if n == nil {
			return "-"
		}
		return fmt.Sprint(*n)
	}
	line := func(scope, key, decl, ov string, running, queued, deferred *int64) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", scope, key, decl, ov, count(running), count(queued), count(deferred))
	}
	for i, r := range rows {
		k, ov := "-", "-"
		switch {
		case r.NullKey:
			k = "null"
		case r.Key != nil:
			k = *r.Key
		}
		if r.Override != nil {
			ov = *r.Override
		}
		decl := strings.Join(r.Declared, " | ")
		if decl == "" {
			decl = "-"
		}
		line(r.Scope, k, decl, ov, r.Running, r.Queued, r.Deferred)
		if i+1 < len(rows) && rows[i+1].Scope == r.Scope {
			continue
		}
		// The scope's last row: its busiest keys follow, but for those
		// already listed with their override.
		var scope *limitRow
		for j := range rows {
			if rows[j].Scope == r.Scope && rows[j].Key == nil && !rows[j].NullKey {
				scope = &rows[j]
			}
		}
		if scope == nil {
			continue
		}
		for _, b := range scope.Busiest {
			listed := slices.ContainsFunc(rows, func(o limitRow) bool {
				return o.Scope == r.Scope && sameKey(o, backends.KeyUsage{Key: derefOr(b.Key), Null: b.NullKey})
			})
			if listed {
				continue
			}
			name := "null"
			if b.Key != nil {
				name = *b.Key
			}
			line(r.Scope, name, "-", "-", &b.Running, &b.Queued, &b.Deferred)
		}
	}
	return tw.Flush()
}

func derefOr(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// limitRows joins the declared caps and the overrides by scope, then key.
func limitRows(overrides []backends.LimitOverride, workers []backends.Worker) []limitRow {
	declared := map[string][]string{}
	names := map[string][]string{}
	keyPaths := map[string]string{}
	concurrency := map[string]int{}
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
			if c.Key != "" && (keyPaths[scope] == "" || c.Key < keyPaths[scope]) {
				keyPaths[scope] = c.Key
			}
			// The smaller cap holds while the sidecars disagree.
			if cur := concurrency[scope]; c.Concurrency > 0 && (cur == 0 || c.Concurrency < cur) {
				concurrency[scope] = c.Concurrency
			}
		}
	}
	rows := []limitRow{}
	seen := map[string]bool{}
	for _, o := range overrides {
		if o.Key == nil && !o.NullKey {
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
		r := limitRow{Scope: o.Scope, Key: o.Key, NullKey: o.NullKey, Declared: declared[o.Scope], names: names[o.Scope],
			keyPath: keyPaths[o.Scope], concurrency: concurrency[o.Scope]}
		if o.Key != nil || o.NullKey {
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

// oneKey refuses --key with --null-key: an override is of one key.
func oneKey(sub string, fs *pflag.FlagSet, nullKey bool) error {
	if nullKey && fs.Changed("key") {
		return usageErrorf("limit %s: --key and --null-key name two different keys; give one of them", sub)
	}
	return nil
}

// overrideTarget names an override: SCOPE, SCOPE key VALUE, or SCOPE key
// null.
func overrideTarget(o backends.LimitOverride) string {
	switch {
	case o.NullKey:
		return o.Scope + " key null"
	case o.Key == nil:
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
