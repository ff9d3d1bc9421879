package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	// The "sqlite" database/sql driver: the library the sidecar embeds.
	_ "modernc.org/sqlite"

	"github.com/soniq-dev/soniq-sidecar/internal/proc"
)

// ---- 7: the embedded SQLite default beside Soniq's worker on SQLite ----
//
// Every run gets a new file in the scratch directory. The workers start on
// it (each side creates its tables as it does on first use) and become
// idle; the driver then writes the jobs in one transaction, as the
// Postgres sections do, and the rate runs from the first completion to the
// last (or the target-th): SQLite has no cross-process notification, so
// the pickup waits for a poll, which is latency, not throughput.

// sqlitePoll is SONIQ_POLL_INTERVAL for both sides (the same variable name
// in Soniq and the sidecar): it only bounds how long an idle worker takes
// to see the jobs the driver wrote, which the clock leaves out.
const sqlitePoll = 500 * time.Millisecond

// sqliteVariant is one way of running the jobs on SQLite.
type sqliteVariant struct {
	v     variant
	procs int // sidecar handler processes, or Soniq worker processes
	per   int // concurrency of each
	n     int // jobs per throughput run
	// once: run in the first round only (its point is not its rate).
	once bool
}

// sqliteRun is one drain on SQLite.
type sqliteRun struct {
	tpRun
	// ClaimsPerJob is the attempts counter summed over the done rows per
	// row: 1.0 when every job was claimed, so run, exactly once.
	ClaimsPerJob float64 `json:"claims_per_job"`
	Repeated     int     `json:"rows_claimed_more_than_once"`
	// Locked counts "database is locked" errors in the workers' logs.
	Locked int `json:"database_locked_errors,omitempty"`
}

// sqliteResult is one variant's runs on SQLite. Its Runs shadow the
// embedded tpResult's in the JSON; summarise copies them there.
type sqliteResult struct {
	tpResult
	Processes    int         `json:"processes"`
	Concurrency  int         `json:"concurrency_each"`
	Runs         []sqliteRun `json:"runs"`
	ClaimsPerJob float64     `json:"median_claims_per_job,omitempty"`
}

// sqlitePoint is one queue depth of the SQLite curve.
type sqlitePoint struct {
	Key         string  `json:"key"`
	Label       string  `json:"label"`
	Kind        string  `json:"kind"`
	SDK         string  `json:"sdk,omitempty"`
	Queued      int     `json:"queued"`
	Target      int     `json:"target"`  // completions the rate is to be taken over
	Drained     int     `json:"drained"` // completions it was taken over
	JobsPerS    float64 `json:"jobs_per_s"`
	FillSeconds float64 `json:"fill_seconds"`
	// Capped: the window ended before Target completions.
	Capped bool   `json:"capped,omitempty"`
	Error  string `json:"error,omitempty"`
}

// sqliteReport is section 7 of the report.
type sqliteReport struct {
	Settings   map[string]string `json:"settings"`
	Throughput []*sqliteResult   `json:"throughput"`
	Depth      []sqlitePoint     `json:"depth,omitempty"`
	WindowS    float64           `json:"depth_window_s"`
	PollS      float64           `json:"poll_interval_s"`
}

func (b *bench) sqliteVariants() []sqliteVariant {
	c := b.c
	per := c.conc / c.procs
	side := func(sdk string) sqliteVariant {
		v := sidecarVariant(sdk, "stdio")
		v.Key, v.Label = "sqlite-"+v.Key, v.Label+" on SQLite"
		return sqliteVariant{v: v, procs: c.procs, per: per, n: c.sqliteN}
	}
	return []sqliteVariant{
		side("python"),
		side("node"),
		{v: variant{Key: "sqlite-soniq", Label: "Soniq 0.1.0 worker on SQLite, 1 process × concurrency 1", Kind: "soniq"},
			procs: 1, per: 1, n: c.sqliteSoniqN},
		{v: variant{Key: "sqlite-soniq-budget", Label: fmt.Sprintf("Soniq 0.1.0 worker on SQLite, %d processes × concurrency %d (the bench's budget)", c.procs, per), Kind: "soniq"},
			procs: c.procs, per: per, n: c.sqliteSoniqBudgetN, once: true},
	}
}

