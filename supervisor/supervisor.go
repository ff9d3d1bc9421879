// Package supervisor is the sidecar's engine, and the API for embedding it
// in a Go program: the handler process pools, the claim-and-dispatch loop,
// retries, heartbeats, maintenance and the shutdown state machine of
// docs/shutdown.md. LoadManifest and ResolveSettings read the same
// manifest and settings as the soniq-sidecar command, into the config
// package's types; New and Run run them against any backends.Backend;
// Shutdown applies the shutdown contract. docs/embedding.md states what is
// stable.
//
// All mutable state lives in one event loop goroutine (Run); process pipes,
// timers, claims and database writes run in goroutines Run owns and report
// back as events. That keeps the state machine free of locks and every
// transition in one place.
package supervisor

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/big"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/config"
	"github.com/soniq-dev/soniq-sidecar/internal/transport"
	"github.com/soniq-dev/soniq-sidecar/protocol"
)

// InstrumentationScope names the OpenTelemetry meter and tracer of the
// supervisor's metrics and spans: this package's import path. Dashboards
// and collectors that filter on the scope key on it, so it changes only
// with a major version.
const InstrumentationScope = "github.com/soniq-dev/soniq-sidecar/supervisor"

// Config is what Run needs. Manifest, Settings and Backend are required.
type Config struct {
	Manifest *config.Manifest
	Settings config.Settings
	Backend  backends.Backend
	Logger   *slog.Logger
	// Version is recorded on the worker row.
	Version string
	// WorkerID is this sidecar's soniq_workers id (a UUID); empty = a new one.
	WorkerID string
	// Instance names this sidecar among the programs that share its
	// hostname and pid (every container of a pod has the pod's hostname and
	// pid 1). It goes into the worker row's hostname ("INSTANCE@HOST") and
	// metadata, so the row never collides with a Soniq worker's, and a
	// restart takes over only its own predecessor's row. Two sidecars in
	// one pod need two names. Default DefaultInstance.
	Instance string
	// DeadLetterUnknown claims jobs of names no handler here serves and
	// dead-letters them (job_not_found), as Soniq's worker does. Only for a
	// sidecar that owns its queues exclusively.
	DeadLetterUnknown bool
	// Once runs what is due and stops: when nothing is running and a claim
	// finds no due job (after every result was written, so an immediate
	// retry is due again), the shutdown starts as if asked (`run --once`).
	Once bool
	// MaxFrameBytes is the protocol frame limit (default 16 MiB).
	MaxFrameBytes int
	// Metrics receives the supervisor's measurements; nil records nothing.
	Metrics *Metrics
	// Tracer starts a span per job execution; nil uses the global
	// provider's (otel.Tracer(InstrumentationScope)). A noop.Tracer
	// (go.opentelemetry.io/otel/trace/noop) turns spans off: none is
	// started, which saves the per-job work of a span that records
	// nothing.
	Tracer trace.Tracer

	// Timings below default to production values; tests shorten them.
	PingInterval time.Duration // default 5s
	PingTimeout  time.Duration // default 30s: a silent process holding no sync job is killed
	StopGrace    time.Duration // shutdown frame → SIGTERM (default 5s), SIGTERM → SIGKILL likewise (shutdown.go)
	WaitWarn     time.Duration // WAIT_FOR_THREAD reminder period (default 30s)

	// startTransport replaces transport.Start in unit tests, which run the
	// state machine against in-process fake handlers on a fake clock.
	startTransport func(transport.Env, transport.Spec) (transport.Conn, error)
}

// writeTimeout bounds one database call the engine makes itself (a claim,
// a registration, marking the worker stopped); the completer has its own
// bound for result writes. It exists only so a wedged database cannot hold
// the sidecar forever; it is not a time budget.
const writeTimeout = 30 * time.Second

// DefaultInstance is the instance name of a sidecar that sets none.
const DefaultInstance = "soniq-sidecar"

// workerKind is the metadata kind of the sidecar's worker rows.
const workerKind = "soniq-sidecar"

// CheckInstance reports whether name can be an instance name: 1 to 63
// letters, digits, '.', '_' or '-', like a container name.
func CheckInstance(name string) error {
	if name == "" || len(name) > 63 {
		return fmt.Errorf("instance name %q must be 1 to 63 characters", name)
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("instance name %q may hold only letters, digits, '.', '_' and '-'", name)
		}
	}
	return nil
}

// Supervisor runs handler pools against a backend. Create it with New,
// start it with Run, stop it with Shutdown (or by cancelling Run's context).
type Supervisor struct {
	cfg      Config
	log      *slog.Logger
	workerID string
	metrics  *Metrics
	tracer   trace.Tracer

	events   chan event
	loopDone chan struct{}
	shutdown chan struct{} // one value per Shutdown call

	// identity is the worker row this sidecar registers; Run sets it, and
	// a re-registration may change its hostname (see register).
	identityMu sync.Mutex
	identity   backends.Worker
	taskNames  []string

	state      atomic.Int32 // State, readable from any goroutine
	readyMu    sync.Mutex
	notReady   map[string]string // handler → why it has no ready process
	startedRun atomic.Bool

	claimIndexMissing atomic.Bool // see Advisories
	// writeDeadline is the shutdown's write deadline (unix ns; 0 before
	// one is fixed), which the stop mark shares with the loop's writes.
	writeDeadline atomic.Int64
	// acking is set once a handler that wants acknowledgements said hello
	// (acks.go): only then does the writer report what it settled.
	acking atomic.Bool
}

// New checks the configuration and prepares a Supervisor.
func New(cfg Config) (*Supervisor, error) {
	if cfg.Manifest == nil || cfg.Backend == nil {
		return nil, errors.New("supervisor: Config needs a Manifest and a Backend")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Instance == "" {
		cfg.Instance = DefaultInstance
	}
	if err := CheckInstance(cfg.Instance); err != nil {
		return nil, fmt.Errorf("supervisor: %w", err)
	}
	if cfg.MaxFrameBytes <= 0 {
		cfg.MaxFrameBytes = protocol.DefaultMaxFrameBytes
	}
	if cfg.PingInterval <= 0 {
		cfg.PingInterval = 5 * time.Second
	}
	if cfg.PingTimeout <= 0 {
		cfg.PingTimeout = 30 * time.Second
	}
	if cfg.StopGrace <= 0 {
		cfg.StopGrace = defaultStopGrace
	}
	if cfg.Tracer == nil {
		cfg.Tracer = otel.Tracer(InstrumentationScope)
	}
	if cfg.WaitWarn <= 0 {
		cfg.WaitWarn = 30 * time.Second
	}
	// A library caller may pass a partial Settings: intervals of 0 would
	// spin or panic, so they take Soniq's defaults.
	def := defaultSettings()
	for _, d := range []struct{ v, def *time.Duration }{
		{&cfg.Settings.HeartbeatInterval, &def.HeartbeatInterval},
		{&cfg.Settings.HeartbeatTimeout, &def.HeartbeatTimeout},
		{&cfg.Settings.CleanupInterval, &def.CleanupInterval},
		{&cfg.Settings.PollInterval, &def.PollInterval},
		{&cfg.Settings.ShutdownTimeout, &def.ShutdownTimeout},
	} {
		if *d.v <= 0 {
			*d.v = *d.def
		}
	}
	if cfg.Settings.ShutdownWriteTimeout <= 0 {
		cfg.Settings.ShutdownWriteTimeout = def.ShutdownWriteTimeout
	}
	if cfg.Settings.AuditInterval == 0 { // negative turns the audit off
		cfg.Settings.AuditInterval = def.AuditInterval
	}
	if cfg.Settings.ClaimAheadMax <= 0 {
		cfg.Settings.ClaimAheadMax = def.ClaimAheadMax
	}
	cfg.Settings.ClaimAhead = max(cfg.Settings.ClaimAhead, 0) // 0: only free slots
	s := &Supervisor{
		cfg:      cfg,
		log:      cfg.Logger,
		workerID: cfg.WorkerID,
		metrics:  cfg.Metrics,
		tracer:   cfg.Tracer,
		events:   make(chan event, 1024),
		loopDone: make(chan struct{}),
		shutdown: make(chan struct{}, 8),
		notReady: map[string]string{},
	}
	s.metrics.observePool(cfg.Backend)
	if s.workerID == "" {
		s.workerID = backends.NewID()
	}
	for _, h := range cfg.Manifest.Handlers {
		s.notReady[h.Name] = "starting"
	}
	return s, nil
}

// WorkerID is this sidecar's soniq_workers id.
func (s *Supervisor) WorkerID() string { return s.workerID }

// State is the current shutdown state.
func (s *Supervisor) State() State { return State(s.state.Load()) }

// Ready reports whether every handler has a ready process and the
// supervisor is RUNNING; when not, it says why.
func (s *Supervisor) Ready() (bool, string) {
	if st := s.State(); st != StateRunning {
		return false, "state " + st.String()
	}
	s.readyMu.Lock()
	defer s.readyMu.Unlock()
	for _, h := range s.cfg.Manifest.Handlers {
		if why, ok := s.notReady[h.Name]; ok {
			return false, "handler " + h.Name + ": " + why
		}
	}
	return true, ""
}

func (s *Supervisor) setReady(handler string, why string) {
	s.readyMu.Lock()
	defer s.readyMu.Unlock()
	if why == "" {
		delete(s.notReady, handler)
	} else {
		s.notReady[handler] = why
	}
}

// Shutdown asks Run to stop. The first call moves RUNNING to DRAINING; a
// second call during DRAINING moves to FORCE_TIMEOUT_PATH at once. It never
// blocks. Sync jobs are never killed, whatever the number of calls.
func (s *Supervisor) Shutdown() {
	select {
	case s.shutdown <- struct{}{}:
	default:
	}
}

// StartError means a handler's command can never be started (not found,
// not executable, its workdir missing): a configuration error (exit 2),
// reported at the handler's first start instead of restarting forever.
type StartError struct {
	Handler string
	Command []string
	Err     error
}

func (e *StartError) Error() string {
	return fmt.Sprintf("handler %s: command %q cannot be started: %v", e.Handler, e.Command, e.Err)
}

func (e *StartError) Unwrap() error { return e.Err }

// cannotStart reports whether a start failure is one that retrying cannot
// fix: the command or its directory is missing or not executable.
func cannotStart(err error) bool {
	return errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) ||
		errors.Is(err, syscall.ENOEXEC) || errors.Is(err, syscall.ENOTDIR)
}

// HelloMismatchError means a handler's hello disagrees with the manifest:
// a configuration error (exit 2).
type HelloMismatchError struct {
	Handler string
	Detail  string
}

func (e *HelloMismatchError) Error() string {
	return fmt.Sprintf("handler %s: its hello disagrees with the manifest: %s", e.Handler, e.Detail)
}

// Run registers the worker, starts the pools and serves jobs until the
// shutdown state machine reaches STOPPED. Cancelling ctx is the same as
// Shutdown. Run does not return before every result it holds is written
// (each write bounded at 30 s) and the worker row is marked stopped.
func (s *Supervisor) Run(ctx context.Context) error {
	if !s.startedRun.CompareAndSwap(false, true) {
		return errors.New("supervisor: Run called twice")
	}
	// Database work at start and end uses contexts detached from ctx: a
	// cancelled run context must not stop the bookkeeping.
	bg := context.WithoutCancel(ctx)
	m := s.cfg.Manifest
	total := 0
	var names []string
	for _, h := range m.Handlers {
		total += h.Processes * h.Concurrency
		names = append(names, h.JobNames()...)
	}
	hostname, _ := os.Hostname()
	if err := s.setIdentity(hostname, os.Getpid(), total); err != nil {
		return err
	}
	s.taskNames = names
	// A dead predecessor of this instance on this host (a container or
	// service restart, whatever the pid) is taken over: the rows it held
	// become this sidecar's, and the loop keeps those its attached handlers
	// still run or report results for, and gives the others back.
	inherited, err := s.registerWaiting(ctx)
	if errors.Is(err, errStoppedBeforeStart) {
		s.log.Info("stopped before the worker was registered; nothing was claimed", "worker_id", s.workerID)
		return nil
	}
	if err != nil {
		return fmt.Errorf("registering worker %s: %w", s.workerID, err)
	}
	s.log.Info("worker registered", "worker_id", s.workerID, "hostname", s.workerHostname(), "pid", os.Getpid(),
		"handlers", len(m.Handlers), "jobs", len(names))

	s.prepareLimits(ctx)

	// Owned goroutines, stopped in reverse order below.
	var wg sync.WaitGroup
	svc := s.startServices(bg, total)

	// Subscribed before the loop's first claim: a job enqueued once the
	// handlers are ready notifies a LISTEN that is already active (an
	// attached handler can be ready before a LISTEN set up beside the loop
	// is, and its first job then waited for the poll).
	subCtx, stopSubscription := context.WithCancel(bg)
	wakeups, subErr := s.cfg.Backend.Subscribe(subCtx)
	wg.Add(1)
	go func() { defer wg.Done(); s.forwardWakeups(wakeups, subErr) }()

	sp := transport.StartSpawner()

	l := newLoop(s, svc.writer, sp, &wg)
	l.enqueuer = svc.enqueuer
	l.readOverridesAtStart(bg)
	l.inherit(inherited)
	go func() {
		select {
		case <-ctx.Done():
			s.Shutdown()
		case <-s.loopDone:
		}
	}()
	loopErr := l.run()
	close(s.loopDone)
	stopSubscription()

	// Every result the loop decided is with the writer; wait for it. The
	// stop mark goes with the last NACKs when the backend can (one round
	// trip), or follows at once, usually on the connection the writer just
	// gave back (fresh: no liveness ping, no dial). The watchers stop
	// beside these writes: over a slow link their last words (a
	// leadership's release) cost the exit no round trip of their own.
	watchersStopped := svc.stopWatchers(s.writeDeadlineAt())
	svc.enqueuer.Stop()
	if !svc.writer.Finish() {
		s.markStopped(bg, svc.writer.GaveUp())
	}
	watchersStopped()
	// Beats go on until the row is marked stopped.
	svc.heartbeat.Stop()
	wg.Wait()
	sp.Stop()
	s.log.Info("stopped", "state", StateStopped.String(), "worker_id", s.workerID)
	return loopErr
}

