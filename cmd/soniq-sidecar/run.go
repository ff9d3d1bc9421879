package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/oklog/run"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/backends/connect"
	"github.com/soniq-dev/soniq-sidecar/internal/config"
	"github.com/soniq-dev/soniq-sidecar/internal/loglimit"
	"github.com/soniq-dev/soniq-sidecar/supervisor"
)

// defaultManifest is the manifest `run` reads when none is named.
const defaultManifest = "manifest.yaml"

// newLogger builds the process logger: text on a terminal, JSON otherwise.
func newLogger(w io.Writer, format string) (*slog.Logger, error) {
	switch format {
	case "auto", "":
		format = "json"
		if f, ok := w.(*os.File); ok {
			if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
				format = "text"
			}
		}
	case "text", "json":
	default:
		return nil, usageErrorf("--log-format must be auto, text or json, got %q", format)
	}
	opts := &slog.HandlerOptions{Level: slog.LevelInfo, ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		// "1.5s", not 1500000000: logs are read by people at 3 a.m.
		if a.Value.Kind() == slog.KindDuration {
			return slog.String(a.Key, a.Value.Duration().String())
		}
		return a
	}}
	var h slog.Handler = slog.NewJSONHandler(w, opts)
	if format == "text" {
		h = slog.NewTextHandler(w, opts)
	}
	// A failure that repeats on every poll or beat (the database away for
	// minutes) is one line per window and a count, not hundreds of lines.
	return slog.New(loglimit.New(h, repeatWindow)), nil
}

// repeatWindow is how long an identical WARN or ERROR line is written
// only once; its repeats are counted on one line when the window ends.
const repeatWindow = 30 * time.Second

// flushLog writes the counts of repeated lines not yet reported.
func flushLog(log *slog.Logger) {
	if h, ok := log.Handler().(*loglimit.Handler); ok {
		_ = h.Flush(context.Background())
	}
}

// loadManifest loads a manifest; its errors are configuration errors (exit 2).
func loadManifest(path string) (*config.Manifest, error) {
	m, err := config.LoadManifest(path)
	if err != nil {
		return nil, usageError{err}
	}
	return m, nil
}

func cmdManifest(ctx context.Context, e env, args []string) error {
	if len(args) != 2 || args[0] != "check" {
		return usageErrorf("manifest: usage: soniq-sidecar manifest check FILE")
	}
	m, err := loadManifest(args[1])
	if err != nil {
		return err
	}
	log, _ := newLogger(e.stderr, "text")
	failed := 0
	for _, r := range supervisor.CheckHandlers(ctx, m, log) {
		if r.Err != nil {
			failed++
			fmt.Fprintf(e.stderr, "FAIL %v\n", r.Err) // the error names the handler
			continue
		}
		h := handlerByName(m, r.Handler)
		fmt.Fprintf(e.stdout, "ok   handler %s (%s, pid %d): %d jobs, hello matches the manifest\n", r.Handler, r.SDK, r.PID, len(h.Jobs))
	}
	if failed > 0 {
		return exitCodeError{code: exitUsage, msg: fmt.Sprintf("%s: %d of %d handlers failed the check", args[1], failed, len(m.Handlers))}
	}
	fmt.Fprintf(e.stdout, "%s: ok\n", args[1])
	return nil
}

func handlerByName(m *config.Manifest, name string) *config.Handler {
	for i := range m.Handlers {
		if m.Handlers[i].Name == name {
			return &m.Handlers[i]
		}
	}
	return &config.Handler{}
}

func cmdRun(ctx context.Context, e env, args []string) error {
	fs := newFlagSet(e, "run")
	manifestPath := fs.String("manifest", "", "manifest file (default $SONIQ_MANIFEST, else "+defaultManifest+" if it exists)")
	dbURL := fs.String("database-url", "", "database URL (default $SONIQ_DATABASE_URL, else sqlite:soniq.db)")
	overrides := config.RegisterFlags(fs) // every setting, flag > environment > manifest
	metricsAddr := fs.String("metrics-addr", ":9464", "HTTP address for /metrics, /healthz and /readyz (empty disables)")
	logFormat := fs.String("log-format", "auto", "auto (text on a terminal, else JSON), text or json")
	instance := fs.String("instance", "", "this sidecar's name among programs sharing its hostname and pid, e.g. two sidecars in one pod (default $SONIQ_INSTANCE, else "+supervisor.DefaultInstance+")")
	finalScrapeFlag := fs.String("metrics-final-scrape-wait", "", "after shutdown NACKs, hold the exit (at most this long, e.g. 20s) until /metrics has been scraped once more, so Prometheus sees them; only when something has scraped /metrics before (default $SONIQ_METRICS_FINAL_SCRAPE_WAIT seconds, else 0: off)")
	dbWaitFlag := fs.String("database-wait", "", "how long to retry an unreachable database at start, e.g. 60s (default $SONIQ_DATABASE_WAIT seconds, else 60s)")
	once := fs.Bool("once", false, "run the jobs that are due, then stop as on SIGTERM and exit 0 (for cron and CI)")
	pooler := fs.String("database-pooler", "", "session (default) or transaction: transaction when --database-url goes through a transaction-mode pooler such as PgBouncer (default $SONIQ_DATABASE_POOLER; see docs/operations.md)")
	listenURL := fs.String("listen-url", "", "optional postgres:// URL for the one LISTEN connection, straight to Postgres or a session-mode pool (default $SONIQ_DATABASE_LISTEN_URL)")
	deadLetterUnknown := fs.Bool("dead-letter-unknown", false, "dead-letter jobs whose name no handler serves (only for a sidecar that owns its queues)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErrorf("run: unexpected argument %q", pos[0])
	}
	if over := dbFlagEnv(*pooler, *listenURL); len(over) > 0 {
		e = withEnv(e, over)
	}
	if *manifestPath == "" {
		if v, ok := e.lookupEnv("SONIQ_MANIFEST"); ok && v != "" {
			*manifestPath = v
		} else if _, err := os.Stat(defaultManifest); err == nil {
			*manifestPath = defaultManifest
		} else {
			return usageErrorf("run: no manifest: give --manifest FILE, set SONIQ_MANIFEST, or put one at ./%s", defaultManifest)
		}
	}
	if *instance == "" {
		if v, ok := e.lookupEnv("SONIQ_INSTANCE"); ok {
			*instance = strings.TrimSpace(v)
		}
	}
	if *instance == "" {
		*instance = supervisor.DefaultInstance
	}
	if err := supervisor.CheckInstance(*instance); err != nil {
		return usageErrorf("--instance / SONIQ_INSTANCE: %v", err)
	}
	log, err := newLogger(e.stderr, *logFormat)
	if err != nil {
		return err
	}
	defer flushLog(log)
	m, err := loadManifest(*manifestPath)
	if err != nil {
		return err
	}
	settings, err := config.ResolveSettings(m, e.lookupEnv, *overrides)
	if err != nil {
		return usageError{err}
	}
	// A command that can never start is refused before the database is
	// created or a worker row registered.
	if err := supervisor.CheckCommands(m); err != nil {
		return usageError{err}
	}

	dbWait, err := databaseWait(e, *dbWaitFlag)
	if err != nil {
		return err
	}
	finalScrapeWait, err := secondsSetting(e, "metrics-final-scrape-wait", "SONIQ_METRICS_FINAL_SCRAPE_WAIT", *finalScrapeFlag, 0)
	if err != nil {
		return err
	}

	hs := &health{}
	hs.setWaiting("connecting to the database")
	workerID := backends.NewID()
	metrics, shutdownTelemetry, metricsHandler, err := setupTelemetry(ctx, e, withWorkerID(workerID), withLogger(log), withReadiness(hs.ready))
	if err != nil {
		return err
	}
	defer shutdownTelemetry()
	scrapes := newScrapeTracker()
	hs.metrics = scrapes.wrap(metricsHandler)

	// Three actors run together (oklog/run): the HTTP server, the signal
	// handler and the engine (the database, then the supervisor). The
	// first to return ends the others, and its error is run's. The HTTP
	// server comes up first: while the database is not reachable yet,
	// /healthz says alive and /readyz says why it is not ready.
	eng := &engine{}
	var g run.Group
	if *metricsAddr != "" {
		serve, stop, err := listenHTTP(*metricsAddr, healthHandler(hs), log)
		if err != nil {
			return err
		}
		g.Add(serve, func(error) { stop() })
	}
	// Signals: the first SIGTERM/SIGINT/SIGHUP starts DRAINING (or ends the
	// wait for the database), a second one during DRAINING forces
	// FORCE_TIMEOUT_PATH. SIGHUP drains like SIGTERM, as Soniq's worker
	// does: a closed terminal or a supervisor's reload must never drop a
	// running job. Cancelling cmdRun's own ctx (tests, embedding) counts as
	// one shutdown request.
	{
		sigs := make(chan os.Signal, 4)
		signal.Notify(sigs, shutdownSignals...)
		done := make(chan struct{})
		ctxDone := ctx.Done()
		g.Add(func() error {
			for {
				select {
				case s := <-sigs:
					log.Info("signal received", "signal", s.String(), "state", eng.state())
					eng.stop()
				case <-ctxDone:
					ctxDone = nil // once
					log.Info("run context cancelled", "state", eng.state())
					eng.stop()
				case <-done:
					return nil
				}
			}
		}, func(error) {
			signal.Stop(sigs)
			close(done)
		})
	}
	// The engine returns when the supervisor has stopped (nil after a
	// clean shutdown), or when the database never came.
	{
		waitCtx, cancelWait := context.WithCancel(context.WithoutCancel(ctx))
		defer cancelWait()
		eng.cancelWait = cancelWait
		g.Add(func() error {
			b, err := openWaiting(waitCtx, e, *dbURL, dbWait, log, hs)
			if errors.Is(err, errStoppedWaiting) {
				return nil
			}
			if err != nil {
				return err
			}
			defer b.Close()
			if err := checkPoolSize(b); err != nil {
				return err
			}
			sup, err := supervisor.New(supervisor.Config{
				Manifest: m, Settings: settings, Backend: b, Logger: log, Version: version, WorkerID: workerID, Instance: *instance,
				DeadLetterUnknown: *deadLetterUnknown, Metrics: metrics, Once: *once, Tracer: jobTracer(e),
			})
			if err != nil {
				return err
			}
			if !eng.start(sup) {
				log.Info("stopped before the supervisor started")
				return nil
			}
			hs.setRunning(sup, b)
			dbOpts := databaseOptions(e)
			log.Info("starting", "version", version, "database", connect.Redact(databaseURL(e, *dbURL)),
				"database_pooler", cmp.Or(dbOpts.Pooler, "session"), "listen_url", connect.Redact(dbOpts.ListenURL),
				"manifest", m.Path, "worker_id", sup.WorkerID(), "shutdown_timeout", settings.ShutdownTimeout,
				"sync_grace", settings.SyncHandlerGrace, "job_timeout", settings.JobTimeout, "state", supervisor.StateRunning.String())
			err = sup.Run(context.Background())
			if *metricsAddr != "" {
				// Before the HTTP server stops with the group: a NACK
				// counted just now must reach one more scrape.
				finalScrape(scrapes, metrics.LastShutdownNack(), finalScrapeWait, log)
			}
			var hm *supervisor.HelloMismatchError
			var se *supervisor.StartError
			if errors.As(err, &hm) || errors.As(err, &se) {
				return usageError{err}
			}
			return err
		}, func(error) {
			eng.stop()
		})
	}
	return g.Run()
}

// engine is what a shutdown request reaches: the wait for the database
// until the supervisor exists, the supervisor after.
type engine struct {
	mu         sync.Mutex
	sup        *supervisor.Supervisor
	stopped    bool
	cancelWait context.CancelFunc
}

// start hands the engine its supervisor; false if a stop came first.
func (e *engine) start(sup *supervisor.Supervisor) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped {
		return false
	}
	e.sup = sup
	return true
}

// stop is one shutdown request: it ends the wait for the database, or
// moves the supervisor along the shutdown contract (a second request
// during DRAINING forces FORCE_TIMEOUT_PATH).
func (e *engine) stop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.stopped = true
	if e.sup != nil {
		e.sup.Shutdown()
	} else if e.cancelWait != nil {
		e.cancelWait()
	}
}

func (e *engine) state() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.sup == nil {
		return "WAITING_FOR_DATABASE"
	}
	return e.sup.State().String()
}

// minPoolConns is the smallest connection pool `run` works with: the
// maintenance pass holds its leader lock on one connection while it works
// on another, so with one it waits for its own lock's connection, and every
// claim and heartbeat queues behind it until the write timeout.
const minPoolConns = 2

// checkPoolSize refuses a pool too small to run on, before anything is
// claimed. The one-shot commands (status, enqueue…) need only one.
func checkPoolSize(b backends.Backend) error {
	ps, ok := b.(backends.PoolStater)
	if !ok {
		return nil
	}
	if n := ps.PoolStats().Max; n < minPoolConns {
		return usageErrorf("database URL: pool_max_conns=%d is too small for run: the sidecar needs at least %d connections "+
			"(its maintenance pass holds one while it uses another); set pool_max_conns=%d or more (4 is plenty)", n, minPoolConns, minPoolConns)
	}
	return nil
}

// dbFlagEnv maps run's connection flags onto the variables they outrank.
func dbFlagEnv(pooler, listenURL string) map[string]string {
	over := map[string]string{}
	if pooler != "" {
		over["SONIQ_DATABASE_POOLER"] = pooler
	}
	if listenURL != "" {
		over["SONIQ_DATABASE_LISTEN_URL"] = listenURL
	}
	return over
}

// shutdownSignals start DRAINING (a second one forces FORCE_TIMEOUT_PATH).
var shutdownSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}

// defaultDatabaseWait is how long run waits for an unreachable database at
// start: long enough for a database that starts beside the sidecar (a pod,
// a compose file), short enough that a wrong address fails the deploy.
const defaultDatabaseWait = 60 * time.Second

// databaseWait resolves --database-wait, else $SONIQ_DATABASE_WAIT
// (seconds), else the default.
func databaseWait(e env, flagValue string) (time.Duration, error) {
	return secondsSetting(e, "database-wait", "SONIQ_DATABASE_WAIT", flagValue, defaultDatabaseWait)
}

// secondsSetting resolves a duration given as --flag (a Go duration), else
// as $envKey (seconds), else def.
func secondsSetting(e env, flag, envKey, flagValue string, def time.Duration) (time.Duration, error) {
	if flagValue != "" {
		d, err := time.ParseDuration(flagValue)
		if err != nil || d < 0 {
			return 0, usageErrorf("--%s %q: want a duration like 60s or 0s", flag, flagValue)
		}
		return d, nil
	}
	if v, ok := e.lookupEnv(envKey); ok && strings.TrimSpace(v) != "" {
		secs, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || secs < 0 || math.IsInf(secs, 0) || math.IsNaN(secs) {
			return 0, usageErrorf("%s=%q: want a number of seconds, like 60 or 0", envKey, v)
		}
		return time.Duration(secs * float64(time.Second)), nil
	}
	return def, nil
}

// errStoppedWaiting: a shutdown signal arrived before the database did.
var errStoppedWaiting = errors.New("stopped while waiting for the database")

// openWaiting opens the database, retrying with backoff (250 ms doubling
// to 5 s) while it is unreachable, for at most wait. Cancelling ctx (a
// shutdown request) ends the wait: nothing was claimed, so there is nothing
// to drain. Other errors (a bad URL, a refused login, missing tables) fail
// at once.
func openWaiting(ctx context.Context, e env, flagValue string, wait time.Duration, log *slog.Logger, hs *health) (backends.Backend, error) {
	sigCtx := ctx
	deadline := time.Now().Add(wait)
	delay := 250 * time.Millisecond
	for attempt := 1; ; attempt++ {
		b, err := openForCommand(sigCtx, e, flagValue)
		if err == nil {
			if attempt > 1 {
				log.Info("database reachable", "attempts", attempt)
			}
			return b, nil
		}
		if sigCtx.Err() != nil {
			log.Info("stopped while waiting for the database", "attempts", attempt)
			return nil, errStoppedWaiting
		}
		if !errors.Is(err, backends.ErrUnreachable) {
			return nil, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, fmt.Errorf("the database stayed unreachable for %s (--database-wait, SONIQ_DATABASE_WAIT): %w", wait, err)
		}
		hs.setWaiting("database unreachable: " + redactLine(connect.Redact(err.Error())))
		d := min(delay, left)
		log.Warn("database unreachable; retrying", "attempt", attempt, "retry_in", d, "gives_up_in", left.Round(time.Second), "err", err)
		select {
		case <-time.After(d):
		case <-sigCtx.Done():
			log.Info("stopped while waiting for the database", "attempts", attempt)
			return nil, errStoppedWaiting
		}
		delay = min(2*delay, 5*time.Second)
	}
}

// listenHTTP binds addr and returns the HTTP server as an actor: serve
// runs it until stop. It logs the address it bound, so that port 0 (any
// free port) can be found. A server that fails ends the run (its error is
// returned): probes that cannot reach the sidecar would restart it anyway.
func listenHTTP(addr string, h http.Handler, log *slog.Logger) (serve func() error, stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, usageErrorf("--metrics-addr %s: %v", addr, err)
	}
	log.Info("serving /metrics, /healthz and /readyz", "addr", ln.Addr().String())
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	serve = func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serving HTTP on %s: %w", addr, err)
		}
		return nil
	}
	stop = func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}
	return serve, stop, nil
}

