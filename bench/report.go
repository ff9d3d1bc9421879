package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// report is everything docs/benchmarks.md shows; its JSON is embedded in the
// document so bench/chart.py (and anyone) can redraw from the file alone.
type report struct {
	Meta       map[string]string `json:"meta"`
	Params     params            `json:"params"`
	Throughput []*tpResult       `json:"throughput"`
	Latency    []*latResult      `json:"latency"`
	Priority   []*prioResult     `json:"priority,omitempty"`
	Shutdown   []*shutResult     `json:"shutdown"`
	Pooler     []*latResult      `json:"pooler,omitempty"`
	Depth      []depthPoint      `json:"depth,omitempty"`
	Sharing    []*shareResult    `json:"sharing,omitempty"`
	SQLite     *sqliteReport     `json:"sqlite,omitempty"`
	Peers      []*peerResult     `json:"peers,omitempty"`
	Producers  []*producerResult `json:"producers,omitempty"`
	Limits     *limitsResult     `json:"limits,omitempty"`
	Fleet      *fleetResult      `json:"fleet,omitempty"`
	Loads      []sectionLoad     `json:"loads,omitempty"`
	Notes      []string          `json:"notes,omitempty"`
	Goals      []goal            `json:"goals"`

	scrub []string // old, new pairs: machine paths out of the document
}

// params are the driver's settings for the run.
type params struct {
	JobsPerRun       int     `json:"jobs_per_run"`
	SoniqJobsPerRun  int     `json:"soniq_jobs_per_run"`
	ThroughputRounds int     `json:"throughput_rounds"`
	Budget           int     `json:"concurrency_budget"`
	Processes        int     `json:"processes"`
	WarmJobs         int     `json:"warm_jobs_per_process,omitempty"`
	LatencyRate      int     `json:"latency_rate_per_s"`
	LatencySeconds   float64 `json:"latency_seconds"`
	LatencyRounds    int     `json:"latency_rounds"`
	ShutdownRounds   int     `json:"shutdown_rounds"`
	ShutdownTimeoutS float64 `json:"shutdown_timeout_s"`
	PrioRounds       int     `json:"priority_rounds,omitempty"`
	PrioJobs         int     `json:"priority_jobs_per_run,omitempty"`
	PrioInterval     string  `json:"priority_interval,omitempty"`
	PrioBacklog      int     `json:"priority_backlog,omitempty"`
	PeersN           int     `json:"peers_jobs_per_run,omitempty"`
	PeersSlowN       int     `json:"peers_slow_jobs_per_run,omitempty"`
	PeersRounds      int     `json:"peers_rounds,omitempty"`
	PeersLatSeconds  float64 `json:"peers_latency_seconds,omitempty"`
	ProducersBatch   int     `json:"producers_batch,omitempty"`
	ProducersRounds  int     `json:"producers_rounds,omitempty"`
	ProducersSingle  int     `json:"producers_single,omitempty"`
	Bound            string  `json:"budget"`
	Command          string  `json:"command"`
}

type goal struct {
	Name     string `json:"name"`
	Target   string `json:"target"`
	Measured string `json:"measured"`
	Met      string `json:"met"` // yes | no | not measured
	Note     string `json:"note,omitempty"`
}

func newReport(c *config, d *database) *report {
	ctx := context.Background()
	m := machine()
	m["date"] = time.Now().UTC().Format("2006-01-02")
	m["commit"] = output(c.root, "git", "rev-parse", "--short=12", "HEAD")
	if output(c.root, "git", "status", "--porcelain", "--untracked-files=no") != "" {
		m["commit"] += " (the work tree had uncommitted changes)"
	}
	m["sidecar_version"] = output(c.root, c.sidecar, "version")
	m["go"] = output(c.root, "go", "env", "GOVERSION")
	m["python"] = output(c.root, c.python, "-c", "import platform; print(platform.python_version())")
	m["node"] = output(c.root, c.node, "--version")
	m["soniq"] = output(c.root, filepath.Join(filepath.Dir(c.soniq), "python"), "-c", "import importlib.metadata as m; print(m.version('soniq'))")
	m["postgres"] = d.setting(ctx, "server_version")
	for _, s := range []string{"fsync", "synchronous_commit", "full_page_writes", "shared_buffers", "max_connections"} {
		m["pg_"+s] = d.setting(ctx, s)
	}
	home, _ := os.UserHomeDir()
	var scrub []string
	for _, p := range [][2]string{{c.dbURL, "$SONIQ_TEST_DATABASE_URL"}, {filepath.Dir(c.sidecar), "$work"}, {c.work, "$scratch"}, {c.root, "."}, {home, "~"}} {
		if len(p[0]) > 1 {
			scrub = append(scrub, p[0], p[1])
		}
	}
	return &report{
		scrub: scrub,
		Meta:  m,
		Params: params{
			JobsPerRun: c.n, SoniqJobsPerRun: c.soniqN, ThroughputRounds: c.runs, Budget: c.conc, Processes: c.procs, WarmJobs: c.warm,
			LatencyRate: c.latRate, LatencySeconds: c.latSecs, LatencyRounds: c.latRuns,
			ShutdownRounds: c.shutRuns, ShutdownTimeoutS: c.shutTO.Seconds(), Bound: c.budget.String(),
			PrioRounds: c.prioRuns, PrioJobs: c.prioJobs, PrioInterval: c.prioInterval.String(), PrioBacklog: c.prioBacklog,
			PeersN: c.peersN, PeersSlowN: c.peersSlowN, PeersRounds: c.peersRuns, PeersLatSeconds: c.peersLatSecs,
			Command: c.command,
		},
	}
}

func (r *report) tp(key string) *tpResult {
	for _, t := range r.Throughput {
		if t.Key == key {
			return t
		}
	}
	return &tpResult{Status: "not run"}
}

func (r *report) lat(key string) *latResult {
	for _, t := range r.Latency {
		if t.Key == key {
			return t
		}
	}
	return &latResult{Status: "not run"}
}

func (r *report) peer(key string) *peerResult {
	for _, t := range r.Peers {
		if t.Key == key {
			return t
		}
	}
	return &peerResult{Status: "not run"}
}

func (r *report) shut(key string) *shutResult {
	for _, t := range r.Shutdown {
		if t.Key == key {
			return t
		}
	}
	return &shutResult{Status: "not run"}
}

func yes(ok bool) string {
	if ok {
		return "yes"
	}
	return "**no**"
}

func ok(f float64) bool { return !math.IsNaN(f) && f > 0 }

// physLimit is the machine's fair physical limit for one SDK: its cores
// divided by the CPU per job of the database work alone (the floor: driver
// plus Postgres, the least Soniq's row contract allows; the ceiling when
// the floor was not run) plus the SDK's handler alone.
type physLimit struct {
	DBCPU, HandlerCPU float64 // CPU seconds per 10,000 jobs
	JobsPerS          float64
	From              string // the variant the database figure comes from
}

// dbFloor is the variant that prices the database work alone: the floor,
// else the ceiling.
func (r *report) dbFloor() *tpResult {
	if f := r.tp("floor"); ok(f.Median) {
		return f
	}
	return r.tp("ceiling")
}

func (r *report) limit(sdk string, cores int) physLimit {
	db, alone := r.dbFloor(), r.tp("alone-"+sdk)
	var l physLimit
	if !ok(db.Median) || !ok(alone.Median) {
		return l
	}
	l.DBCPU, l.HandlerCPU, l.From = db.DriverCPU10k+db.PostgresCPU10k, alone.HandlerCPU10k, db.Key
	if l.DBCPU+l.HandlerCPU > 0 {
		l.JobsPerS = float64(cores) * 10000 / (l.DBCPU + l.HandlerCPU)
	}
	return l
}

