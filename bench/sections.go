package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/backends/postgres"
	"github.com/soniq-dev/soniq-sidecar/internal/proc"
)

// ---- 1, 2, 5: throughput, the database's ceiling, cost ----

// tpRun is one drain of n no-op jobs.
type tpRun struct {
	Round       int     `json:"round"`
	JobsPerS    float64 `json:"jobs_per_s"`
	Seconds     float64 `json:"seconds"`
	SidecarCPU  float64 `json:"sidecar_cpu_s,omitempty"`  // the sidecar process
	HandlerCPU  float64 `json:"handler_cpu_s,omitempty"`  // its handler processes
	WorkerCPU   float64 `json:"worker_cpu_s,omitempty"`   // Soniq worker processes
	DriverCPU   float64 `json:"driver_cpu_s,omitempty"`   // ceiling: the Go driver itself
	PostgresCPU float64 `json:"postgres_cpu_s,omitempty"` // every server process
	PeakRSSKB   int     `json:"sidecar_peak_rss_kb,omitempty"`
	SeqScans    int64   `json:"seq_scans,omitempty"` // of soniq_jobs, during the run
	Claims      int64   `json:"claims,omitempty"`    // claim statements (sidecar, ceiling), see workerRowUpdates
	Error       string  `json:"error,omitempty"`
}

// tpResult is one variant's runs and medians.
type tpResult struct {
	variant
	N      int     `json:"jobs_per_run"`
	Status string  `json:"status,omitempty"` // "" = measured, else why not
	Runs   []tpRun `json:"runs"`
	Median float64 `json:"median_jobs_per_s,omitempty"`
	// Medians over runs of the cost figures, per 10,000 jobs.
	SidecarCPU10k  float64 `json:"sidecar_cpu_s_per_10k,omitempty"`
	HandlerCPU10k  float64 `json:"handler_cpu_s_per_10k,omitempty"`
	WorkerCPU10k   float64 `json:"worker_cpu_s_per_10k,omitempty"`
	DriverCPU10k   float64 `json:"driver_cpu_s_per_10k,omitempty"`
	PostgresCPU10k float64 `json:"postgres_cpu_s_per_10k,omitempty"`
	PeakRSSMB      float64 `json:"sidecar_peak_rss_mb,omitempty"`
	SeqScans1k     float64 `json:"seq_scans_per_1k,omitempty"`
	// ClaimSize is the mean rows per claim statement (median over runs).
	ClaimSize float64 `json:"rows_per_claim,omitempty"`
}

func (b *bench) throughputVariants() []*tpResult {
	vs := []variant{
		soniqVariant,
		withoutIndex(soniqVariant),
		sidecarVariant("python", "stdio"),
		sidecarVariant("node", "stdio"),
		ahead0(sidecarVariant("python", "stdio")),
		ahead0(sidecarVariant("node", "stdio")),
		sidecarVariant("python", "unix"),
		sidecarVariant("node", "unix"),
		attachVariant("python"),
		attachVariant("node"),
		withoutIndex(sidecarVariant("python", "stdio")),
		ceilingVariant(b.c.conc),
		floorVariant,
		aloneVariant("python"),
		aloneVariant("node"),
	}
	var out []*tpResult
	for _, v := range vs {
		if !b.c.want(v.Key) {
			continue
		}
		r := &tpResult{variant: v, N: b.c.jobsFor(v)}
		if v.Transport == "unix" {
			r.Status = b.unix[v.SDK]
		}
		out = append(out, r)
	}
	return out
}

func ceilingVariant(batch int) variant {
	return variant{Key: "ceiling", Label: fmt.Sprintf("database ceiling (Go, no handler, claim batch %d)", batch), Kind: "ceiling", Batch: batch}
}

// floorVariant is the least Soniq's row contract allows (floorRun): the
// database's cost per job that no worker can go below.
var floorVariant = variant{Key: "floor", Label: fmt.Sprintf("database floor (Go, no handler, claims and completions of %d rows)", floorBatch), Kind: "ceiling", Batch: floorBatch}

