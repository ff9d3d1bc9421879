// Command chaos is `make chaos`: a bounded, seeded, randomized fault run of
// the real soniq-sidecar binary, then a checker over the whole history.
//
// Three sidecars serve one queue of a throw-away Postgres (one directly with
// spawned Python handlers, one through PgBouncer in transaction mode with
// spawned Node handlers, one attached to a Python handler that runs on its
// own). A producer enqueues about 20 jobs/s by SQL; every execution records
// itself in a history file. A nemesis drawn from the seed SIGKILLs,
// SIGSTOPs and SIGTERMs sidecars, SIGKILLs handler processes, restarts
// Postgres and kills PgBouncer every 2 to 6 s. At the end the producer
// stops, everything is healed, the queue drains, the sidecars stop
// gracefully, and the checker applies its rules (check.go) to the history.
// It prints one summary line, then each violation with its details, and
// exits 1 on any violation. docs/reliability.md describes the rules.
package main

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	mrand "math/rand"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/soniq-dev/soniq-sidecar/internal/proc"
)

type config struct {
	root       string
	work       string
	sidecarBin string
	python     string
	node       string
	keep       bool

	seconds time.Duration
	seed    int64
	rate    float64
	plan    PlanParams
	drain   time.Duration

	hbInterval      time.Duration
	hbTimeout       time.Duration
	shutdownTimeout time.Duration
	rules           Rules
}