// ofFloor is Postgres' CPU per job for t as a multiple of the floor's, or
// NaN when either was not measured.
func (r *report) ofFloor(pgCPU10k float64) float64 {
	f := r.tp("floor")
	if !ok(f.PostgresCPU10k) || !ok(pgCPU10k) {
		return math.NaN()
	}
	return pgCPU10k / f.PostgresCPU10k
}

// evaluate fills Goals from the results: first the race with the native
// queues and what it takes to lead it, then the rest.
func (r *report) evaluate(cores int) {
	soniq, soniqNo, py := r.tp("soniq"), r.tp("soniq-noindex"), r.tp("python-stdio")
	add := func(g goal) { r.Goals = append(r.Goals, g) }
	const nm = "not measured"

	for _, pair := range [][2]string{{"python-stdio", "pgqueuer"}, {"node-stdio", "pg-boss"}} {
		sc, pe := r.peer(pair[0]), r.peer(pair[1])
		g := goal{Name: fmt.Sprintf("throughput in the peers section (same rounds): %s vs %s", labelOr(sc.Label, pair[0]), labelOr(pe.Label, pair[1])), Target: "≥ 2×"}
		if ok(sc.JobsPerS) && ok(pe.JobsPerS) {
			x := sc.JobsPerS / pe.JobsPerS
			g.Measured, g.Met = fmt.Sprintf("%.2f× (%.0f vs %.0f jobs/s)", x, sc.JobsPerS, pe.JobsPerS), yes(x >= 2)
			if x < 2 {
				g.Note = fmt.Sprintf("per 10,000 jobs the sidecar row spent %.2f CPU-s in its processes (sidecar %.2f) and %.2f in Postgres; %s %.2f and %.2f",
					sc.ProcCPU10k, sc.SidecarCPU10k, sc.PostgresCPU10k, pe.Label, pe.ProcCPU10k, pe.PostgresCPU10k)
			}
		} else {
			g.Measured, g.Met = nm, nm
		}
		add(g)
	}

	// Total CPU per job (processes + Postgres) against graphile-worker's,
	// in the same rounds: with done rows kept (result_ttl > 0, the
	// default) and with result_ttl 0, when done rows are deleted at
	// completion as graphile-worker deletes its jobs.
	gw := r.peer("graphile-worker")
	for _, ref := range []struct {
		key    string
		target float64
	}{{"node-stdio", 1.6}, {"node-stdio-ttl0", 1.4}} {
		sc := r.peer(ref.key)
		g := goal{Name: fmt.Sprintf("total CPU per job (processes + Postgres), peers section: %s vs %s", labelOr(sc.Label, ref.key), labelOr(gw.Label, "graphile-worker")),
			Target: fmt.Sprintf("≤ %.4g×", ref.target)}
		if a, b := sc.ProcCPU10k+sc.PostgresCPU10k, gw.ProcCPU10k+gw.PostgresCPU10k; ok(sc.JobsPerS) && ok(gw.JobsPerS) && ok(a) && ok(b) {
			x := a / b
			g.Measured, g.Met = fmt.Sprintf("%.2f× (%.2f vs %.2f CPU-s per 10,000 jobs)", x, a, b), yes(x <= ref.target)
		} else {
			g.Measured, g.Met = nm, nm
		}
		add(g)
	}

	for _, key := range []string{"python-stdio", "node-stdio"} {
		t := r.tp(key)
		g := goal{Name: "Postgres CPU per job, " + labelOr(t.Label, key) + ", vs the database floor (throughput section)", Target: "≤ 1.25×"}
		if x := r.ofFloor(t.PostgresCPU10k); ok(t.Median) && ok(x) {
			g.Measured, g.Met = fmt.Sprintf("%.2f× (%.2f vs %.2f CPU-s per 10,000 jobs; %.0f rows per claim)", x, t.PostgresCPU10k, r.tp("floor").PostgresCPU10k, t.ClaimSize), yes(x <= 1.25)
		} else {
			g.Measured, g.Met = nm, nm
		}
		add(g)
	}

	for _, key := range []string{"python-stdio", "node-stdio"} {
		t := r.tp(key)
		lim := r.limit(t.SDK, cores)
		g := goal{Name: "fraction of the physical limit, " + labelOr(t.Label, key) + " (database set up by `migrate`)", Target: "≥ 80 %"}
		if ok(t.Median) && ok(lim.JobsPerS) {
			f := t.Median / lim.JobsPerS
			g.Measured, g.Met = fmt.Sprintf("%.0f %% (%.0f of %.0f jobs/s)", 100*f, t.Median, lim.JobsPerS), yes(f >= 0.8)
			if f < 0.8 {
				g.Note = r.profile(t, cores) + fmt.Sprintf("; the limit assumes %.2f s (database) + %.2f s (handler)", lim.DBCPU, lim.HandlerCPU)
			}
		} else {
			g.Measured, g.Met = nm, nm
		}
		add(g)
	}

	// The pod topology (attach) and spawned unix handlers against stdio,
	// per SDK: throughput in the same rounds, and pickup latency.
	for _, sdk := range []string{"python", "node"} {
		stdio, stdioLat := r.tp(sdk+"-stdio"), r.lat(sdk+"-stdio")
		for _, tr := range []string{"attach", "unix"} {
			t := r.tp(sdk + "-" + tr)
			g := goal{Name: "throughput, " + labelOr(t.Label, sdk+"-"+tr) + " vs the same SDK over stdio", Target: "≥ 90 %"}
			if t.Status == "" && ok(t.Median) && ok(stdio.Median) {
				f := t.Median / stdio.Median
				g.Measured, g.Met = fmt.Sprintf("%.0f %% (%.0f vs %.0f jobs/s)", 100*f, t.Median, stdio.Median), yes(f >= 0.9)
				if f < 0.9 && ok(t.SidecarCPU10k) && ok(stdio.SidecarCPU10k) {
					g.Note = fmt.Sprintf("per 10,000 jobs: sidecar %.2f vs %.2f CPU-s, handlers %.2f vs %.2f", t.SidecarCPU10k, stdio.SidecarCPU10k, t.HandlerCPU10k, stdio.HandlerCPU10k)
				}
			} else {
				g.Measured, g.Met = nm, nm
			}
			add(g)
			l := r.lat(sdk + "-" + tr)
			g = goal{Name: "pickup latency p99 at 50 jobs/s, " + labelOr(t.Label, sdk+"-"+tr) + " vs the same SDK over stdio", Target: "≤ stdio's"}
			if l != nil && stdioLat != nil && l.Status == "" && ok(l.P99) && ok(stdioLat.P99) {
				g.Measured, g.Met = fmt.Sprintf("%.2f vs %.2f ms (p50 %.2f vs %.2f)", l.P99, stdioLat.P99, l.P50, stdioLat.P50), yes(l.P99 <= stdioLat.P99)
			} else {
				g.Measured, g.Met = nm, nm
			}
			add(g)
		}
	}

	for _, key := range []string{"python-stdio", "node-stdio"} {
		t := r.tp(key)
		g := goal{Name: "sidecar CPU per 10,000 jobs, " + labelOr(t.Label, key) + " (throughput section)", Target: "≤ 0.10 CPU-s"}
		if ok(t.Median) && ok(t.SidecarCPU10k) {
			g.Measured, g.Met = fmt.Sprintf("%.2f CPU-s (%.0f µs a job)", t.SidecarCPU10k, t.SidecarCPU10k*100), yes(t.SidecarCPU10k <= 0.10)
		} else {
			g.Measured, g.Met = nm, nm
		}
		add(g)
	}

	// Rows per claim at full load: the throughput section's stdio rows,
	// with the default claim_ahead (claim_ahead 0 beside it).
	for _, key := range []string{"python-stdio", "node-stdio"} {
		t, off := r.tp(key), r.tp(key+"-ahead0")
		g := goal{Name: "rows per claim at full load, " + labelOr(t.Label, key) + " (throughput section)", Target: "≥ 200"}
		if ok(t.Median) && ok(t.ClaimSize) {
			g.Measured, g.Met = fmt.Sprintf("%.0f%s", t.ClaimSize, offNote(off.ClaimSize, "%.0f")), yes(t.ClaimSize >= 200)
		} else {
			g.Measured, g.Met = nm, nm
		}
		add(g)
	}

	def, off := r.shareSet(false), r.shareSet(true)
	for _, k := range []struct {
		n      int
		target float64
	}{{4, 0.95}, {8, 0.9}} {
		g := goal{Name: fmt.Sprintf("%d sidecars sharing one database vs one, same total budget", k.n), Target: fmt.Sprintf("≥ %.0f %%", 100*k.target)}
		g.Measured, g.Met = nm, nm
		if f, many, one := shareFrac(def, k.n); ok(f) {
			g.Measured = fmt.Sprintf("%.0f %% (%.0f vs %.0f jobs/s; %.0f vs %.0f rows per claim)", 100*f, many.Median, one.Median, many.Cost.ClaimSize, one.Cost.ClaimSize)
			if fo, _, _ := shareFrac(off, k.n); ok(fo) {
				g.Measured += fmt.Sprintf("; claim_ahead 0: %.0f %%", 100*fo)
			}
			g.Met = yes(f >= k.target)
		}
		add(g)
	}
	g := goal{Name: "Postgres CPU per job with the most sidecars sharing one database vs one", Target: "≤ 1.2×"}
	g.Measured, g.Met = nm, nm
	if x, many, one := shareCPU(def); ok(x) {
		g.Name = fmt.Sprintf("Postgres CPU per job, %d sidecars sharing one database vs one", many.Sidecars)
		g.Measured = fmt.Sprintf("%.2f× (%.2f vs %.2f CPU-s per 10,000 jobs; %.0f vs %.0f rows per claim)", x,
			many.Cost.PostgresCPU10k, one.Cost.PostgresCPU10k, many.Cost.ClaimSize, one.Cost.ClaimSize)
		if xo, mo, oo := shareCPU(off); ok(xo) {
			g.Measured += fmt.Sprintf("; claim_ahead 0: %.2f× (%.0f vs %.0f rows per claim)", xo, mo.Cost.ClaimSize, oo.Cost.ClaimSize)
		}
		g.Met = yes(x <= 1.2)
	}
	add(g)

	g = goal{Name: "Postgres CPU per job, 128 simulated sidecars vs 1 (fleet section)", Target: "≤ 1.5×"}
	g.Measured, g.Met = nm, nm
	if x, many, one := r.Fleet.ratio(); ok(x) {
		if many.Sidecars != 128 {
			g.Name = fmt.Sprintf("Postgres CPU per job, %d simulated sidecars vs 1 (fleet section; 128 not measured)", many.Sidecars)
		}
		g.Measured = fmt.Sprintf("%.2f× (%.2f vs %.2f CPU-s per 10,000 jobs; %.0f vs %.0f rows per claim; %.1f vs %.1f jobs per result write)", x,
			many.PostgresCPU10k, one.PostgresCPU10k, many.RowsPerClaim, one.RowsPerClaim, many.jobsPerWrite(), one.jobsPerWrite())
		g.Measured += r.Fleet.behind(many, one)
		g.Met = yes(x <= 1.5 && many.Sidecars == 128)
	}
	add(g)

	// A job of better priority than the reserve's rows starts within
	// claim_ahead plus one claim; the claim_ahead 0 row's p99 stands for
	// "one claim" (the wait for the next claim, and the claim).
	if len(r.Priority) > 0 {
		pd, po := r.prio("python-stdio"), r.prio("python-stdio-ahead0")
		g := goal{Name: "start delay p99 of a high-priority job behind a full reserve, " + labelOr(pd.Label, "python-stdio") + " (priority section)",
			Target: "≤ claim_ahead (100 ms) + the claim_ahead 0 row's p99"}
		if pd.Status == "" && po.Status == "" && ok(pd.P99) && ok(po.P99) {
			g.Measured = fmt.Sprintf("%.1f ms vs 100 + %.1f ms (p50 %.1f vs %.1f ms)", pd.P99, po.P99, pd.P50, po.P50)
			g.Met = yes(pd.P99 <= 100+po.P99)
		} else {
			g.Measured, g.Met = nm, nm
		}
		add(g)
	}

	g = goal{Name: "drain rate as the queue grows, largest depth vs smallest (Python SDK, stdio)", Target: "within 1.2×"}
	var pts []depthPoint
	for _, p := range r.Depth {
		if p.Error == "" && ok(p.JobsPerS) {
			pts = append(pts, p)
		}
	}
	if len(pts) >= 2 {
		first, last := pts[0], pts[len(pts)-1]
		claimX, tpX := last.ClaimMS/first.ClaimMS, first.JobsPerS/last.JobsPerS
		g.Measured = fmt.Sprintf("%d → %d queued: %.0f → %.0f jobs/s (%.2f×); one claim %.2f → %.2f ms (%.2f×)",
			first.Depth, last.Depth, first.JobsPerS, last.JobsPerS, tpX, first.ClaimMS, last.ClaimMS, claimX)
		g.Met = yes(tpX <= 1.2)
	} else {
		g.Measured, g.Met = nm, nm
	}
	add(g)

	for _, ref := range []struct {
		t      *tpResult
		target float64
	}{{soniqNo, 40}, {soniq, 10}} {
		g := goal{Name: "throughput vs " + ref.t.Label + " (Python SDK, stdio)", Target: fmt.Sprintf("≥ %.0f×", ref.target)}
		if ref.t.Label == "" {
			g.Name = "throughput vs the Soniq worker"
		}
		if ok(py.Median) && ok(ref.t.Median) {
			x := py.Median / ref.t.Median
			g.Measured, g.Met = fmt.Sprintf("%.1f× (%.0f vs %.0f jobs/s)", x, py.Median, ref.t.Median), yes(x >= ref.target)
		} else {
			g.Measured, g.Met = nm, nm
		}
		add(g)
	}

	g = goal{Name: "sidecar peak RSS at full load (Python SDK, stdio)", Target: "≤ 40 MB"}
	if ok(py.PeakRSSMB) {
		worst := 0.0
		for _, run := range py.Runs {
			worst = max(worst, float64(run.PeakRSSKB)/1024)
		}
		g.Measured, g.Met = fmt.Sprintf("%.1f MiB (median; worst %.1f MiB)", py.PeakRSSMB, worst), yes(py.PeakRSSMB <= 40*1e6/(1<<20))
	} else {
		g.Measured, g.Met = nm, nm
	}
	add(g)

	sl := r.lat("soniq")
	for _, key := range []string{"python-stdio", "node-stdio"} {
		l := r.lat(key)
		g = goal{Name: "pickup latency p99 at " + strconv.Itoa(r.Params.LatencyRate) + " jobs/s, " + labelOr(l.Label, key), Target: "≤ 1/5 of the Soniq worker's"}
		if ok(l.P99) && ok(sl.P99) {
			g.Measured, g.Met = fmt.Sprintf("%.2f ms = 1/%.1f of %.2f ms (p50 %.2f, p95 %.2f)", l.P99, sl.P99/l.P99, sl.P99, l.P50, l.P95), yes(l.P99*5 <= sl.P99)
		} else {
			g.Measured, g.Met = nm, nm
		}
		add(g)
	}

	for _, key := range []string{"python-stdio", "node-stdio"} {
		s := r.shut(key)
		g = goal{Name: "async-forced exit after SIGTERM, " + labelOr(s.Label, key), Target: "≤ shutdown_timeout + 200 ms"}
		if s.Status == "" && len(s.Runs) > 0 {
			g.Measured, g.Met = fmt.Sprintf("+%.0f ms (median of %d; worst +%.0f ms)", s.OvershootMS, len(s.Runs), s.MaxOverMS), yes(s.OvershootMS <= 200)
		} else {
			g.Measured, g.Met = nm, nm
		}
		add(g)
	}
}

