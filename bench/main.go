// Command bench measures soniq-sidecar against the released Soniq worker and
// against the database's own ceiling, and writes docs/benchmarks.md.
// It is run by `make bench` through bench/run.sh, which provides the
// throw-away Postgres, the Soniq virtualenv and the chart; run it by hand with
// the flags run.sh passes. Not part of `make test`.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/soniq-dev/soniq-sidecar/internal/proc"
)

// config is everything a run needs; flags fill it.
type config struct {
	dbURL     string
	root      string // repository root
	sidecar   string // the binary under test
	python    string // interpreter for the Python SDK handlers
	soniq     string // the released Soniq CLI (in its virtualenv)
	node      string
	out       string
	work      string // scratch directory (manifests, logs)
	keep      bool   // keep work when the bench ends
	n         int
	warm      int // jobs each handler process runs before a throughput run is measured
	runs      int
	conc      int         // total concurrency budget
	procs     int         // handler processes (and Soniq worker processes)
	group     *proc.Group // every process the driver started
	latRate   int
	latSecs   float64
	latRuns   int
	shutRuns  int
	shutTO    time.Duration
	budget    time.Duration
	startedAt time.Time
	deadline  time.Time
	command   string
	only      map[string]bool // variant keys to run; empty = all
	sections  map[string]bool
	soniqN    int   // jobs per throughput run of the Soniq worker
	depths    []int // queue depths of the depth curve
	sidecars  []int // sidecar counts of the sharing curve

	prioRuns     int           // rounds of the priority section
	prioJobs     int           // high-priority jobs per run
	prioInterval time.Duration // between two high-priority jobs
	prioBacklog  int           // low-priority jobs kept queued ahead of them

	soniqSQLite        string        // Soniq's CLI from a virtualenv with its sqlite extra
	sqliteN            int           // jobs per SQLite run of the sidecar
	sqliteSoniqN       int           // jobs per SQLite run of Soniq's worker, 1 × 1
	sqliteSoniqBudgetN int           // jobs per SQLite run of Soniq's worker at the budget
	sqliteDepths       []int         // queue depths of the SQLite curve
	sqliteDrain        int           // completions a SQLite depth point is taken over, at most
	sqliteWindow       time.Duration // bound of one SQLite depth point

	peerPaths     map[string]string // peer key → its install: node_modules' parent directory, or the virtualenv's python
	peersN        int               // jobs per throughput run of the peers section (every row)
	peersSlowN    int               // the same for the peers that fetch one job per statement
	peersRuns     int               // rounds of the peers section
	peersLatSecs  float64           // duration of the latency phase of a peers run
	peersStrict   bool              // a failed peers run fails the bench (bench-smoke)
	pgBossLocal   int               // pg-boss: workers per process (the budget split as localConcurrency × batchSize)
	pgQueuerBatch int               // PgQueuer: batch_size (0: half the per-process budget)

	producersBatch  int // jobs of one bulk call of the producers section
	producersRuns   int // rounds of the producers section
	producersSingle int // single enqueues a round of the producers section times

	limitsN        int // jobs per drain of the limits section
	limitsKeys     int // keys they are spread over
	limitsRuns     int // rounds of the limits section
	limitsBacklog  int // rows queued on the capped key (0: that part is not run)
	limitsRate     int // the rate cap, claims a second
	limitsRateJobs int // jobs drained under it

	fleetSizes  []int         // simulated fleet sizes of the fleet section
	fleetRate   int           // the simulated fleet's total rate, jobs a second
	fleetWarmup time.Duration // before a fleet size's window: the rates are measured
	fleetWindow time.Duration // the window a fleet size is measured over
	fleetRounds int           // rounds of the fleet section
	// fleetUnaware: the simulated sidecars are not told the fleet's size
	// (each sizes its reserve and writes as if alone), for comparison.
	fleetUnaware bool
}