// aloneVariant is the handler SDK alone: the bench handler fed no-op jobs
// from a pipe by the driver, no sidecar and no database (the physical limit).
func aloneVariant(sdk string) variant {
	name := map[string]string{"python": "Python", "node": "Node"}[sdk]
	return variant{Key: "alone-" + sdk, Label: name + " SDK alone (jobs from a pipe, no sidecar, no database)", Kind: "alone", SDK: sdk, Transport: "stdio"}
}

// withoutIndex is the variant on a database without the claim-order index
// (set up by Soniq's tools only, or `migrate --no-claim-index`).
func withoutIndex(v variant) variant {
	v.Key += "-noindex"
	v.Label += ", without the claim-order index"
	v.NoIndex = true
	return v
}

// jobsFor is the number of jobs one throughput run of v drains.
func (c *config) jobsFor(v variant) int {
	if v.Kind == "soniq" && c.soniqN > 0 {
		return c.soniqN
	}
	return c.n
}

// claimIndex matches the ORDER BY of the claim statement (Soniq's and the
// sidecar's): the index `soniq-sidecar migrate` creates (there CONCURRENTLY).
// Every run has it except the "without the claim-order index" variants.
const claimIndex = `CREATE INDEX soniq_sidecar_claim_order ON soniq_jobs (priority, scheduled_at NULLS FIRST, created_at) WHERE status = 'queued'`

func (b *bench) throughputSection(ctx context.Context) error {
	c := b.c
	results := b.throughputVariants()
	b.rep.Throughput = results
	var active []*tpResult
	for _, r := range results {
		if r.Status == "" {
			active = append(active, r)
		}
	}
	var roundTime time.Duration
	for round := range c.runs {
		if round > 0 && c.remaining()-c.reserve() < roundTime+30*time.Second {
			b.rep.Notes = append(b.rep.Notes, fmt.Sprintf("throughput: %d of %d rounds run; the next would have passed the %s bound", round, c.runs, c.budget))
			break
		}
		t0 := time.Now()
		// Alternate: each round starts one variant later.
		for i := range active {
			r := active[(i+round)%len(active)]
			run, err := b.throughputRun(ctx, r.variant, round)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err != nil {
				run.Error = err.Error()
				logf("throughput %s round %d: %v", r.Key, round+1, err)
			} else {
				logf("throughput %s round %d: %.0f jobs/s (%.2fs)", r.Key, round+1, run.JobsPerS, run.Seconds)
			}
			run.Round = round + 1
			r.Runs = append(r.Runs, run)
		}
		roundTime = time.Since(t0)
	}
	for _, r := range active {
		r.summarise(r.N)
	}
	return nil
}

func (r *tpResult) summarise(n int) {
	var tp, sc, hc, wc, dc, pc, rss, rpc, cs []float64
	per10k := 10000 / float64(n)
	for _, run := range r.Runs {
		if run.Error != "" {
			continue
		}
		tp = append(tp, run.JobsPerS)
		sc = append(sc, run.SidecarCPU*per10k)
		hc = append(hc, run.HandlerCPU*per10k)
		wc = append(wc, run.WorkerCPU*per10k)
		dc = append(dc, run.DriverCPU*per10k)
		pc = append(pc, run.PostgresCPU*per10k)
		rss = append(rss, float64(run.PeakRSSKB)/1024)
		if run.SeqScans > 0 {
			rpc = append(rpc, float64(run.SeqScans)*1000/float64(n))
		}
		if run.Claims > 0 {
			cs = append(cs, float64(n)/float64(run.Claims))
		}
	}
	if len(tp) == 0 {
		r.Status = "failed: see the runs' errors"
		return
	}
	r.Median = median(tp)
	r.SidecarCPU10k, r.HandlerCPU10k, r.WorkerCPU10k = median(sc), median(hc), median(wc)
	r.DriverCPU10k, r.PostgresCPU10k, r.PeakRSSMB = median(dc), median(pc), median(rss)
	if len(rpc) > 0 {
		r.SeqScans1k = median(rpc)
	}
	if len(cs) > 0 {
		r.ClaimSize = median(cs)
	}
}