func (b *bench) sqliteSection(ctx context.Context) error {
	c := b.c
	rep := &sqliteReport{Settings: b.sqliteSettings(ctx), WindowS: c.sqliteWindow.Seconds(), PollS: sqlitePoll.Seconds()}
	b.rep.SQLite = rep
	soniqMissing := b.soniqSQLiteMissing(ctx)
	var active []*sqliteResult
	vars := map[string]sqliteVariant{}
	for _, sv := range b.sqliteVariants() {
		if !c.want(sv.v.Key) {
			continue
		}
		r := &sqliteResult{tpResult: tpResult{variant: sv.v, N: sv.n}, Processes: sv.procs, Concurrency: sv.per}
		if sv.v.Kind == "soniq" {
			r.Status = soniqMissing
		}
		rep.Throughput = append(rep.Throughput, r)
		vars[sv.v.Key] = sv
		if r.Status == "" {
			active = append(active, r)
		}
	}
	var roundTime time.Duration
	for round := range c.runs {
		if round > 0 && c.remaining() < roundTime+2*time.Minute {
			b.rep.Notes = append(b.rep.Notes, fmt.Sprintf("sqlite: %d of %d rounds run; the next would have come near the %s bound", round, c.runs, c.budget))
			break
		}
		t0 := time.Now()
		for i := range active {
			r := active[(i+round)%len(active)]
			sv := vars[r.Key]
			if sv.once && round > 0 {
				continue
			}
			run, err := b.sqliteRun(ctx, sv, fmt.Sprintf("sqlite-%s-%d", r.Key, round))
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err != nil {
				run.Error = err.Error()
				logf("sqlite %s round %d: %v", r.Key, round+1, err)
			} else {
				logf("sqlite %s round %d: %.0f jobs/s (%.2fs, %.2f claims per job)", r.Key, round+1, run.JobsPerS, run.Seconds, run.ClaimsPerJob)
			}
			run.Round = round + 1
			r.Runs = append(r.Runs, run)
		}
		roundTime = time.Since(t0)
	}
	for _, r := range active {
		r.summarise()
	}

	// The curve: the sidecar (Python SDK) and Soniq's worker in the one
	// setting that runs each job once.
	for _, d := range c.sqliteDepths {
		for _, key := range []string{"sqlite-python-stdio", "sqlite-soniq"} {
			sv, ok := vars[key]
			if !ok || (sv.v.Kind == "soniq" && soniqMissing != "") {
				continue
			}
			if c.remaining() < c.sqliteWindow+30*time.Second {
				b.rep.Notes = append(b.rep.Notes, fmt.Sprintf("sqlite: %s at %d queued not measured: the %s bound was near", sv.v.Label, d, c.budget))
				continue
			}
			p, err := b.sqliteDepthRun(ctx, sv, d)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err != nil {
				p.Error = err.Error()
				logf("sqlite depth %d %s: %v", d, key, err)
			} else {
				logf("sqlite depth %d %s: %.0f jobs/s over the first %d (filled in %.2fs)", d, key, p.JobsPerS, p.Drained, p.FillSeconds)
			}
			rep.Depth = append(rep.Depth, p)
		}
	}
	return nil
}

func (r *sqliteResult) summarise() {
	r.tpResult.Runs = r.tpResult.Runs[:0]
	var claims []float64
	for _, run := range r.Runs {
		r.tpResult.Runs = append(r.tpResult.Runs, run.tpRun)
		if run.Error == "" {
			claims = append(claims, run.ClaimsPerJob)
		}
	}
	r.tpResult.summarise(r.N)
	if len(claims) > 0 {
		r.ClaimsPerJob = median(claims)
	}
}