// pinger is the part of a backend /readyz uses.
type pinger interface{ Ping(context.Context) error }

// health is what /healthz and /readyz report. Until the database is
// reachable there is no supervisor yet, and readiness says why.
type health struct {
	metrics http.Handler
	mu      sync.Mutex
	sup     *supervisor.Supervisor
	db      pinger
	waiting string
	// lastWaited and lastWaitedFor are the pool's wait count and summed
	// wait time at the previous /readyz.
	lastWaited    int64
	lastWaitedFor time.Duration
}

// poolWaitWarnAfter is how long acquires must have waited for a pooled
// connection, summed since the previous probe, before /readyz warns. A few
// milliseconds of waiting while a burst of statements starts together is
// normal on a small pool; a pool too small for the load waits far longer.
const poolWaitWarnAfter = 250 * time.Millisecond

// poolWarning says, for /readyz, whether the database pool was exhausted
// since the previous probe: acquires that waited for a free connection,
// for poolWaitWarnAfter or more in total. It is a warning, not
// unreadiness: the sidecar still works, only slower, and flipping
// readiness under load would stall a rolling deploy.
func (h *health) poolWarning(db pinger) string {
	ps, ok := db.(backends.PoolStater)
	if !ok {
		return ""
	}
	st := ps.PoolStats()
	h.mu.Lock()
	waited, waitedFor := st.Waited-h.lastWaited, st.WaitedFor-h.lastWaitedFor
	h.lastWaited, h.lastWaitedFor = st.Waited, st.WaitedFor
	h.mu.Unlock()
	if waited <= 0 || waitedFor < poolWaitWarnAfter {
		return ""
	}
	return fmt.Sprintf("database pool exhausted since the last probe: %d acquires waited %s in total for a free connection (pool of %d, %d in use now; "+
		"raise pool_max_conns in the database URL, or the pooler's pool size)", waited, waitedFor.Round(time.Millisecond), st.Max, st.InUse)
}

func (h *health) setWaiting(why string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.waiting = why
}

func (h *health) setRunning(sup *supervisor.Supervisor, db pinger) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sup, h.db, h.waiting = sup, db, ""
}

func (h *health) get() (*supervisor.Supervisor, pinger, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sup, h.db, h.waiting
}

// httpHandler serves the health endpoints of a running supervisor (and
// /metrics when configured).
func httpHandler(sup *supervisor.Supervisor, b pinger, metrics http.Handler) http.Handler {
	h := &health{metrics: metrics}
	h.setRunning(sup, b)
	return healthHandler(h)
}

func healthHandler(h *health) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		sup, _, _ := h.get()
		if sup == nil {
			// Alive: restarting the container would not bring the database.
			fmt.Fprintln(w, "ok STARTING")
			return
		}
		fmt.Fprintf(w, "ok %s\n", sup.State())
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if ok, why := h.readiness(r.Context()); !ok {
			http.Error(w, "not ready: "+why, http.StatusServiceUnavailable)
			return
		}
		sup, b, _ := h.get()
		// Advisories (an exhausted pool, a missing claim-order index) stay
		// 200: the pod works, and restarting or unrouting it would fix nothing.
		if warn := h.poolWarning(b); warn != "" {
			fmt.Fprintln(w, "ready; "+warn)
		} else {
			fmt.Fprintln(w, "ready")
		}
		for _, a := range sup.Advisories() {
			fmt.Fprintln(w, a)
		}
	})
	if h.metrics != nil {
		mux.Handle("/metrics", h.metrics)
	}
	return mux
}

// readiness is /readyz's verdict, without its advisories: ready, or why not.
func (h *health) readiness(ctx context.Context) (bool, string) {
	sup, b, waiting := h.get()
	if sup == nil {
		return false, waiting
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := b.Ping(ctx); err != nil {
		return false, "database unreachable: " + redactLine(connect.Redact(err.Error()))
	}
	return sup.Ready()
}

// ready is readiness without the reason: the soniq_ready gauge.
func (h *health) ready(ctx context.Context) bool {
	ok, _ := h.readiness(ctx)
	return ok
}

// redactLine keeps error text on one line for HTTP bodies.
func redactLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }
