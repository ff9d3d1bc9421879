package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/oklog/run"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/backends/connect"
	"github.com/soniq-dev/soniq-sidecar/supervisor"
)

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
	if format == "text" {
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return slog.New(slog.NewJSONHandler(w, opts)), nil
}

// loadManifest loads a manifest; its errors are configuration errors (exit 2).
func loadManifest(path string) (*supervisor.Manifest, error) {
	m, err := supervisor.LoadManifest(path)
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

func handlerByName(m *supervisor.Manifest, name string) *supervisor.Handler {
	for i := range m.Handlers {
		if m.Handlers[i].Name == name {
			return &m.Handlers[i]
		}
	}
	return &supervisor.Handler{}
}

func cmdRun(ctx context.Context, e env, args []string) error {
	fs := newFlagSet(e, "run")
	manifestPath := fs.String("manifest", "", "manifest file (default $SONIQ_MANIFEST)")
	dbURL := fs.String("database-url", "", "database URL (default $SONIQ_DATABASE_URL, else sqlite:soniq.db)")
	queues := fs.String("queues", "", "comma-separated queues to claim from (default $SONIQ_QUEUES, else all)")
	metricsAddr := fs.String("metrics-addr", ":9464", "HTTP address for /metrics, /healthz and /readyz (empty disables)")
	logFormat := fs.String("log-format", "auto", "auto (text on a terminal, else JSON), text or json")
	instance := fs.String("instance", "", "this sidecar's name among programs sharing its hostname and pid, e.g. two sidecars in one pod (default $SONIQ_INSTANCE, else "+supervisor.DefaultInstance+")")
	deadLetterUnknown := fs.Bool("dead-letter-unknown", false, "dead-letter jobs whose name no handler serves (only for a sidecar that owns its queues)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErrorf("run: unexpected argument %q", pos[0])
	}
	if *manifestPath == "" {
		if v, ok := e.lookupEnv("SONIQ_MANIFEST"); ok && v != "" {
			*manifestPath = v
		} else {
			return usageErrorf("run: --manifest FILE is required (or set SONIQ_MANIFEST)")
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
	m, err := loadManifest(*manifestPath)
	if err != nil {
		return err
	}
	var overrides supervisor.FlagOverrides
	if *queues != "" {
		overrides.Queues = queues
	}
	settings, err := supervisor.ResolveSettings(m, e.lookupEnv, overrides)
	if err != nil {
		return usageError{err}
	}

	b, err := openForCommand(ctx, e, *dbURL)
	if err != nil {
		return err
	}
	defer b.Close()

	workerID := backends.NewID()
	metrics, shutdownTelemetry, metricsHandler, err := setupTelemetry(ctx, e, withWorkerID(workerID), withLogger(log))
	if err != nil {
		return err
	}
	defer shutdownTelemetry()

	sup, err := supervisor.New(supervisor.Config{
		Manifest: m, Settings: settings, Backend: b, Logger: log, Version: version, WorkerID: workerID, Instance: *instance,
		DeadLetterUnknown: *deadLetterUnknown, Metrics: metrics,
	})
	if err != nil {
		return err
	}
	log.Info("starting", "version", version, "database", connect.Redact(databaseURL(e, *dbURL)),
		"manifest", m.Path, "worker_id", sup.WorkerID(), "shutdown_timeout", settings.ShutdownTimeout,
		"sync_grace", settings.SyncHandlerGrace, "job_timeout", settings.JobTimeout, "state", supervisor.StateRunning.String())

	var g run.Group
	// Signals: the first SIGTERM/SIGINT/SIGHUP starts DRAINING, a second one
	// during DRAINING forces FORCE_TIMEOUT_PATH. SIGHUP drains like SIGTERM,
	// as Soniq's worker does: a closed terminal or a supervisor's reload
	// must never drop a running job. The signal context is not the run
	// context (seed 001): Run gets one that outlives the signal. Cancelling
	// cmdRun's own ctx (tests, embedding) counts as one shutdown request.
	{
		sigs := make(chan os.Signal, 4)
		signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
		done := make(chan struct{})
		ctxDone := ctx.Done()
		g.Add(func() error {
			for {
				select {
				case s := <-sigs:
					log.Info("signal received", "signal", s.String(), "state", sup.State().String())
					sup.Shutdown()
				case <-ctxDone:
					ctxDone = nil // once
					log.Info("run context cancelled", "state", sup.State().String())
					sup.Shutdown()
				case <-done:
					return nil
				}
			}
		}, func(error) {
			signal.Stop(sigs)
			close(done)
		})
	}
	// The supervisor: its return ends the group.
	var runErr error
	{
		g.Add(func() error {
			runErr = sup.Run(context.Background())
			return errSupervisorDone
		}, func(error) {
			sup.Shutdown()
		})
	}
	// HTTP: /metrics, /healthz, /readyz.
	if *metricsAddr != "" {
		ln, err := net.Listen("tcp", *metricsAddr)
		if err != nil {
			return usageErrorf("--metrics-addr %s: %v", *metricsAddr, err)
		}
		srv := &http.Server{Handler: httpHandler(sup, b, metricsHandler), ReadHeaderTimeout: 5 * time.Second}
		g.Add(func() error {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("HTTP server failed; the sidecar keeps running", "addr", *metricsAddr, "err", err)
				<-make(chan struct{}) // keep the actor alive; interrupt ends it via Shutdown
			}
			return nil
		}, func(error) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_ = srv.Shutdown(ctx)
		})
	}
	_ = g.Run()
	var hm *supervisor.HelloMismatchError
	if errors.As(runErr, &hm) {
		return usageError{runErr}
	}
	return runErr
}

var errSupervisorDone = errors.New("supervisor stopped")

// httpHandler serves the health endpoints (and /metrics when configured).
func httpHandler(sup *supervisor.Supervisor, b interface{ Ping(context.Context) error }, metrics http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "ok %s\n", sup.State())
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := b.Ping(ctx); err != nil {
			http.Error(w, "not ready: database unreachable: "+redactLine(connect.Redact(err.Error())), http.StatusServiceUnavailable)
			return
		}
		if ok, why := sup.Ready(); !ok {
			http.Error(w, "not ready: "+why, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	if metrics != nil {
		mux.Handle("/metrics", metrics)
	}
	return mux
}

// redactLine keeps error text on one line for HTTP bodies.
func redactLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }
