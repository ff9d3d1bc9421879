package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/soniq-dev/soniq-sidecar/internal/proc"
)

// ---- the peers: native Postgres queues measured beside the sidecar ----
//
// Every row of the section, the sidecar's two stdio rows and each peer's,
// is measured the same way in one start of its processes, in rounds that
// alternate the rows:
//
//  1. its tables emptied; its processes started (the sidecar with its
//     handler pool, or the peer's worker processes and its producer) and
//     idle; a warm-up of a few jobs drained;
//  2. pickup latency: a producer enqueues one job at a time at the latency
//     rate, each with its own enqueue and the wall clock taken just before
//     the call; the handler subtracts it at its start;
//  3. throughput: the row's processes are stopped (SIGSTOP, with their
//     children), the queue is filled with N no-op jobs by one bulk enqueue
//     and the row's tables are analysed (analyzeTables); CPU is read from
//     /proc, the clock starts and the processes are continued (SIGCONT);
//     the driver polls the row's "anything left to run?" query
//     (pollDrained) and the clock stops at the first poll that finds
//     nothing, CPU read again there, peak RSS after it. The stop keeps the
//     fill and the drain apart: a peer's workers woke at the fill's commit
//     while its producer, a process of its own, was still reading the
//     rows the bulk enqueue returns, and drained much of the queue before
//     the commit's time reached the driver (a round of 10,000 jobs then
//     "took" 0.08 s, its Postgres CPU mostly before the clock);
//  4. the processes stopped gracefully; every job must have run once.

// peer is a native Postgres job queue run beside the sidecar.
type peer struct {
	Key   string // also its directory under bench/peers
	Label string
	Lang  string // node | python
	// Pkg is the package whose installed version the report names.
	Pkg string
	// Settings says, for the report, which of its settings the bench uses
	// and why (each peer's script says the same at its top).
	Settings string
	// open is true while a job is queued or running (the drain poll).
	open string
	// reset empties its tables between runs.
	reset []string
	// tables are analysed after each fill (its queue's tables).
	tables []string
	// env is what its scripts get beyond the database URL and budget.
	env func(c *config) []string
	// slow: it drains -peers-slow-n jobs per run instead of -peers-n.
	slow bool
}

var peers = []peer{
	{
		Key: "graphile-worker", Label: "graphile-worker", Lang: "node", Pkg: "graphile-worker",
		Settings: "its documented high-throughput configuration (docs: Performance, \"with batching\"): `localQueue: {size: 500}`, " +
			"`completeJobBatchDelay: 0`, `failJobBatchDelay: 0`, `maxPoolSize` = concurrency + 1; `concurrentJobs` = the per-process budget " +
			"(it runs at most that many at a time, and locks up to 500 more per process in its local queue); " +
			"filled with `addJobs` (one `add_jobs` call), latency jobs by `addJob`; logger at warning (it logs every job at info)",
		open:   `SELECT EXISTS (SELECT 1 FROM graphile_worker._private_jobs)`,
		reset:  []string{`TRUNCATE graphile_worker._private_jobs, graphile_worker._private_job_queues`},
		tables: []string{"graphile_worker._private_jobs", "graphile_worker._private_job_queues"},
	},
	{
		Key: "pg-boss", Label: "pg-boss", Lang: "node", Pkg: "pg-boss",
		Settings: "LISTEN/NOTIFY (`useListenNotify` on the instance, `notify` on the queue), batch fetching with `burstWhenBatchFull` " +
			"(without it a worker waits out its polling interval between full batches), `pollingIntervalSeconds: 0.5` (its minimum) as the " +
			"fallback, the per-process budget as `localConcurrency` × `batchSize` = 1 × 32 (the fastest split in trials: " +
			"2 × 16, 4 × 8 and 8 × 4 drained 1.7–3.5× slower), a pool of localConcurrency + 2; one queue for both kinds of job so one `work()` holds the whole budget; filled with `insert()` " +
			"(one statement), latency jobs by `send()`",
		open:   `SELECT EXISTS (SELECT 1 FROM pgboss.job WHERE name = 'bench' AND state IN ('created', 'retry', 'active'))`,
		reset:  []string{`TRUNCATE pgboss.job`},
		tables: []string{"pgboss.job"}, // partitioned: its partitions are analysed too
		env: func(c *config) []string {
			return []string{fmt.Sprintf("BENCH_PGBOSS_LOCAL=%d", c.pgBossLocal)}
		},
	},
	{
		Key: "pgqueuer", Label: "PgQueuer (asyncpg)", Lang: "python", Pkg: "pgqueuer",
		Settings: "its performance-tuning guide: the asyncpg driver, one direct connection for the QueueManager, uvloop (what its CLI runs on), " +
			"`pgq autovac`'s autovacuum settings, default durable (logged) tables as the sidecar's; `max_concurrent_tasks` = the per-process " +
			"budget and `batch_size` = half of it, the largest PgQueuer allows (4 and 8 cost more CPU per job in trials, and drained no faster); filled with one `enqueue()` call of lists (one statement), " +
			"latency jobs by `enqueue()`",
		open:   `SELECT EXISTS (SELECT 1 FROM pgqueuer)`,
		reset:  []string{`TRUNCATE pgqueuer, pgqueuer_log, pgqueuer_statistics`},
		tables: []string{"pgqueuer", "pgqueuer_log", "pgqueuer_statistics"},
		env: func(c *config) []string {
			batch := c.pgQueuerBatch
			if batch == 0 {
				batch = max(1, c.conc/c.procs/2)
			}
			return []string{fmt.Sprintf("BENCH_PGQUEUER_BATCH=%d", batch)}
		},
	},
	{
		Key: "procrastinate", Label: "Procrastinate", Lang: "python", Pkg: "procrastinate",
		Settings: "its documentation: `concurrency` = the per-process budget, a psycopg pool of concurrency + 1 (its advice for short jobs), " +
			"LISTEN/NOTIFY (the default), psycopg's C implementation (`psycopg-binary`); it fetches one job per statement (no batch fetch); " +
			"filled with `batch_defer_async` (one call), latency jobs by `defer_async`",
		open:   `SELECT EXISTS (SELECT 1 FROM procrastinate_jobs WHERE status IN ('todo', 'doing'))`,
		reset:  []string{`TRUNCATE procrastinate_jobs CASCADE`, `DELETE FROM procrastinate_workers`},
		tables: []string{"procrastinate_jobs", "procrastinate_events", "procrastinate_workers"},
		slow:   true,
	},
}

// settings is the peer's Settings text with what the harness does to its
// tables, the same as for every row.
func (p *peer) settings() string {
	return p.Settings + "; its tables (" + codeList(p.tables) + ") analysed right after each fill, as every row's, " +
		"with autovacuum on (the server's defaults unless said above)"
}

func codeList(xs []string) string {
	q := make([]string, len(xs))
	for i, x := range xs {
		q[i] = "`" + x + "`"
	}
	return strings.Join(q, ", ")
}

// peersTableNote says, under the peers table, what every row gets and
// what the result_ttl 0 rows are (empty when neither applies).
func peersTableNote(rows []*peerResult) string {
	var an, polls []float64
	analyzed, ttl0 := false, false
	var perClaim []string
	for _, t := range rows {
		var rpc []float64
		for _, run := range t.Runs {
			if run.Error != "" {
				continue
			}
			an = append(an, run.AnalyzeCPU)
			polls = append(polls, run.PollCPU)
			if run.RowsPerClaim > 0 {
				rpc = append(rpc, run.RowsPerClaim)
			}
		}
		if len(rpc) > 0 {
			perClaim = append(perClaim, fmt.Sprintf("%s %.0f", t.Label, median(rpc)))
		}
		analyzed = analyzed || t.Analyzed
		ttl0 = ttl0 || strings.HasSuffix(t.Key, "-ttl0")
	}
	var notes []string
	if analyzed {
		note := "Right after each fill the driver runs `ANALYZE` on the row's queue tables (`soniq_jobs` for the sidecar's rows), so " +
			"every row's planner sees the queue as it is, whatever autovacuum last saw (a table analysed while it held only finished " +
			"jobs, then emptied and filled, made Procrastinate's fetch rescan every open job per candidate row and stall)"
		if len(an) > 0 {
			note += fmt.Sprintf("; that `ANALYZE`'s own CPU (median %.0f ms a run) is left out of the Postgres column", median(an)*1000)
		}
		notes = append(notes, note+".")
	}
	var waits []float64
	for _, t := range rows {
		for _, run := range t.Runs {
			if run.AutovacuumWait > 0 {
				waits = append(waits, run.AutovacuumWait)
			}
		}
	}
	note := "After each run the driver empties the row's tables and waits for any autovacuum worker to finish before the next row " +
		"starts, so the clean-up one row's jobs set off is not done during the next row's drain"
	if len(waits) > 0 {
		note += fmt.Sprintf(" (it waited after %d runs, at most %.1f s)", len(waits), slices.Max(waits))
	}
	notes = append(notes, note+".")
	if len(polls) > 0 && slices.Max(polls) > 0 {
		notes = append(notes, fmt.Sprintf("The driver's polls during a drain run on a connection of their own, whose server process's CPU "+
			"(median %.0f ms a run, at most %.0f) is left out of the Postgres column too: what one poll costs depends on the row's table "+
			"(one that keeps its finished jobs is scanned further as it drains), and it is the harness's work, not the queue's.",
			median(polls)*1000, slices.Max(polls)*1000))
	}
	if len(perClaim) > 0 {
		notes = append(notes, "Rows per claim in the drains (jobs over the sidecar's claim statements, from its own `soniq_claim_rows` "+
			"histogram; median of the rounds): "+strings.Join(perClaim, "; ")+".")
	}
	if ttl0 {
		notes = append(notes, "The sidecar's rows marked `result_ttl: 0` run with that setting in the manifest: each done row is deleted by its "+
			"completion's own statement (as Soniq's worker does with that setting, and as graphile-worker deletes every finished job), "+
			"instead of kept as `done` with an expiry (the default 300 s), as the other sidecar rows, pg-boss and Procrastinate keep theirs "+
			"(PgQueuer deletes its finished jobs from its queue table and appends a row for each to its log table). "+
			"Their latency jobs' starts are read from the handlers' stderr, since the results go with the rows.")
	}
	return strings.Join(notes, " ")
}

func peerByKey(key string) *peer {
	for i := range peers {
		if peers[i].Key == key {
			return &peers[i]
		}
	}
	return nil
}

// peerResult is one row of the section: a sidecar variant or a peer.
type peerResult struct {
	Key      string    `json:"key"`
	Label    string    `json:"label"`
	Kind     string    `json:"kind"` // sidecar | peer
	SDK      string    `json:"sdk,omitempty"`
	Version  string    `json:"version,omitempty"`
	Settings string    `json:"settings,omitempty"`
	N        int       `json:"jobs_per_run"`
	Status   string    `json:"status,omitempty"`
	Runs     []peerRun `json:"runs"`
	// Analyzed: its tables were analysed after each fill (reports from
	// before that was done do not say it).
	Analyzed bool `json:"analyzed_after_fill,omitempty"`

	// Medians over the runs without an error.
	JobsPerS       float64 `json:"median_jobs_per_s,omitempty"`
	P50            float64 `json:"median_p50_ms,omitempty"`
	P95            float64 `json:"median_p95_ms,omitempty"`
	P99            float64 `json:"median_p99_ms,omitempty"`
	ProcCPU10k     float64 `json:"processes_cpu_s_per_10k,omitempty"`
	SidecarCPU10k  float64 `json:"sidecar_cpu_s_per_10k,omitempty"`
	PostgresCPU10k float64 `json:"postgres_cpu_s_per_10k,omitempty"`
	RSSMB          float64 `json:"peak_rss_mb,omitempty"`
	SidecarRSSMB   float64 `json:"sidecar_peak_rss_mb,omitempty"`

	peer    *peer
	variant variant
}

// peerRun is one start of a row's processes: its latency and its drain.
type peerRun struct {
	Round       int     `json:"round"`
	JobsPerS    float64 `json:"jobs_per_s"`
	Seconds     float64 `json:"seconds"`
	ProcCPU     float64 `json:"processes_cpu_s"`         // the row's processes, children included
	SidecarCPU  float64 `json:"sidecar_cpu_s,omitempty"` // sidecar rows: the sidecar alone
	PostgresCPU float64 `json:"postgres_cpu_s"`          // every server process, from the clock's start (after the ANALYZE)
	AnalyzeCPU  float64 `json:"analyze_cpu_s"`           // the ANALYZE after the fill
	PollCPU     float64 `json:"poll_cpu_s"`              // the driver's polls during the drain (left out of PostgresCPU)
	// RowsPerClaim: the sidecar's rows, the drain's jobs per claim
	// statement (its own count; empty claims included).
	RowsPerClaim float64 `json:"rows_per_claim,omitempty"`
	RSSKB        int     `json:"peak_rss_kb"`                   // sum of the row's processes' peak RSS
	SidecarKB    int     `json:"sidecar_peak_rss_kb,omitempty"` // sidecar rows: the sidecar alone
	LatencyN     int     `json:"latency_n"`
	P50          float64 `json:"p50_ms"`
	P95          float64 `json:"p95_ms"`
	P99          float64 `json:"p99_ms"`
	Max          float64 `json:"max_ms"`
	// AutovacuumWait: after the run, its tables emptied, how long the
	// driver waited for autovacuum workers to finish before the next row.
	AutovacuumWait float64 `json:"autovacuum_wait_s,omitempty"`
	Error          string  `json:"error,omitempty"`
}

// peerWarmup jobs run before anything is measured in a start.
const peerWarmup = 8

func (b *bench) peerRows() []*peerResult {
	c := b.c
	var rows []*peerResult
	for _, sdk := range []string{"python", "node"} {
		v := sidecarVariant(sdk, "stdio")
		if c.want(v.Key) {
			rows = append(rows, &peerResult{Key: v.Key, Label: v.Label, Kind: "sidecar", SDK: sdk, N: c.peersN, Analyzed: true, variant: v})
		}
	}
	// The same rows with result_ttl 0: a done row is deleted by its
	// completion, as graphile-worker deletes its jobs, instead of kept.
	for _, sdk := range []string{"python", "node"} {
		v := ttl0Variant(sdk)
		if c.want(v.Key) {
			rows = append(rows, &peerResult{Key: v.Key, Label: v.Label, Kind: "sidecar", SDK: sdk, N: c.peersN, Analyzed: true, variant: v})
		}
	}
	for i := range peers {
		p := &peers[i]
		if !c.want(p.Key) {
			continue
		}
		r := &peerResult{Key: p.Key, Label: p.Label, Kind: "peer", SDK: p.Lang, Settings: p.settings(), N: c.peersN, Analyzed: true, peer: p}
		if p.slow {
			r.N = c.peersSlowN
		}
		if c.peerPaths[p.Key] == "" {
			r.Status = "not measured: no installation given (-peer-installs " + p.Key + "=…)"
		}
		rows = append(rows, r)
	}
	return rows
}