func (b *bench) throughputRun(ctx context.Context, v variant, round int) (tpRun, error) {
	c := b.c
	var run tpRun
	n := c.jobsFor(v)
	if v.Kind == "alone" {
		return b.aloneRun(ctx, v, n)
	}
	if err := b.db.reset(ctx, !v.NoIndex); err != nil {
		return run, err
	}
	tag := fmt.Sprintf("tp-%s-%d", v.Key, round)
	timeout := min(max(c.remaining(), 2*time.Minute), 5*time.Minute)
	if v.Kind == "ceiling" {
		// Jobs first, then the drain; the clock starts when the claimer
		// is connected and about to issue its first claim.
		if err := b.db.enqueueBulk(ctx, "bench.noop", map[string]any{}, n); err != nil {
			return run, err
		}
		var t0 time.Time
		var cpu0, pg0 float64
		seq0, err := b.db.seqScans(ctx)
		if err != nil {
			return run, err
		}
		upd0, err := b.db.workerRowUpdates(ctx)
		if err != nil {
			return run, err
		}
		cctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		ready := func() {
			cpu0, pg0 = proc.CPU(syscall.Getpid()), b.db.serverCPU()
			t0 = time.Now()
		}
		finished := func() {
			run.DriverCPU = proc.CPU(syscall.Getpid()) - cpu0
			run.PostgresCPU = b.db.serverCPU() - pg0
		}
		if v.Key == floorVariant.Key {
			err = floorRun(cctx, c.dbURL, ready, finished)
		} else {
			err = ceilingRun(cctx, c.dbURL, v.Batch, ready, finished)
		}
		if err != nil {
			return run, err
		}
		if run.SeqScans, err = b.seqScansSince(ctx, v, seq0); err != nil {
			return run, err
		}
		if v.Key != floorVariant.Key {
			if run.Claims, err = b.claimsSince(ctx, upd0); err != nil {
				return run, err
			}
		}
		return b.finishRun(ctx, run, t0, n)
	}

	// A warm run counts its claims from the sidecar's own histogram: the
	// table statistics the cold runs read are flushed up to seconds late,
	// so the warm-up's claims would land in the measured run's.
	warm := v.Kind == "sidecar" && c.warm > 0
	if warm {
		var err error
		if v.metricsAddr, err = freeAddr(); err != nil {
			return run, err
		}
	}
	ws, err := b.startVariant(ctx, v, tag, nil)
	if err != nil {
		return run, err
	}
	defer ws.stop()
	seq0, err := b.db.seqScans(ctx)
	if err != nil {
		return run, err
	}
	upd0, err := b.db.workerRowUpdates(ctx)
	if err != nil {
		return run, err
	}
	var claims0 []float64
	if warm {
		if err := b.warmUp(ctx, ws, c.warm*c.procs, timeout); err != nil {
			return run, err
		}
		if claims0, err = scrapeGauges(ctx, v.metricsAddr, "soniq_claim_rows_count"); err != nil {
			return run, err
		}
	}
	own0, ch0 := ws.cpu() // idle until the commit below
	if err := b.db.enqueueBulk(ctx, "bench.noop", map[string]any{}, n); err != nil {
		return run, err
	}
	// The jobs become visible at the commit: the clock starts there.
	t0 := time.Now()
	pg0 := b.db.serverCPU()
	if err := b.db.waitDrained(ctx, ws, timeout); err != nil {
		return run, err
	}
	own1, ch1 := ws.cpu()
	run.PostgresCPU = b.db.serverCPU() - pg0
	if v.Kind == "sidecar" {
		run.SidecarCPU, run.HandlerCPU = own1-own0, ch1-ch0
		run.PeakRSSKB = proc.StatusKB(ws.procs[0].PID, "VmHWM")
	} else {
		run.WorkerCPU = own1 - own0 + ch1 - ch0
	}
	if warm {
		claims1, err := scrapeGauges(ctx, v.metricsAddr, "soniq_claim_rows_count")
		if err != nil {
			return run, err
		}
		run.Claims = int64(claims1[0] - claims0[0])
		return b.finishRun(ctx, run, t0, n)
	}
	ws.stop() // their connections close: the counters are flushed
	if run.SeqScans, err = b.seqScansSince(ctx, v, seq0); err != nil {
		return run, err
	}
	if v.Kind == "sidecar" {
		if run.Claims, err = b.claimsSince(ctx, upd0); err != nil {
			return run, err
		}
	}
	return b.finishRun(ctx, run, t0, n)
}