func main() {
	var c config
	flag.StringVar(&c.dbURL, "database-url", "", "Postgres URL (default $SONIQ_TEST_DATABASE_URL)")
	flag.StringVar(&c.sidecar, "sidecar", "bin/soniq-sidecar", "the soniq-sidecar binary")
	flag.StringVar(&c.python, "python", "python3", "Python for the example SDK handlers")
	flag.StringVar(&c.soniq, "soniq", "", "the released Soniq CLI (`soniq`, from a virtualenv with integration/soniq-requirements.txt)")
	flag.StringVar(&c.node, "node", "node", "Node.js for the example SDK handlers")
	flag.StringVar(&c.out, "out", "docs/benchmarks.md", "report to write")
	flag.BoolVar(&c.keep, "keep", false, "keep the scratch directory (every process's log and manifest) and print where it is")
	flag.IntVar(&c.n, "n", 20000, "jobs per throughput run")
	flag.IntVar(&c.warm, "warm", 0, "jobs each handler process of the throughput section's sidecar and SDK-alone rows runs before the run is measured: the handlers' cost per job once their runtime has compiled its hot paths (0: measured from a cold start, as every other row)")
	flag.IntVar(&c.runs, "runs", 3, "runs of each throughput variant (alternating)")
	flag.IntVar(&c.conc, "concurrency", 64, "total concurrency budget (jobs in flight), the same for every variant")
	flag.IntVar(&c.procs, "processes", 2, "handler processes of the sidecar, and Soniq worker processes")
	flag.IntVar(&c.latRate, "latency-rate", 50, "jobs per second for the pickup-latency runs")
	flag.Float64Var(&c.latSecs, "latency-seconds", 6, "duration of one pickup-latency run")
	flag.IntVar(&c.latRuns, "latency-runs", 3, "runs of each pickup-latency variant")
	flag.IntVar(&c.shutRuns, "shutdown-runs", 5, "runs of each shutdown variant")
	flag.DurationVar(&c.shutTO, "shutdown-timeout", 2*time.Second, "shutdown_timeout for the shutdown runs")
	flag.DurationVar(&c.budget, "budget", 20*time.Minute, "wall-time bound of the measuring: later rounds are skipped past it (a full run measures for about 12 to 15 minutes on 2 cores; a slower machine gives up throughput rounds first)")
	only := flag.String("only", "", "comma-separated variant keys to run (soniq, python-stdio, node-stdio, python-stdio-ahead0, node-stdio-ahead0 (claim_ahead 0), python-unix, node-unix, python-attach, node-attach, ceiling, floor, alone-python, alone-node, and in the peers section also python-stdio-ttl0, node-stdio-ttl0 (result_ttl 0) and the peers graphile-worker, pg-boss, pgqueuer, procrastinate); default all")
	sections := flag.String("sections", "shutdown,latency,priority,pooler,sqlite,peers,producers,limits,throughput,depth,sharing,fleet", "comma-separated sections to run (fleet: 1 to 128 simulated sidecars sharing one database, in-process, with no handler: Postgres CPU per job and rows per claim; limits: fleet-wide caps against the same jobs unlimited; producers: enqueueing from Node, soniq-client beside pg-boss and graphile-worker, needs -peer-installs for those two; priority: a high-priority job's start delay behind a full reserve; pooler: pickup latency direct and through PgBouncer, needs pgbouncer; sqlite: the embedded SQLite default beside Soniq's worker on SQLite; peers: graphile-worker, pg-boss, PgQueuer and Procrastinate beside the sidecar's stdio rows, needs -peer-installs)")
	flag.IntVar(&c.soniqN, "soniq-n", 5000, "jobs per throughput run of the Soniq worker (fewer than -n: it is 20-50 times slower, and a shallower queue only flatters it)")
	depths := flag.String("depths", "10000,100000,1000000", "queue depths of the depth curve")
	sidecarCounts := flag.String("sidecars", "1,2,4,8", "sidecar counts of the sharing curve (same total budget)")
	flag.IntVar(&c.prioRuns, "prio-runs", 2, "rounds of the priority section (a high-priority job's start delay behind a full reserve, with the default claim_ahead and with 0)")
	flag.IntVar(&c.prioJobs, "prio-jobs", 100, "high-priority jobs per run of the priority section")
	flag.DurationVar(&c.prioInterval, "prio-interval", 50*time.Millisecond, "time between two high-priority jobs of the priority section")
	flag.IntVar(&c.prioBacklog, "prio-backlog", 20000, "low-priority no-op jobs the priority section keeps queued (topped up by half when half are gone) while it enqueues the high-priority ones")
	flag.StringVar(&c.soniqSQLite, "soniq-sqlite", "", "Soniq's CLI from a virtualenv that also has its sqlite extra (aiosqlite), for the sqlite section")
	flag.IntVar(&c.sqliteN, "sqlite-n", 3000, "jobs per SQLite throughput run of the sidecar")
	flag.IntVar(&c.sqliteSoniqN, "sqlite-soniq-n", 3000, "jobs per SQLite throughput run of Soniq's worker (1 process, concurrency 1; the same depth as the sidecar's, since Soniq's claim sorts every queued row and a shallower queue would flatter it)")
	flag.IntVar(&c.sqliteSoniqBudgetN, "sqlite-soniq-budget-n", 200, "jobs of the one SQLite run of Soniq's worker at the bench's budget (it runs each job many times)")
	sqliteDepths := flag.String("sqlite-depths", "1000,10000,50000", "queue depths of the SQLite curve")
	flag.IntVar(&c.sqliteDrain, "sqlite-drain", 3000, "completions a point of the SQLite curve is taken over, at most")
	flag.DurationVar(&c.sqliteWindow, "sqlite-window", 6*time.Second, "bound of one point of the SQLite curve, from the jobs' commit")
	peerInstalls := flag.String("peer-installs", "", "where each peer is installed, KEY=PATH separated by commas: the directory holding node_modules for graphile-worker and pg-boss, the virtualenv's python for pgqueuer and procrastinate (bench/run.sh makes them from bench/peers/*)")
	flag.IntVar(&c.peersN, "peers-n", 10000, "jobs per throughput run of every row of the peers section")
	flag.IntVar(&c.peersSlowN, "peers-slow-n", 3000, "jobs per throughput run of the peers that fetch one job per statement (Procrastinate): about 10 times slower, it would take most of the section's time at -peers-n")
	flag.IntVar(&c.peersRuns, "peers-runs", 3, "rounds of the peers section (each row: one start, its latency, then its drain)")
	flag.Float64Var(&c.peersLatSecs, "peers-latency-seconds", 4, "duration of the pickup-latency phase of a peers run (at -latency-rate)")
	flag.BoolVar(&c.peersStrict, "peers-strict", false, "fail the bench when a run of the peers section fails (bench-smoke: the peers' harnesses must not rot)")
	flag.IntVar(&c.pgBossLocal, "pgboss-local", 1, "pg-boss: the per-process budget split as localConcurrency × batchSize, this many workers (1 × 32 drained fastest of 1 × 32, 2 × 16, 4 × 8 and 8 × 4 in trials: about 1.7×, 2.5× and 3.5× the others)")
	flag.IntVar(&c.pgQueuerBatch, "pgqueuer-batch", 0, "PgQueuer: batch_size (default half the per-process budget, the largest PgQueuer allows with max_concurrent_tasks = the budget)")
	flag.IntVar(&c.producersBatch, "producers-batch", 10000, "jobs of one bulk call in the producers section (soniq-client enqueueMany, pg-boss insert, graphile-worker addJobs)")
	flag.IntVar(&c.producersRuns, "producers-runs", 3, "rounds of the producers section")
	flag.IntVar(&c.limitsN, "limits-n", 10000, "no-op jobs per drain of the limits section (limited and unlimited rows)")
	flag.IntVar(&c.limitsKeys, "limits-keys", 1000, "keys (args.k) the limits section's drains spread their jobs over, concurrency 2 each")
	flag.IntVar(&c.limitsRuns, "limits-runs", 3, "rounds of the limits section's drains")
	flag.IntVar(&c.limitsBacklog, "limits-backlog", 100000, "rows queued on one key at its cap in the limits section (0: skip that part)")
	flag.IntVar(&c.limitsRate, "limits-rate", 1000, "the limits section's rate cap, claims a second")
	flag.IntVar(&c.limitsRateJobs, "limits-rate-jobs", 10000, "jobs drained under the limits section's rate cap")
	flag.IntVar(&c.producersSingle, "producers-single", 500, "single enqueues timed per round of the producers section")
	fleetSizes := flag.String("fleet-sizes", "1,2,4,8,16,32,64,128", "simulated fleet sizes of the fleet section (in-process sidecars sharing one database and one total rate)")
	flag.IntVar(&c.fleetRate, "fleet-rate", 4000, "the fleet section's total rate, jobs a second, split evenly across the simulated sidecars")
	flag.DurationVar(&c.fleetWarmup, "fleet-warmup", 3*time.Second, "the fleet section: time before each size's window (the reserves measure their rates)")
	flag.DurationVar(&c.fleetWindow, "fleet-window", 4*time.Second, "the fleet section: the window each size is measured over (shrink it, -fleet-rounds and -fleet-sizes for a quicker run)")
	flag.BoolVar(&c.fleetUnaware, "fleet-unaware", false, "the fleet section: do not tell the simulated sidecars the fleet's size (each sizes its reserve and result batches as if alone), to compare")
	flag.IntVar(&c.fleetRounds, "fleet-rounds", 2, "rounds of the fleet section, the sizes' order reversed every other round (about 75 s each with the defaults)")
	renderOnly := flag.String("render", "", "only rewrite this report from the JSON it embeds (goals, analysis), measuring nothing")
	flag.Parse()
	if *renderOnly != "" {
		if err := render(*renderOnly); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	c.only, c.sections = set(*only), set(*sections)
	var err error
	if c.depths, err = ints(*depths); err == nil {
		c.sidecars, err = ints(*sidecarCounts)
	}
	if err == nil {
		c.sqliteDepths, err = ints(*sqliteDepths)
	}
	if err == nil {
		c.fleetSizes, err = ints(*fleetSizes)
	}
	if err == nil {
		c.peerPaths, err = keyPaths(*peerInstalls)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	c.command = strings.Join(os.Args, " ")
	if c.dbURL == "" {
		c.dbURL = os.Getenv("SONIQ_TEST_DATABASE_URL")
	}
	if c.dbURL == "" || c.soniq == "" {
		fmt.Fprintln(os.Stderr, "bench: need --database-url (or $SONIQ_TEST_DATABASE_URL) and --soniq; `make bench` provides both")
		os.Exit(2)
	}
	if c.conc%c.procs != 0 {
		fmt.Fprintln(os.Stderr, "bench: --concurrency must be a multiple of --processes")
		os.Exit(2)
	}
	c.group = proc.NewGroup()
	c.startedAt = time.Now()
	c.deadline = c.startedAt.Add(c.budget)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code := 0
	if err := run(ctx, &c); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		code = 1
	}
	c.group.KillAll()
	os.Exit(code)
}

func ints(list string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(list, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q: want positive integers separated by commas", list)
		}
		out = append(out, n)
	}
	return out, nil
}