func (b *bench) peersSection(ctx context.Context) error {
	c := b.c
	rows := b.peerRows()
	b.rep.Peers = rows
	var active []*peerResult
	for _, r := range rows {
		if r.Status == "" && r.peer != nil {
			r.Version = b.peerVersion(r.peer)
			if err := b.peerSetup(ctx, r.peer); err != nil {
				r.Status = "failed: setup: " + lastLine(err.Error())
				logf("peers %s setup: %v", r.Key, err)
			}
		}
		if r.Status == "" {
			active = append(active, r)
		} else if c.peersStrict {
			return fmt.Errorf("peers: %s %s", r.Key, r.Status)
		}
	}
	var roundTime time.Duration
	for round := range c.peersRuns {
		if round > 0 && c.remaining()-c.peersReserve() < roundTime+30*time.Second {
			b.rep.Notes = append(b.rep.Notes, fmt.Sprintf("peers: %d of %d rounds run; the next would have passed the %s bound", round, c.peersRuns, c.budget))
			break
		}
		t0 := time.Now()
		for i := range active {
			r := active[(i+round)%len(active)]
			run, err := b.peerRun(ctx, r, round)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			wait, serr := b.peerSettle(ctx, r)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			run.AutovacuumWait = wait
			if err == nil {
				err = serr // a run whose tables could not be emptied is not a clean run either
			}
			run.Round = round + 1
			if err != nil {
				run.Error = err.Error()
				logf("peers %s round %d: %v", r.Key, round+1, err)
				if c.peersStrict {
					return fmt.Errorf("peers: %s round %d: %w", r.Key, round+1, err)
				}
			} else {
				logf("peers %s round %d: %.0f jobs/s (%.2fs), latency p50 %.2f p99 %.2f ms, CPU %.2f + Postgres %.2f s (the driver's polls %.3f s more), RSS %.0f MiB%s",
					r.Key, round+1, run.JobsPerS, run.Seconds, run.P50, run.P99, run.ProcCPU, run.PostgresCPU, run.PollCPU, float64(run.RSSKB)/1024, rowsPerClaimNote(run.RowsPerClaim))
			}
			r.Runs = append(r.Runs, run)
		}
		roundTime = time.Since(t0)
	}
	for _, r := range active {
		r.summarise()
	}
	// Leave the later sections a database holding only their own rows.
	for _, r := range active {
		if r.peer != nil {
			if err := b.peerReset(ctx, r.peer); err != nil {
				return err
			}
		}
	}
	return nil
}

// peerSettle empties the tables r's run filled and waits, at most
// settleBound, for any autovacuum worker to finish: a row's leftovers
// (thousands of finished jobs, a queue table's churn) set off autovacuums
// that otherwise ran during the next row's drain, so the rows that
// followed the heaviest peers paid for them. It returns the wait, in
// seconds, and the reset's error.
func (b *bench) peerSettle(ctx context.Context, r *peerResult) (float64, error) {
	var err error
	if r.peer != nil {
		err = b.peerReset(ctx, r.peer)
	} else {
		err = b.db.reset(ctx, true)
	}
	return b.db.awaitAutovacuum(ctx, settleBound), err
}

// settleBound bounds the wait for autovacuum between two rows.
const settleBound = 10 * time.Second

// peerReset empties a peer's tables.
func (b *bench) peerReset(ctx context.Context, p *peer) error {
	for _, q := range append(append([]string{}, p.reset...), `CHECKPOINT`) {
		if _, err := b.db.pool.Exec(ctx, q); err != nil {
			return fmt.Errorf("reset %s: %s: %w", p.Key, q, err)
		}
	}
	return nil
}

// peersReserve is the part of the budget the peers' rounds leave to the
// sections after them (throughput, depth and sharing took about 3 of a
// 9-minute run on 2 cores; 45 % left the peers one round where two fitted).
func (c *config) peersReserve() time.Duration {
	if !c.sections["throughput"] && !c.sections["depth"] && !c.sections["sharing"] {
		return 0
	}
	return c.budget * 30 / 100
}

func (r *peerResult) summarise() {
	var tp, p50, p95, p99, proc, sc, pg, rss, srss []float64
	for _, run := range r.Runs {
		if run.Error != "" {
			continue
		}
		per10k := 10000 / float64(r.N)
		tp = append(tp, run.JobsPerS)
		p50, p95, p99 = append(p50, run.P50), append(p95, run.P95), append(p99, run.P99)
		proc, sc, pg = append(proc, run.ProcCPU*per10k), append(sc, run.SidecarCPU*per10k), append(pg, run.PostgresCPU*per10k)
		rss, srss = append(rss, float64(run.RSSKB)/1024), append(srss, float64(run.SidecarKB)/1024)
	}
	if len(tp) == 0 {
		r.Status = "failed: see the runs' errors"
		return
	}
	r.JobsPerS, r.P50, r.P95, r.P99 = median(tp), median(p50), median(p95), median(p99)
	r.ProcCPU10k, r.SidecarCPU10k, r.PostgresCPU10k = median(proc), median(sc), median(pg)
	r.RSSMB, r.SidecarRSSMB = median(rss), median(srss)
}

// rowProcs is a started row: what the measuring needs of it.
type rowProcs interface {
	// bulk enqueues n no-op jobs at once and returns once they are
	// committed.
	bulk(ctx context.Context, n int) error
	// pids are the processes that run the jobs (not a peer's producer).
	pids() []int
	// latency enqueues n latency jobs, rate a second.
	latency(ctx context.Context, rate, n int) error
	// openQuery selects whether a job is left to run.
	openQuery() string
	// tables are the row's queue tables, analysed after the fill.
	tables() []string
	// exited reports a process of the row that ended (nil while all run).
	exited() error
	// cpu is the CPU seconds of the row's processes (children included)
	// and, for the sidecar, of the sidecar alone.
	cpu() (all, sidecar float64)
	// rss is the sum of the processes' peak RSS and the sidecar's own (kB).
	rss() (all, sidecar int)
	// finish stops the processes gracefully and returns how many no-op
	// jobs ran and the pickup latencies (ms) of the latency jobs.
	finish(ctx context.Context) (noop int, lats []float64, err error)
	// stop ends whatever still runs (after a failure).
	stop()
}