// seqScansSince is the growth of soniq_jobs' seq_scan counter since seq0
// (only for the rows without the claim-order index; the others scan it).
func (b *bench) seqScansSince(ctx context.Context, v variant, seq0 int64) (int64, error) {
	if !v.NoIndex {
		return 0, nil
	}
	time.Sleep(300 * time.Millisecond)
	seq1, err := b.db.seqScans(ctx)
	return seq1 - seq0, err
}

// finishRun reads the last completion time and checks every job is done.
// claimsSince is the number of claim statements since workerRowUpdates
// read upd0 (see there), read once the claimers have disconnected.
func (b *bench) claimsSince(ctx context.Context, upd0 int64) (int64, error) {
	// A backend flushes its statistics when it exits; give the server a
	// moment to have them all.
	time.Sleep(200 * time.Millisecond)
	upd, err := b.db.workerRowUpdates(ctx)
	return upd - upd0, err
}

func (b *bench) finishRun(ctx context.Context, run tpRun, t0 time.Time, n int) (tpRun, error) {
	last, done, err := b.db.lastDone(ctx)
	if err != nil {
		return run, err
	}
	if done != n {
		return run, fmt.Errorf("%d of %d jobs done", done, n)
	}
	run.Seconds = last.Sub(t0).Seconds()
	run.JobsPerS = float64(n) / run.Seconds
	return run, nil
}

// ---- 3: pickup latency ----

type latRun struct {
	Round int     `json:"round"`
	N     int     `json:"n"`
	P50   float64 `json:"p50_ms"`
	P95   float64 `json:"p95_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`
	Error string  `json:"error,omitempty"`
}

type latResult struct {
	variant
	Status string   `json:"status,omitempty"`
	Runs   []latRun `json:"runs"`
	P50    float64  `json:"median_p50_ms,omitempty"`
	P95    float64  `json:"median_p95_ms,omitempty"`
	P99    float64  `json:"median_p99_ms,omitempty"`
}