// keyPaths parses KEY=PATH,KEY=PATH for known peers.
func keyPaths(list string) (map[string]string, error) {
	m := map[string]string{}
	for _, kv := range strings.Split(list, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok || v == "" || peerByKey(k) == nil {
			return nil, fmt.Errorf("-peer-installs: %q: want KEY=PATH with KEY one of graphile-worker, pg-boss, pgqueuer, procrastinate", kv)
		}
		m[k] = abs(v)
	}
	return m, nil
}

func set(list string) map[string]bool {
	m := map[string]bool{}
	for _, s := range strings.Split(list, ",") {
		if s = strings.TrimSpace(s); s != "" {
			m[s] = true
		}
	}
	return m
}

// want says whether a variant is selected by --only.
func (c *config) want(key string) bool { return len(c.only) == 0 || c.only[key] }

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s bench: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func run(ctx context.Context, c *config) error {
	var err error
	if c.root, err = os.Getwd(); err != nil {
		return err
	}
	c.sidecar = abs(c.sidecar)
	c.soniq = abs(c.soniq)
	if c.soniqSQLite != "" {
		c.soniqSQLite = abs(c.soniqSQLite)
	}
	// The pyenv-style shim python3 may be a script: use the interpreter itself.
	if p := output("", c.python, "-c", "import sys; print(sys.executable)"); p != "unknown" {
		c.python = p
	}
	if p, err := exec.LookPath(c.node); err == nil {
		c.node = abs(p)
	}
	if c.work, err = os.MkdirTemp("", "soniq-bench-"); err != nil {
		return err
	}
	if c.keep {
		defer logf("logs and manifests kept in %s", c.work)
	} else {
		defer os.RemoveAll(c.work)
	}

	db, err := openDB(ctx, c.dbURL)
	if err != nil {
		return err
	}
	defer db.close()
	if err := setupSchema(ctx, c, db); err != nil {
		return err
	}
	rep := newReport(c, db)
	rep.Meta["started"] = c.startedAt.UTC().Format(time.RFC3339)

	b := &bench{c: c, db: db, rep: rep}
	if c.sections["throughput"] || c.sections["latency"] {
		// Only those sections have unix rows.
		b.probeUnix(ctx)
	}

	// Cheap sections first so the bound never cuts them; the throughput
	// rounds then use what remains of the budget.
	for _, s := range []struct {
		name string
		run  func(context.Context) error
	}{{"shutdown", b.shutdownSection}, {"latency", b.latencySection}, {"priority", b.prioritySection}, {"pooler", b.poolerSection}, {"sqlite", b.sqliteSection},
		{"peers", b.peersSection},
		{"producers", b.producersSection},
		{"limits", b.limitsSection},
		{"throughput", b.throughputSection},
		{"depth", b.depthSection}, {"sharing", b.shareSection}, {"fleet", b.fleetSection}} {
		if !c.sections[s.name] {
			continue
		}
		l := loadNow(s.name)
		rep.Loads = append(rep.Loads, l)
		logf("section %s (load average %s)", s.name, l.Load)
		if err := s.run(ctx); err != nil {
			return err
		}
	}
	rep.Meta["finished"] = time.Now().UTC().Format(time.RFC3339)
	rep.Meta["duration"] = time.Since(c.startedAt).Round(time.Second).String()
	return rep.write(c.out)
}

// bench carries the shared state of one invocation.
type bench struct {
	c    *config
	db   *database
	rep  *report
	unix map[string]string // sdk → "" (available) or why not
}

// variant is one way of running the jobs.
type variant struct {
	Key       string `json:"key"`
	Label     string `json:"label"`
	Kind      string `json:"kind"` // soniq | sidecar | ceiling (the floor too) | alone
	SDK       string `json:"sdk,omitempty"`
	Transport string `json:"transport,omitempty"`
	Batch     int    `json:"claim_batch,omitempty"` // ceiling and floor: claim limit
	// NoIndex: run without the claim-order index that `migrate` creates
	// (a database set up by Soniq's own tools only).
	NoIndex bool `json:"without_claim_index,omitempty"`
	// ResultTTL0: run the sidecar with `result_ttl: 0` (done rows deleted
	// at completion, as Soniq's worker does then); its handlers report the
	// latency jobs' start on stderr, since their results go with the rows.
	ResultTTL0 bool `json:"result_ttl_0,omitempty"`
	// ClaimAhead0: run the sidecar with `claim_ahead: 0` (no reserve: it
	// claims only free slots), beside the default to measure the gain.
	ClaimAhead0 bool `json:"claim_ahead_0,omitempty"`
	// metricsAddr: serve /metrics there ("" = none), for a section that
	// reads the sidecar's gauges.
	metricsAddr string
	// limitGroup: the caps of one limit group every bench job names
	// (limits.go); "" = no limits.
	limitGroup string
}

// ahead0 is v run with `claim_ahead: 0`.
func ahead0(v variant) variant {
	v.Key += "-ahead0"
	v.Label += ", claim_ahead 0"
	v.ClaimAhead0 = true
	return v
}

func sidecarVariant(sdk, transport string) variant {
	name := map[string]string{"python": "Python", "node": "Node"}[sdk]
	return variant{Key: sdk + "-" + transport, Label: "sidecar + " + name + " SDK over " + transport, Kind: "sidecar", SDK: sdk, Transport: transport}
}

var soniqVariant = variant{Key: "soniq", Label: "Soniq 0.1.0 worker (its CLI)", Kind: "soniq"}

// probeUnix runs a few jobs through a unix-transport sidecar for each SDK:
// the rows for transport unix are measured as soon as that works.
func (b *bench) probeUnix(ctx context.Context) {
	c := b.c
	b.unix = map[string]string{}
	for _, sdk := range []string{"python", "node"} {
		v := sidecarVariant(sdk, "unix")
		if !c.want(v.Key) {
			continue
		}
		if err := b.smoke(ctx, v); err != nil {
			b.unix[sdk] = "not yet measured: transport unix unavailable"
			b.rep.Notes = append(b.rep.Notes, fmt.Sprintf("transport unix with the %s SDK is not measured: a sidecar with `transport: unix` did not run 100 jobs (%s)", sdk, lastLine(err.Error())))
			logf("transport unix with %s unavailable: %v", sdk, lastLine(err.Error()))
		} else {
			b.unix[sdk] = ""
		}
	}
}

