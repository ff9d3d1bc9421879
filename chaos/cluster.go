package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/soniq-dev/soniq-sidecar/internal/netfault"
	"github.com/soniq-dev/soniq-sidecar/internal/proc"
)

// The system under test: a throw-away Postgres, a PgBouncer in transaction
// mode in front of it, and three sidecars of the real binary on one queue:
//
//   - py: straight to Postgres, spawning Python handlers over stdio;
//   - node: through PgBouncer, spawning Node handlers over stdio;
//   - attach: straight to Postgres, attached to a Python handler that the
//     driver runs on its own with --listen, as the worker container of a
//     pod (deploy/kubernetes/attach.yaml).

// recorder keeps what the run observes about its processes and faults.
type recorder struct {
	mu       sync.Mutex
	start    time.Time
	faults   []Fault
	incs     []*incarnation
	problems []string
	cancels  []Cancel // the cancel fault's commands (cancel.go)
	log      *os.File // faults.jsonl
}

func (r *recorder) logf(format string, args ...any) {
	now := time.Now()
	fmt.Fprintf(os.Stderr, "%s +%6.1fs chaos: %s\n", now.Format("15:04:05.000"), now.Sub(r.start).Seconds(), fmt.Sprintf(format, args...))
}

// fault records an injected fault (and logs it with its timestamp).
func (r *recorder) fault(f Fault) {
	r.mu.Lock()
	r.faults = append(r.faults, f)
	if b, err := json.Marshal(f); err == nil {
		_, _ = r.log.Write(append(b, '\n'))
	}
	r.mu.Unlock()
	r.logf("fault: %s", f)
}

// problem records something a sidecar did wrong that the harness saw itself.
func (r *recorder) problem(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.mu.Lock()
	r.problems = append(r.problems, time.Now().Format("15:04:05.000")+" "+msg)
	r.mu.Unlock()
	r.logf("PROBLEM: %s", msg)
}

// incarnation is one process of a sidecar.
type incarnation struct {
	Incarnation
	p *proc.Proc
	// expected: the driver signalled it to end (its exit is no surprise).
	expected bool
}

type cluster struct {
	cfg   *config
	group *proc.Group
	rec   *recorder

	pgDir, pgbDir string
	dbURL, pgbURL string

	sidecars []*sidecar
	handler  *attachHandler // the attach sidecar's handler
}

// script runs one of the repository's .ci scripts and returns its stdout.
// The server keeps every acknowledged commit through an immediate stop:
// the producer's rows and the sidecars' writes must survive the restarts
// the nemesis makes, or the checker would blame the sidecars for what the
// server dropped.
func (c *cluster) script(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.cfg.root, ".ci", name), args...)
	// A port fixed for the test server of make test must not be reused here.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PGPORT_TEST=") && !strings.HasPrefix(kv, "PGBOUNCER_PORT=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "PG_SYNCHRONOUS_COMMIT=on")
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf(".ci/%s %s: %w\n%s", name, strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

var exportRE = regexp.MustCompile(`export [A-Z_]+='([^']+)'`)

func exported(out string) (string, error) {
	m := exportRE.FindStringSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("no export line in %q", out)
	}
	return m[1], nil
}

// startDatabase starts Postgres (a few tries: its port is drawn at random
// and may be taken), sets the schema up with the sidecar's migrate, and
// starts PgBouncer in front of it.
func (c *cluster) startDatabase(ctx context.Context) error {
	c.pgDir, c.pgbDir = filepath.Join(c.cfg.work, "pg"), filepath.Join(c.cfg.work, "pgbouncer")
	var err error
	for range 3 {
		var out string
		if out, err = c.script(ctx, "pg.sh", "start", c.pgDir); err == nil {
			c.dbURL, err = exported(out)
			break
		}
		_, _ = c.script(ctx, "pg.sh", "stop", c.pgDir)
	}
	if err != nil {
		return err
	}
	mig := exec.CommandContext(ctx, c.cfg.sidecarBin, "migrate", "--database-url", c.dbURL)
	if out, err := mig.CombinedOutput(); err != nil {
		return fmt.Errorf("soniq-sidecar migrate: %w\n%s", err, out)
	}
	pool, err := pgxpool.New(ctx, c.dbURL)
	if err != nil {
		return fmt.Errorf("installing the heartbeat record: %w", err)
	}
	err = installBeats(ctx, pool)
	pool.Close()
	if err != nil {
		return err
	}
	for range 3 {
		var out string
		if out, err = c.script(ctx, "pgbouncer.sh", "start", c.pgbDir, c.dbURL); err == nil {
			c.pgbURL, err = exported(out)
			break
		}
		_, _ = c.script(ctx, "pgbouncer.sh", "stop", c.pgbDir)
	}
	return err
}

func (c *cluster) stopDatabase() {
	ctx := context.Background()
	if _, err := c.script(ctx, "pgbouncer.sh", "stop", c.pgbDir); err != nil {
		c.rec.logf("stopping pgbouncer: %v", err)
	}
	if _, err := c.script(ctx, "pg.sh", "stop", c.pgDir); err != nil {
		c.rec.logf("stopping postgres: %v", err)
	}
}

// pgbouncerPID is the pid of this cluster's PgBouncer, from its pid file,
// or 0 when none runs. The file outlives a killed PgBouncer and pids come
// round again within minutes while make test starts thousands of processes
// (pid_max is often 32768): a pid whose command line does not name this
// cluster's configuration is another process, never signalled. (A run of
// make test lost the PgBouncer every other test shared.)
func (c *cluster) pgbouncerPID() int {
	b, err := os.ReadFile(filepath.Join(c.pgbDir, "pgbouncer.pid"))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !strings.Contains(string(cmd), filepath.Join(c.pgbDir, "pgbouncer.ini")) {
		return 0
	}
	return pid
}

func (c *cluster) historyPath(name string) string {
	return filepath.Join(c.cfg.work, "history-"+name+".log")
}

// baseEnv is the environment every process gets: PATH and HOME, nothing
// else of the driver's (no SONIQ_* setting leaks in).
func baseEnv() []string {
	return []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
}

// ---- the attached handler ----

// attachHandler is the handler process the attach sidecar attaches to: it
// runs on its own, as a pod's worker container would.
type attachHandler struct {
	c    *cluster
	sock string
	mu   sync.Mutex
	p    *proc.Proc
	n    int
}

func (h *attachHandler) start(ctx context.Context) error {
	h.mu.Lock()
	h.n++
	n := h.n
	h.mu.Unlock()
	_ = os.Remove(h.sock) // a killed handler leaves its socket file
	c := h.c
	env := append(baseEnv(),
		"PYTHONPATH="+filepath.Join(c.cfg.root, "sdk", "python"),
		"CHAOS_HISTORY="+c.historyPath("attach"), "CHAOS_SIDECAR=attach",
		"CHAOS_CONCURRENCY=8", "CHAOS_SYNC_CONCURRENCY=4")
	argv := []string{c.cfg.python, "-u", filepath.Join(c.cfg.root, "chaos", "handlers", "chaos_handler.py"), "--listen", h.sock}
	p, err := c.group.Start(argv, env, c.cfg.work, filepath.Join(c.cfg.work, fmt.Sprintf("attach-handler.%d.log", n)))
	if err != nil {
		return err
	}
	h.mu.Lock()
	h.p = p
	h.mu.Unlock()
	if err := proc.WaitLog(ctx, p, "listening on", 1, 30*time.Second); err != nil {
		return fmt.Errorf("attached handler: %w", err)
	}
	c.rec.logf("attached handler started: pid %d", p.PID)
	return nil
}

func (h *attachHandler) current() *proc.Proc {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.p
}

// ---- sidecars ----

type sidecar struct {
	c        *cluster
	name     string // py, node, attach
	url      string // the database it is configured for (Postgres or PgBouncer)
	connect  string // what it connects to: its fault proxy in front of url
	proxy    *netfault.Proxy
	manifest string
	ready    int // "handler process ready" lines that say it is ready
	mu       sync.Mutex
	cur      *incarnation
	n        int
}

func (c *cluster) newSidecars() error {
	jobs := "    jobs:\n" +
		"      - {name: " + jobAsync + ", cancellable: true}\n" +
		"      - {name: " + jobFailAsync + ", cancellable: true}\n" +
		"      - {name: " + jobSync + ", cancellable: false, " + limitManifest() + "}\n" +
		"      - {name: " + jobFailSync + ", cancellable: false}\n"
	q := strconv.Quote
	env := func(name string, kv ...string) string {
		kv = append(kv, "CHAOS_HISTORY", c.historyPath(name), "CHAOS_SIDECAR", name,
			"CHAOS_CONCURRENCY", "8", "CHAOS_SYNC_CONCURRENCY", "4", "PATH", os.Getenv("PATH"))
		s := "    env:\n"
		for i := 0; i < len(kv); i += 2 {
			s += fmt.Sprintf("      %s: %s\n", kv[i], q(kv[i+1]))
		}
		return s
	}
	handlers := filepath.Join(c.cfg.root, "chaos", "handlers")
	manifests := map[string]string{
		"py": "version: 1\nhandlers:\n  - name: chaos-py\n" +
			fmt.Sprintf("    command: [%s, \"-u\", %s]\n", q(c.cfg.python), q(filepath.Join(handlers, "chaos_handler.py"))) +
			"    processes: 2\n    concurrency: 8\n    sync_concurrency: 4\n    startup_timeout: 30s\n" +
			env("py", "PYTHONPATH", filepath.Join(c.cfg.root, "sdk", "python")) + jobs,
		"node": "version: 1\nhandlers:\n  - name: chaos-node\n" +
			fmt.Sprintf("    command: [%s, %s]\n", q(c.cfg.node), q(filepath.Join(handlers, "chaos_handler.js"))) +
			"    processes: 2\n    concurrency: 8\n    sync_concurrency: 4\n    startup_timeout: 30s\n" +
			env("node", "CHAOS_NODE_SDK", filepath.Join(c.cfg.root, "sdk", "node", "index.js")) + jobs,
		"attach": "version: 1\nhandlers:\n  - name: chaos-attach\n" +
			fmt.Sprintf("    attach: %s\n", q(c.handler.sock)) +
			"    concurrency: 8\n    sync_concurrency: 4\n    startup_timeout: 30s\n" + jobs,
	}
	for _, name := range sidecarNames() {
		path := filepath.Join(c.cfg.work, "manifest-"+name+".yaml")
		if err := os.WriteFile(path, []byte(manifests[name]), 0o644); err != nil {
			return fmt.Errorf("manifest: %w", err)
		}
		s := &sidecar{c: c, name: name, url: c.dbURL, manifest: path, ready: 2}
		switch name {
		case "node":
			s.url = c.pgbURL
		case "attach":
			s.ready = 1
		}
		var err error
		if s.connect, err = s.proxyURL(); err != nil {
			return err
		}
		c.sidecars = append(c.sidecars, s)
	}
	return nil
}

// env is the sidecar's environment: short heartbeats and recovery (no
// Soniq worker shares this database), a short shutdown_timeout so that
// SIGTERM NACKs some async jobs, and done rows kept for the checker.
func (s *sidecar) env() []string {
	cfg := s.c.cfg
	secs := func(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) }
	env := baseEnv()
	if s.url == s.c.pgbURL {
		// As docs/operations.md says for a transaction-mode pooler: no
		// session state, LISTEN straight to Postgres.
		env = append(env, "SONIQ_DATABASE_POOLER=transaction", "SONIQ_DATABASE_LISTEN_URL="+s.c.dbURL)
	}
	return append(env,
		"SONIQ_DATABASE_URL="+s.connect,
		"SONIQ_QUEUES="+queueName,
		"SONIQ_POLL_INTERVAL=0.5",
		"SONIQ_HEARTBEAT_INTERVAL="+secs(cfg.hbInterval),
		"SONIQ_HEARTBEAT_TIMEOUT="+secs(cfg.hbTimeout),
		"SONIQ_ALLOW_SHORT_HEARTBEAT_TIMEOUT=true",
		"SONIQ_CLEANUP_INTERVAL=1",
		// Short, so an orphaned row is given back (and reported below)
		// well within the drain.
		"SONIQ_AUDIT_INTERVAL=5",
		"SONIQ_SHUTDOWN_TIMEOUT="+secs(cfg.shutdownTimeout),
		"SONIQ_SYNC_HANDLER_GRACE_SECONDS=10",
		"SONIQ_JOB_TIMEOUT=30",
		"SONIQ_RESULT_TTL=86400",
		"SONIQ_DATABASE_WAIT=120",
	)
}

// start runs a new process of the sidecar and waits until its handlers are
// ready (a sidecar that is not ready within a minute is a problem; it keeps
// running).
func (s *sidecar) start(ctx context.Context) error {
	s.mu.Lock()
	s.n++
	n := s.n
	s.mu.Unlock()
	log := filepath.Join(s.c.cfg.work, fmt.Sprintf("sidecar-%s.%d.log", s.name, n))
	argv := []string{s.c.cfg.sidecarBin, "run", "--manifest", s.manifest, "--instance", "chaos-" + s.name,
		"--log-format", "json", "--metrics-addr", ""}
	p, err := s.c.group.Start(argv, s.env(), s.c.cfg.work, log)
	if err != nil {
		return err
	}
	path := "direct"
	if s.url == s.c.pgbURL {
		path = "pgbouncer"
	}
	in := &incarnation{Incarnation: Incarnation{Sidecar: s.name, PID: p.PID, Start: time.Now(), Log: log, DBPath: path}, p: p}
	s.c.rec.mu.Lock()
	s.c.rec.incs = append(s.c.rec.incs, in)
	s.c.rec.mu.Unlock()
	s.mu.Lock()
	s.cur = in
	s.mu.Unlock()
	if err := proc.WaitLog(ctx, p, `"handler process ready"`, s.ready, time.Minute); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.c.rec.problem("sidecar %s pid %d not ready: %v; its last log line: %s", s.name, p.PID, strings.TrimSuffix(firstLine(err.Error()), "; log tail:"), lastLine(proc.Tail(log, 4000)))
		return nil
	}
	s.c.rec.logf("sidecar %s started: pid %d (%s)", s.name, p.PID, filepath.Base(log))
	return nil
}

// lastLine is the last non-empty line of text.
func lastLine(text string) string {
	lines := strings.Split(strings.TrimSpace(text), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

func (s *sidecar) current() *incarnation {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

// kill SIGKILLs the current process and waits for its exit.
func (s *sidecar) kill(detail string) {
	in := s.current()
	s.mu.Lock()
	in.expected = true
	s.mu.Unlock()
	s.c.rec.fault(Fault{At: time.Now(), Kind: faultSidecarKill, Target: s.name, PID: in.PID, Detail: detail})
	_ = in.p.Signal(syscall.SIGKILL)
	if !in.p.Wait(10 * time.Second) {
		s.c.rec.problem("sidecar %s pid %d still running 10 s after SIGKILL", s.name, in.PID)
	}
}

// terminate sends SIGTERM and waits for a graceful exit with status 0
// within bound; a sidecar that does not exit is SIGKILLed (and that is a
// problem). fault says whether the SIGTERM is a fault of the run (or the
// final stop).
func (s *sidecar) terminate(bound time.Duration, fault bool) {
	in := s.current()
	if in == nil || in.p.Exited() {
		return
	}
	s.mu.Lock()
	in.expected = true
	in.TermAt = time.Now()
	s.mu.Unlock()
	if fault {
		s.c.rec.fault(Fault{At: in.TermAt, Kind: faultSidecarTerm, Target: s.name, PID: in.PID})
	}
	_ = in.p.Signal(syscall.SIGTERM)
	if !in.p.Wait(bound) {
		s.c.rec.problem("sidecar %s pid %d did not exit within %s of SIGTERM (log %s)", s.name, in.PID, bound, in.Log)
		s.kill("SIGTERM not obeyed")
		return
	}
	if code := in.p.ExitCode(); code != 0 {
		s.c.rec.problem("sidecar %s pid %d exited with status %d after SIGTERM (log %s)", s.name, in.PID, code, in.Log)
	} else {
		s.c.rec.logf("sidecar %s pid %d exited 0, %s after SIGTERM", s.name, in.PID, in.p.ExitedAt().Sub(in.TermAt).Round(time.Millisecond))
	}
}

// handlerPIDs are the sidecar's handler processes: its children for a
// spawning sidecar, the attached handler for the attach one.
func (s *sidecar) handlerPIDs() []int {
	if s.name == "attach" {
		if p := s.c.handler.current(); p != nil && !p.Exited() {
			return []int{p.PID}
		}
		return nil
	}
	in := s.current()
	if in == nil || in.p.Exited() {
		return nil
	}
	kids := proc.Children(in.PID)
	sort.Ints(kids)
	return kids
}