// offNote is ", claim_ahead 0: X" for a measured claim_ahead 0 figure.
func offNote(x float64, format string) string {
	if !ok(x) {
		return ""
	}
	return " (claim_ahead 0: " + fmt.Sprintf(format, x) + ")"
}

// shareSet is the sharing curve with the default claim_ahead (off false)
// or with claim_ahead 0 (off true), in the order run.
func (r *report) shareSet(off bool) []*shareResult {
	var out []*shareResult
	for _, sh := range r.Sharing {
		if sh.ClaimAhead0 == off {
			out = append(out, sh)
		}
	}
	return out
}

// shareOne is the set's one-sidecar row, or nil.
func shareOne(set []*shareResult) *shareResult {
	for _, sh := range set {
		if sh.Sidecars == 1 && ok(sh.Median) && sh.Cost != nil {
			return sh
		}
	}
	return nil
}

// shareFrac is k sidecars' rate as a fraction of one's in set (NaN when
// either was not measured).
func shareFrac(set []*shareResult, k int) (float64, *shareResult, *shareResult) {
	one := shareOne(set)
	for _, sh := range set {
		if sh.Sidecars == k && one != nil && ok(sh.Median) && sh.Cost != nil {
			return sh.Median / one.Median, sh, one
		}
	}
	return math.NaN(), nil, nil
}