// envDefault returns $name, or def when it is unset or empty.
func envDefault(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// parseDur reads a Go duration ("90s") or a number of seconds ("90").
func parseDur(s string) (time.Duration, error) {
	if d, err := time.ParseDuration(s); err == nil {
		return d, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 {
		return 0, fmt.Errorf("invalid duration %q (want 90s, 1m30s or a number of seconds)", s)
	}
	return time.Duration(f * float64(time.Second)), nil
}

func parseConfig(args []string) (*config, error) {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	c := &config{}
	durs := map[string]*string{}
	dur := func(name, env, def, usage string) {
		durs[name] = fs.String(name, envDefault(env, def), usage+" ($"+env+")")
	}
	dur("seconds", "CHAOS_SECONDS", "240", "how long faults are injected and jobs enqueued")
	seed := fs.String("seed", os.Getenv("CHAOS_SEED"), "the seed of the fault schedule and the job mix; random when empty, always printed ($CHAOS_SEED)")
	rate := fs.Float64("rate", 20, "jobs enqueued per second")
	dur("gap-min", "CHAOS_GAP_MIN", "2s", "shortest time between two faults")
	dur("gap-max", "CHAOS_GAP_MAX", "6s", "longest time between two faults")
	dur("stop-min", "CHAOS_STOP_MIN", "1s", "shortest SIGSTOP")
	dur("stop-max", "CHAOS_STOP_MAX", "12s", "longest SIGSTOP (above heartbeat-timeout minus two heartbeats, another sidecar may recover the stopped one's rows)")
	dur("pg-down-max", "CHAOS_PG_DOWN_MAX", "2s", "longest time Postgres stays down in a restart")
	kinds := fs.String("faults", envDefault("CHAOS_FAULTS", "all"), "comma-separated fault kinds to inject: "+strings.Join(faultKinds(), ",")+" ($CHAOS_FAULTS)")
	dur("drain", "CHAOS_DRAIN", "120s", "how long the queue may take to drain once the faults stop")
	dur("job-bound", "CHAOS_JOB_BOUND", "120s", "the longest a job may take from its enqueue to done or dead-lettered")
	dur("heartbeat-interval", "CHAOS_HEARTBEAT_INTERVAL", "1s", "the sidecars' heartbeat_interval")
	dur("heartbeat-timeout", "CHAOS_HEARTBEAT_TIMEOUT", "8s", "the sidecars' heartbeat_timeout (stale-worker recovery)")
	dur("shutdown-timeout", "CHAOS_SHUTDOWN_TIMEOUT", "250ms", "the sidecars' shutdown_timeout (short: SIGTERM NACKs some async jobs)")
	fs.StringVar(&c.root, "root", ".", "the repository's root")
	fs.StringVar(&c.sidecarBin, "sidecar", envDefault("CHAOS_SIDECAR", "bin/soniq-sidecar"), "the binary under test (make build) ($CHAOS_SIDECAR)")
	fs.StringVar(&c.work, "dir", os.Getenv("CHAOS_DIR"), "working directory for logs and history (default: a new temporary one) ($CHAOS_DIR)")
	fs.BoolVar(&c.keep, "keep", os.Getenv("CHAOS_KEEP") != "", "keep the working directory after a passing run ($CHAOS_KEEP)")
	fs.IntVar(&c.rules.RSSMaxKB, "rss-max-kb", 256<<10, "no sidecar's VmRSS may exceed this")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	parsed := map[string]time.Duration{}
	for name, v := range durs {
		d, err := parseDur(*v)
		if err != nil {
			return nil, fmt.Errorf("-%s: %w", name, err)
		}
		parsed[name] = d
	}
	c.seconds, c.drain = parsed["seconds"], parsed["drain"]
	c.hbInterval, c.hbTimeout, c.shutdownTimeout = parsed["heartbeat-interval"], parsed["heartbeat-timeout"], parsed["shutdown-timeout"]
	if *seed == "" {
		var b [8]byte
		_, _ = crand.Read(b[:])
		c.seed = int64(binary.LittleEndian.Uint64(b[:]) >> 1 % 1_000_000_000)
	} else {
		n, err := strconv.ParseInt(*seed, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("-seed %q: want an integer", *seed)
		}
		c.seed = n
	}
	if *rate <= 0 {
		return nil, errors.New("-rate must be positive")
	}
	c.rate = *rate
	k, err := parseKinds(*kinds)
	if err != nil {
		return nil, err
	}
	c.plan = PlanParams{Length: c.seconds, GapMin: parsed["gap-min"], GapMax: parsed["gap-max"],
		StopMin: parsed["stop-min"], StopMax: parsed["stop-max"], PGDownMax: parsed["pg-down-max"], Kinds: k}
	if c.plan.GapMin <= 0 || c.plan.GapMax < c.plan.GapMin || c.plan.StopMax < c.plan.StopMin {
		return nil, errors.New("want 0 < gap-min <= gap-max and stop-min <= stop-max")
	}
	if c.hbTimeout < 2*c.hbInterval {
		return nil, errors.New("heartbeat-timeout must be at least two heartbeat intervals")
	}
	c.rules.HeartbeatInterval, c.rules.HeartbeatTimeout = c.hbInterval, c.hbTimeout
	c.rules.WriteWindow, c.rules.Slack = 5*time.Second, time.Second
	c.rules.JobBound = parsed["job-bound"]
	c.rules.RSSWarmup, c.rules.RSSMinSpan = 20*time.Second, 60*time.Second
	c.rules.RSSGrowthPct, c.rules.RSSGrowthKB = 25, 8<<10
	return c, nil
}

func main() {
	c, err := parseConfig(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code, err := run(ctx, c)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		fmt.Fprintf(os.Stderr, "chaos: seed=%d (CHAOS_SEED=%d reproduces the fault schedule); logs in %s\n", c.seed, c.seed, c.work)
		code = 1
	}
	os.Exit(code)
}

func (c *config) resolve() error {
	var err error
	if c.root, err = filepath.Abs(c.root); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(c.root, ".ci", "pg.sh")); err != nil {
		return fmt.Errorf("-root %s is not the repository's root: %w", c.root, err)
	}
	if !filepath.IsAbs(c.sidecarBin) {
		c.sidecarBin = filepath.Join(c.root, c.sidecarBin)
	}
	if _, err := os.Stat(c.sidecarBin); err != nil {
		return fmt.Errorf("the sidecar binary (run make build first): %w", err)
	}
	// The interpreters the handlers run on: found in PATH (make chaos puts
	// the project's virtualenv first), started by their full path.
	if c.python, err = exec.LookPath("python3"); err != nil {
		return fmt.Errorf("python3: %w", err)
	}
	if c.node, err = exec.LookPath("node"); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if c.work == "" {
		if c.work, err = os.MkdirTemp("", "soniq-chaos-"); err != nil {
			return err
		}
	} else if err := os.MkdirAll(c.work, 0o755); err != nil {
		return err
	}
	// Postgres and PgBouncer run as another user when we are root.
	return os.Chmod(c.work, 0o755)
}

func run(ctx context.Context, cfg *config) (int, error) {
	if err := cfg.resolve(); err != nil {
		return 0, err
	}
	plan := Plan(cfg.seed, cfg.plan)
	faultsLog, err := os.Create(filepath.Join(cfg.work, "faults.jsonl"))
	if err != nil {
		return 0, err
	}
	defer faultsLog.Close()
	rec := &recorder{start: time.Now(), log: faultsLog}
	rec.logf("seed=%d seconds=%d rate=%g/s stops %s-%s heartbeat %s/%s; work dir %s", cfg.seed, int(cfg.seconds.Seconds()), cfg.rate,
		cfg.plan.StopMin, cfg.plan.StopMax, cfg.hbInterval, cfg.hbTimeout, cfg.work)
	var sched strings.Builder
	for _, st := range plan {
		sched.WriteString(st.String() + "\n")
	}
	if err := os.WriteFile(filepath.Join(cfg.work, "schedule.txt"), []byte(sched.String()), 0o644); err != nil {
		return 0, err
	}
	rec.logf("fault schedule (%d faults, also in schedule.txt):\n%s", len(plan), sched.String())

	c := &cluster{cfg: cfg, group: proc.NewGroup(), rec: rec}
	defer c.group.KillAll()
	if err := c.startDatabase(ctx); err != nil {
		return 0, err
	}
	defer c.stopDatabase()
	rec.logf("postgres %s, pgbouncer %s", c.dbURL, c.pgbURL)

	c.handler = &attachHandler{c: c, sock: filepath.Join(cfg.work, "attach.sock")}
	if err := c.handler.start(ctx); err != nil {
		return 0, err
	}
	if err := c.newSidecars(); err != nil {
		return 0, err
	}
	for _, s := range c.sidecars {
		if err := s.start(ctx); err != nil {
			return 0, err
		}
	}
	pool, err := pgxpool.New(ctx, c.dbURL)
	if err != nil {
		return 0, fmt.Errorf("producer pool: %w", err)
	}
	defer pool.Close()
	prodLog, err := os.Create(filepath.Join(cfg.work, "produced.jsonl"))
	if err != nil {
		return 0, err
	}
	defer prodLog.Close()

	// The run: producer, nemesis and memory sampler until the deadline.
	rec.logf("running for %s", cfg.seconds)
	start := time.Now()
	runCtx, endRun := context.WithTimeout(ctx, cfg.seconds)
	defer endRun()
	samplerCtx, stopSampler := context.WithCancel(ctx)
	defer stopSampler()
	var rss []RSSSample
	var outages []Outage
	var wg sync.WaitGroup
	wg.Go(func() { rss = c.sampleRSS(samplerCtx) })
	wg.Go(func() { outages = c.probe(samplerCtx) })
	prod := &producer{pool: pool, rnd: mrand.New(mrand.NewSource(cfg.seed + 1)), rate: cfg.rate, log: prodLog}
	var produced []Produced
	wg.Go(func() { produced = prod.run(runCtx, rec) })
	c.runNemesis(runCtx, plan, start)
	<-runCtx.Done()
	if ctx.Err() != nil {
		stopSampler()
		wg.Wait()
		return 0, errors.New("interrupted")
	}

	// Heal, drain, stop.
	rec.logf("faults over; producer stopping; healing")
	if err := c.heal(ctx, pool); err != nil {
		stopSampler()
		wg.Wait()
		return 0, err
	}
	drained := c.waitDrained(ctx, pool)
	stopSampler()
	wg.Wait()
	rec.logf("stopping the sidecars (SIGTERM) and the attached handler")
	c.stopAll()

	h, err := c.collect(ctx, pool, produced, rss)
	if err != nil {
		return 0, err
	}
	h.Outages = outages
	var samples strings.Builder
	samples.WriteString("sidecar,pid,unix_ms,vmrss_kb\n")
	for _, r := range rss {
		fmt.Fprintf(&samples, "%s,%d,%d,%d\n", r.Sidecar, r.PID, r.At.UnixMilli(), r.KB)
	}
	_ = os.WriteFile(filepath.Join(cfg.work, "rss.csv"), []byte(samples.String()), 0o644)
	if !drained {
		h.Problems = append(h.Problems, fmt.Sprintf("the queue did not drain within %s of the end of the faults", cfg.drain))
	}
	h.Seed, h.Length = cfg.seed, cfg.seconds
	rep := Check(h, cfg.rules)
	summary := rep.Summary(cfg.seed, cfg.seconds)
	details := c.details(h, rep)
	_ = os.WriteFile(filepath.Join(cfg.work, "summary.txt"), []byte(summary+"\n"+details), 0o644)
	fmt.Println(summary)
	if len(rep.Violations) > 0 {
		fmt.Print(details)
		fmt.Printf("chaos: FAIL; CHAOS_SEED=%d reproduces the fault schedule; logs, history and faults in %s\n", cfg.seed, cfg.work)
		return 1, nil
	}
	if cfg.keep {
		fmt.Printf("chaos: logs, history and faults in %s\n", cfg.work)
	} else {
		c.stopDatabase()
		_ = os.RemoveAll(cfg.work)
	}
	return 0, nil
}

// sampleRSS reads each running sidecar's VmRSS every second until ctx ends.
func (c *cluster) sampleRSS(ctx context.Context) []RSSSample {
	var out []RSSSample
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return out
		case <-tick.C:
		}
		for _, s := range c.sidecars {
			in := s.current()
			if in == nil || in.p.Exited() {
				continue
			}
			if kb := proc.StatusKB(in.PID, "VmRSS"); kb > 0 {
				out = append(out, RSSSample{Sidecar: s.name, PID: in.PID, At: time.Now(), KB: kb})
			}
		}
	}
}