func (b *bench) peerRun(ctx context.Context, r *peerResult, round int) (peerRun, error) {
	c := b.c
	var run peerRun
	tag := fmt.Sprintf("peers-%s-%d", r.Key, round)
	var rp rowProcs
	var err error
	if r.peer == nil {
		rp, err = b.startSidecarRow(ctx, r.variant, tag)
	} else {
		rp, err = b.startPeerRow(ctx, r.peer, tag)
	}
	if err != nil {
		return run, err
	}
	defer rp.stop()

	drain := func(timeout time.Duration) (time.Time, error) {
		at, _, err := b.pollDrained(ctx, rp, timeout)
		return at, err
	}
	if err := rp.bulk(ctx, peerWarmup); err != nil {
		return run, fmt.Errorf("warm-up: %w", err)
	}
	if _, err := drain(30 * time.Second); err != nil {
		return run, fmt.Errorf("warm-up: %w", err)
	}

	latN := max(1, int(float64(c.latRate)*c.peersLatSecs))
	if err := rp.latency(ctx, c.latRate, latN); err != nil {
		return run, fmt.Errorf("latency: %w", err)
	}
	if _, err := drain(30 * time.Second); err != nil {
		return run, fmt.Errorf("latency: %w", err)
	}

	sr, isSidecar := rp.(*sidecarRow)
	var claims0 float64
	if isSidecar {
		if claims0, err = sr.claims(ctx); err != nil {
			return run, err
		}
	}
	// Nothing runs a job between the fill's commit and the clock's start.
	thaw := freeze(rp.pids())
	defer thaw()
	if err := rp.bulk(ctx, r.N); err != nil {
		return run, fmt.Errorf("fill: %w", err)
	}
	if run.AnalyzeCPU, err = b.analyzeTables(ctx, rp.tables()); err != nil {
		return run, fmt.Errorf("after the fill: %w", err)
	}
	cpu0, sc0 := rp.cpu()
	pg0, t0 := b.db.serverCPU(), time.Now()
	thaw()
	t1, pollCPU, err := b.pollDrained(ctx, rp, min(max(c.remaining(), 2*time.Minute), 5*time.Minute))
	if err != nil {
		return run, fmt.Errorf("drain: %w", err)
	}
	cpu1, sc1 := rp.cpu()
	run.PollCPU = pollCPU
	if isSidecar {
		claims1, err := sr.claims(ctx)
		if err != nil {
			return run, err
		}
		if claims1 > claims0 {
			run.RowsPerClaim = float64(r.N) / (claims1 - claims0)
		}
	}
	run.PostgresCPU = b.db.serverCPU() - pg0 - pollCPU
	run.ProcCPU, run.SidecarCPU = cpu1-cpu0, sc1-sc0
	run.RSSKB, run.SidecarKB = rp.rss()
	run.Seconds = t1.Sub(t0).Seconds()
	if run.Seconds <= 0 {
		return run, fmt.Errorf("drained before the fill returned (%.3fs)", run.Seconds)
	}
	run.JobsPerS = float64(r.N) / run.Seconds

	noop, lats, err := rp.finish(ctx)
	if err != nil {
		return run, err
	}
	if want := peerWarmup + r.N; noop != want {
		return run, fmt.Errorf("%d no-op jobs ran, want %d (each once)", noop, want)
	}
	if len(lats) != latN {
		return run, fmt.Errorf("%d latency jobs ran, want %d", len(lats), latN)
	}
	slices.Sort(lats)
	run.LatencyN = latN
	run.P50, run.P95, run.P99, run.Max = pct(lats, 50), pct(lats, 95), pct(lats, 99), lats[len(lats)-1]
	return run, nil
}

// analyzeTables analyses tables on a connection of its own and returns
// the CPU seconds its server process spent on it (0 when the server is not
// on this machine).
//
// Every row gets it right after its fill: the planner then sees the queue
// as it is, whatever autovacuum last saw. Without it a row's plans depend
// on when autoanalyze last ran: after the TRUNCATE between runs a table
// keeps the column statistics of its last analysis, and one analysed while
// it held only finished jobs makes queued ones look rare to the planner
// (Procrastinate's fetch then rescans every open job for each candidate row
// it skips, and stalled). Its own CPU is left out of the row's Postgres
// CPU: it is the harness's work, not the queue's.
func (b *bench) analyzeTables(ctx context.Context, tables []string) (float64, error) {
	conn, err := b.db.metered(ctx)
	if err != nil {
		return 0, fmt.Errorf("analyze: %w", err)
	}
	defer conn.Release()
	q := "ANALYZE " + strings.Join(tables, ", ")
	if _, err := conn.Exec(ctx, q); err != nil {
		return 0, fmt.Errorf("%s: %w", q, err)
	}
	return conn.spent(), nil
}