// shareCPU is Postgres' CPU per job with the most sidecars in set, as a
// multiple of one sidecar's.
func shareCPU(set []*shareResult) (float64, *shareResult, *shareResult) {
	one := shareOne(set)
	if len(set) < 2 || one == nil {
		return math.NaN(), nil, nil
	}
	many := set[len(set)-1]
	if many.Sidecars == 1 || many.Cost == nil || !ok(many.Cost.PostgresCPU10k) || !ok(one.Cost.PostgresCPU10k) {
		return math.NaN(), nil, nil
	}
	return many.Cost.PostgresCPU10k / one.Cost.PostgresCPU10k, many, one
}

func (r *report) prio(key string) *prioResult {
	for _, t := range r.Priority {
		if t.Key == key {
			return t
		}
	}
	return &prioResult{Status: "not run"}
}

// labelOr is a row's label, or its key when the row was not run.
func labelOr(label, key string) string {
	if label != "" {
		return label
	}
	if v := peerByKey(key); v != nil {
		return v.Label
	}
	if base, found := strings.CutSuffix(key, "-ahead0"); found {
		return labelOr("", base) + ", claim_ahead 0"
	}
	if sdk, tr, found := strings.Cut(key, "-"); found {
		return sidecarVariant(sdk, tr).Label
	}
	return key
}

// profile says where the time of a throughput run went: the CPU seconds of
// each party per 10,000 jobs and how busy the machine's cores were.
func (r *report) profile(t *tpResult, cores int) string {
	if !ok(t.Median) {
		return ""
	}
	wall := 10000 / t.Median
	total := t.SidecarCPU10k + t.HandlerCPU10k + t.PostgresCPU10k
	return fmt.Sprintf("per 10,000 jobs: %.2f s wall; CPU: sidecar %.2f s, handlers %.2f s, Postgres %.2f s = %.2f s, i.e. %.0f %% of %d cores busy "+
		"(the rest: the driver's polling, other load on the machine, or waiting on round trips)",
		wall, t.SidecarCPU10k, t.HandlerCPU10k, t.PostgresCPU10k, total, 100*total/(wall*float64(cores)), cores)
}

func f0(x float64) string {
	if !ok(x) {
		return "—"
	}
	return fmt.Sprintf("%.0f", x)
}

func f2(x float64) string {
	if math.IsNaN(x) || x == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f", x)
}