// probe connects to Postgres directly and through PgBouncer every 250 ms
// until ctx ends (a new connection each time, as a sidecar's pool must make
// after a restart) and returns the times each path was unreachable.
func (c *cluster) probe(ctx context.Context) []Outage {
	paths := []struct{ name, url string }{{"direct", c.dbURL}, {"pgbouncer", c.pgbURL}}
	open := map[string]time.Time{}
	var out []Outage
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			for _, p := range paths {
				if from, ok := open[p.name]; ok {
					out = append(out, Outage{Path: p.name, From: from, To: time.Now()})
				}
			}
			return out
		case <-tick.C:
		}
		for _, p := range paths {
			at := time.Now()
			pctx, cancel := context.WithTimeout(ctx, time.Second)
			err := probeOnce(pctx, p.url)
			cancel()
			if ctx.Err() != nil {
				break
			}
			from, down := open[p.name]
			switch {
			case err != nil && !down:
				open[p.name] = at
			case err == nil && down:
				delete(open, p.name)
				out = append(out, Outage{Path: p.name, From: from, To: at})
				if at.Sub(from) >= time.Second {
					c.rec.logf("postgres was unreachable %s for %s", p.name, at.Sub(from).Round(time.Millisecond))
				}
			}
		}
	}
}

func probeOnce(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, "SELECT 1", pgx.QueryExecModeSimpleProtocol)
	return err
}

// heal brings everything back: Postgres answering, PgBouncer running, the
// attached handler listening, every sidecar running (SIGCONT, harmless when
// it is not stopped) and ready.
func (c *cluster) heal(ctx context.Context, pool *pgxpool.Pool) error {
	deadline := time.Now().Add(90 * time.Second)
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := pool.Ping(pctx)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres does not answer after the run: %w", err)
		}
		sleep(ctx, 500*time.Millisecond)
	}
	if pid := c.pgbouncerPID(); pid == 0 || syscall.Kill(pid, 0) != nil {
		c.rec.problem("pgbouncer was not running at the end of the run")
		if _, err := c.script(ctx, "pgbouncer.sh", "restart", c.pgbDir); err != nil {
			return err
		}
	}
	if p := c.handler.current(); p == nil || p.Exited() {
		if err := c.handler.start(ctx); err != nil {
			return err
		}
	}
	for _, s := range c.sidecars {
		in := s.current()
		_ = syscall.Kill(in.PID, syscall.SIGCONT)
		if in.p.Exited() {
			if err := s.start(ctx); err != nil {
				return err
			}
			continue
		}
		if err := proc.WaitLog(ctx, in.p, `"handler process ready"`, s.ready, time.Minute); err != nil {
			c.rec.problem("sidecar %s pid %d not ready after the run: %v", s.name, in.PID, firstLine(err.Error()))
		}
	}
	return nil
}

// waitDrained waits, up to the drain bound, until no job of the queue is
// queued or processing, restarting a sidecar that exits meanwhile.
func (c *cluster) waitDrained(ctx context.Context, pool *pgxpool.Pool) bool {
	start := time.Now()
	last := time.Time{}
	for {
		var open int
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := pool.QueryRow(qctx, `SELECT count(*) FROM soniq_jobs WHERE queue = $1 AND status IN ('queued', 'processing')`, queueName).Scan(&open)
		cancel()
		if err == nil && open == 0 {
			c.rec.logf("drained in %s", time.Since(start).Round(time.Millisecond))
			return true
		}
		if time.Since(last) > 10*time.Second {
			c.rec.logf("draining: %d jobs queued or processing (%v)", open, err)
			last = time.Now()
		}
		if time.Since(start) > c.cfg.drain || ctx.Err() != nil {
			return false
		}
		for _, s := range c.sidecars {
			if in := s.current(); in.p.Exited() {
				c.rec.problem("sidecar %s pid %d exited on its own during the drain with status %d (log %s)", s.name, in.PID, in.p.ExitCode(), in.Log)
				s.restart(ctx)
			}
		}
		sleep(ctx, 500*time.Millisecond)
	}
}

// stopAll sends SIGTERM to every sidecar at once and waits for each to
// exit 0, then stops the attached handler the same way.
func (c *cluster) stopAll() {
	var wg sync.WaitGroup
	for _, s := range c.sidecars {
		wg.Go(func() { s.terminate(30*time.Second, false) })
	}
	wg.Wait()
	if p := c.handler.current(); p != nil && !p.Exited() {
		_ = p.Signal(syscall.SIGTERM)
		if !p.Wait(30 * time.Second) {
			c.rec.problem("the attached handler pid %d did not exit within 30 s of SIGTERM", p.PID)
			_ = syscall.Kill(-p.PID, syscall.SIGKILL)
		} else if code := p.ExitCode(); code != 0 {
			c.rec.problem("the attached handler pid %d exited with status %d after SIGTERM", p.PID, code)
		}
	}
}

