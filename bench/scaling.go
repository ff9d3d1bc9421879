package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/backends/postgres"
	"github.com/soniq-dev/soniq-sidecar/internal/proc"
	"github.com/soniq-dev/soniq-sidecar/protocol"
)

// ---- the handler SDK alone: half of the physical limit ----

// aloneRun feeds n no-op jobs to one bench handler process over its stdin,
// as the sidecar would (never more in flight than its concurrency), and
// reads the results from its stdout. Its CPU per job is what the SDK costs
// with nothing else in the way.
func (b *bench) aloneRun(ctx context.Context, v variant, n int) (tpRun, error) {
	c := b.c
	var run tpRun
	per := c.conc / c.procs
	var argv, env []string
	switch v.SDK {
	case "python":
		argv = []string{c.python, filepath.Join(c.root, "bench", "handlers", "py_handler.py")}
		env = []string{"PYTHONPATH=" + filepath.Join(c.root, "sdk", "python"), "PYTHONUNBUFFERED=1"}
	case "node":
		argv = []string{c.node, filepath.Join(c.root, "bench", "handlers", "node_handler.js")}
		env = []string{"BENCH_NODE_SDK=" + filepath.Join(c.root, "sdk", "node", "index.js")}
	default:
		return run, fmt.Errorf("unknown sdk %q", v.SDK)
	}
	env = append(env, "BENCH_CONCURRENCY="+strconv.Itoa(per), "PATH="+os.Getenv("PATH"),
		"SONIQ_PROTOCOL_VERSIONS=1", "SONIQ_TRANSPORT=stdio", "SONIQ_HANDLER=bench-alone")
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	logf, err := os.Create(filepath.Join(c.work, "alone-"+v.SDK+".log"))
	if err != nil {
		return run, err
	}
	defer logf.Close()
	cmd.Stderr = logf
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return run, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return run, err
	}
	if err := cmd.Start(); err != nil {
		return run, fmt.Errorf("start %s: %w", strings.Join(argv, " "), err)
	}
	defer func() {
		_ = stdin.Close()
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	}()
	rd := bufio.NewReaderSize(stdout, 1<<20)
	line, err := rd.ReadBytes('\n')
	if err != nil {
		return run, fmt.Errorf("no hello from the %s handler: %w", v.SDK, err)
	}
	if m, err := protocol.Decode(line[:len(line)-1]); err != nil || m.Type() != protocol.TypeHello {
		return run, fmt.Errorf("first frame of the %s handler is not a hello: %q", v.SDK, line)
	}
	// The first c.warm results are not measured: cpu0 and t0 are taken
	// when they are in (the window is kept full across, as in a long run).
	total := c.warm + n
	// The frames the sidecar sends for these rows' jobs: random ids, the
	// job's deadline (its 300 s timeout), the claiming worker and the row's
	// created_at. Made before the clock starts: the driver's work is not
	// the handler's.
	frames := make([][]byte, total)
	workerID, now := randomUUID(), time.Now().UnixMilli()
	deadline := now + 300_000
	for i := range frames {
		frame, err := protocol.Marshal(&protocol.Job{ID: randomUUID(), Name: "bench.noop", Args: json.RawMessage("{}"),
			Attempt: 1, MaxAttempts: 3, Queue: "default", Deadline: &deadline, WorkerID: &workerID, CreatedAt: &now})
		if err != nil {
			return run, err
		}
		frames[i] = append(frame, '\n')
	}
	slots := make(chan struct{}, per)
	werr := make(chan error, 1)
	cpu0 := proc.CPU(cmd.Process.Pid)
	t0 := time.Now()
	go func() {
		w := bufio.NewWriterSize(stdin, 1<<16)
		for i := range total {
			select {
			case slots <- struct{}{}:
			default:
				// About to block on a full window: send what is buffered.
				if err := w.Flush(); err != nil {
					werr <- err
					return
				}
				slots <- struct{}{}
			}
			if _, err := w.Write(frames[i]); err != nil {
				werr <- err
				return
			}
		}
		werr <- w.Flush()
	}()
	for done := 0; done < total; {
		if done == c.warm && c.warm > 0 {
			cpu0, t0 = proc.CPU(cmd.Process.Pid), time.Now()
		}
		line, err := rd.ReadBytes('\n')
		if err != nil {
			return run, fmt.Errorf("%s handler after %d results: %w", v.SDK, done, err)
		}
		m, err := protocol.Decode(line[:len(line)-1])
		if err != nil {
			return run, err
		}
		if r, ok := m.(*protocol.Result); ok {
			if r.Status != protocol.StatusDone {
				return run, fmt.Errorf("job %s: %s", r.ID, r.Status)
			}
			<-slots
			done++
		}
	}
	run.Seconds = time.Since(t0).Seconds()
	run.HandlerCPU = proc.CPU(cmd.Process.Pid) - cpu0
	run.JobsPerS = float64(n) / run.Seconds
	if err := <-werr; err != nil {
		return run, err
	}
	return run, nil
}

// ---- 6a: queue depth ----
//
// The claims are timed on the full queue (up to 7 of them; the claimed
// rows are deleted), then a sidecar drains the first -n jobs.

// depthPoint is one queue depth: the cost of one claim of the budget and
// the drain rate of the first jobs.
type depthPoint struct {
	Depth          int     `json:"queued"`
	Drained        int     `json:"drained"`
	ClaimMS        float64 `json:"claim_ms"` // median of the timed claims
	JobsPerS       float64 `json:"jobs_per_s"`
	PostgresCPU10k float64 `json:"postgres_cpu_s_per_10k,omitempty"`
	FillSeconds    float64 `json:"fill_seconds"`
	Error          string  `json:"error,omitempty"`
}

func (b *bench) depthSection(ctx context.Context) error {
	v := sidecarVariant("python", "stdio")
	for _, d := range b.c.depths {
		// About 20,000 rows a second to fill on a busy 2-core machine.
		if b.c.remaining() < 15*time.Second+time.Duration(d/20)*time.Millisecond {
			b.rep.Notes = append(b.rep.Notes, fmt.Sprintf("queue depth %d not measured: the %s bound was near", d, b.c.budget))
			continue
		}
		p, err := b.depthRun(ctx, v, d)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			p.Error = err.Error()
			logf("depth %d: %v", d, err)
		} else {
			logf("depth %d: claim %.2f ms, %.0f jobs/s over the first %d (filled in %.0fs)", d, p.ClaimMS, p.JobsPerS, p.Drained, p.FillSeconds)
		}
		b.rep.Depth = append(b.rep.Depth, p)
	}
	return nil
}