// soniqSQLiteMissing says why Soniq's worker cannot run on SQLite here,
// or "": its SQLite backend needs the aiosqlite extra.
func (b *bench) soniqSQLiteMissing(ctx context.Context) string {
	c := b.c
	if c.soniqSQLite == "" {
		return "not measured: no Soniq with its sqlite extra (-soniq-sqlite)"
	}
	py := filepath.Join(filepath.Dir(c.soniqSQLite), "python")
	if out, err := exec.CommandContext(ctx, py, "-c", "import aiosqlite").CombinedOutput(); err != nil {
		return "not measured: aiosqlite is not importable next to -soniq-sqlite (" + lastLine(string(out)) + ")"
	}
	return ""
}

// sqliteSettings records what decides SQLite's write cost on each side.
// synchronous is read, not assumed: neither side sets it, so it is each
// library's default once the connection is in WAL mode.
func (b *bench) sqliteSettings(ctx context.Context) map[string]string {
	c := b.c
	levels := map[string]string{"0": "OFF", "1": "NORMAL", "2": "FULL", "3": "EXTRA"}
	level := func(v string) string {
		if l, ok := levels[v]; ok {
			return l
		}
		return "unknown"
	}
	dir, err := os.MkdirTemp(c.work, "sqlite-settings-")
	if err != nil {
		return nil
	}
	defer os.RemoveAll(dir)

	sideSync, sideVersion := "unknown", "unknown"
	if db, err := sql.Open("sqlite", filepath.Join(dir, "sidecar.db")+"?_pragma=journal_mode(WAL)"); err == nil {
		var v string
		if db.QueryRowContext(ctx, `PRAGMA synchronous`).Scan(&v) == nil {
			sideSync = level(v)
		}
		if db.QueryRowContext(ctx, `SELECT sqlite_version()`).Scan(&v) == nil {
			sideVersion = v
		}
		_ = db.Close()
	}
	m := map[string]string{
		"sidecar": "journal_mode=WAL, synchronous=" + sideSync + " (not set: the library's default), busy_timeout=5000 ms; one write connection " +
			"(BEGIN IMMEDIATE; a claim of up to the free slots, and a completion batch of up to 500 rows, per transaction) and 4 read connections",
		"sidecar_sqlite": sideVersion + " (modernc.org/sqlite, in the Go binary)",
		"filesystem":     fsType(c.work),
	}
	if c.soniqSQLite != "" {
		// Soniq's own backend opens the connection, as its worker does.
		py := filepath.Join(filepath.Dir(c.soniqSQLite), "python")
		out := output("", py, "-c", `import asyncio, sqlite3, sys, importlib.metadata as m
from soniq.backends.sqlite import SQLiteBackend
async def main():
    b = SQLiteBackend(sys.argv[1])
    await b.initialize()
    async with b._conn.execute("PRAGMA synchronous") as cur:
        sync = (await cur.fetchone())[0]
    await b.close()
    print(sync, sqlite3.sqlite_version, m.version("aiosqlite"))
asyncio.run(main())`, filepath.Join(dir, "soniq.db"))
		if f := strings.Fields(out); len(f) == 3 {
			m["soniq"] = "journal_mode=WAL, synchronous=" + level(f[0]) + " (not set: the library's default), busy_timeout=5000 ms; one aiosqlite connection per worker process, " +
				"a claim (SELECT … LIMIT 1, then UPDATE by id) and a completion per commit"
			m["soniq_sqlite"] = f[1] + " (Python's sqlite3), aiosqlite " + f[2]
		}
	}
	return m
}

// fsType names the filesystem holding dir (fsync's cost depends on it).
func fsType(dir string) string {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return "unknown"
	}
	names := map[int64]string{0xEF53: "ext4", 0x01021994: "tmpfs", 0x794c7630: "overlayfs", 0x9123683E: "btrfs", 0x58465342: "xfs", 0x2FC12FC1: "zfs"}
	if n, ok := names[int64(st.Type)]; ok {
		return n
	}
	return fmt.Sprintf("0x%x", st.Type)
}

// startSQLite starts a variant on the SQLite file at path and waits until
// it is idle: the sidecar's handlers said hello, the Soniq workers
// registered their rows.
func (b *bench) startSQLite(ctx context.Context, sv sqliteVariant, path, tag string) (*workers, error) {
	c := b.c
	ws := &workers{v: sv.v}
	poll := fmt.Sprintf("SONIQ_POLL_INTERVAL=%g", sqlitePoll.Seconds())
	switch sv.v.Kind {
	case "sidecar":
		m, err := b.writeManifestSized(sv.v, tag, sv.procs, sv.per)
		if err != nil {
			return nil, err
		}
		argv := []string{c.sidecar, "run", "--manifest", m, "--metrics-addr=", "--log-format", "json", "--database-url", "sqlite:" + path}
		w, err := b.c.group.Start(argv, b.sidecarEnv([]string{poll}), c.work, filepath.Join(c.work, tag+".log"))
		if err != nil {
			return nil, err
		}
		ws.procs = append(ws.procs, w)
		if err := proc.WaitLog(ctx, w, `"handler process ready"`, sv.procs, 60*time.Second); err != nil {
			ws.stop()
			return nil, err
		}
	case "soniq":
		// The bench's job module builds Soniq(database_url=…): a path
		// ending in .db selects Soniq's SQLite backend.
		env := b.sidecarEnv([]string{"SONIQ_DATABASE_URL=" + path, poll, "PYTHONPATH=" + filepath.Join(c.root, "bench", "handlers")})
		for i := range sv.procs {
			argv := []string{c.soniqSQLite, "worker", "--concurrency", fmt.Sprint(sv.per), "--jobs-modules", "soniq_bench_jobs", "--log-level", "WARNING"}
			w, err := b.c.group.Start(argv, env, filepath.Join(c.root, "bench", "handlers"), filepath.Join(c.work, fmt.Sprintf("%s-%d.log", tag, i)))
			if err != nil {
				ws.stop()
				return nil, err
			}
			ws.procs = append(ws.procs, w)
		}
		if err := waitSQLiteWorkers(ctx, path, ws.procs, 60*time.Second); err != nil {
			ws.stop()
			return nil, err
		}
	default:
		return nil, fmt.Errorf("cannot start %s on SQLite", sv.v.Kind)
	}
	return ws, nil
}

// sqliteFile is the driver's own connection to a run's file.
type sqliteFile struct{ db *sql.DB }

func openSQLiteFile(path string) (*sqliteFile, error) {
	// The workers made the file (WAL); the driver writes in IMMEDIATE
	// transactions and waits for their write lock as they do.
	db, err := sql.Open("sqlite", path+"?_txlock=immediate&_pragma=busy_timeout(30000)")
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	return &sqliteFile{db: db}, nil
}

func (f *sqliteFile) close() { _ = f.db.Close() }

// fill writes n queued no-op jobs in one statement and transaction, with
// the columns Soniq's create_job writes: a version-4 UUID, created_at a
// microsecond apart in insertion order, in Soniq's timestamp format.
func (f *sqliteFile) fill(ctx context.Context, n int) error {
	base := time.Now().Unix()
	_, err := f.db.ExecContext(ctx, `WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i + 1 < ?1),
	t(i, ts) AS (SELECT i, strftime('%Y-%m-%dT%H:%M:%S', ?2 + i / 1000000, 'unixepoch') ||
		CASE WHEN i % 1000000 = 0 THEN '' ELSE printf('.%06d', i % 1000000) END || '+00:00' FROM s)
	INSERT INTO soniq_jobs
	(id, job_name, args, status, attempts, max_attempts, priority, queue, unique_job, created_at, updated_at)
	SELECT lower(hex(randomblob(4))) || '-' || lower(hex(randomblob(2))) || '-4' || substr(lower(hex(randomblob(2))), 2) || '-' ||
		substr('89ab', 1 + abs(random()) % 4, 1) || substr(lower(hex(randomblob(2))), 2) || '-' || lower(hex(randomblob(6))),
		'bench.noop', '{}', 'queued', 0, 3, 100, 'default', 0, ts, ts
	FROM t`, n, base)
	if err != nil {
		return fmt.Errorf("fill: %w", err)
	}
	return nil
}

// waitDrained polls until no job is queued or processing (through the
// (queue, status) index both schemas have).
func (f *sqliteFile) waitDrained(ctx context.Context, ws *workers, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var open bool
		if err := f.db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM soniq_jobs
		WHERE queue = 'default' AND status IN ('queued', 'processing'))`).Scan(&open); err != nil {
			return err
		}
		if !open {
			return nil
		}
		if err := ws.exitedErr(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("jobs still open after %s", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// exitedErr reports a started process that is gone.
func (ws *workers) exitedErr() error {
	for _, w := range ws.procs {
		if w.Exited() {
			return fmt.Errorf("pid %d exited during the run (%v); log tail:\n%s", w.PID, w.Err(), proc.Tail(w.Log, 3000))
		}
	}
	return nil
}

// doneCount counts the done rows (through the (queue, status) index).
func (f *sqliteFile) doneCount(ctx context.Context) (int, error) {
	var n int
	err := f.db.QueryRowContext(ctx, `SELECT count(*) FROM soniq_jobs WHERE queue = 'default' AND status = 'done'`).Scan(&n)
	return n, err
}

// done returns the completion times of the done rows in order, and their
// attempts counters: the claims per job and the rows claimed more than once.
func (f *sqliteFile) done(ctx context.Context) (times []time.Time, claims float64, repeated int, err error) {
	rows, err := f.db.QueryContext(ctx, `SELECT updated_at, COALESCE(attempts, 0) FROM soniq_jobs WHERE queue = 'default' AND status = 'done'`)
	if err != nil {
		return nil, 0, 0, err
	}
	defer rows.Close()
	total := 0
	for rows.Next() {
		var s string
		var a int
		if err := rows.Scan(&s, &a); err != nil {
			return nil, 0, 0, err
		}
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return nil, 0, 0, fmt.Errorf("updated_at %q: %w", s, err)
		}
		times = append(times, t)
		total += a
		if a > 1 {
			repeated++
		}
	}
	if err := rows.Err(); err != nil {
		return nil, 0, 0, err
	}
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	if len(times) > 0 {
		claims = float64(total) / float64(len(times))
	}
	return times, claims, repeated, nil
}

// rateOver is the completion rate over the first k completions.
func rateOver(times []time.Time, k int) (float64, float64, error) {
	if k < 2 || len(times) < k {
		return 0, 0, fmt.Errorf("%d completions, need at least 2", min(k, len(times)))
	}
	span := times[k-1].Sub(times[0]).Seconds()
	if span <= 0 {
		return 0, 0, fmt.Errorf("the first %d completions share one timestamp", k)
	}
	return float64(k-1) / span, span, nil
}

// waitSQLiteWorkers waits until every Soniq worker registered its row in
// the file (which its first connection also creates).
func waitSQLiteWorkers(ctx context.Context, path string, ws []*proc.Proc, timeout time.Duration) error {
	pids := make([]string, len(ws))
	for i, w := range ws {
		pids[i] = fmt.Sprint(w.PID)
	}
	q := `SELECT count(*) FROM soniq_workers WHERE status = 'active' AND pid IN (` + strings.Join(pids, ",") + `)`
	return waitRegistered(ctx, ws, timeout, func() (int, error) {
		n := 0
		if _, err := os.Stat(path); err == nil {
			if f, err := openSQLiteFile(path); err == nil {
				// No such table until the worker made it: wait on.
				_ = f.db.QueryRowContext(ctx, q).Scan(&n)
				f.close()
			}
		}
		return n, nil
	})
}

// sqliteRun drains sv.n jobs from a new file.
func (b *bench) sqliteRun(ctx context.Context, sv sqliteVariant, tag string) (sqliteRun, error) {
	var run sqliteRun
	dir := filepath.Join(b.c.work, tag)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return run, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "soniq.db")
	ws, err := b.startSQLite(ctx, sv, path, tag)
	if err != nil {
		return run, err
	}
	defer ws.stop()
	f, err := openSQLiteFile(path)
	if err != nil {
		return run, err
	}
	defer f.close()
	own0, ch0 := ws.cpu() // idle, polling every sqlitePoll
	if err := f.fill(ctx, sv.n); err != nil {
		return run, err
	}
	timeout := min(max(b.c.remaining(), 2*time.Minute), 5*time.Minute)
	if sv.once {
		// Soniq's worker at the budget can leave rows processing after a
		// "database is locked" error (until its stale-worker recovery,
		// minutes later): what it did within a bound is the result.
		timeout = 5 * b.c.sqliteWindow
	}
	drainErr := f.waitDrained(ctx, ws, timeout)
	if drainErr != nil && ctx.Err() != nil {
		return run, drainErr
	}
	own1, ch1 := ws.cpu()
	if sv.v.Kind == "sidecar" {
		run.SidecarCPU, run.HandlerCPU = own1-own0, ch1-ch0
		run.PeakRSSKB = proc.StatusKB(ws.procs[0].PID, "VmHWM")
	} else {
		run.WorkerCPU = own1 - own0 + ch1 - ch0
	}
	ws.stop()
	for _, w := range ws.procs {
		run.Locked += proc.CountLines(w.Log, "database is locked")
	}
	times, claims, repeated, err := f.done(ctx)
	if err != nil {
		return run, err
	}
	run.ClaimsPerJob, run.Repeated = claims, repeated
	if drainErr != nil || len(times) != sv.n {
		var processing, queued int
		_ = f.db.QueryRowContext(ctx, `SELECT count(*) FILTER (WHERE status = 'processing'), count(*) FILTER (WHERE status = 'queued') FROM soniq_jobs`).Scan(&processing, &queued)
		why := ""
		if drainErr != nil {
			why = fmt.Sprintf(" (%s)", lastLine(drainErr.Error()))
		}
		return run, fmt.Errorf("%d of %d jobs done, %d left processing, %d queued%s; claims per done job %.2f; %d \"database is locked\" errors in the logs",
			len(times), sv.n, processing, queued, why, claims, run.Locked)
	}
	if run.JobsPerS, run.Seconds, err = rateOver(times, sv.n); err != nil {
		return run, err
	}
	return run, nil
}

// sqliteDepthRun fills a new file with depth jobs while the variant idles,
// then takes the rate over the first completions: up to -sqlite-drain of
// them, or as many as the -sqlite-window allows.
func (b *bench) sqliteDepthRun(ctx context.Context, sv sqliteVariant, depth int) (sqlitePoint, error) {
	c := b.c
	p := sqlitePoint{Key: sv.v.Key, Label: sv.v.Label, Kind: sv.v.Kind, SDK: sv.v.SDK, Queued: depth, Target: min(depth, c.sqliteDrain)}
	tag := fmt.Sprintf("sqlite-depth-%s-%d", sv.v.Key, depth)
	dir := filepath.Join(c.work, tag)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return p, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "soniq.db")
	ws, err := b.startSQLite(ctx, sv, path, tag)
	if err != nil {
		return p, err
	}
	defer ws.stop()
	f, err := openSQLiteFile(path)
	if err != nil {
		return p, err
	}
	defer f.close()
	t := time.Now()
	if err := f.fill(ctx, depth); err != nil {
		return p, err
	}
	p.FillSeconds = time.Since(t).Seconds()
	// The window starts at the commit and covers the first poll.
	deadline := time.Now().Add(c.sqliteWindow + sqlitePoll)
	for {
		n, err := f.doneCount(ctx)
		if err != nil {
			return p, err
		}
		if n >= p.Target {
			break
		}
		if time.Now().After(deadline) {
			p.Capped = true
			break
		}
		if err := ws.exitedErr(); err != nil {
			return p, err
		}
		select {
		case <-ctx.Done():
			return p, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	ws.stop()
	times, _, _, err := f.done(ctx)
	if err != nil {
		return p, err
	}
	p.Drained = min(len(times), p.Target)
	if p.JobsPerS, _, err = rateOver(times, p.Drained); err != nil {
		return p, err
	}
	return p, nil
}

// writeSQLite is section 7 of the report.
func (r *report) writeSQLite(w func(string, ...any)) {
	sq := r.SQLite
	if sq == nil {
		return
	}
	w("## 7. The embedded SQLite default beside Soniq's worker on SQLite\n\n")
	soniq := &sqliteResult{}
	for _, t := range sq.Throughput {
		if t.Key == "sqlite-soniq" {
			soniq = t
		}
	}
	w("| variant | processes × concurrency | jobs per run | jobs/s (median) | runs (jobs/s) | × Soniq 1 × 1 | claims per job | sidecar CPU | handlers CPU | Soniq worker CPU | sidecar peak RSS |\n")
	w("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, t := range sq.Throughput {
		if t.Status != "" {
			w("| %s | %d × %d | %d | %s | | | | | | | |\n", t.Label, t.Processes, t.Concurrency, t.N, t.Status)
			continue
		}
		runs := roundsCell(t.Runs, func(run sqliteRun) (string, string) { return f0(run.JobsPerS), run.Error })
		ratio, rss := "—", "—"
		if ok(soniq.Median) && t.Key != soniq.Key {
			ratio = fmt.Sprintf("%.1f×", t.Median/soniq.Median)
		}
		if ok(t.PeakRSSMB) {
			rss = fmt.Sprintf("%.1f MiB", t.PeakRSSMB)
		}
		w("| %s | %d × %d | %d | **%s** | %s | %s | %.2f | %s | %s | %s | %s |\n", t.Label, t.Processes, t.Concurrency, t.N, f0(t.Median),
			runs, ratio, t.ClaimsPerJob, f2(t.SidecarCPU10k), f2(t.HandlerCPU10k), f2(t.WorkerCPU10k), rss)
	}
	w("\nCPU in CPU-seconds per 10,000 jobs (medians over the runs); on SQLite the database work is inside the sidecar's and Soniq's processes.\n\n")
	for _, t := range sq.Throughput {
		for _, run := range t.Runs {
			if run.Error != "" {
				w("- %s, run %d: %s\n", t.Label, run.Round, lastLine(run.Error))
			} else if run.Locked > 0 {
				w("- %s, run %d: %d \"database is locked\" errors in the workers' logs\n", t.Label, run.Round, run.Locked)
			}
		}
	}
	w("\n")
	if len(sq.Depth) > 0 {
		w("Drain rate as the queue grows (rate over the first completions, at most -sqlite-drain of them within a %gs window from the commit):\n\n", sq.WindowS)
		w("| queued | variant | fill (s) | completions | jobs/s |\n| --- | --- | --- | --- | --- |\n")
		for _, p := range sq.Depth {
			if p.Error != "" {
				w("| %d | %s | | | failed: %s |\n", p.Queued, p.Label, lastLine(p.Error))
				continue
			}
			capped := ""
			if p.Capped {
				capped = " (window ended)"
			}
			w("| %d | %s | %.2f | %d of %d%s | **%s** |\n", p.Queued, p.Label, p.FillSeconds, p.Drained, p.Target, capped, f0(p.JobsPerS))
		}
		w("\n")
	}
	if len(sq.Settings) > 0 {
		w("What bounds the writes (neither side's settings are changed by the bench):\n\n")
		for _, k := range []string{"sidecar", "soniq", "sidecar_sqlite", "soniq_sqlite", "filesystem"} {
			if v := sq.Settings[k]; v != "" {
				w("- %s: %s\n", strings.ReplaceAll(k, "_", " "), v)
			}
		}
		w("\n")
	}
}