// collect reads the rows, the histories and the sidecars' logs.
func (c *cluster) collect(ctx context.Context, pool *pgxpool.Pool, produced []Produced, rss []RSSSample) (*History, error) {
	jobs := map[string]*Job{}
	var order []string
	for _, p := range produced {
		jobs[p.ID] = &Job{ID: p.ID, Name: p.Name, Status: "missing"}
		order = append(order, p.ID)
	}
	unconfirmed := map[string]bool{}
	for _, p := range produced {
		if p.Unconfirmed {
			unconfirmed[p.ID] = true
		}
	}
	row := func(id, name string) *Job {
		j, ok := jobs[id]
		if !ok { // a row nobody enqueued: checked all the same
			j = &Job{ID: id, Name: name}
			jobs[id] = j
			order = append(order, id)
		}
		return j
	}
	rows, err := pool.Query(ctx, `SELECT id::text, job_name, status, attempts, max_attempts, created_at, updated_at, coalesce(last_error, '')
	FROM soniq_jobs WHERE queue = $1`, queueName)
	if err != nil {
		return nil, fmt.Errorf("reading soniq_jobs: %w", err)
	}
	for rows.Next() {
		var id, name, status, lastErr string
		var attempts, maxAttempts int
		var created, updated time.Time
		if err := rows.Scan(&id, &name, &status, &attempts, &maxAttempts, &created, &updated, &lastErr); err != nil {
			rows.Close()
			return nil, err
		}
		j := row(id, name)
		j.Status, j.Attempts, j.MaxAttempts, j.Enqueued, j.LastError = status, attempts, maxAttempts, created, lastErr
		if status == "done" {
			j.Finished = updated
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var both []string
	rows, err = pool.Query(ctx, `SELECT id::text, job_name, attempts, max_attempts, dead_letter_reason, original_created_at, moved_to_dead_letter_at, coalesce(last_error, '')
	FROM soniq_dead_letter_jobs WHERE queue = $1`, queueName)
	if err != nil {
		return nil, fmt.Errorf("reading soniq_dead_letter_jobs: %w", err)
	}
	for rows.Next() {
		var id, name, reason, lastErr string
		var attempts, maxAttempts int
		var created, moved time.Time
		if err := rows.Scan(&id, &name, &attempts, &maxAttempts, &reason, &created, &moved, &lastErr); err != nil {
			rows.Close()
			return nil, err
		}
		j := row(id, name)
		if j.Status != "missing" && j.Status != "" {
			both = append(both, id)
		}
		j.Status, j.Attempts, j.MaxAttempts, j.Enqueued, j.Finished, j.Reason, j.LastError = "dead_letter", attempts, maxAttempts, created, moved, reason, lastErr
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}

	h := &History{RSS: rss}
	for _, id := range order {
		j := jobs[id]
		if j.Status == "missing" && unconfirmed[id] {
			continue // its INSERT never landed
		}
		h.Jobs = append(h.Jobs, *j)
	}
	for _, id := range both {
		h.Problems = append(h.Problems, fmt.Sprintf("job %s is both in soniq_jobs and in soniq_dead_letter_jobs", id))
	}
	c.rec.mu.Lock()
	h.Faults = append(h.Faults, c.rec.faults...)
	h.Problems = append(h.Problems, c.rec.problems...)
	for _, in := range c.rec.incs {
		in.End, in.ExitCode = in.p.ExitedAt(), in.p.ExitCode()
		if err := scanSidecarLog(&in.Incarnation); err != nil {
			c.rec.mu.Unlock()
			return nil, err
		}
		h.Incarnations = append(h.Incarnations, in.Incarnation)
	}
	c.rec.mu.Unlock()
	sort.Slice(h.Faults, func(i, j int) bool { return h.Faults[i].At.Before(h.Faults[j].At) })
	var paths []string
	for _, name := range sidecarNames() {
		paths = append(paths, c.historyPath(name))
	}
	if h.Executions, err = readExecutions(paths); err != nil {
		return nil, err
	}
	attribute(h.Executions, h.Incarnations)
	return h, nil
}

// details prints each violation with what explains it: the row, the
// executions, the faults around them, the sidecars' log lines about the job.
func (c *cluster) details(h *History, rep *Report) string {
	var b strings.Builder
	jobs := map[string]Job{}
	for _, j := range h.Jobs {
		jobs[j.ID] = j
	}
	execs := map[string][]Execution{}
	for _, e := range h.Executions {
		execs[e.JobID] = append(execs[e.JobID], e)
	}
	for i, v := range rep.Violations {
		fmt.Fprintf(&b, "VIOLATION %d %s", i+1, v.Rule)
		if v.JobID != "" {
			fmt.Fprintf(&b, " job %s", v.JobID)
		}
		fmt.Fprintf(&b, ": %s\n", v.Text)
		if v.JobID == "" || i >= 30 {
			continue
		}
		j := jobs[v.JobID]
		fmt.Fprintf(&b, "  row: %s %s attempts %d/%d enqueued %s finished %s %s\n", j.Name, j.Status, j.Attempts, j.MaxAttempts, clock(j.Enqueued), clock(j.Finished), j.Reason)
		from, to := j.Enqueued, j.Finished
		for k, e := range execs[v.JobID] {
			fmt.Fprintf(&b, "  execution %d: %s\n", k+1, e.describe())
			if from.IsZero() || e.Start.Before(from) {
				from = e.Start
			}
			if e.End.After(to) {
				to = e.End
			}
		}
		if to.IsZero() {
			to = from
		}
		lo, hi := from.Add(-15*time.Second), to.Add(15*time.Second)
		for _, f := range h.Faults {
			if f.At.After(lo) && f.At.Before(hi) {
				fmt.Fprintf(&b, "  fault: %s\n", f)
			}
		}
		for _, o := range h.Outages {
			if o.To.After(lo) && o.From.Before(hi) {
				fmt.Fprintf(&b, "  postgres unreachable %s from %s for %s\n", o.Path, clock(o.From), o.To.Sub(o.From).Round(time.Millisecond))
			}
		}
		for _, in := range h.Incarnations {
			for _, t := range in.RowLost {
				if t.After(lo) && t.Before(hi) {
					fmt.Fprintf(&b, "  sidecar %s pid %d: found its worker row recovered at %s\n", in.Sidecar, in.PID, clock(t))
				}
			}
		}
		for _, in := range h.Incarnations {
			for _, line := range logLinesAbout(in.Log, v.JobID, 12) {
				fmt.Fprintf(&b, "  %s: %s\n", filepath.Base(in.Log), line)
			}
		}
	}
	return b.String()
}
