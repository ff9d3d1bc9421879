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
	"errors"
	"flag"
	"fmt"
	mrand "math/rand"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/soniq-dev/soniq-sidecar/internal/proc"
)

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

func run(ctx context.Context, cfg *config) (int, error) {
	if err := cfg.resolve(); err != nil {
		return 0, err
	}
	plan := mergeSteps(mergeSteps(Plan(cfg.seed, cfg.plan), PlanCPU(cfg.seed, cfg.plan.Length, cfg.cpu)),
		PlanReserve(cfg.seed, cfg.plan.Length, cfg.reserve))
	plan = mergeSteps(plan, PlanCancels(cfg.seed, cfg.plan.Length, cfg.cancelGap))
	plan = mergeSteps(plan, PlanNet(cfg.seed, cfg.plan.Length, cfg.net))
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
	defer func() {
		for _, s := range c.sidecars {
			_ = s.proxy.Close()
		}
	}()
	for _, s := range c.sidecars {
		if err := s.start(ctx); err != nil {
			return 0, err
		}
	}
	poolCfg, err := pgxpool.ParseConfig(c.dbURL)
	if err != nil {
		return 0, fmt.Errorf("producer pool: %w", err)
	}
	harnessParams(poolCfg.ConnConfig.RuntimeParams)
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
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
	var limited []LimitSample
	wg.Go(func() { limited = sampleLimits(samplerCtx, pool, cfg.rules.LimitCaps) })
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
	holders, err := c.holders(ctx, pool)
	if err != nil {
		rec.logf("%v", err)
	}
	stopSampler()
	wg.Wait()
	rec.logf("stopping the sidecars (SIGTERM) and the attached handler")
	c.stopAll()

	h, err := c.collect(ctx, pool, produced, rss)
	if err != nil {
		return 0, err
	}
	h.Outages, h.Holders, h.Limits = outages, holders, limited
	if h.Cancels, err = c.collectCancels(ctx, pool); err != nil {
		return 0, err
	}
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
	conn, err := probeConnect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, "SELECT 1", pgx.QueryExecModeSimpleProtocol)
	return err
}

// probeConnect opens a probe's connection, one that sends no cancel request.
func probeConnect(ctx context.Context, url string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse the probe's URL: %w", err)
	}
	up := noCancels(cfg)
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	up()
	return conn, nil
}

// noCancels makes cfg's connection send no cancel request once it is up:
// the probe's statement cut by its deadline would send one on a second
// connection, and PgBouncer 1.18 exits on cancel requests met at the wrong
// moment; a probe that took the run's PgBouncer down would be a fault of
// the harness, not of the sidecars. The connection calls up() once it is
// connected (dials before that, a fallback's, are the connection's own).
func noCancels(cfg *pgx.ConnConfig) (up func()) {
	dial := cfg.DialFunc
	var connected atomic.Bool
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if connected.Load() {
			return nil, errors.New("the probe sends no cancel request")
		}
		return dial(ctx, network, addr)
	}
	return func() { connected.Store(true) }
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