// smoke starts a variant and drains 100 jobs with it.
func (b *bench) smoke(ctx context.Context, v variant) error {
	if err := b.db.reset(ctx, true); err != nil {
		return err
	}
	ws, err := b.startVariantWithin(ctx, v, "probe-"+v.Key, nil, 20*time.Second)
	if err != nil {
		return err
	}
	defer ws.stop()
	if err := b.db.enqueueBulk(ctx, "bench.noop", map[string]any{}, 100); err != nil {
		return err
	}
	return b.db.waitDrained(ctx, ws, 20*time.Second)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// writeManifest writes the manifest a sidecar variant runs.
func (b *bench) writeManifest(v variant, tag string) (string, error) {
	return b.writeManifestSized(v, tag, b.c.procs, b.c.conc/b.c.procs)
}

// writeManifestSized writes a manifest with procs processes of per jobs.
func (b *bench) writeManifestSized(v variant, tag string, procs, per int) (string, error) {
	if v.Transport == "attach" {
		return b.writeAttachManifest(v, tag)
	}
	c := b.c
	var command, env []string
	switch v.SDK {
	case "python":
		command = []string{c.python, filepath.Join(c.root, "bench", "handlers", "py_handler.py")}
		env = []string{"PYTHONPATH", filepath.Join(c.root, "sdk", "python"), "PYTHONUNBUFFERED", "1"}
	case "node":
		command = []string{c.node, filepath.Join(c.root, "bench", "handlers", "node_handler.js")}
		env = []string{"BENCH_NODE_SDK", filepath.Join(c.root, "sdk", "node", "index.js")}
	default:
		return "", fmt.Errorf("unknown sdk %q", v.SDK)
	}
	env = append(env, "BENCH_CONCURRENCY", fmt.Sprint(per), "PATH", os.Getenv("PATH"))
	if v.ResultTTL0 {
		env = append(env, "BENCH_LATENCY_STDERR", "1")
	}
	q := func(s string) string { return fmt.Sprintf("%q", s) }
	var sb strings.Builder
	sb.WriteString("version: 1\n")
	if v.ResultTTL0 || v.ClaimAhead0 {
		sb.WriteString("settings:\n")
	}
	if v.limitGroup != "" {
		fmt.Fprintf(&sb, "limits:\n  - {group: %s, %s}\n", limitsGroup, v.limitGroup)
	}
	if v.ResultTTL0 {
		sb.WriteString("  result_ttl: 0s\n")
	}
	if v.ClaimAhead0 {
		sb.WriteString("  claim_ahead: 0s\n")
	}
	fmt.Fprintf(&sb, "handlers:\n  - name: bench-%s\n", v.SDK)
	cmd := make([]string, len(command))
	for i, a := range command {
		cmd[i] = q(a)
	}
	fmt.Fprintf(&sb, "    command: [%s]\n", strings.Join(cmd, ", "))
	fmt.Fprintf(&sb, "    transport: %s\n    processes: %d\n    concurrency: %d\n    sync_concurrency: 1\n    startup_timeout: 30s\n", v.Transport, procs, per)
	sb.WriteString("    env:\n")
	for i := 0; i < len(env); i += 2 {
		fmt.Fprintf(&sb, "      %s: %s\n", env[i], q(env[i+1]))
	}
	sb.WriteString("    jobs:\n")
	for _, j := range []string{"bench.noop", "bench.latency", "bench.sleep"} {
		if v.limitGroup != "" {
			fmt.Fprintf(&sb, "      - {name: %s, cancellable: true, limit: {group: %s}}\n", j, limitsGroup)
			continue
		}
		fmt.Fprintf(&sb, "      - {name: %s, cancellable: true}\n", j)
	}
	path := filepath.Join(c.work, "manifest-"+tag+".yaml")
	return path, os.WriteFile(path, []byte(sb.String()), 0o644)
}

// sidecarEnv is the driver's environment without SONIQ_* settings, plus the
// database URL and extra.
func (b *bench) sidecarEnv(extra []string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SONIQ_") && !strings.HasPrefix(kv, "OTEL_") {
			env = append(env, kv)
		}
	}
	env = append(env, "SONIQ_DATABASE_URL="+b.c.dbURL)
	return append(env, extra...)
}

// workers is what one variant started: the sidecar, or the Soniq workers.
type workers struct {
	v     variant
	procs []*proc.Proc
	// handlers: an attach variant's handler processes (not the sidecar's
	// children), stopped after it.
	handlers []*proc.Proc
}

// startVariant starts a sidecar or the Soniq workers and waits until they
// are ready to take jobs.
func (b *bench) startVariant(ctx context.Context, v variant, tag string, extraEnv []string) (*workers, error) {
	return b.startVariantWithin(ctx, v, tag, extraEnv, 60*time.Second)
}

func (b *bench) startVariantWithin(ctx context.Context, v variant, tag string, extraEnv []string, readyIn time.Duration) (*workers, error) {
	c := b.c
	ws := &workers{v: v}
	switch v.Kind {
	case "sidecar":
		if v.Transport == "attach" {
			hs, err := b.startHandlers(ctx, v, tag, readyIn)
			if err != nil {
				return nil, err
			}
			ws.handlers = hs
		}
		m, err := b.writeManifest(v, tag)
		if err != nil {
			ws.stop()
			return nil, err
		}
		argv := []string{c.sidecar, "run", "--manifest", m, "--metrics-addr=" + v.metricsAddr, "--log-format", "json"}
		w, err := b.c.group.Start(argv, b.sidecarEnv(extraEnv), c.work, filepath.Join(c.work, tag+".log"))
		if err != nil {
			ws.stop()
			return nil, err
		}
		ws.procs = append(ws.procs, w)
		if err := proc.WaitLog(ctx, w, `"handler process ready"`, c.procs, readyIn); err != nil {
			ws.stop()
			return nil, err
		}
	case "soniq":
		per := c.conc / c.procs
		env := b.sidecarEnv(append([]string{
			"PYTHONPATH=" + filepath.Join(c.root, "bench", "handlers"),
			// Soniq checks that its pool covers the concurrency.
			fmt.Sprintf("SONIQ_POOL_MAX_SIZE=%d", per+5),
		}, extraEnv...))
		for i := range c.procs {
			argv := []string{c.soniq, "worker", "--concurrency", fmt.Sprint(per), "--jobs-modules", "soniq_bench_jobs", "--log-level", "WARNING"}
			w, err := b.c.group.Start(argv, env, filepath.Join(c.root, "bench", "handlers"), filepath.Join(c.work, fmt.Sprintf("%s-%d.log", tag, i)))
			if err != nil {
				ws.stop()
				return nil, err
			}
			ws.procs = append(ws.procs, w)
		}
		if err := b.db.waitSoniqWorkers(ctx, ws.procs, readyIn); err != nil {
			ws.stop()
			return nil, err
		}
	default:
		return nil, fmt.Errorf("cannot start %s", v.Kind)
	}
	// Let the LISTEN connections and the claim loops settle.
	time.Sleep(300 * time.Millisecond)
	return ws, nil
}

func (ws *workers) stop() {
	for _, w := range ws.procs {
		_ = w.Signal(syscall.SIGTERM)
	}
	for _, w := range ws.procs {
		if err := w.Stop(20 * time.Second); err != nil {
			logf("%v", err)
		}
	}
	for _, w := range ws.handlers {
		if err := w.Stop(20 * time.Second); err != nil {
			logf("%v", err)
		}
	}
}

// cpu returns the CPU seconds of the started processes and of their children.
func (ws *workers) cpu() (own, children float64) {
	for _, w := range ws.procs {
		o, ch := proc.TreeCPU(w.PID)
		own += o
		children += ch
	}
	for _, w := range ws.handlers {
		children += proc.CPU(w.PID)
	}
	return own, children
}

func numCPU() int { return runtime.NumCPU() }

// reserve is the part of the budget the throughput rounds leave to the
// queue-depth and sharing sections that follow them.
func (c *config) reserve() time.Duration {
	var d time.Duration
	if c.sections["depth"] || c.sections["sharing"] {
		// The sharing curve runs twice (default claim_ahead and 0): about
		// a minute for both sections on 2 cores, twice that on a slow one.
		d = c.budget * 15 / 100
	}
	if c.sections["fleet"] {
		d += c.fleetTime()
	}
	return d
}

// fleetTime is about how long the fleet section takes: each size's
// warm-up and window, and its fill and reset.
func (c *config) fleetTime() time.Duration {
	return time.Duration(c.fleetRounds*len(c.fleetSizes)) * (c.fleetWarmup + c.fleetWindow + 4*time.Second)
}

// remaining is the budget left.
func (c *config) remaining() time.Duration { return time.Until(c.deadline) }

// sectionLoad is the load average just before a section started.
type sectionLoad struct {
	Section string `json:"section"`
	Load    string `json:"loadavg"`
	Busy    bool   `json:"busy"`
}

// loadNow reads /proc/loadavg. Busy means the 1-minute average reached the
// core count: other work than this bench's own previous section (which
// counts too) was competing for the cores.
func loadNow(section string) sectionLoad {
	l := sectionLoad{Section: section, Load: "unknown"}
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return l
	}
	f := strings.Fields(string(b))
	if len(f) >= 3 {
		l.Load = strings.Join(f[:3], " ")
		one, _ := strconv.ParseFloat(f[0], 64)
		l.Busy = one >= float64(numCPU())
	}
	return l
}