// writeDeadlineAt is the shutdown's write deadline, zero before one was
// set.
func (s *Supervisor) writeDeadlineAt() time.Time {
	if ns := s.writeDeadline.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// markStopped marks the worker row stopped within what remains of the
// shutdown's write deadline. When the handler processes took longer to
// exit than that, it gets shutdown_write_timeout again, unless the
// shutdown's writes already failed: the database is not answering, and
// recovery takes the row as it would a crashed worker's.
func (s *Supervisor) markStopped(bg context.Context, writesFailed bool) {
	bound := writeTimeout
	if at := s.writeDeadlineAt(); !at.IsZero() {
		left := time.Until(at)
		switch {
		case left > 0:
			bound = min(bound, left)
		case writesFailed:
			s.log.Error("not marking the worker stopped: the shutdown's writes failed and shutdown_write_timeout has passed; stale-worker recovery will take its row",
				"worker_id", s.workerID, "shutdown_write_timeout", s.cfg.Settings.ShutdownWriteTimeout)
			return
		default:
			bound = min(bound, s.cfg.Settings.ShutdownWriteTimeout)
		}
	}
	ctx, cancel := context.WithTimeout(bg, bound)
	defer cancel()
	if err := s.cfg.Backend.SetWorkerStatus(ctx, s.workerID, backends.WorkerStopped); err != nil {
		s.log.Error("marking the worker stopped failed", "worker_id", s.workerID, "err", err)
	}
}

// setIdentity sets the worker row this sidecar registers: its hostname is
// INSTANCE@HOST, its metadata names its identity (kind, instance, host) and
// its heartbeat interval.
func (s *Supervisor) setIdentity(hostname string, pid, concurrency int) error {
	m := map[string]any{backends.MetaKind: workerKind, backends.MetaInstance: s.cfg.Instance,
		backends.MetaHost: hostname, backends.MetaHeartbeatInterval: s.cfg.Settings.HeartbeatInterval.Seconds()}
	if caps := declaredCaps(s.cfg.Manifest); len(caps) > 0 {
		// The caps this sidecar declares, for the others to compare (limits.go).
		m[backends.MetaLimits] = caps
	}
	meta, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("encoding the worker row's metadata: %w", err)
	}
	s.identity = backends.Worker{
		ID: s.workerID, Hostname: s.cfg.Instance + "@" + hostname, PID: pid, Queues: s.cfg.Settings.Queues,
		Concurrency: concurrency, Status: backends.WorkerActive, Version: s.cfg.Version, Metadata: meta,
	}
	return nil
}

// emit hands an event to the loop; false once the loop has ended.
func (s *Supervisor) emit(e event) bool {
	select {
	case s.events <- e:
		return true
	case <-s.loopDone:
		return false
	}
}

// jitter returns n scaled by a random factor in [0.9, 1.1], at least 1.
func jitter(n int) int {
	r, _ := rand.Int(rand.Reader, big.NewInt(2001))
	f := 0.9 + float64(r.Int64())/10000
	return max(1, int(float64(n)*f))
}

// jitterPoll scales a poll interval by a random factor in [0.8, 1.2), so
// the sidecars of a fleet, polling without notifications, drift apart
// instead of querying the database in step; the mean stays d.
func jitterPoll(d time.Duration) time.Duration {
	return max(time.Millisecond, time.Duration(float64(d)*(0.8+0.4*randFloat())))
}

// randFloat is a uniform float in [0, 1) for the retry policy's jitter.
func randFloat() float64 {
	r, _ := rand.Int(rand.Reader, big.NewInt(1<<53))
	return float64(r.Int64()) / (1 << 53)
}

// claimIndexAdvice is the detail /readyz shows while the index is missing.
const claimIndexAdvice = "warning: the claim-order index soniq_sidecar_claim_order is missing, so every claim sorts every queued row; run `soniq-sidecar migrate` to create it"

func (s *Supervisor) setClaimIndexMissing(missing bool) {
	s.claimIndexMissing.Store(missing)
	s.metrics.claimIndex(missing)
}

// Advisories are conditions an operator should fix that do not make the
// sidecar unready (shown by /readyz under "ready").
func (s *Supervisor) Advisories() []string {
	if s.claimIndexMissing.Load() {
		return []string{claimIndexAdvice}
	}
	return nil
}