// pollDrained polls the row's open query and returns when the poll that
// found nothing open was issued, and the CPU seconds the polls cost the
// server (0 when it is not on this machine). The polls are 2 ms apart at
// first and then a fiftieth of the time so far, at most 20 ms: the drain
// time is known to within 2 % (or 2 ms), and a long drain is not polled
// more often than it needs.
//
// They run on a connection of their own, so their cost is read from its
// server process and left out of the row's Postgres CPU: it is the
// harness's work, not the queue's, and what one poll costs depends on the
// row's table (a queue that keeps its finished jobs makes a scan of it
// longer as it drains).
func (b *bench) pollDrained(ctx context.Context, rp rowProcs, timeout time.Duration) (time.Time, float64, error) {
	conn, err := b.db.metered(ctx)
	if err != nil {
		return time.Time{}, 0, fmt.Errorf("poll: %w", err)
	}
	defer conn.Release()
	spent := conn.spent
	q := rp.openQuery()
	begin := time.Now()
	deadline := begin.Add(timeout)
	for {
		at := time.Now()
		var open bool
		if err := conn.QueryRow(ctx, q).Scan(&open); err != nil {
			return at, spent(), fmt.Errorf("%s: %w", q, err)
		}
		if !open {
			return at, spent(), nil
		}
		if err := rp.exited(); err != nil {
			return at, spent(), err
		}
		if at.After(deadline) {
			return at, spent(), fmt.Errorf("jobs still open after %s", timeout)
		}
		select {
		case <-ctx.Done():
			return at, spent(), ctx.Err()
		case <-time.After(min(20*time.Millisecond, max(2*time.Millisecond, time.Since(begin)/50))):
		}
	}
}

// ---- the sidecar's rows ----

// ttl0Variant is the sidecar's stdio row for sdk run with result_ttl 0.
func ttl0Variant(sdk string) variant {
	v := sidecarVariant(sdk, "stdio")
	v.Key += "-ttl0"
	v.Label += ", `result_ttl: 0` (done rows deleted, as graphile-worker does)"
	v.ResultTTL0 = true
	return v
}

type sidecarRow struct {
	b  *bench
	ws *workers
	// metrics is where the sidecar serves /metrics: its claims are
	// counted from its own histogram.
	metrics string
	// noop is how many no-op jobs were enqueued: with result_ttl 0 no
	// row is left to count, so every row gone means every job done.
	noop int
}

func (b *bench) startSidecarRow(ctx context.Context, v variant, tag string) (*sidecarRow, error) {
	if err := b.db.reset(ctx, true); err != nil {
		return nil, err
	}
	var err error
	if v.metricsAddr, err = freeAddr(); err != nil {
		return nil, err
	}
	ws, err := b.startVariant(ctx, v, tag, nil)
	if err != nil {
		return nil, err
	}
	return &sidecarRow{b: b, ws: ws, metrics: v.metricsAddr}, nil
}

// claims is how many claim statements the sidecar has made.
func (s *sidecarRow) claims(ctx context.Context) (float64, error) {
	n, err := scrapeGauges(ctx, s.metrics, "soniq_claim_rows_count")
	if err != nil {
		return 0, fmt.Errorf("read the sidecar's claims: %w", err)
	}
	return n[0], nil
}

func (s *sidecarRow) bulk(ctx context.Context, n int) error {
	err := s.b.db.enqueueBulk(ctx, "bench.noop", map[string]any{}, n)
	s.noop += n
	return err
}

func (s *sidecarRow) tables() []string { return []string{"soniq_jobs"} }

func (s *sidecarRow) pids() []int { return pidsOf(s.ws.procs) }

func (s *sidecarRow) latency(ctx context.Context, rate, n int) error {
	return s.b.produceLatency(ctx, rate, n)
}

func (s *sidecarRow) openQuery() string {
	return `SELECT EXISTS (SELECT 1 FROM soniq_jobs WHERE queue = 'default' AND status IN ('queued', 'processing'))`
}

func (s *sidecarRow) exited() error { return exitedOf(s.ws.procs) }

func (s *sidecarRow) cpu() (all, sidecar float64) {
	own, ch := s.ws.cpu()
	return own + ch, own
}

func (s *sidecarRow) rss() (all, sidecar int) {
	pid := s.ws.procs[0].PID
	sidecar = proc.StatusKB(pid, "VmHWM")
	all = sidecar
	for _, ch := range proc.Children(pid) {
		all += proc.StatusKB(ch, "VmHWM")
	}
	return all, sidecar
}

func (s *sidecarRow) finish(ctx context.Context) (int, []float64, error) {
	s.ws.stop()
	if s.ws.v.ResultTTL0 {
		return s.finishTTL0(ctx)
	}
	var noop int
	if err := s.b.db.pool.QueryRow(ctx, `SELECT count(*) FROM soniq_jobs WHERE job_name = 'bench.noop' AND status = 'done'`).Scan(&noop); err != nil {
		return 0, nil, err
	}
	lats, err := s.b.latencies(ctx)
	return noop, lats, err
}

// finishTTL0 checks a result_ttl 0 run: no row may be left (each job's
// completion deleted its row; a failed or unfinished job would have kept
// one), and the latency jobs' starts come from the handlers' stderr lines
// in the sidecar's log.
func (s *sidecarRow) finishTTL0(ctx context.Context) (int, []float64, error) {
	var left int
	if err := s.b.db.pool.QueryRow(ctx, `SELECT count(*) FROM soniq_jobs`).Scan(&left); err != nil {
		return 0, nil, fmt.Errorf("count rows left: %w", err)
	}
	if left != 0 {
		return 0, nil, fmt.Errorf("%d rows left in soniq_jobs with result_ttl 0, want none", left)
	}
	lats, err := stderrLatencies(s.ws.procs[0].Log)
	return s.noop, lats, err
}

