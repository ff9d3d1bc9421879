package main

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"time"
)

// ---- 3b: pickup latency per database-connection mode ----

// poolerPoll is the poll interval of the poll-only mode: short enough to
// keep the section within its time, long enough that its cost shows.
const poolerPoll = time.Second

// poolerMode is one way the sidecar reaches the database.
type poolerMode struct {
	v   variant
	env func(direct, pooled string) []string
}

func poolerModes() []poolerMode {
	mode := func(key, label string, env func(direct, pooled string) []string) poolerMode {
		v := sidecarVariant("python", "stdio")
		v.Key, v.Label = "pooler-"+key, label
		return poolerMode{v: v, env: env}
	}
	return []poolerMode{
		mode("direct", "direct to Postgres, LISTEN", func(direct, _ string) []string { return nil }),
		mode("listen", "PgBouncer (transaction) + listen URL to Postgres", func(direct, pooled string) []string {
			return []string{"SONIQ_DATABASE_URL=" + pooled, "SONIQ_DATABASE_POOLER=transaction", "SONIQ_DATABASE_LISTEN_URL=" + direct}
		}),
		mode("poll", fmt.Sprintf("PgBouncer (transaction), poll-only, poll interval %v", poolerPoll), func(_, pooled string) []string {
			return []string{"SONIQ_DATABASE_URL=" + pooled, "SONIQ_DATABASE_POOLER=transaction",
				fmt.Sprintf("SONIQ_POLL_INTERVAL=%g", poolerPoll.Seconds())}
		}),
	}
}

// poolerSection measures pickup latency (as section 3, Python SDK over
// stdio) with the sidecar straight on Postgres, through a PgBouncer in
// transaction mode with a LISTEN connection to Postgres, and through it
// polling only. It starts its own PgBouncer with .ci/pgbouncer.sh.
func (b *bench) poolerSection(ctx context.Context) error {
	c := b.c
	pooled, stop, err := b.startPgBouncer(ctx)
	if err != nil {
		return err
	}
	defer stop()
	modes := poolerModes()
	results := make([]*latResult, len(modes))
	for i, m := range modes {
		results[i] = &latResult{variant: m.v}
		b.rep.Pooler = append(b.rep.Pooler, results[i])
	}
	for round := range c.latRuns {
		for i := range modes {
			k := (i + round) % len(modes)
			m, r := modes[k], results[k]
			run, err := b.latencyRun(ctx, m.v, round, m.env(c.dbURL, pooled))
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err != nil {
				run.Error = err.Error()
				logf("pooler %s round %d: %v", m.v.Key, round+1, err)
			} else {
				logf("pooler %s round %d: p50 %.2f p95 %.2f p99 %.2f ms (n=%d)", m.v.Key, round+1, run.P50, run.P95, run.P99, run.N)
			}
			run.Round = round + 1
			r.Runs = append(r.Runs, run)
		}
	}
	for _, r := range results {
		var p50, p95, p99 []float64
		for _, run := range r.Runs {
			if run.Error == "" {
				p50, p95, p99 = append(p50, run.P50), append(p95, run.P95), append(p99, run.P99)
			}
		}
		if len(p50) == 0 {
			r.Status = "failed: see the runs' errors"
			continue
		}
		r.P50, r.P95, r.P99 = median(p50), median(p95), median(p99)
	}
	if v := pgbouncerVersion(); v != "" {
		b.rep.Meta["pgbouncer"] = v
	}
	return nil
}

var pgbouncerURLRe = regexp.MustCompile(`SONIQ_TEST_PGBOUNCER_URL='([^']+)'`)

// startPgBouncer starts a PgBouncer in transaction mode in front of the
// bench's server and returns the bench database's URL through it.
func (b *bench) startPgBouncer(ctx context.Context) (string, func(), error) {
	c := b.c
	// Not under c.work: PgBouncer may run as another user (when we are
	// root), which must reach its directory.
	dir, err := os.MkdirTemp("", "soniq-bench-pgb-")
	if err != nil {
		return "", nil, fmt.Errorf("pooler section: %w", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", nil, fmt.Errorf("pooler section: %w", err)
	}
	script := filepath.Join(c.root, ".ci", "pgbouncer.sh")
	stop := func() {
		if out, err := exec.Command(script, "stop", dir).CombinedOutput(); err != nil {
			logf("stopping PgBouncer: %v: %s", err, out)
		}
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, script, "start", dir, c.dbURL)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		stop()
		return "", nil, fmt.Errorf("pooler section: starting PgBouncer with .ci/pgbouncer.sh (install pgbouncer, or set PGBOUNCER, or leave the section out with -sections): %w: %s", err, lastLine(stderr.String()))
	}
	m := pgbouncerURLRe.FindStringSubmatch(stdout.String())
	if m == nil {
		stop()
		return "", nil, fmt.Errorf("pooler section: .ci/pgbouncer.sh printed no URL: %q", stdout.String())
	}
	// Same database, user and options as the bench's URL; PgBouncer's
	// address.
	pgb, err := url.Parse(m[1])
	if err != nil {
		stop()
		return "", nil, fmt.Errorf("pooler section: PgBouncer URL: %w", err)
	}
	u, err := url.Parse(c.dbURL)
	if err != nil {
		stop()
		return "", nil, fmt.Errorf("pooler section: database URL: %w", err)
	}
	u.Host = pgb.Host
	logf("PgBouncer (transaction mode) at %s", pgb.Host)
	return u.String(), stop, nil
}

// pgbouncerVersion is the first line of `pgbouncer --version`, or "".
func pgbouncerVersion() string {
	p := os.Getenv("PGBOUNCER")
	if p == "" {
		if p, _ = exec.LookPath("pgbouncer"); p == "" {
			p = "/usr/sbin/pgbouncer"
		}
	}
	out, err := exec.Command(p, "--version").Output()
	if err != nil {
		return ""
	}
	return lastLine(string(bytes.SplitN(out, []byte("\n"), 2)[0]))
}