func (b *bench) latencySection(ctx context.Context) error {
	c := b.c
	vs := []variant{soniqVariant, sidecarVariant("python", "stdio"), sidecarVariant("node", "stdio"),
		sidecarVariant("python", "unix"), sidecarVariant("node", "unix"), attachVariant("python"), attachVariant("node")}
	var active []*latResult
	for _, v := range vs {
		if !b.c.want(v.Key) {
			continue
		}
		r := &latResult{variant: v}
		if v.Transport == "unix" {
			r.Status = b.unix[v.SDK]
		}
		b.rep.Latency = append(b.rep.Latency, r)
		if r.Status == "" {
			active = append(active, r)
		}
	}
	for round := range c.latRuns {
		for i := range active {
			r := active[(i+round)%len(active)]
			run, err := b.latencyRun(ctx, r.variant, round, nil)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err != nil {
				run.Error = err.Error()
				logf("latency %s round %d: %v", r.Key, round+1, err)
			} else {
				logf("latency %s round %d: p50 %.2f p95 %.2f p99 %.2f ms (n=%d)", r.Key, round+1, run.P50, run.P95, run.P99, run.N)
			}
			run.Round = round + 1
			r.Runs = append(r.Runs, run)
		}
	}
	for _, r := range active {
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
	return nil
}

// extraEnv adds to (and overrides) the sidecar's environment.
func (b *bench) latencyRun(ctx context.Context, v variant, round int, extraEnv []string) (latRun, error) {
	c := b.c
	var run latRun
	if err := b.db.reset(ctx, true); err != nil {
		return run, err
	}
	ws, err := b.startVariant(ctx, v, fmt.Sprintf("lat-%s-%d", v.Key, round), extraEnv)
	if err != nil {
		return run, err
	}
	defer ws.stop()
	n := int(float64(c.latRate) * c.latSecs)
	if err := b.produceLatency(ctx, c.latRate, n); err != nil {
		return run, err
	}
	if err := b.db.waitDrained(ctx, ws, 30*time.Second); err != nil {
		return run, err
	}
	lats, err := b.latencies(ctx)
	if err != nil {
		return run, err
	}
	if len(lats) != n {
		return run, fmt.Errorf("%d of %d latency jobs done", len(lats), n)
	}
	slices.Sort(lats)
	run.N = n
	run.P50, run.P95, run.P99, run.Max = pct(lats, 50), pct(lats, 95), pct(lats, 99), lats[len(lats)-1]
	return run, nil
}

// produceLatency enqueues n bench.latency jobs, rate a second. The producer
// is Soniq-style: one INSERT and pg_notify per job, as Soniq's enqueue does
// (backends/postgres Enqueue mirrors it).
func (b *bench) produceLatency(ctx context.Context, rate, n int) error {
	prod, err := postgres.Open(ctx, b.c.dbURL)
	if err != nil {
		return err
	}
	defer prod.Close()
	if err := prod.Ping(ctx); err != nil {
		return err
	}
	interval := time.Second / time.Duration(rate)
	begin := time.Now()
	for i := range n {
		if d := time.Until(begin.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		// The clock starts before the INSERT is sent: enqueue-call to
		// handler start, the producer's view.
		args, _ := json.Marshal(map[string]int64{"t_us": time.Now().UnixMicro()})
		if _, err := prod.Enqueue(ctx, backends.EnqueueParams{Name: "bench.latency", Args: args}); err != nil {
			return err
		}
	}
	return nil
}

// latencies reads the pickup latency (ms) of every done bench.latency job:
// the handler's start, which it returns as its result, minus the
// producer's t_us.
func (b *bench) latencies(ctx context.Context) ([]float64, error) {
	rows, err := b.db.pool.Query(ctx, `SELECT args::text, COALESCE(result::text, 'null') FROM soniq_jobs WHERE job_name = 'bench.latency' AND status = 'done'`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var lats []float64
	for rows.Next() {
		var a, res string
		if err := rows.Scan(&a, &res); err != nil {
			return nil, err
		}
		var args struct {
			T int64 `json:"t_us"`
		}
		if err := json.Unmarshal([]byte(a), &args); err != nil {
			return nil, err
		}
		started, err := startedUS(res)
		if err != nil {
			return nil, err
		}
		lats = append(lats, float64(started-args.T)/1000)
	}
	return lats, rows.Err()
}

// startedUS reads {"started_us": N} from a result, which Soniq may store
// as a JSON string holding the object.
func startedUS(res string) (int64, error) {
	var s string
	if json.Unmarshal([]byte(res), &s) == nil {
		res = s
	}
	var r struct {
		S json.Number `json:"started_us"`
	}
	if err := json.Unmarshal([]byte(res), &r); err != nil {
		return 0, fmt.Errorf("result %q: %w", res, err)
	}
	f, err := strconv.ParseFloat(string(r.S), 64)
	if err != nil {
		return 0, fmt.Errorf("result %q: %w", res, err)
	}
	return int64(f), nil
}

// ---- 4: shutdown precision ----

type shutRun struct {
	Round       int     `json:"round"`
	ExitS       float64 `json:"sigterm_to_exit_s"`
	OvershootMS float64 `json:"overshoot_ms"`
	InFlight    int     `json:"in_flight"`
	Requeued    int     `json:"requeued"`
	Error       string  `json:"error,omitempty"`
}

type shutResult struct {
	variant
	Status      string    `json:"status,omitempty"`
	Runs        []shutRun `json:"runs"`
	OvershootMS float64   `json:"median_overshoot_ms,omitempty"`
	MaxOverMS   float64   `json:"max_overshoot_ms,omitempty"`
}

func (b *bench) shutdownSection(ctx context.Context) error {
	c := b.c
	vs := []variant{sidecarVariant("python", "stdio"), sidecarVariant("node", "stdio"), soniqVariant, attachVariant("python"), attachVariant("node")}
	var active []*shutResult
	for _, v := range vs {
		if !b.c.want(v.Key) {
			continue
		}
		r := &shutResult{variant: v}
		b.rep.Shutdown = append(b.rep.Shutdown, r)
		active = append(active, r)
	}
	for round := range c.shutRuns {
		for i := range active {
			r := active[(i+round)%len(active)]
			run, err := b.shutdownRun(ctx, r.variant, round)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err != nil {
				run.Error = err.Error()
				logf("shutdown %s round %d: %v", r.Key, round+1, err)
			} else {
				logf("shutdown %s round %d: exit %.3fs after SIGTERM (overshoot %.0f ms)", r.Key, round+1, run.ExitS, run.OvershootMS)
			}
			run.Round = round + 1
			r.Runs = append(r.Runs, run)
		}
	}
	for _, r := range active {
		var o []float64
		for _, run := range r.Runs {
			if run.Error == "" {
				o = append(o, run.OvershootMS)
			}
		}
		if len(o) == 0 {
			r.Status = "failed: see the runs' errors"
			continue
		}
		r.OvershootMS, r.MaxOverMS = median(o), slices.Max(o)
	}
	return nil
}

func (b *bench) shutdownRun(ctx context.Context, v variant, round int) (shutRun, error) {
	c := b.c
	var run shutRun
	if err := b.db.reset(ctx, true); err != nil {
		return run, err
	}
	to := fmt.Sprint(c.shutTO.Seconds())
	ws, err := b.startVariant(ctx, v, fmt.Sprintf("shut-%s-%d", v.Key, round), []string{"SONIQ_SHUTDOWN_TIMEOUT=" + to})
	if err != nil {
		return run, err
	}
	defer ws.stop()
	// Every slot busy with an async job that outlives shutdown_timeout.
	if err := b.db.enqueueBulk(ctx, "bench.sleep", map[string]any{"seconds": 60}, c.conc); err != nil {
		return run, err
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, processing, _, err := b.db.counts(ctx)
		if err != nil {
			return run, err
		}
		if processing == c.conc {
			break
		}
		if time.Now().After(deadline) {
			return run, fmt.Errorf("only %d of %d jobs started", processing, c.conc)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // the handlers are inside their sleeps
	run.InFlight = c.conc
	t0 := time.Now()
	for _, w := range ws.procs {
		_ = w.Signal(syscall.SIGTERM)
	}
	var last time.Time
	for _, w := range ws.procs {
		select {
		case <-w.Done():
		case <-time.After(c.shutTO + 30*time.Second):
			return run, fmt.Errorf("pid %d still running %s after SIGTERM", w.PID, c.shutTO+30*time.Second)
		}
		if w.ExitedAt().After(last) {
			last = w.ExitedAt()
		}
	}
	run.ExitS = last.Sub(t0).Seconds()
	run.OvershootMS = (last.Sub(t0) - c.shutTO).Seconds() * 1000
	if err := b.db.pool.QueryRow(ctx, `SELECT count(*) FROM soniq_jobs WHERE status = 'queued'`).Scan(&run.Requeued); err != nil {
		return run, err
	}
	return run, nil
}

// ---- statistics ----

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// pct is the nearest-rank percentile of sorted xs.
func pct(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	k := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[min(max(k, 0), len(sorted)-1)]
}

// warmUp drains n no-op jobs through a started variant before its measured
// run, then empties the table again so the measured drain starts on an
// empty table as a cold one does. The sidecar's reserve starts that drain
// sized by the warm-up's decayed rate, not from nothing: its claims are
// smaller for the first windows (rows per claim and Postgres per job are
// read from cold runs).
func (b *bench) warmUp(ctx context.Context, ws *workers, n int, timeout time.Duration) error {
	if err := b.db.enqueueBulk(ctx, "bench.noop", map[string]any{}, n); err != nil {
		return err
	}
	if err := b.db.waitDrained(ctx, ws, timeout); err != nil {
		return fmt.Errorf("warm-up drain: %w", err)
	}
	_, err := b.db.pool.Exec(ctx, `TRUNCATE soniq_jobs`)
	return err
}