func (b *bench) depthRun(ctx context.Context, v variant, depth int) (depthPoint, error) {
	c := b.c
	p := depthPoint{Depth: depth, Drained: min(depth, c.n)}
	if err := b.db.reset(ctx, true); err != nil {
		return p, err
	}
	t := time.Now()
	for left := depth; left > 0; left -= 100000 { // in pieces: one huge transaction would hold everything
		if err := b.db.enqueueBulk(ctx, "bench.noop", map[string]any{}, min(left, 100000)); err != nil {
			return p, err
		}
	}
	p.FillSeconds = time.Since(t).Seconds()
	// A fill of this size sets off an autovacuum of the table, which would
	// otherwise run beside the drain at some depths and not at others (a
	// run at 1,000,000 queued drained 1.17× slower with one beside it than
	// without). Done here, it is the same for every depth.
	if _, err := b.db.pool.Exec(ctx, `VACUUM (ANALYZE) soniq_jobs`); err != nil {
		return p, fmt.Errorf("vacuuming the filled queue: %w", err)
	}

	// Claim cost: the sidecar's own statement, limit = the budget, on the
	// full queue (the claimed rows are deleted).
	be, err := postgres.Open(ctx, c.dbURL)
	if err != nil {
		return p, err
	}
	defer be.Close()
	wid := backends.NewID()
	if err := be.RegisterWorker(ctx, backends.Worker{ID: wid, Hostname: fmt.Sprintf("bench-depth-%d", depth), PID: os.Getpid(), Concurrency: c.conc, Version: "bench"}); err != nil {
		return p, err
	}
	claims := max(1, min(7, depth/(2*c.conc)))
	var ms []float64
	for range claims {
		t := time.Now()
		jobs, err := be.Claim(ctx, backends.ClaimParams{WorkerID: wid, Names: []string{"bench.noop"}, Limit: c.conc})
		if err != nil {
			return p, err
		}
		ms = append(ms, float64(time.Since(t).Microseconds())/1000)
		if len(jobs) != c.conc {
			return p, fmt.Errorf("claimed %d of %d", len(jobs), c.conc)
		}
		if _, err := b.db.pool.Exec(ctx, `DELETE FROM soniq_jobs WHERE worker_id = $1`, wid); err != nil {
			return p, err
		}
	}
	p.ClaimMS = median(ms)
	depthLeft := depth - claims*c.conc
	p.Drained = min(depthLeft, c.n)

	ws, err := b.startVariant(ctx, v, fmt.Sprintf("depth-%d", depth), nil)
	if err != nil {
		return p, err
	}
	defer ws.stop()
	t0, pg0 := time.Now(), b.db.serverCPU()
	deadline := t0.Add(3 * time.Minute)
	for {
		var done int
		// Done rows carry expires_at: counted through its index.
		if err := b.db.pool.QueryRow(ctx, `SELECT count(*) FROM soniq_jobs WHERE expires_at IS NOT NULL`).Scan(&done); err != nil {
			return p, err
		}
		if done >= p.Drained {
			break
		}
		if time.Now().After(deadline) || ws.procs[0].Exited() {
			return p, fmt.Errorf("%d of %d jobs done after %s", done, p.Drained, time.Since(t0).Round(time.Second))
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.PostgresCPU10k = (b.db.serverCPU() - pg0) * 10000 / float64(p.Drained)
	// The sidecar starts claiming as soon as its handlers are ready, with
	// the queue already full: the rate runs from the first completion to
	// the Drained-th (the server's clock).
	var first, nth time.Time
	if err := b.db.pool.QueryRow(ctx, `SELECT min(updated_at) FROM soniq_jobs WHERE expires_at IS NOT NULL`).Scan(&first); err != nil {
		return p, err
	}
	if err := b.db.pool.QueryRow(ctx, `SELECT updated_at FROM soniq_jobs WHERE expires_at IS NOT NULL ORDER BY expires_at OFFSET $1 LIMIT 1`, p.Drained-1).Scan(&nth); err != nil {
		return p, err
	}
	if !nth.After(first) {
		return p, fmt.Errorf("first and %d-th completion at the same instant", p.Drained)
	}
	p.JobsPerS = float64(p.Drained-1) / nth.Sub(first).Seconds()
	return p, nil
}

// ---- 6b: several sidecars sharing one database ----

// shareResult is k sidecars draining one queue with the same total budget.
type shareResult struct {
	Sidecars int `json:"sidecars"`
	// ClaimAhead0: the sidecars run with `claim_ahead: 0` (the set
	// measured beside the default one, in the same rounds).
	ClaimAhead0 bool      `json:"claim_ahead_0,omitempty"`
	Processes   int       `json:"processes_each"`
	PerProc     int       `json:"concurrency_each_process"`
	Runs        []float64 `json:"runs_jobs_per_s"`
	Errors      []string  `json:"errors,omitempty"`
	Median      float64   `json:"median_jobs_per_s,omitempty"`
	// Costs are the runs' CPU figures and claim counts (tpRun's fields);
	// Cost holds their medians per 10,000 jobs and the rows per claim.
	Costs []tpRun   `json:"cost_runs,omitempty"`
	Cost  *tpResult `json:"cost,omitempty"`
}

func (b *bench) shareSection(ctx context.Context) error {
	c := b.c
	// The curve twice, with the default claim_ahead and with claim_ahead
	// 0, in the same rounds: the reserve's gain at each fleet size.
	var rs []*shareResult
	for _, off := range []bool{false, true} {
		for _, k := range c.sidecars {
			procs := max(1, c.procs/k)
			rs = append(rs, &shareResult{Sidecars: k, ClaimAhead0: off, Processes: procs, PerProc: c.conc / k / procs})
		}
	}
	b.rep.Sharing = rs
	for round := range c.runs {
		if round > 0 && c.remaining() < c.reserve()/6 {
			b.rep.Notes = append(b.rep.Notes, fmt.Sprintf("sharing: %d of %d rounds run (the %s bound)", round, c.runs, c.budget))
			break
		}
		for i := range rs {
			r := rs[(i+round)%len(rs)]
			run, err := b.shareRun(ctx, r, round)
			jps := run.JobsPerS
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err != nil {
				r.Errors = append(r.Errors, err.Error())
				logf("sharing %d sidecars%s round %d: %v", r.Sidecars, r.suffix(), round+1, err)
				continue
			}
			logf("sharing %d sidecars%s round %d: %.0f jobs/s, %.1f rows per claim", r.Sidecars, r.suffix(), round+1, jps, float64(c.n)/float64(max(run.Claims, 1)))
			r.Runs = append(r.Runs, jps)
			r.Costs = append(r.Costs, run)
		}
	}
	for _, r := range rs {
		if len(r.Runs) > 0 {
			r.Median = median(r.Runs)
			r.Cost = &tpResult{Runs: r.Costs}
			r.Cost.summarise(c.n)
		}
	}
	return nil
}

func (b *bench) shareRun(ctx context.Context, r *shareResult, round int) (tpRun, error) {
	c := b.c
	var run tpRun
	if err := b.db.reset(ctx, true); err != nil {
		return run, err
	}
	v := sidecarVariant("python", "stdio")
	if r.ClaimAhead0 {
		v = ahead0(v)
	}
	all := &workers{v: v}
	defer all.stop()
	for i := range r.Sidecars {
		m, err := b.writeManifestSized(v, fmt.Sprintf("share-%d%s-%d-%d", r.Sidecars, r.tag(), round, i), r.Processes, r.PerProc)
		if err != nil {
			return run, err
		}
		w, err := b.c.group.Start([]string{c.sidecar, "run", "--manifest", m, "--metrics-addr=", "--log-format", "json", "--instance", fmt.Sprintf("bench%d", i)},
			b.sidecarEnv(nil), c.work, filepath.Join(c.work, fmt.Sprintf("share-%d%s-%d-%d.log", r.Sidecars, r.tag(), round, i)))
		if err != nil {
			return run, err
		}
		all.procs = append(all.procs, w)
	}
	for _, w := range all.procs {
		if err := proc.WaitLog(ctx, w, `"handler process ready"`, r.Processes, 60*time.Second); err != nil {
			return run, err
		}
	}
	time.Sleep(300 * time.Millisecond)
	upd0, err := b.db.workerRowUpdates(ctx)
	if err != nil {
		return run, err
	}
	own0, ch0 := all.cpu()
	if err := b.db.enqueueBulk(ctx, "bench.noop", map[string]any{}, c.n); err != nil {
		return run, err
	}
	t0 := time.Now()
	pg0 := b.db.serverCPU()
	if err := b.db.waitDrained(ctx, all, 5*time.Minute); err != nil {
		return run, err
	}
	own1, ch1 := all.cpu()
	run.PostgresCPU = b.db.serverCPU() - pg0
	run.SidecarCPU, run.HandlerCPU = own1-own0, ch1-ch0
	all.stop()
	if run.Claims, err = b.claimsSince(ctx, upd0); err != nil {
		return run, err
	}
	return b.finishRun(ctx, run, t0, c.n)
}

// suffix names the set in the log ("" for the default claim_ahead).
func (r *shareResult) suffix() string {
	if r.ClaimAhead0 {
		return " (claim_ahead 0)"
	}
	return ""
}

// tag tells the set's manifests and logs apart.
func (r *shareResult) tag() string {
	if r.ClaimAhead0 {
		return "-ahead0"
	}
	return ""
}

// randomUUID is a version 4 UUID, as gen_random_uuid() makes the rows' ids.
func randomUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}