// stderrLatencies reads the pickup latencies (ms) that the handlers wrote
// to stderr as "BENCH-LATENCY <t_us> <started_us>", as the sidecar logged
// them.
func stderrLatencies(log string) ([]float64, error) {
	raw, err := os.ReadFile(log)
	if err != nil {
		return nil, fmt.Errorf("latencies: %w", err)
	}
	var lats []float64
	for _, line := range strings.Split(string(raw), "\n") {
		_, rest, found := strings.Cut(line, "BENCH-LATENCY ")
		if !found {
			continue
		}
		var t, started int64
		if _, err := fmt.Sscanf(rest, "%d %d", &t, &started); err != nil {
			return nil, fmt.Errorf("latencies: %q: %w", line, err)
		}
		lats = append(lats, float64(started-t)/1000)
	}
	return lats, nil
}

func (s *sidecarRow) stop() { s.ws.stop() }

func exitedOf(ws []*proc.Proc) error {
	for _, w := range ws {
		if w.Exited() {
			return fmt.Errorf("pid %d exited during the run (%v); log tail:\n%s", w.PID, w.Err(), proc.Tail(w.Log, 3000))
		}
	}
	return nil
}

// ---- a peer's rows ----

// peerArgv is the command of one of a peer's scripts in mode (setup,
// worker or client), and its environment.
func (b *bench) peerArgv(p *peer, mode string) ([]string, []string) {
	c := b.c
	dir := filepath.Join(c.root, "bench", "peers", p.Key)
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
		"BENCH_DATABASE_URL=" + c.dbURL, fmt.Sprintf("BENCH_CONCURRENCY=%d", c.conc/c.procs)}
	if p.env != nil {
		env = append(env, p.env(c)...)
	}
	switch p.Lang {
	case "node":
		env = append(env, "BENCH_PEER_MODULES="+c.peerPaths[p.Key])
		return []string{c.node, filepath.Join(dir, "peer.mjs"), mode}, env
	default:
		env = append(env, "PYTHONUNBUFFERED=1")
		return []string{c.peerPaths[p.Key], filepath.Join(dir, "peer.py"), mode}, env
	}
}

// peerVersion reads the installed version of the peer's package.
func (b *bench) peerVersion(p *peer) string {
	path := b.c.peerPaths[p.Key]
	if p.Lang == "node" {
		raw, err := os.ReadFile(filepath.Join(path, "node_modules", p.Pkg, "package.json"))
		if err != nil {
			return "unknown"
		}
		var pkg struct {
			Version string `json:"version"`
		}
		if json.Unmarshal(raw, &pkg) != nil || pkg.Version == "" {
			return "unknown"
		}
		return pkg.Version
	}
	return output("", path, "-c", "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))", p.Pkg)
}

// peerSetup installs the peer's schema with its own tools (once a run).
func (b *bench) peerSetup(ctx context.Context, p *peer) error {
	argv, env := b.peerArgv(p, "setup")
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(sctx, argv[0], argv[1:]...)
	cmd.Env, cmd.Dir = env, b.c.work
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s setup: %w\n%s", p.Key, err, out)
	}
	return nil
}

type peerRow struct {
	b       *bench
	p       *peer
	workers []*proc.Proc
	client  *proc.Proc
	in      io.WriteCloser
	lines   chan string // the client's stdout, a line at a time; closed at EOF
}

func (b *bench) startPeerRow(ctx context.Context, p *peer, tag string) (*peerRow, error) {
	c := b.c
	if err := b.peerReset(ctx, p); err != nil {
		return nil, err
	}
	pr := &peerRow{b: b, p: p}
	argv, env := b.peerArgv(p, "worker")
	for i := range c.procs {
		w, err := c.group.Start(argv, env, c.work, filepath.Join(c.work, fmt.Sprintf("%s-%d.log", tag, i)))
		if err != nil {
			pr.stop()
			return nil, err
		}
		pr.workers = append(pr.workers, w)
	}
	cargv, cenv := b.peerArgv(p, "client")
	cl, in, out, err := c.group.StartPiped(cargv, cenv, c.work, filepath.Join(c.work, tag+"-client.log"))
	if err != nil {
		pr.stop()
		return nil, err
	}
	pr.client, pr.in = cl, in
	pr.lines = make(chan string, 16)
	go func() { // ends at the client's EOF (its exit or stop's kill)
		defer close(pr.lines)
		defer out.Close()
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			pr.lines <- sc.Text()
		}
	}()
	for _, w := range pr.workers {
		if err := proc.WaitLog(ctx, w, "BENCH-READY", 1, 60*time.Second); err != nil {
			pr.stop()
			return nil, err
		}
	}
	if _, err := pr.expect(ctx, "BENCH-READY", 60*time.Second); err != nil {
		pr.stop()
		return nil, err
	}
	// Let the LISTEN connections and the fetch loops settle (as for the
	// sidecar and the Soniq worker).
	time.Sleep(300 * time.Millisecond)
	return pr, nil
}

// expect reads the client's next line, which must start with prefix, and
// returns the rest of it.
func (pr *peerRow) expect(ctx context.Context, prefix string, timeout time.Duration) (string, error) {
	select {
	case line, ok := <-pr.lines:
		if !ok {
			status := "its output closed, the process still running"
			if pr.client.Wait(2 * time.Second) {
				status = fmt.Sprintf("exit: %v", pr.client.Err())
			}
			return "", fmt.Errorf("%s client ended (%s); log tail:\n%s", pr.p.Key, status, proc.Tail(pr.client.Log, 3000))
		}
		rest, found := strings.CutPrefix(line, prefix)
		if !found {
			return "", fmt.Errorf("%s client said %q, want %s", pr.p.Key, line, prefix)
		}
		return strings.TrimSpace(rest), nil
	case <-time.After(timeout):
		return "", fmt.Errorf("%s client: no %s within %s; log tail:\n%s", pr.p.Key, prefix, timeout, proc.Tail(pr.client.Log, 3000))
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

func (pr *peerRow) command(line string) error {
	if _, err := io.WriteString(pr.in, line+"\n"); err != nil {
		return fmt.Errorf("%s client: %w", pr.p.Key, err)
	}
	return nil
}

func (pr *peerRow) bulk(ctx context.Context, n int) error {
	if err := pr.command(fmt.Sprintf("noop %d", n)); err != nil {
		return err
	}
	_, err := pr.expect(ctx, "committed ", 2*time.Minute)
	return err
}

func (pr *peerRow) latency(ctx context.Context, rate, n int) error {
	if err := pr.command(fmt.Sprintf("latency %d %d", rate, n)); err != nil {
		return err
	}
	_, err := pr.expect(ctx, "done", time.Duration(n/rate+30)*time.Second)
	return err
}

func (pr *peerRow) openQuery() string { return pr.p.open }

func (pr *peerRow) tables() []string { return pr.p.tables }

func (pr *peerRow) pids() []int { return pidsOf(pr.workers) }

func (pr *peerRow) exited() error { return exitedOf(pr.workers) }

func (pr *peerRow) cpu() (all, sidecar float64) {
	for _, w := range pr.workers {
		own, ch := proc.TreeCPU(w.PID)
		all += own + ch
	}
	return all, 0
}

func (pr *peerRow) rss() (all, sidecar int) {
	for _, w := range pr.workers {
		all += proc.StatusKB(w.PID, "VmHWM")
		for _, ch := range proc.Children(w.PID) {
			all += proc.StatusKB(ch, "VmHWM")
		}
	}
	return all, 0
}

// peerTally is the line a peer's worker prints when it stops.
type peerTally struct {
	Noop      int     `json:"noop"`
	LatencyUS []int64 `json:"latency_us"`
}

func (pr *peerRow) finish(ctx context.Context) (int, []float64, error) {
	for _, w := range pr.workers {
		_ = w.Signal(syscall.SIGTERM)
	}
	var errs []error
	for _, w := range pr.workers {
		// One SIGTERM each (sent above): a graceful stop, awaited.
		select {
		case <-w.Done():
		case <-time.After(20 * time.Second):
			_ = syscall.Kill(-w.PID, syscall.SIGKILL)
			<-w.Done()
			errs = append(errs, fmt.Errorf("%s worker pid %d did not exit within 20s of SIGTERM; killed; log tail:\n%s", pr.p.Key, w.PID, proc.Tail(w.Log, 3000)))
			continue
		}
		if w.Err() != nil {
			errs = append(errs, fmt.Errorf("%s worker pid %d: %v; log tail:\n%s", pr.p.Key, w.PID, w.Err(), proc.Tail(w.Log, 3000)))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return 0, nil, err
	}
	noop := 0
	var lats []float64
	for _, w := range pr.workers {
		t, err := readTally(w.Log)
		if err != nil {
			return 0, nil, fmt.Errorf("%s worker pid %d: %w; log tail:\n%s", pr.p.Key, w.PID, err, proc.Tail(w.Log, 3000))
		}
		noop += t.Noop
		for _, us := range t.LatencyUS {
			lats = append(lats, float64(us)/1000)
		}
	}
	pr.closeClient()
	return noop, lats, nil
}

func readTally(log string) (peerTally, error) {
	var t peerTally
	raw, err := os.ReadFile(log)
	if err != nil {
		return t, err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if js, ok := strings.CutPrefix(line, "BENCH-RESULT "); ok {
			return t, json.Unmarshal([]byte(js), &t)
		}
	}
	return t, errors.New("no BENCH-RESULT line at exit")
}

// closeClient ends the producer: its stdin closes and it exits.
func (pr *peerRow) closeClient() {
	if pr.client == nil {
		return
	}
	_ = pr.in.Close()
	if err := pr.client.Stop(10 * time.Second); err != nil {
		logf("%v", err)
	}
	pr.client = nil
}

func (pr *peerRow) stop() {
	for _, w := range pr.workers {
		if err := w.Stop(20 * time.Second); err != nil {
			logf("%v", err)
		}
	}
	pr.closeClient()
}

// pidsOf are the pids of ps.
func pidsOf(ps []*proc.Proc) []int {
	out := make([]int, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.PID)
	}
	return out
}

// freeze stops pids and their descendants (SIGSTOP, parents first) and
// returns what continues them; calling it again does nothing, so it can
// be deferred as well as called.
func freeze(pids []int) (thaw func()) {
	var all []int
	for _, pid := range pids {
		all = append(all, pid)
		all = append(all, proc.Descendants(pid)...)
	}
	for _, pid := range all {
		_ = syscall.Kill(pid, syscall.SIGSTOP) // one that exited meanwhile has nothing to stop
	}
	thawed := false
	return func() {
		if thawed {
			return
		}
		thawed = true
		for _, pid := range all {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
}

// rowsPerClaimNote is a run's rows per claim for its log line, if counted.
func rowsPerClaimNote(v float64) string {
	if v == 0 {
		return ""
	}
	return fmt.Sprintf(", %.0f rows per claim", v)
}
