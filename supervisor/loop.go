package supervisor

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/config"
	"github.com/soniq-dev/soniq-sidecar/internal/completer"
	"github.com/soniq-dev/soniq-sidecar/internal/maintenance"
	"github.com/soniq-dev/soniq-sidecar/internal/reserve"
	"github.com/soniq-dev/soniq-sidecar/internal/transport"
)

// taskState is where one claimed job is, as far as the sidecar is concerned.
type taskState int

const (
	taskPending   taskState = iota // claimed, not yet handed to a process
	taskRunning                    // in a process; its row is ours to write
	taskAbandoned                  // row already written (timeout) or NACKed; the process may still hold it
)

// task is one claimed job.
type task struct {
	job       *backends.Job // a row of its claim (tasks share their claim's slice)
	queuedAt  time.Time     // when it joined its pool's pending jobs
	pool      *pool
	spec      *config.JobSpec
	proc      *process
	state     taskState
	timer     *time.Timer
	startedAt time.Time
	abandoned string       // why: "job_timeout", "shutdown_timeout", "user" (a cancel request), …
	span      trace.Span   // one span per execution; nil until started
	suspect   bool         // its process died holding other jobs too: it runs alone next (suspect.go)
	kids      taskChildren // the child jobs this execution asked for (bind.go)
}

// endSpan closes the execution's span once, with its outcome.
func (t *task) endSpan(outcome string, err string) {
	if t.span == nil {
		return
	}
	if t.span.IsRecording() {
		t.span.SetAttributes(attribute.String("soniq.outcome", outcome))
		if err != "" {
			t.span.SetStatus(codes.Error, firstLine(err))
		}
	}
	t.span.End()
	t.span = nil
}

func (t *task) sync() bool { return !t.spec.Cancellable }

// pool is one manifest handler's processes and its claim state.
type pool struct {
	h          *config.Handler
	allNames   []string
	asyncNames []string

	procs   []*process   // by slot; nil while the slot waits for a (re)start (lifecycle.go)
	restart poolRestarts // backoff and crash loop (lifecycle.go)
	pending []*task      // claimed, waiting for a free slot (dispatch.go)
	claim   poolClaims   // the claim in flight and when to make the next (claim.go)
	ahead   poolReserve  // claim-ahead: the reserve's sizing and give-back (reserve.go)
	limit   poolLimits   // the fleet-wide caps its claims obey (limits.go)
	// isolated: processes running a suspect alone (suspect.go).
	isolated map[*process]*task
	attach   poolAttach // attach handlers' endpoints (attach.go)
}

// hasReady reports whether a process of the pool takes jobs.
func (pl *pool) hasReady() bool {
	for _, p := range pl.procs {
		if p != nil && p.state == procReady {
			return true
		}
	}
	return false
}

func (pl *pool) ready() []*process {
	var out []*process
	for _, p := range pl.procs {
		if p != nil && p.state == procReady {
			out = append(out, p)
		}
	}
	return out
}

// pick returns the least-loaded ready process that can take one more job
// (and one more sync job for a sync job), or nil. A process still running an
// earlier execution of the same job (its row was recovered and came back)
// is skipped: job ids are unique within a process.
func (pl *pool) pick(t *task) *process {
	var best *process
	for _, p := range pl.procs {
		if p == nil || p.state != procReady || p.free() <= 0 || (t.sync() && p.syncFree() <= 0) || pl.isolated[p] != nil ||
			p.tasks[t.job.ID] != nil {
			continue
		}
		if best == nil || p.free() > best.free() {
			best = p
		}
	}
	return best
}

// loop is the supervisor's single-threaded core.
type loop struct {
	// Wiring, set once by newLoop: what the loop reads from, reports to
	// and writes with.
	host     loopHost
	cfg      *Config
	log      *slog.Logger
	metrics  *Metrics
	tracer   trace.Tracer
	spans    bool             // false: tracer is a noop.Tracer, no span is started
	emit     func(event) bool // queues an event for the loop (from any goroutine)
	writer   *completer.Completer
	enqueuer *completer.Enqueuer // writes the children asked for at once (children.go); set by Run
	sp       *transport.Spawner
	wg       *sync.WaitGroup
	pools    []*pool

	// Each group below is written by the file named beside it only
	// (TestFieldGroupsHaveOneWriter).
	live      map[string]*task         // rows this sidecar still has to write (bind.go)
	procs     int                      // processes spawned and not yet reaped (lifecycle.go)
	fatal     error                    // a configuration error: the run cannot go on (lifecycle.go)
	claim     loopClaims               // claims in flight, the unknown-name claim, reconciliation (claim.go)
	dispatch  loopDispatch             // the dispatch under way (dispatch.go)
	shut      shutdownState            // the shutdown state machine (shutdown.go)
	rereg     reregistration           // a lost worker row being registered again (identity.go)
	inherited inheritedRows            // a dead predecessor's rows not yet reported (inherit.go)
	ackWait   map[string]*process      // results being written, by job id, to acknowledge (acks.go)
	audit     maintenance.AuditTracker // the self-audit's readings (audit.go)
	cancels   cancelReads              // reads of the cancel requests (cancel.go)
	overrides overrideReads            // reads of the limits' overrides (limits.go)
}

// loopHost is the Supervisor as the loop sees it: its worker id and
// channels, and the callbacks that publish readiness and state to the
// other goroutines. The loop holds no pointer back to the Supervisor.
type loopHost struct {
	workerID string
	events   <-chan event
	shutdown <-chan struct{}
	// setReady marks a handler ready ("") or not, saying why.
	setReady func(handler, why string)
	// setState publishes the shutdown state to State().
	setState func(State)
	// setWriteDeadline publishes the shutdown's write deadline, which the
	// stop mark after the loop shares.
	setWriteDeadline func(time.Time)
	// acking: a handler acknowledges results (the writer reports settled ids).
	acking func()
	// hostname is the worker row's hostname as registered.
	hostname func() string
	// reregister registers the worker row again and returns the held
	// job ids that are no longer this worker's.
	reregister func(ctx context.Context, held []string) ([]string, error)
	// producerID is the producer_id of the child jobs it writes.
	producerID string
}

func (s *Supervisor) loopHost() loopHost {
	return loopHost{
		workerID: s.workerID, events: s.events, shutdown: s.shutdown,
		setReady:         s.setReady,
		setState:         func(st State) { s.state.Store(int32(st)) },
		setWriteDeadline: func(t time.Time) { s.writeDeadline.Store(t.UnixNano()) },
		acking:           func() { s.acking.Store(true) },
		hostname:         s.workerHostname,
		reregister:       s.reregister,
		producerID:       s.producerID(),
	}
}

func newLoop(s *Supervisor, w *completer.Completer, sp *transport.Spawner, wg *sync.WaitGroup) *loop {
	_, noSpans := s.tracer.(noop.Tracer)
	l := &loop{host: s.loopHost(), cfg: &s.cfg, log: s.log, metrics: s.metrics, tracer: s.tracer, spans: !noSpans, emit: s.emit,
		writer: w, sp: sp, wg: wg, live: map[string]*task{}, shut: newShutdownState()}
	for i := range s.cfg.Manifest.Handlers {
		h := &s.cfg.Manifest.Handlers[i]
		pl := &pool{h: h, procs: make([]*process, h.Processes), restart: poolRestarts{pending: make([]bool, h.Processes)},
			claim: poolClaims{more: true},
			ahead: poolReserve{sizing: reserve.New(s.cfg.Settings.ClaimAhead, s.cfg.Settings.ClaimAheadMax),
				shown: [2]int{-1, -1}}} // the reserve's gauges are exported from the first step
		pl.ahead.sizing.SetSlots(h.Processes * h.Concurrency)
		for _, j := range h.Jobs {
			pl.allNames = append(pl.allNames, j.Name)
			if j.Cancellable {
				pl.asyncNames = append(pl.asyncNames, j.Name)
			}
		}
		l.pools = append(l.pools, pl)
		l.serve(pl)
		l.initAttach(pl)
		l.initLimits(pl)
	}
	return l
}

func (l *loop) run() error {
	l.setState(StateRunning)
	for _, pl := range l.pools {
		for slot := range pl.procs {
			l.spawn(pl, slot)
		}
	}
	defer l.stopClaimers()
	defer l.shut.endCut() // what the loop's goroutines still do ends now
	poll := time.NewTimer(jitterPoll(l.cfg.Settings.PollInterval))
	defer poll.Stop()
	tick := time.NewTicker(l.cfg.PingInterval)
	defer tick.Stop()
	for {
		if l.shut.state == StateStopped && l.procs == 0 && l.claim.inFlight == 0 && !l.claim.unknownInFlight {
			return l.fatal
		}
		select {
		case e := <-l.host.events:
			l.handle(e)
		case <-l.host.shutdown:
			l.handle(shutdownRequestEvent{})
		case <-poll.C:
			poll.Reset(jitterPoll(l.cfg.Settings.PollInterval))
			l.handle(pollEvent{})
		case <-tick.C:
			l.handle(tickEvent{})
		}
	}
}

// handle is one step of the loop: the event's own method (react), then
// the one settle step for what it touched.
func (l *loop) handle(e event) {
	l.react(e)
	l.settle(touched(e))
}

// react hands each event to its method; it decides nothing itself.
func (l *loop) react(e event) {
	switch e := e.(type) {
	case frameEvent:
		l.onFrame(e.proc, e.msg)
	case framesEvent:
		l.onFrames(e.proc, e.msgs)
	case protocolErrorEvent:
		l.onProtocolError(e.proc, e.err)
	case exitEvent:
		l.onExit(e.proc, e.err)
	case stdoutClosedEvent:
		l.onStdoutClosed(e.proc)
	case startTimeoutEvent:
		l.onStartTimeout(e.proc)
	case restartEvent:
		l.onRestart(e.pool, e.slot)
	case killEvent:
		l.onKill(e.proc, e.sig)
	case claimedEvent:
		l.onClaimed(e)
	case unknownClaimedEvent:
		l.onUnknownClaimed(e.jobs, e.err)
	case reconcileReadEvent:
		l.onReconcileRead(e.rows, e.err)
	case reconciledEvent:
		l.onReconciled(e.held, e.returned, e.err)
	case wakeEvent:
		l.onWake(e.queue)
	case writtenEvent:
		l.onWritten()
	case rateRetryEvent:
		l.onRateRetry(e.pool)
	case overridesReadEvent:
		l.onOverridesRead(e)
	case pollEvent:
		l.onPoll()
	case cancelWakeEvent:
		l.onCancelWake(e.jobID)
	case cancelsReadEvent:
		l.onCancelsRead(e.ids, e.err)
	case tickEvent:
		l.onTick()
	case jobTimeoutEvent:
		l.onJobTimeout(e.task)
	case shutdownRequestEvent:
		l.onShutdownRequest()
	case shutdownTimeoutEvent:
		l.onShutdownTimeout()
	case graceExpiredEvent:
		l.onGraceExpired()
	case workerLostEvent:
		l.onWorkerLost(e.err)
	case reregisteredEvent:
		l.onReregistered(e.ids, e.err)
	case unsendableEvent:
		l.onUnsendable(e.proc, e.msg, e.err)
	case stdinFailedEvent:
		l.onStdinFailed(e.proc, e.err)
	case attachRefusedEvent:
		l.onAttachRefused(e.proc, e.err)
	case claimHoldEvent, reserveWaitEvent:
		// A time bound of the claim: the settle step acts on it.
	case fleetSizeEvent:
		l.onFleetSize(e.n)
	case settleEvent:
		l.onInheritWaitOver()
	case settledEvent:
		l.onSettled(e.ids)
	case enqueuedEvent:
		l.onEnqueued(e.proc, e.id, e.jobID, e.err)
	case auditEvent:
		l.onAudit(e.reading)
	case ackTimeoutEvent:
		l.onAckTimeout(e.proc)
	}
}

// touched is the pool an event concerns, or nil when it may concern any.
func touched(e event) *pool {
	switch e := e.(type) {
	case frameEvent:
		return e.proc.pool
	case framesEvent:
		return e.proc.pool
	case protocolErrorEvent:
		return e.proc.pool
	case exitEvent:
		return e.proc.pool
	case stdoutClosedEvent:
		return e.proc.pool
	case unsendableEvent:
		return e.proc.pool
	case stdinFailedEvent:
		return e.proc.pool
	case attachRefusedEvent:
		return e.proc.pool
	case startTimeoutEvent:
		return e.proc.pool
	case killEvent:
		return e.proc.pool
	case ackTimeoutEvent:
		return e.proc.pool
	case enqueuedEvent:
		return e.proc.pool
	case restartEvent:
		return e.pool
	case claimedEvent:
		return e.pool
	case claimHoldEvent:
		return e.pool
	case reserveWaitEvent:
		return e.pool
	case rateRetryEvent:
		return e.pool
	case jobTimeoutEvent:
		return e.task.pool
	}
	return nil
}

// settle is the one step after every event, so that no handler has to
// remember what to do next: for the pools the event touched (nil: all),
// a retiring process left without a job is stopped, rows held since before
// a freeze are given back, pending jobs go to
// free slots and a claim is made if one is due; then the unknown-name
// claim, the end of `run --once` and the end of shutdown are checked.
func (l *loop) settle(only *pool) {
	for _, pl := range l.pools {
		if only != nil && pl != only {
			continue
		}
		for _, p := range pl.procs {
			if p != nil && p.state == procRetiring && len(p.tasks) == 0 {
				l.stopIdle(p)
			}
		}
		l.giveBackStale(pl)
		l.tryDispatch(pl)
		l.settleReserve(pl)
		l.maybeClaim(pl)
	}
	l.reconcile()
	l.maybeClaimUnknown()
	l.checkOnce()
	l.checkDone()
}

// servesQueue reports whether a notification for queue q concerns this
// sidecar; "" (an internal wake-up) concerns every pool.
func (l *loop) servesQueue(q string) bool {
	qs := l.cfg.Settings.Queues
	return q == "" || len(qs) == 0 || slices.Contains(qs, q)
}