func (r *report) write(path string) error {
	cores, _ := strconv.Atoi(r.Meta["cores"])
	r.Goals = nil
	r.evaluate(max(cores, 1))
	m := r.Meta
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }

	w("# Benchmarks\n\n")
	w("Generated by `make bench` (`bench/run.sh` → `bench/main.go`; chart by `bench/chart.py`). Do not edit by hand:\n")
	w("run `make bench` again. Goals are goals, not assertions; where one is missed the note says where the time went.\n\n")
	w("![throughput, latency, shutdown and cost](benchmarks.png)\n\n")

	w("## Setup\n\n")
	w("| | |\n| --- | --- |\n")
	w("| date (UTC) | %s, run took %s |\n", m["date"], m["duration"])
	w("| commit | `%s` (`soniq-sidecar version`: %s) |\n", m["commit"], m["sidecar_version"])
	w("| machine | %s, %s cores, %s, %s |\n", m["cpu"], m["cores"], m["memory"], m["kernel"])
	w("| load average at start | %s |\n", m["loadavg"])
	var loads []string
	busy := false
	for _, l := range r.Loads {
		mark := ""
		if l.Busy {
			mark, busy = " (busy)", true
		}
		loads = append(loads, fmt.Sprintf("%s: %s%s", l.Section, l.Load, mark))
	}
	if len(loads) > 0 {
		note := "the machine was quiet enough: no section started with a 1-minute load at or above the core count"
		if busy {
			note = "**busy**: at least one section started with a 1-minute load at or above the core count (this bench's own previous section counts too), so other work competed for the cores: absolute figures are noisy, ratios are measured in the same rounds, alternating"
		}
		w("| load average before each section | %s; %s |\n", strings.Join(loads, "; "), note)
	}
	w("| database | PostgreSQL %s on loopback TCP, throw-away cluster from `.ci/pg.sh` (the test server's config): fsync=%s, synchronous_commit=%s, full_page_writes=%s, shared_buffers=%s, max_connections=%s |\n",
		m["postgres"], m["pg_fsync"], m["pg_synchronous_commit"], m["pg_full_page_writes"], m["pg_shared_buffers"], m["pg_max_connections"])
	w("| toolchain | %s, Python %s, Node %s, Soniq %s (`integration/soniq-requirements.txt`) |\n", m["go"], m["python"], m["node"], m["soniq"])
	p := r.Params
	if p.PeersRounds > 0 && len(r.Peers) > 0 {
		w("| peers | %v no-op jobs per run (%v for Procrastinate); rounds: %v; latency: %vs at %v jobs/s in each run |\n", p.PeersN, p.PeersSlowN, p.PeersRounds, p.PeersLatSeconds, p.LatencyRate)
	}
	w("| parameters | %v no-op jobs per throughput run (%v for the Soniq worker), %v rounds; concurrency budget %v jobs in flight for every variant (%v processes × %v); latency: %v jobs/s for %vs, %v rounds; shutdown: %v rounds, shutdown_timeout %vs |\n\n",
		p.JobsPerRun, p.SoniqJobsPerRun, p.ThroughputRounds, p.Budget, p.Processes, p.Budget/p.Processes,
		p.LatencyRate, p.LatencySeconds, p.LatencyRounds, p.ShutdownRounds, p.ShutdownTimeoutS)

	w("Commands:\n\n```sh\nmake bench      # = bench/run.sh: builds, provides the venvs and a throw-away Postgres, then:\n")
	w(".ci/pg.sh run %s\n%s\n```\n\n", p.Command, "python bench/chart.py docs/benchmarks.md docs/benchmarks.png")

	w("How each figure is taken:\n\n")
	w("- **Throughput**: the workers start and become idle (the sidecar's handlers said hello; the Soniq workers registered), then\n")
	w("  all jobs are inserted and `pg_notify`'d in one transaction; the clock runs from that commit to the last `updated_at` of a\n")
	w("  `done` row (the server's clock: the same machine). Every job must end `done`. The Soniq worker runs as %v processes of\n", p.Processes)
	w("  `soniq worker --concurrency %v --log-level WARNING` (the same Python process count and in-flight budget as the sidecar's pool;\n", p.Budget/p.Processes)
	w("  WARNING so it does not log every job), with `async def` no-op jobs. The table is emptied (TRUNCATE, CHECKPOINT) before every run.\n")
	w("  Every run is on a database set up as `soniq setup` then `soniq-sidecar migrate` leave it, i.e. with the claim-order index\n")
	w("  `%s` (re-created after each TRUNCATE), except the rows marked *without the claim-order index*\n", claimIndex)
	w("  (a database set up by Soniq's tools only, or `migrate --no-claim-index`). The Soniq worker drains fewer jobs per run\n")
	w("  (see parameters): its claim cost grows with the queue's depth, so a shallower queue can only flatter it.\n")
	w("- **Ceiling**: `backends/postgres` Claim and Complete driven from Go with no handler: one claim in flight, limit = the\n")
	w("  budget (the most the supervisor claims for a pool: its free capacity), a concurrent writer completing pending rows in\n")
	w("  batches of up to 500 as `internal/completer/completer.go` does.\n")
	w("- **Floor**: the least Soniq's row contract allows, from Go with no handler (`bench/ceiling.go`, floorRun): one round trip per\n")
	w("  %d jobs, carrying the completion of the previous claim's rows (done, expires_at, updated_at, guarded by status and worker) and\n", floorBatch)
	w("  the next claim of %d rows in the claim order (processing, attempts + 1, worker_id, updated_at, returning what a worker reads),\n", floorBatch)
	w("  with the planner settings set once on its connection: no proof of life, no per-transaction settings, no sort of the claimed rows.\n")
	w("  It prices the rows themselves on Soniq's tables (their indexes and foreign key included); *Postgres ÷ floor* divides a row's Postgres\n")
	w("  CPU per job by the floor's. *Rows per claim*: jobs divided by claim statements, counted as updates of `soniq_workers` (every claim\n")
	w("  refreshes its worker row; heartbeats add a few).\n")
	w("- **SDK alone**: one bench handler process (the same no-op handler, concurrency %v) fed job frames from a pipe by the driver, never\n", p.Budget/p.Processes)
	w("  more in flight than its concurrency, with no sidecar and no database; its CPU per job is the SDK's own cost. The frames are those\n")
	w("  the sidecar sends for these jobs (random ids, the deadline, the worker's id, `created_at`), made before the clock starts.\n")
	if p.WarmJobs > 0 {
		w("- **Warm handlers** (`-warm %d`): in the throughput section each handler process, alone or under a sidecar, runs %d no-op jobs\n", p.WarmJobs, p.WarmJobs)
		w("  before its run is measured, so the figures are the cost per job once the runtime has compiled its hot paths. A warm run's\n")
		w("  claims are counted from the sidecar's `soniq_claim_rows` histogram (the table statistics read otherwise are flushed too late\n")
		w("  to tell the warm-up's claims from the run's); its sequential scans are not read.\n")
	}
	w("- **Physical limit** (per SDK): the machine's cores divided by the CPU per job of the floor (Go driver + Postgres, with the\n")
	w("  index) plus that of the SDK alone: what the cores could do if nothing but the unavoidable work ran. Each variant is given\n")
	w("  as a fraction of its SDK's limit (the unix rows against the stdio SDK's limit).\n")
	w("- **Queue depth**: the queue is filled with N jobs (100,000 per transaction) and vacuumed and analysed (`VACUUM (ANALYZE)`,\n")
	w("  so an autovacuum the fill itself set off does not run beside the drain at one depth and not at another), then the\n")
	w("  sidecar's claim of the budget is timed 7 times on the full queue (the claimed rows deleted), then a sidecar (Python,\n")
	w("  stdio) drains the first %v jobs (all of them when fewer); the rate runs from the first completion to the last of those\n", p.JobsPerRun)
	w("  (the server's clock).\n")
	w("- **Sharing**: 1 to 8 sidecars (Python, stdio) on one database with the same total budget of %v jobs in flight\n", p.Budget)
	w("  (processes and concurrency per sidecar shrink to keep the total), measured as the throughput runs, CPU as the cost table;\n")
	w("  the curve is run twice in the same rounds, with the default `claim_ahead` and with `claim_ahead: 0` (no reserve: claims of\n")
	w("  free slots only). *Of one sidecar* and *Postgres ÷ one sidecar's* compare with the same set's one-sidecar row.\n")
	if f := r.Fleet; f != nil {
		w("- **Simulated fleet**: 1 to 128 sidecars simulated in the bench's own process (`bench/fleet.go`), sharing one Postgres and a\n")
		w("  total rate of %d jobs/s split evenly (%d slots in all, at least 1 each). Each runs the sidecar's own claim (carrying its\n", f.Rate, f.Budget)
		w("  waiting results, as its claimer does), result writer (`internal/completer`) and return, with its own connection pool and\n")
		w("  worker row, and sizes its reserve with the supervisor's code (`internal/reserve`, `claim_ahead` %s, `claim_ahead_max` 500),\n", f.Ahead)
		w("  told the fleet's size as a sidecar counts it from the workers table. No handler runs: a started job ends after its slot's\n")
		w("  share of the rate (run times spread evenly from half to one and a half the mean). The queue is filled first (deep for the\n")
		w("  whole run); after %.0f s (the rates measured) the Postgres server's CPU (every process, from /proc) and the claims are read\n", f.Warmup)
		w("  over %.0f s; %d rounds, the sizes' order reversed every other round; Postgres' CPU is the median of the rounds' (of two, their mean),\n", f.Window, f.Rounds)
		w("  the counts their sums. *Result writes* counts the writer's own statements (results carried by a claim not counted).\n")
	}
	w("- **claim_ahead 0** rows (throughput, sharing, priority) run the same sidecar with `claim_ahead: 0` in its manifest, beside the\n")
	w("  default (a reserve of up to `claim_ahead` of work, 100 ms, at most `claim_ahead_max` rows), so the reserve's gain is measured\n")
	w("  in one run.\n")
	if len(r.Priority) > 0 {
		w("- **High-priority start delay**: one sidecar (Python, stdio) drains a backlog of %v no-op jobs at priority %d (Soniq's default),\n", p.PrioBacklog, prioBacklog)
		w("  topped up by half whenever half is gone so its reserve stays full; once it has finished a first batch, a producer enqueues %v\n", p.PrioJobs)
		w("  `bench.latency` jobs at priority %d (lower runs first), one every %v, each alone as the pickup-latency rows are; the delay is\n", prioUrgent, p.PrioInterval)
		w("  the handler's start minus the producer's clock before the INSERT. The reserve and its target are read from the sidecar's\n")
		w("  `/metrics` (`soniq_claim_reserve_jobs`, `soniq_claim_reserve_target_jobs`) as each job is enqueued. Percentiles per run, then\n")
		w("  the median over %v rounds.\n", p.PrioRounds)
	}
	w("- **Embedded SQLite** (section 7): every run gets a new SQLite file; the workers start on it (each side creates its tables as on\n")
	w("  first use) and become idle, then the driver writes the jobs in one transaction (the columns Soniq's enqueue writes). The rate\n")
	w("  runs from the first completion to the last (`updated_at` of the `done` rows): SQLite has no cross-process notification, so\n")
	w("  both sides see the jobs at their next poll (`SONIQ_POLL_INTERVAL`, the same variable for both, set to 0.5 s), which is pickup\n")
	w("  latency and is left out. The curve fills N jobs, then takes the rate over the first completions (at most a set number, within a\n")
	w("  window from the commit: hollow points ran out of window). CPU is per process, from /proc: on SQLite the database work runs\n")
	w("  inside the sidecar and inside Soniq's worker processes. *Claims per job* is the `attempts` counter summed over the done rows,\n")
	w("  per row: 1.00 when every job was claimed, and so run, once.\n")
	if len(r.Peers) > 0 {
		w("- **Peers** (section 1c): graphile-worker and pg-boss (Node), PgQueuer and Procrastinate (Python), each installed from the pinned files\n")
		w("  under `bench/peers/` into a cached environment of its own, with its schema made by its own tools on the same Postgres, run as %v worker\n", p.Processes)
		w("  processes of %v jobs in flight each (the sidecar's budget) by a small script of ours (`bench/peers/<name>/`) with the same no-op job,\n", p.Budget/p.Processes)
		w("  alternating with the sidecar's stdio rows in the same rounds. Each row is one start of its processes per round: a warm-up of %d jobs;\n", peerWarmup)
		w("  then pickup latency, %v jobs/s for %vs, each job enqueued alone by the row's own producer (the peer's enqueue call in its language;\n", p.LatencyRate, p.PeersLatSeconds)
		w("  the sidecar's as section 3) with the wall clock taken just before the call; then throughput: the row's processes are stopped\n")
		w("  (SIGSTOP, children included), the queue is filled by one bulk enqueue (the peer's own bulk API; for the sidecar one INSERT … SELECT)\n")
		w("  of %v jobs (%v for Procrastinate, which fetches one job per statement) and its tables analysed; the clock starts as the processes\n", p.PeersN, p.PeersSlowN)
		w("  are continued (SIGCONT; without the stop a peer's workers ran much of the queue while its producer was still reading what the bulk\n")
		w("  enqueue returned, before the commit's time reached the driver), and the driver polls the row's own \"anything queued or running?\" query (2 ms apart at first,\n")
		w("  then a fiftieth of the time so far, at most 20 ms): the clock stops at the first poll that finds nothing, the same rule for every row,\n")
		w("  the sidecar's included (at most 2 %% of the drain or 2 ms late). CPU: the row's processes (the sidecar and its handlers, or the\n")
		w("  peer's workers, children included) and every Postgres process but the one answering the driver's polls, from /proc, from the\n")
		w("  clock's start to that poll; peak RSS: the sum of the processes' `VmHWM`. Every job must have run exactly once (the workers count them).\n")
		w("  The Node peers run on the same Node as the Node SDK (%s here), the Python ones on the same Python (%s). graphile-worker 0.18 and\n", r.Meta["node"], r.Meta["python"])
		w("  pg-boss 12 declare Node 22 or later (their support policy); a run in which one of them does not run every job once fails.\n")
	}
	w("- **Transport unix** rows are measured when a sidecar with `transport: unix` runs 100 jobs with that SDK at the start of `make bench`;\n")
	w("  otherwise they read \"not yet measured\" and the reason is in the notes.\n")
	w("- **Pickup latency**: a Go producer enqueues one job at a time at a steady rate with `backends/postgres` Enqueue (INSERT and\n")
	w("  `pg_notify` in one implicit transaction, as Soniq's enqueue); the clock starts before the INSERT is sent and stops\n")
	w("  when the handler starts (its `time.time_ns()` / `performance.now()`, returned as the result). Percentiles per run, then the median over runs.\n")
	w("- **Pickup latency by database connection**: as above, one sidecar (Python SDK over stdio) straight on Postgres, then through a\n")
	w("  PgBouncer in transaction mode that the bench starts with `.ci/pgbouncer.sh` (`SONIQ_DATABASE_POOLER=transaction`), with a\n")
	w("  `SONIQ_DATABASE_LISTEN_URL` straight to Postgres, and polling only (no notifications; a 1 s poll interval). Needs `pgbouncer`.\n")
	w("- **Shutdown**: every slot holds an `async` job sleeping 60 s (cancellable: the async branch); SIGTERM; the time until the\n")
	w("  process exits, minus shutdown_timeout, is the overshoot. The jobs must be back in `queued` (NACKed).\n")
	w("- **Cost**: from the throughput runs: the sidecar's `VmHWM` (peak RSS) and its utime+stime per 10,000 jobs, from /proc;\n")
	w("  the handler processes' and the Postgres server's CPU are shown beside it. Postgres' CPU is every server process's, those\n")
	w("  that end during the run included (closed connections, autovacuum workers: counted through the postmaster's reaped-children\n")
	w("  time), so an autovacuum of the queue table is charged to the run it falls in.\n\n")

	w("## Goals\n\n| goal | target | measured | met |\n| --- | --- | --- | --- |\n")
	for _, g := range r.Goals {
		w("| %s | %s | %s | %s |\n", g.Name, g.Target, g.Measured, g.Met)
	}
	w("\n")
	said := map[string]string{}
	for _, g := range r.Goals {
		switch {
		case g.Note == "":
		case said[g.Note] != "":
			w("- *%s*: as for *%s*.\n", g.Name, said[g.Note])
		default:
			said[g.Note] = g.Name
			w("- *%s*: %s\n", g.Name, g.Note)
		}
	}
	w("\n")

	soniq := r.tp("soniq")
	w("## 1–2. Throughput, the database's ceiling and floor, and the physical limit\n\n")
	w("| variant | jobs/s (median) | runs (jobs/s) | × Soniq worker (with the index) | of the physical limit |\n| --- | --- | --- | --- | --- |\n")
	for _, t := range r.Throughput {
		if t.Status != "" {
			w("| %s | %s | | | |\n", t.Label, t.Status)
			continue
		}
		runs := roundsCell(t.Runs, func(run tpRun) (string, string) { return f0(run.JobsPerS), run.Error })
		ratio, frac := "—", "—"
		if ok(soniq.Median) && t.Kind != "alone" {
			ratio = fmt.Sprintf("%.1f×", t.Median/soniq.Median)
		}
		if lim := r.limit(t.SDK, cores); t.Kind == "sidecar" && ok(lim.JobsPerS) {
			frac = fmt.Sprintf("%.0f %%", 100*t.Median/lim.JobsPerS)
		}
		w("| %s | **%s** | %s | %s | %s |\n", t.Label, f0(t.Median), runs, ratio, frac)
	}
	w("\n")
	r.writeTransportRatios(w)
	for _, sdk := range []string{"python", "node"} {
		if lim := r.limit(sdk, cores); ok(lim.JobsPerS) {
			w("- Physical limit with the %s SDK: %d cores × 10,000 / (%.2f CPU-s database (the %s) + %.2f CPU-s handler per 10,000 jobs) = **%.0f jobs/s**.\n",
				sdk, cores, lim.DBCPU, lim.From, lim.HandlerCPU, lim.JobsPerS)
		}
	}
	for _, t := range r.Throughput {
		if x := r.ofFloor(t.PostgresCPU10k); t.Status == "" && t.Key != "floor" && t.Kind != "alone" && ok(x) {
			size := ""
			if ok(t.ClaimSize) {
				size = fmt.Sprintf(", %.0f rows per claim", t.ClaimSize)
			}
			w("- %s: Postgres CPU per job **%.2f×** the floor's (%.2f vs %.2f CPU-s per 10,000 jobs%s).\n", t.Label, x, t.PostgresCPU10k, r.tp("floor").PostgresCPU10k, size)
		}
	}
	w("\n")

	r.writePeers(w)
	r.writeProducers(w)
	r.writeLimits(w)

	if len(r.Depth) > 0 {
		w("## 6a. Queue depth (Python SDK, stdio, with the index)\n\n")
		w("| queued | fill (s) | one claim of %v (ms, median of 7) | drained | jobs/s | Postgres CPU-s per 10,000 |\n| --- | --- | --- | --- | --- | --- |\n", p.Budget)
		for _, d := range r.Depth {
			if d.Error != "" {
				w("| %d | | | | failed: %s | |\n", d.Depth, lastLine(d.Error))
				continue
			}
			w("| %d | %.1f | %.2f | %d | **%.0f** | %s |\n", d.Depth, d.FillSeconds, d.ClaimMS, d.Drained, d.JobsPerS, f2(d.PostgresCPU10k))
		}
		w("\n")
	}
	if len(r.Sharing) > 0 {
		w("## 6b. Sidecars sharing one database (Python SDK, stdio, total budget %v)\n\n", p.Budget)
		w("| sidecars | claim_ahead | processes × concurrency each | jobs/s (median) | runs | of one sidecar | CPU-s per 10,000 jobs: sidecars + handlers + Postgres | Postgres ÷ one sidecar's | rows per claim |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
		for _, off := range []bool{false, true} {
			set := r.shareSet(off)
			one := shareOne(set)
			for _, sh := range set {
				var runs []string
				for _, x := range sh.Runs {
					runs = append(runs, f0(x))
				}
				for range sh.Errors {
					runs = append(runs, "failed")
				}
				frac, xpg := "—", "—"
				if one != nil && ok(sh.Median) {
					frac = fmt.Sprintf("%.0f %%", 100*sh.Median/one.Median)
				}
				cost, size := "—", "—"
				if c := sh.Cost; c != nil && ok(c.PostgresCPU10k) {
					cost = fmt.Sprintf("%s + %s + %s", f2(c.SidecarCPU10k), f2(c.HandlerCPU10k), f2(c.PostgresCPU10k))
					if ok(c.ClaimSize) {
						size = fmt.Sprintf("%.1f", c.ClaimSize)
					}
					if one != nil && ok(one.Cost.PostgresCPU10k) {
						xpg = fmt.Sprintf("%.2f×", c.PostgresCPU10k/one.Cost.PostgresCPU10k)
					}
				}
				ahead := "default"
				if off {
					ahead = "0"
				}
				w("| %d | %s | %d × %d | **%s** | %s | %s | %s | %s | %s |\n", sh.Sidecars, ahead, sh.Processes, sh.PerProc, f0(sh.Median), strings.Join(runs, ", "), frac, cost, xpg, size)
			}
		}
		w("\n")
	}
	r.writeFleet(w)
	r.writeSQLite(w)

	w("## 3. Pickup latency at %v jobs/s\n\n", p.LatencyRate)
	w("| variant | p50 ms | p95 ms | p99 ms | runs (p99 ms) |\n| --- | --- | --- | --- | --- |\n")
	for _, l := range r.Latency {
		if l.Status != "" {
			w("| %s | %s | | | |\n", l.Label, l.Status)
			continue
		}
		runs := roundsCell(l.Runs, func(run latRun) (string, string) { return f2(run.P99), run.Error })
		w("| %s | %s | %s | **%s** | %s |\n", l.Label, f2(l.P50), f2(l.P95), f2(l.P99), runs)
	}
	w("\n")

	if len(r.Priority) > 0 {
		w("### A high-priority job's start delay behind a full reserve (Python SDK over stdio)\n\n")
		w("| variant | p50 ms | p99 ms | runs (p99 ms) | reserve (median jobs) | its target (median) |\n| --- | --- | --- | --- | --- | --- |\n")
		for _, t := range r.Priority {
			if t.Status != "" {
				w("| %s | %s | | | | |\n", t.Label, t.Status)
				continue
			}
			runs := roundsCell(t.Runs, func(run prioRun) (string, string) { return f2(run.P99), run.Error })
			w("| %s | %s | **%s** | %s | %.0f | %.0f |\n", t.Label, f2(t.P50), f2(t.P99), runs, t.Reserved, t.Target)
		}
		w("\n")
	}

	if len(r.Pooler) > 0 {
		w("### Pickup latency by database connection (Python SDK over stdio, %v jobs/s)\n\n", p.LatencyRate)
		if v := r.Meta["pgbouncer"]; v != "" {
			w("Through %s in transaction mode (`.ci/pgbouncer.sh`), `SONIQ_DATABASE_POOLER=transaction`; the producer enqueues straight to Postgres.\n\n", v)
		}
		w("| connection | p50 ms | p95 ms | p99 ms | runs (p99 ms) |\n| --- | --- | --- | --- | --- |\n")
		for _, l := range r.Pooler {
			if l.Status != "" {
				w("| %s | %s | | | |\n", l.Label, l.Status)
				continue
			}
			runs := roundsCell(l.Runs, func(run latRun) (string, string) { return f2(run.P99), run.Error })
			w("| %s | %s | %s | **%s** | %s |\n", l.Label, f2(l.P50), f2(l.P95), f2(l.P99), runs)
		}
		w("\n")
	}

	w("## 4. Shutdown precision (async-forced path, shutdown_timeout %vs)\n\n", p.ShutdownTimeoutS)
	w("| variant | overshoot median | overshoot worst | runs (SIGTERM → exit, s) | jobs NACKed |\n| --- | --- | --- | --- | --- |\n")
	for _, s := range r.Shutdown {
		if s.Status != "" {
			w("| %s | %s | | | |\n", s.Label, s.Status)
			continue
		}
		var runs, nacked []string
		for _, run := range s.Runs {
			if run.Error != "" {
				runs = append(runs, "failed")
				continue
			}
			runs = append(runs, fmt.Sprintf("%.3f", run.ExitS))
			nacked = append(nacked, fmt.Sprintf("%d/%d", run.Requeued, run.InFlight))
		}
		w("| %s | %+.0f ms | %+.0f ms | %s | %s |\n", s.Label, s.OvershootMS, s.MaxOverMS, strings.Join(runs, ", "), strings.Join(uniq(nacked), ", "))
	}
	w("\n")

	w("## 5. Cost (medians over the throughput runs, CPU seconds per 10,000 jobs)\n\n")
	w("| variant | sidecar peak RSS | sidecar CPU | handlers CPU | Soniq workers CPU | Go driver CPU | Postgres CPU | Postgres ÷ floor | rows per claim |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, t := range r.Throughput {
		if t.Status != "" {
			continue
		}
		rss := "—"
		if ok(t.PeakRSSMB) {
			rss = fmt.Sprintf("%.1f MiB", t.PeakRSSMB)
		}
		xf, size := "—", "—"
		if x := r.ofFloor(t.PostgresCPU10k); ok(x) {
			xf = fmt.Sprintf("%.2f×", x)
		}
		if t.Key == "floor" {
			size = strconv.Itoa(floorBatch)
		} else if ok(t.ClaimSize) {
			size = fmt.Sprintf("%.1f", t.ClaimSize)
		}
		w("| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", t.Label, rss, f2(t.SidecarCPU10k), f2(t.HandlerCPU10k), f2(t.WorkerCPU10k), f2(t.DriverCPU10k), f2(t.PostgresCPU10k), xf, size)
	}
	w("\n")

	if len(r.Notes) > 0 {
		w("## Notes from this run\n\n")
		for _, n := range r.Notes {
			w("- %s\n", n)
		}
		w("\n")
	}
	if a, err := os.ReadFile(analysisPath()); err == nil {
		w("%s\n", strings.TrimSpace(string(a)))
		w("\n")
	}

	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	w("## Raw results\n\n<details><summary>JSON (read by bench/chart.py)</summary>\n\n```json\n%s\n```\n\n</details>\n", js)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(strings.NewReplacer(r.scrub...).Replace(b.String())), 0o644)
}

// writePeers is section 1c: the native Postgres queues beside the
// sidecar's stdio rows, measured in the same rounds.
func (r *report) writePeers(w func(string, ...any)) {
	if len(r.Peers) == 0 {
		return
	}
	w("## 1c. The native Postgres queues (peers), beside the sidecar in the same rounds\n\n")
	w("| row | version | jobs/s (median) | runs (jobs/s) | pickup p50 ms | p99 ms | CPU-s per 10,000 jobs: its processes | Postgres | total | peak RSS, all its processes |\n")
	w("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, t := range r.Peers {
		version := t.Version
		if t.Kind == "sidecar" {
			version = "this commit"
		}
		if t.Status != "" {
			w("| %s | %s | %s | | | | | | | |\n", t.Label, version, t.Status)
			continue
		}
		runs := roundsCell(t.Runs, func(run peerRun) (string, string) { return f0(run.JobsPerS), run.Error })
		proc := f2(t.ProcCPU10k)
		rss := fmt.Sprintf("%.0f MiB", t.RSSMB)
		if t.Kind == "sidecar" {
			proc += fmt.Sprintf(" (sidecar %s)", f2(t.SidecarCPU10k))
			rss += fmt.Sprintf(" (sidecar %.0f MiB)", t.SidecarRSSMB)
		}
		w("| %s | %s | **%s** | %s | %s | %s | %s | %s | %s | %s |\n", t.Label, version, f0(t.JobsPerS), runs, f2(t.P50), f2(t.P99),
			proc, f2(t.PostgresCPU10k), f2(t.ProcCPU10k+t.PostgresCPU10k), rss)
	}
	w("\n")
	if note := peersTableNote(r.Peers); note != "" {
		w("%s\n\n", note)
	}
	w("Each peer's settings (its own recommendations for throughput; see also the top of its script under `bench/peers/`):\n\n")
	for _, t := range r.Peers {
		if t.Kind == "peer" && t.Settings != "" {
			w("- **%s**: %s.\n", t.Label, t.Settings)
		}
	}
	w("\n")
}

// analysisPath is bench/analysis.md: the hand-written profile of the
// bottlenecks, included in the report as it stands.
func analysisPath() string { return filepath.Join("bench", "analysis.md") }

func uniq(xs []string) []string {
	var out []string
	for _, x := range xs {
		if len(out) == 0 || out[len(out)-1] != x {
			out = append(out, x)
		}
	}
	return out
}

// render rewrites a report from the JSON embedded in it: the goals are
// evaluated again and bench/analysis.md is included as it now stands.
func render(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	m := regexp.MustCompile("(?s)```json\n(.*?)\n```").FindSubmatch(b)
	if m == nil {
		return fmt.Errorf("%s: no ```json block with the raw results", path)
	}
	var r report
	if err := json.Unmarshal(m[1], &r); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return r.write(path)
}

// roundsCell is a table cell listing each round's figure, or "failed" for
// a round that failed (figure returns the figure and the round's error).
func roundsCell[R any](runs []R, figure func(R) (value, failed string)) string {
	cells := make([]string, len(runs))
	for i, run := range runs {
		v, failed := figure(run)
		if failed != "" {
			v = "failed"
		}
		cells[i] = v
	}
	return strings.Join(cells, ", ")
}

// writeFleet is section 6c: the simulated fleet.
func (r *report) writeFleet(w func(string, ...any)) {
	f := r.Fleet
	if f == nil || len(f.Points) == 0 {
		return
	}
	w("## 6c. A simulated fleet on one database (%d jobs/s in all, split evenly; no handler)\n\n", f.Rate)
	if f.Unaware {
		w("*Run with `-fleet-unaware`: the sidecars were not told the fleet's size and sized their reserves and result batches as if alone.*\n\n")
	}
	w("| sidecars | slots × jobs/s each | jobs/s | Postgres CPU-s per 10,000 jobs (median) | rounds | ÷ one sidecar's | rows per claim | claims | result writes | jobs per write | returned |\n")
	w("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	var one *fleetPoint
	for _, p := range f.Points {
		if p.Sidecars == 1 && p.Error == "" {
			one = p
		}
	}
	for _, p := range f.Points {
		if p.Error != "" {
			w("| %d | %d × %.0f | failed: %s | | | | | | | | |\n", p.Sidecars, p.SlotsEach, p.RateEach, lastLine(p.Error))
			continue
		}
		x := "—"
		if one != nil && ok(one.PostgresCPU10k) {
			x = fmt.Sprintf("%.2f×", p.PostgresCPU10k/one.PostgresCPU10k)
		}
		var runs []string
		for _, r := range p.Runs {
			runs = append(runs, f2(r))
		}
		for range p.Errors {
			runs = append(runs, "failed")
		}
		w("| %d | %d × %.0f | %.0f | %s | %s | **%s** | %.1f | %d | %d | %.1f | %d |\n", p.Sidecars, p.SlotsEach, p.RateEach, p.JobsPerS,
			f2(p.PostgresCPU10k), strings.Join(runs, ", "), x, p.RowsPerClaim, p.Claims, p.Writes, p.jobsPerWrite(), p.Returned)
	}
	w("\n")
}

// jobsPerWrite is the jobs done per statement of the result writer.
func (p *fleetPoint) jobsPerWrite() float64 {
	if p == nil || p.Writes == 0 {
		return math.NaN()
	}
	return float64(p.Jobs) / float64(p.Writes)
}
