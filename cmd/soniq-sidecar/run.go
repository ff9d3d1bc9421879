package main

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/oklog/run"
	"github.com/spf13/cobra"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/backends/connect"
	"github.com/soniq-dev/soniq-sidecar/internal/config"
	"github.com/soniq-dev/soniq-sidecar/supervisor"
)

// runConfig is what `run` resolved before it starts anything: the command
// line's own options, the manifest and the engine's settings.
type runConfig struct {
	opts     config.Options
	manifest *config.Manifest
	settings config.Settings
}

const runLong = `Claim Soniq jobs and run them in the manifest's handler processes until SIGTERM,
SIGINT or SIGHUP; then drain (a second signal forces the shutdown's end).
/healthz, /readyz and /metrics are served on --metrics-addr.

Every setting is a flag here, an environment variable, or a key under the
manifest's settings: (in that order of precedence; docs/manifest.md lists them).`

const runExample = `  soniq-sidecar run --manifest manifest.yaml --database-url postgres://soniq@db:5432/app
  SONIQ_DATABASE_URL=postgres://soniq@db:5432/app soniq-sidecar run --queues mail,reports
  soniq-sidecar run --once --metrics-addr ""      # run the jobs that are due, then exit 0`

func newRunCmd(e env) *cobra.Command {
	cmd := &cobra.Command{
		Use:               "run",
		Short:             "Claim jobs and run them in the manifest's handlers",
		Long:              runLong,
		Example:           runExample,
		Args:              cobra.ArbitraryArgs,
		ValidArgsFunction: cobra.NoFileCompletions,
	}
	flags := config.RegisterFlags(cmd.Flags(), config.CommandRun)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return cmdRun(cmd.Context(), e, flags, args)
	}
	_ = cmd.RegisterFlagCompletionFunc("log-format", cobra.FixedCompletions([]cobra.Completion{"auto", "text", "json"}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("database-pooler", cobra.FixedCompletions([]cobra.Completion{"session", "transaction"}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("manifest", func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return []cobra.Completion{"yaml", "yml"}, cobra.ShellCompDirectiveFilterFileExt
	})
	return cmd
}

// parseRun reads run's flags (parsed into flags), the environment and the
// manifest; every setting comes from the settings table (internal/config).
// Its errors are configuration errors (exit 2).
func parseRun(e env, flags *config.Flags, pos []string) (runConfig, error) {
	if len(pos) > 0 {
		return runConfig{}, usageErrorf("run: unexpected argument %q", pos[0])
	}
	opts, err := flags.Options(e.lookupEnv)
	if err != nil {
		return runConfig{}, usageError{err}
	}
	if opts.Manifest == "" {
		if _, err := os.Stat(config.DefaultManifest); err != nil {
			return runConfig{}, usageErrorf("run: no manifest: give --manifest FILE, set SONIQ_MANIFEST, or put one at ./%s", config.DefaultManifest)
		}
		opts.Manifest = config.DefaultManifest
	}
	opts.Instance = cmp.Or(opts.Instance, supervisor.DefaultInstance)
	if err := supervisor.CheckInstance(opts.Instance); err != nil {
		return runConfig{}, usageErrorf("--instance / SONIQ_INSTANCE: %v", err)
	}
	m, err := loadManifest(opts.Manifest)
	if err != nil {
		return runConfig{}, err
	}
	settings, err := config.ResolveSettings(m, e.lookupEnv, flags.Overrides())
	if err != nil {
		return runConfig{}, usageError{err}
	}
	// A command that can never start is refused before the database is
	// created or a worker row registered.
	if err := supervisor.CheckCommands(m); err != nil {
		return runConfig{}, usageError{err}
	}
	return runConfig{opts: opts, manifest: m, settings: settings}, nil
}

// cmdRun wires the parts of `run` together. Three actors run together
// (oklog/run): the HTTP server, the signal handler and the engine (the
// database, then the supervisor). The first to return ends the others,
// and its error is run's. The HTTP server comes up first: while the
// database is not reachable yet, /healthz says alive and /readyz says why
// it is not ready.
func cmdRun(ctx context.Context, e env, flags *config.Flags, args []string) error {
	rc, err := parseRun(e, flags, args)
	if err != nil {
		return err
	}
	log, err := newLogger(e.stderr, rc.opts.LogFormat)
	if err != nil {
		return err
	}
	defer flushLog(log)

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

	eng := &engine{}
	var g run.Group
	if rc.opts.MetricsAddr != "" {
		serve, stop, err := listenHTTP(rc.opts.MetricsAddr, healthHandler(hs), log)
		if err != nil {
			return err
		}
		g.Add(serve, func(error) { stop() })
	}
	g.Add(signalActor(ctx, eng, log))
	waitCtx, cancelWait := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWait()
	eng.cancelWait = cancelWait
	g.Add(func() error {
		return eng.run(waitCtx, e, rc, engineParts{workerID: workerID, log: log, hs: hs, metrics: metrics, scrapes: scrapes})
	}, func(error) { eng.stop() })
	return g.Run()
}

// shutdownSignals start DRAINING (a second one forces FORCE_TIMEOUT_PATH).
var shutdownSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}

// signalActor is the signal handler: the first SIGTERM/SIGINT/SIGHUP
// starts DRAINING (or ends the wait for the database), a second one during
// DRAINING forces FORCE_TIMEOUT_PATH. SIGHUP drains like SIGTERM, as
// Soniq's worker does: a closed terminal or a supervisor's reload must
// never drop a running job. Cancelling cmdRun's own ctx (tests,
// embedding) counts as one shutdown request.
func signalActor(ctx context.Context, eng *engine, log *slog.Logger) (execute func() error, interrupt func(error)) {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, shutdownSignals...)
	done := make(chan struct{})
	ctxDone := ctx.Done()
	return func() error {
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
		}
}

// engineParts are what the engine actor is handed by the wiring.
type engineParts struct {
	workerID string
	log      *slog.Logger
	hs       *health
	metrics  *supervisor.Metrics
	scrapes  *scrapeTracker
}

// engine is what a shutdown request reaches: the wait for the database
// until the supervisor exists, the supervisor after.
type engine struct {
	mu         sync.Mutex
	sup        *supervisor.Supervisor
	stopped    bool
	cancelWait context.CancelFunc
}

// run is the engine actor: it waits for the database, then runs the
// supervisor until it has stopped (nil after a clean shutdown). waitCtx
// ends the wait for the database.
func (eng *engine) run(waitCtx context.Context, e env, rc runConfig, p engineParts) error {
	b, err := openWaiting(waitCtx, e, rc.opts, p.log, p.hs)
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
	if len(rc.manifest.Schedules) > 0 {
		dctx, cancel := context.WithTimeout(waitCtx, 30*time.Second)
		err := declareSchedules(dctx, b, rc.manifest, p.log)
		cancel()
		if err != nil {
			return err
		}
	}
	sup, err := supervisor.New(supervisor.Config{
		Manifest: rc.manifest, Settings: rc.settings, Backend: b, Logger: p.log, Version: version, WorkerID: p.workerID,
		Instance: rc.opts.Instance, DeadLetterUnknown: rc.opts.DeadLetterUnknown, Metrics: p.metrics, Once: rc.opts.Once,
		Tracer: jobTracer(e),
	})
	if err != nil {
		return err
	}
	if !eng.start(sup) {
		p.log.Info("stopped before the supervisor started")
		return nil
	}
	p.hs.setRunning(sup, b)
	p.log.Info("starting", "version", version, "database", connect.Redact(databaseURL(rc.opts)),
		"database_pooler", cmp.Or(rc.opts.DatabasePooler, "session"), "listen_url", connect.Redact(rc.opts.ListenURL),
		"manifest", rc.manifest.Path, "worker_id", sup.WorkerID(), "shutdown_timeout", rc.settings.ShutdownTimeout,
		"sync_grace", rc.settings.SyncHandlerGrace, "job_timeout", rc.settings.JobTimeout, "state", supervisor.StateRunning.String())
	err = sup.Run(context.Background())
	if rc.opts.MetricsAddr != "" {
		// Before the HTTP server stops with the group: a NACK counted
		// just now must reach one more scrape.
		finalScrape(p.scrapes, p.metrics.LastShutdownNack(), rc.opts.MetricsFinalScrapeWait, p.log)
	}
	var hm *supervisor.HelloMismatchError
	var se *supervisor.StartError
	if errors.As(err, &hm) || errors.As(err, &se) {
		return usageError{err}
	}
	return err
}

// start hands the engine its supervisor; false if a stop came first.
func (eng *engine) start(sup *supervisor.Supervisor) bool {
	eng.mu.Lock()
	defer eng.mu.Unlock()
	if eng.stopped {
		return false
	}
	eng.sup = sup
	return true
}

// stop is one shutdown request: it ends the wait for the database, or
// moves the supervisor along the shutdown contract (a second request
// during DRAINING forces FORCE_TIMEOUT_PATH).
func (eng *engine) stop() {
	eng.mu.Lock()
	defer eng.mu.Unlock()
	eng.stopped = true
	if eng.sup != nil {
		eng.sup.Shutdown()
	} else if eng.cancelWait != nil {
		eng.cancelWait()
	}
}

func (eng *engine) state() string {
	eng.mu.Lock()
	defer eng.mu.Unlock()
	if eng.sup == nil {
		return "WAITING_FOR_DATABASE"
	}
	return eng.sup.State().String()
}
