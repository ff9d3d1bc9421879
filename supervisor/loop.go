package supervisor

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/protocol"
	"github.com/soniq-dev/soniq-sidecar/protocol/session"
)

// eventKind says what happened; the loop is the only reader of events.
type eventKind int

const (
	evFrame           eventKind = iota + 1 // a frame from a handler process
	evProtocolError                        // a handler process broke the protocol
	evExit                                 // a handler process exited
	evStartTimeout                         // no hello within startup_timeout
	evRestart                              // backoff over: start a process in a pool slot
	evKill                                 // escalate a process stop (SIGTERM, then SIGKILL)
	evClaimed                              // a claim statement returned
	evUnknownClaimed                       // --dead-letter-unknown claim returned
	evWake                                 // new-job notification for a queue
	evJobTimeout                           // a job's timeout fired
	evShutdownTimeout                      // shutdown_timeout elapsed in DRAINING
	evGraceExpired                         // sync_handler_grace_seconds elapsed
	evWorkerLost                           // the heartbeat found our worker row gone or not active
	evReregistered                         // the worker row is registered again (ids: rows no longer ours)
	evStdoutClosed                         // a stdio process closed its stdout and did not exit
	evUnsendable                           // a frame for a handler process could not be encoded
	evStdinFailed                          // writing to a handler process failed
	evAttachRefused                        // an attach endpoint refused the session (attach.go)
)

type event struct {
	kind  eventKind
	proc  *process
	msg   protocol.Message
	err   error
	pool  *pool
	slot  int
	jobs  []backends.Job
	limit int
	queue string
	task  *task
	sig   syscall.Signal
	ids   []string
	// evClaimed: the claim asked for every job name of its pool, when the
	// writer had written writtenAt batches (run --once).
	allNames  bool
	writtenAt int64
}

// taskState is where one claimed job is, as far as the sidecar is concerned.
type taskState int

const (
	taskPending   taskState = iota // claimed, not yet handed to a process
	taskRunning                    // in a process; its row is ours to write
	taskAbandoned                  // row already written (timeout) or NACKed; the process may still hold it
)

// task is one claimed job.
type task struct {
	job       backends.Job
	pool      *pool
	spec      *JobSpec
	proc      *process
	state     taskState
	timer     *time.Timer
	startedAt time.Time
	abandoned string     // why: "job_timeout" or "shutdown_timeout"
	span      trace.Span // one span per execution; nil until started
	suspect   bool       // its process died holding other jobs too: it runs alone next (suspect.go)
}

// endSpan closes the execution's span once, with its outcome.
func (t *task) endSpan(outcome string, err string) {
	if t.span == nil {
		return
	}
	t.span.SetAttributes(attribute.String("soniq.outcome", outcome))
	if err != "" {
		t.span.SetStatus(codes.Error, firstLine(err))
	}
	t.span.End()
	t.span = nil
}

func (t *task) sync() bool { return !t.spec.Cancellable }

// pool is one manifest handler's processes and its claim state.
type pool struct {
	h          *Handler
	allNames   []string
	asyncNames []string
	procs      []*process // by slot; nil while the slot waits for a (re)start
	pending    []*task    // claimed, waiting for a free slot
	failures   int        // consecutive start failures or crashes
	crashLoop  bool
	started    bool // a process of this pool was started once
	claiming   bool
	more       bool // there may be runnable rows: claim when capacity allows
	restarting []bool
	isolated   map[*process]*task // processes running a suspect alone (suspect.go)
	endpoints  []string           // attach handlers: each slot's socket (attach.go)
	lastLoss   map[string]string  // attach handlers: why each endpoint's last session ended
	// run --once: the last claim asked for every job name and came back
	// empty, issued when the writer had written drainedAt batches.
	drained   bool
	drainedAt int64
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

// crashLoopThreshold is how many consecutive failures make a crash loop.
const crashLoopThreshold = 5

// healthyAfter resets the restart backoff.
const healthyAfter = time.Minute

func restartDelay(failures int) time.Duration {
	d := 100 * time.Millisecond
	for i := 1; i < failures && d < 30*time.Second; i++ {
		d *= 2
	}
	return min(d, 30*time.Second)
}

// loop is the supervisor's single-threaded core.
type loop struct {
	s      *Supervisor
	cfg    *Config
	writer *resultWriter
	sp     *spawner
	wg     *sync.WaitGroup

	pools []*pool
	live  map[string]*task // tasks whose row this sidecar still has to write

	state           State
	procs           int // spawned and not yet reaped
	claims          int // claim statements in flight
	shutdownTimer   *time.Timer
	graceTimer      *time.Timer
	lastWaitWarn    time.Time
	fatal           error
	unknownClaiming bool
	reregistering   bool  // the worker row was lost: no claim until it is registered again
	lostCause       error // what the heartbeat found
	servedNames     []string
}

func newLoop(s *Supervisor, w *resultWriter, sp *spawner, wg *sync.WaitGroup) *loop {
	l := &loop{s: s, cfg: &s.cfg, writer: w, sp: sp, wg: wg, live: map[string]*task{}}
	for i := range s.cfg.Manifest.Handlers {
		h := &s.cfg.Manifest.Handlers[i]
		pl := &pool{h: h, procs: make([]*process, h.Processes), restarting: make([]bool, h.Processes), more: true}
		for _, j := range h.Jobs {
			pl.allNames = append(pl.allNames, j.Name)
			if j.Cancellable {
				pl.asyncNames = append(pl.asyncNames, j.Name)
			}
		}
		l.servedNames = append(l.servedNames, pl.allNames...)
		l.pools = append(l.pools, pl)
		l.initAttach(pl)
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
	poll := time.NewTicker(l.cfg.Settings.PollInterval)
	defer poll.Stop()
	tick := time.NewTicker(l.cfg.PingInterval)
	defer tick.Stop()
	for {
		if l.state == StateStopped && l.procs == 0 && l.claims == 0 && !l.unknownClaiming {
			return l.fatal
		}
		select {
		case e := <-l.s.events:
			l.handle(e)
		case <-l.s.shutdown:
			l.onShutdownRequest()
		case <-poll.C:
			for _, pl := range l.pools {
				pl.more = true
				l.maybeClaim(pl)
			}
			l.maybeClaimUnknown()
		case <-tick.C:
			l.onTick()
		}
	}
}

func (l *loop) handle(e event) {
	switch e.kind {
	case evFrame:
		l.onFrame(e.proc, e.msg)
	case evProtocolError:
		l.breakProcess(e.proc, "protocol_error", fmt.Sprintf("protocol error from handler %s process %d: %v", e.proc.pool.h.Name, e.proc.pid, e.err))
	case evExit:
		l.onExit(e.proc, e.err)
	case evStdoutClosed:
		// No result can come back from it: crash handling, as for an exit.
		// A process already stopping is left to its stop's escalation.
		if p := e.proc; p.state != procStopping && p.state != procDead {
			reason := "start_failure"
			if p.hello != nil {
				reason = "crashed"
			}
			l.breakProcess(p, reason, fmt.Sprintf("handler %s process %d closed its stdout while still running", p.pool.h.Name, p.pid))
		}
	case evStartTimeout:
		if e.proc.state == procStarting {
			l.breakProcess(e.proc, "startup_timeout", fmt.Sprintf("handler %s process %d sent no hello within startup_timeout %s", e.proc.pool.h.Name, e.proc.pid, e.proc.pool.h.StartupTimeout))
		}
	case evRestart:
		e.pool.restarting[e.slot] = false
		if l.state <= StateDraining && e.pool.procs[e.slot] == nil && l.fatal == nil {
			l.spawn(e.pool, e.slot)
		}
	case evKill:
		l.onKill(e.proc, e.sig)
	case evClaimed:
		e.pool.drained, e.pool.drainedAt = e.err == nil && len(e.jobs) == 0 && e.allNames, e.writtenAt
		l.onClaimed(e.pool, e.jobs, e.limit, e.err)
		l.checkOnce()
	case evUnknownClaimed:
		l.onUnknownClaimed(e.jobs, e.err)
	case evWake:
		for _, pl := range l.pools {
			if l.servesQueue(e.queue) {
				pl.more = true
				l.maybeClaim(pl)
			}
		}
	case evJobTimeout:
		l.onJobTimeout(e.task)
	case evShutdownTimeout:
		if l.state == StateDraining {
			l.enterForce("shutdown_timeout elapsed")
		}
	case evWorkerLost:
		l.onWorkerLost(e.err)
	case evReregistered:
		l.onReregistered(e.ids, e.err)
	case evUnsendable:
		l.onUnsendable(e.proc, e.msg, e.err)
	case evStdinFailed:
		l.onStdinFailed(e.proc, e.err)
	case evAttachRefused:
		l.onAttachRefused(e.proc, e.err)
	case evGraceExpired:
		if l.state == StateForceTimeoutPath {
			l.setState(StateWaitForThread)
			l.lastWaitWarn = time.Now()
			l.s.log.Warn("state transition: sync_handler_grace_seconds expired; waiting for sync jobs without end (never killed; SIGKILL from the supervisor is the only hard stop)",
				"state", StateWaitForThread.String(), "from", StateForceTimeoutPath.String(),
				"sync_grace", l.cfg.Settings.SyncHandlerGrace, "sync_jobs", l.syncJobIDs())
		}
	}
}

func (l *loop) setState(s State) {
	l.state = s
	l.s.state.Store(int32(s))
	l.s.metrics.state(s)
}

// servesQueue reports whether a notification for queue q concerns this
// sidecar; "" (an internal wake-up) concerns every pool.
func (l *loop) servesQueue(q string) bool {
	qs := l.cfg.Settings.Queues
	return q == "" || len(qs) == 0 || slices.Contains(qs, q)
}

// ---- processes ----

func (l *loop) spawn(pl *pool, slot int) {
	h := pl.h
	p := &process{
		pool: pl, slot: slot,
		out:       make(chan protocol.Message, 2*h.Concurrency+16),
		state:     procStarting,
		spawnedAt: time.Now(),
		tasks:     map[string]*task{},
		stderr:    &stderrTail{},
	}
	// The transport starts the child, sets p.pid, consumes p.out and
	// reports frames, protocol errors and the exit as events.
	start := startStdio
	switch {
	case l.cfg.startTransport != nil:
		start = l.cfg.startTransport // tests: an in-process fake handler
	case h.Attached():
		p.endpoint, start = pl.endpoints[slot], startAttach
	case h.Transport == TransportUnix:
		start = startUnix
	}
	if err := start(transportEnv{sp: l.sp, maxFrame: l.cfg.MaxFrameBytes, log: l.s.log, emit: l.s.emit, wg: l.wg}, p); err != nil {
		if !pl.started && cannotStart(err) {
			// A command that was never started and cannot be is a
			// configuration error, not a crash to retry forever.
			se := &StartError{Handler: h.Name, Command: h.Command, Err: err}
			l.s.log.Error("handler command cannot be started; refusing to run", "handler", h.Name, "command", h.Command, "err", err)
			if l.fatal == nil {
				l.fatal = se
			}
			if l.state == StateRunning {
				l.enterDraining("configuration error")
			}
			return
		}
		l.startFailed(pl, slot, err.Error(), "start_failure")
		return
	}
	pl.started = true
	pl.procs[slot] = p
	l.procs++
	l.s.metrics.processState(h.Name, procStarting, procStarting, true)
	if p.endpoint != "" {
		// Its transport waits for the endpoint with backoff, as long as it takes.
		l.s.log.Info("attaching to handler endpoint", "handler", h.Name, "endpoint", p.endpoint, "slot", slot)
		return
	}
	p.startTimer = time.AfterFunc(h.StartupTimeout, func() { l.s.emit(event{kind: evStartTimeout, proc: p}) })
	l.s.log.Info("handler process started", "handler", h.Name, "pid", p.pid, "slot", slot)
}

func (l *loop) setProcState(p *process, to procState) {
	l.s.metrics.processState(p.pool.h.Name, p.state, to, false)
	p.state = to
}

// startFailed schedules a restart of a pool slot with exponential backoff
// and reports a crash loop once.
func (l *loop) startFailed(pl *pool, slot int, why, reason string) {
	pl.failures++
	delay := restartDelay(pl.failures)
	l.s.metrics.restart(pl.h.Name, reason)
	if pl.failures >= crashLoopThreshold && !pl.crashLoop {
		pl.crashLoop = true
		l.s.setReady(pl.h.Name, "crash loop: "+why)
		l.s.log.Error("handler is crash-looping: not ready, its jobs are not claimed until a process starts; retrying with backoff up to 30s",
			"handler", pl.h.Name, "failures", pl.failures, "last_error", why)
	} else if !pl.crashLoop {
		l.s.log.Warn("handler process failed; restarting with backoff", "handler", pl.h.Name, "slot", slot, "retry_in", delay, "err", why)
	}
	l.scheduleRestart(pl, slot, delay)
}

func (l *loop) scheduleRestart(pl *pool, slot int, delay time.Duration) {
	if pl.restarting[slot] || l.state > StateDraining {
		return
	}
	pl.restarting[slot] = true
	time.AfterFunc(delay, func() { l.s.emit(event{kind: evRestart, pool: pl, slot: slot}) })
}

func (l *loop) onFrame(p *process, m protocol.Message) {
	if p.state == procDead {
		return
	}
	switch msg := m.(type) {
	case *protocol.Hello:
		if p.state != procStarting {
			l.breakProcess(p, "protocol_error", fmt.Sprintf("protocol error from handler %s process %d: a second hello", p.pool.h.Name, p.pid))
			return
		}
		l.onHello(p, msg)
	case *session.Hello:
		if p.state != procStarting {
			l.breakProcess(p, "protocol_error", fmt.Sprintf("protocol error from handler %s %s: a second hello", p.pool.h.Name, p.label()))
			return
		}
		l.onAttachHello(p, msg)
	case *session.Draining:
		l.onDraining(p)
	case *protocol.Result:
		if p.hello == nil {
			l.breakProcess(p, "protocol_error", fmt.Sprintf("protocol error from handler %s process %d: a result before hello", p.pool.h.Name, p.pid))
			return
		}
		l.onResult(p, msg)
	case *protocol.Pong:
		if p.hello == nil {
			l.breakProcess(p, "protocol_error", fmt.Sprintf("protocol error from handler %s process %d: a pong before hello", p.pool.h.Name, p.pid))
			return
		}
		if msg.Seq == p.pingSeq {
			p.pingSentAt = time.Time{}
		}
	}
}

// checkHello compares a hello with the manifest's declaration.
func checkHello(h *Handler, hello *protocol.Hello) error {
	if hello.Protocol != protocol.Version {
		return &HelloMismatchError{Handler: h.Name, Detail: fmt.Sprintf("protocol version %d was not offered (SONIQ_PROTOCOL_VERSIONS=%d)", hello.Protocol, protocol.Version)}
	}
	said := map[string]bool{}
	for _, j := range hello.Jobs {
		said[j.Name] = j.Cancellable
	}
	var problems []string
	for _, j := range h.Jobs {
		c, ok := said[j.Name]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("job %s (manifest line %d) is declared in the manifest but the handler does not register it", j.Name, j.Line))
		case c != j.Cancellable:
			problems = append(problems, fmt.Sprintf("job %s (manifest line %d): the manifest says cancellable: %t, the handler says %t", j.Name, j.Line, j.Cancellable, c))
		}
		delete(said, j.Name)
	}
	for name := range said {
		problems = append(problems, fmt.Sprintf("job %s is registered by the handler but not declared in the manifest", name))
	}
	if len(problems) > 0 {
		slices.Sort(problems)
		return &HelloMismatchError{Handler: h.Name, Detail: strings.Join(problems, "; ")}
	}
	return nil
}

func (l *loop) onHello(p *process, hello *protocol.Hello) {
	pl := p.pool
	if p.startTimer != nil {
		p.startTimer.Stop()
	}
	if err := checkHello(pl.h, hello); err != nil {
		l.s.log.Error("handler hello disagrees with the manifest; refusing to run", "handler", pl.h.Name, "pid", p.pid, "err", err)
		if l.fatal == nil {
			l.fatal = err
		}
		l.breakProcess(p, "hello_mismatch", err.Error())
		if l.state == StateRunning {
			l.enterDraining("configuration error")
		}
		return
	}
	p.hello = hello
	p.readyAt = time.Now()
	if pl.h.MaxJobs > 0 {
		p.maxJobs = jitter(pl.h.MaxJobs)
	}
	l.setProcState(p, procReady)
	if pl.crashLoop {
		l.s.log.Info("handler recovered from its crash loop", "handler", pl.h.Name, "pid", p.pid)
	}
	pl.crashLoop = false
	l.s.setReady(pl.h.Name, "")
	l.s.log.Info("handler process ready", "handler", pl.h.Name, "pid", p.pid, "sdk", hello.SDK,
		"concurrency", p.capacity(), "sync_concurrency", p.syncCapacity())
	l.tryDispatch(pl)
	l.maybeClaim(pl)
}

// breakProcess gives up on a process that broke the protocol, missed its
// startup deadline or stopped answering: its live jobs fail with cause when
// it exits, and it is killed now.
func (l *loop) breakProcess(p *process, reason, cause string) {
	if p.state == procDead {
		return
	}
	if p.brokenCause == "" {
		p.brokenCause, p.brokenReason = cause, reason
		l.s.log.Error("handler process is broken; killing it", "handler", p.pool.h.Name, "pid", p.pid, "err", cause)
	}
	if p.state != procStopping {
		l.setProcState(p, procStopping)
	}
	p.closeInput()
	p.signalGroup(syscall.SIGKILL)
}

func (l *loop) onExit(p *process, err error) {
	pl := p.pool
	l.procs--
	wasReady := p.hello != nil
	expected := p.state == procStopping && p.brokenCause == ""
	l.setProcState(p, procDead)
	p.closeInput()
	if p.startTimer != nil {
		p.startTimer.Stop()
	}
	for _, t := range p.killTimers {
		t.Stop()
	}
	if pl.procs[p.slot] == p {
		pl.procs[p.slot] = nil
	}
	desc := p.endDescription(err)
	cause := p.brokenCause
	if cause == "" {
		cause = fmt.Sprintf("handler %s %s %s", pl.h.Name, p.label(), desc)
	}
	l.attachEnded(p, wasReady, err)
	if tail := p.stderr.String(); tail != "" && !expected {
		cause += "\nstderr (last lines):\n" + tail
	}
	l.settleCrash(p, cause, desc)
	p.tasks = nil
	if len(pl.ready()) == 0 && !expected {
		// A recycled process is replaced at once; only a failure makes
		// the handler not ready.
		l.s.setReady(pl.h.Name, l.notReadyReason(pl))
	}
	switch {
	case expected:
		l.s.log.Info("handler process stopped", "handler", pl.h.Name, "pid", p.pid, "exit", desc)
		if l.state <= StateDraining && l.fatal == nil {
			// A recycled process: replace it at once.
			l.s.metrics.restart(pl.h.Name, "recycle")
			l.respawn(pl, p)
		}
	default:
		if wasReady && time.Since(p.readyAt) >= healthyAfter {
			pl.failures = 0
		}
		if wasReady {
			l.s.log.Error("handler process exited unexpectedly; a job it held alone fails through the retry policy, jobs it held together re-run alone first", "handler", pl.h.Name, "pid", p.pid, "exit", desc)
		}
		if l.state <= StateDraining && l.fatal == nil {
			reason := "start_failure" // exited before its hello
			switch {
			case p.brokenReason != "":
				reason = p.brokenReason
			case wasReady:
				reason = "crashed"
			}
			l.startFailed(pl, p.slot, cause, reason)
		}
	}
	l.tryDispatch(pl)
	l.checkDone()
}

// stopProcess asks an idle process to exit: `shutdown` and EOF, then
// SIGTERM after grace, then SIGKILL after grace again. A process holding a
// sync job is never signalled.
func (l *loop) stopProcess(p *process, grace time.Duration) {
	if p.state == procStopping || p.state == procDead {
		return
	}
	l.setProcState(p, procStopping)
	p.closeInput()
	p.killTimers = append(p.killTimers, time.AfterFunc(grace, func() {
		l.s.emit(event{kind: evKill, proc: p, sig: syscall.SIGTERM})
	}), time.AfterFunc(2*grace, func() {
		l.s.emit(event{kind: evKill, proc: p, sig: syscall.SIGKILL})
	}))
}

func (l *loop) onKill(p *process, sig syscall.Signal) {
	if p.state == procDead {
		return
	}
	if p.syncHeld > 0 {
		return // never kill a sync job (docs/shutdown.md)
	}
	for _, t := range p.tasks {
		if t.state == taskRunning {
			return // holds a job whose row is still ours: let it finish
		}
	}
	l.s.log.Warn("handler process did not exit after shutdown; signalling it", "handler", p.pool.h.Name, "pid", p.pid, "signal", sig.String())
	p.signalGroup(sig)
}

// onTick pings idle-enough processes, kills silent ones, recycles by
// memory, and repeats the WAIT_FOR_THREAD warning.
func (l *loop) onTick() {
	now := time.Now()
	for _, pl := range l.pools {
		l.rescanAttach(pl)
		for _, p := range pl.procs {
			if p == nil || (p.state != procReady && p.state != procRetiring) {
				continue
			}
			if p.syncHeld > 0 {
				// A process running a sync job is never killed for silence:
				// a blocked event loop there is expected.
				p.pingSentAt = time.Time{}
			} else if !p.pingSentAt.IsZero() && now.Sub(p.pingSentAt) > l.cfg.PingTimeout {
				l.breakProcess(p, "unresponsive", fmt.Sprintf("handler %s process %d did not answer a ping for %s", pl.h.Name, p.pid, l.cfg.PingTimeout))
				continue
			} else if p.pingSentAt.IsZero() {
				p.pingSeq++
				if p.send(&protocol.Ping{Seq: p.pingSeq}) {
					p.pingSentAt = now
				}
			}
			if pl.h.MaxMemoryMB > 0 && p.state == procReady {
				if rss := p.rssMB(); rss > pl.h.MaxMemoryMB {
					l.s.log.Info("handler process over max_memory_mb; recycling it when idle", "handler", pl.h.Name, "pid", p.pid, "rss_mb", rss, "max_memory_mb", pl.h.MaxMemoryMB)
					l.retire(p)
				}
			}
		}
	}
	if l.state == StateWaitForThread && now.Sub(l.lastWaitWarn) >= l.cfg.WaitWarn {
		l.lastWaitWarn = now
		l.s.log.Warn("still waiting for sync jobs to return (WAIT_FOR_THREAD); heartbeats continue",
			"state", StateWaitForThread.String(), "sync_jobs", l.syncJobIDs())
	}
}

// retire stops giving a process jobs and stops it once idle.
func (l *loop) retire(p *process) {
	if p.state != procReady {
		return
	}
	l.setProcState(p, procRetiring)
	if len(p.tasks) == 0 {
		l.stopProcess(p, l.cfg.StopGrace)
	}
}

// ---- claiming and dispatch ----

func (l *loop) maybeClaim(pl *pool) {
	if l.state != StateRunning || pl.claiming || !pl.more || l.fatal != nil || l.reregistering {
		return
	}
	free, syncFree, pendingSync := 0, 0, 0
	for _, p := range pl.ready() {
		if pl.isolated[p] != nil {
			continue // takes no other job while its suspect runs
		}
		free += p.free()
		syncFree += p.syncFree()
	}
	queued := 0
	for _, t := range pl.pending {
		if t.suspect {
			continue // waits for an empty process, not for a slot of these
		}
		queued++
		if t.sync() {
			pendingSync++
		}
	}
	free -= queued
	if free <= 0 {
		return
	}
	names := pl.allNames
	if syncFree-pendingSync <= 0 {
		// No sync slot is free: claim only async jobs, so sync rows are not
		// held in the claimed-not-yet-running window for nothing.
		names = pl.asyncNames
	}
	if len(names) == 0 {
		return
	}
	pl.claiming, pl.more = true, false
	l.claims++
	params := backends.ClaimParams{WorkerID: l.s.workerID, Queues: l.cfg.Settings.Queues, Names: names, Limit: free}
	allNames, writtenAt := len(names) == len(pl.allNames), l.writer.written.Load()
	b := l.cfg.Backend
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		// Detached and never cancelled: a claim that committed must reach
		// the loop, or its rows would stay processing under a live worker.
		ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
		jobs, err := b.Claim(ctx, params)
		cancel()
		l.s.emit(event{kind: evClaimed, pool: pl, jobs: jobs, limit: params.Limit, err: err, allNames: allNames, writtenAt: writtenAt})
	}()
}

func (l *loop) onClaimed(pl *pool, jobs []backends.Job, limit int, err error) {
	pl.claiming = false
	l.claims--
	if err != nil {
		l.s.log.Warn("claiming jobs failed; retrying at the next poll", "handler", pl.h.Name, "err", err)
		l.checkDone()
		return
	}
	l.s.metrics.claimedRows(len(jobs))
	if len(jobs) == limit {
		pl.more = true
	}
	for _, j := range jobs {
		spec := pl.h.Job(j.Name)
		t := &task{job: j, pool: pl, spec: spec, state: taskPending}
		switch {
		case spec == nil:
			// Cannot happen (the claim names only this pool's jobs); fail safe.
			l.writer.nack(j.ID)
			continue
		case j.Attempts > j.MaxAttempts:
			// Repeated crashes pushed attempts past the maximum: dead-letter
			// without running, as Soniq's worker does.
			l.s.log.Error("job dead-lettered without running: attempts exceed max_attempts (it crashed repeatedly)",
				"job_id", j.ID, "job_name", j.Name, "queue", j.Queue, "attempts", j.Attempts, "max_attempts", j.MaxAttempts)
			l.writer.complete(backends.Completion{JobID: j.ID, Outcome: backends.OutcomeDeadLetter,
				Reason: backends.ReasonMaxRetriesExceeded, Error: "Max attempts exceeded (job crashed repeatedly)"})
			continue
		case !isJSONObject(j.Args):
			l.s.log.Error("job dead-lettered: its args are not a JSON object", "job_id", j.ID, "job_name", j.Name, "queue", j.Queue)
			l.writer.complete(backends.Completion{JobID: j.ID, Outcome: backends.OutcomeDeadLetter,
				Reason: backends.ReasonInvalidArguments, Error: "args must be a JSON object, got: " + truncate(string(j.Args), 200)})
			continue
		case argsUnsendable(j.Args, l.cfg.MaxFrameBytes) != "":
			// Sending it would break every handler process it reached (an
			// oversize or too-deep frame is a protocol error there), and
			// retrying cannot help: dead-letter it with the reason.
			why := argsUnsendable(j.Args, l.cfg.MaxFrameBytes)
			l.s.log.Error("job dead-lettered: its args cannot be sent to a handler", "job_id", j.ID, "job_name", j.Name, "queue", j.Queue, "reason", why)
			l.writer.complete(backends.Completion{JobID: j.ID, Outcome: backends.OutcomeDeadLetter,
				Reason: backends.ReasonInvalidArguments, Error: why})
			continue
		}
		if l.state >= StateForceTimeoutPath {
			// Claimed-not-yet-running at FORCE_TIMEOUT_PATH: the async branch.
			l.nack(t, "shutdown_timeout")
			continue
		}
		if old := l.live[j.ID]; old != nil {
			// The row came back to us after another worker recovered it
			// while we still ran it: only this claim may write it now.
			l.abandonSuperseded(old)
		}
		l.live[j.ID] = t
		pl.pending = append(pl.pending, t)
	}
	l.tryDispatch(pl)
	l.maybeClaim(pl)
	l.checkDone()
}

func (l *loop) maybeClaimUnknown() {
	if !l.cfg.DeadLetterUnknown || l.unknownClaiming || l.state != StateRunning || l.reregistering {
		return
	}
	l.unknownClaiming = true
	params := backends.ClaimParams{WorkerID: l.s.workerID, Queues: l.cfg.Settings.Queues, ExcludeNames: l.servedNames, Limit: 100}
	b := l.cfg.Backend
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
		jobs, err := b.Claim(ctx, params)
		cancel()
		l.s.emit(event{kind: evUnknownClaimed, jobs: jobs, err: err})
	}()
}

func (l *loop) onUnknownClaimed(jobs []backends.Job, err error) {
	l.unknownClaiming = false
	if err != nil {
		l.s.log.Warn("claiming unknown job names failed", "err", err)
		return
	}
	for _, j := range jobs {
		l.s.log.Error("job not served by any handler: dead-lettered (--dead-letter-unknown)", "job_id", j.ID, "job_name", j.Name, "queue", j.Queue)
		l.writer.complete(backends.Completion{JobID: j.ID, Outcome: backends.OutcomeDeadLetter,
			Reason: backends.ReasonJobNotFound, Error: fmt.Sprintf("Job %s not registered.", j.Name)})
	}
}

func isJSONObject(b json.RawMessage) bool {
	for _, c := range b {
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case '{':
			return true
		default:
			return false
		}
	}
	return false
}

// tryDispatch hands pending jobs to processes with a free slot; suspects,
// first in line, each to a process of its own.
func (l *loop) tryDispatch(pl *pool) {
	l.releaseIsolated(pl)
	if len(pl.pending) == 0 || l.state >= StateForceTimeoutPath {
		return
	}
	kept := pl.pending[:0]
	for _, t := range pl.pending {
		if l.adoptForeign(pl, t) {
			continue
		}
		var p *process
		if t.suspect {
			p = pl.pickEmpty(t.sync())
		} else {
			p = pl.pick(t)
		}
		if p == nil {
			kept = append(kept, t)
			continue
		}
		if t.suspect {
			l.isolate(t, p)
		}
		l.start(t, p)
	}
	clear(pl.pending[len(kept):])
	pl.pending = kept
}

func (l *loop) start(t *task, p *process) {
	t.proc, t.state, t.startedAt = p, taskRunning, time.Now()
	p.tasks[t.job.ID] = t
	if t.sync() {
		p.syncHeld++
	}
	p.jobsRun++
	frame := newJobFrame(t.job, l.s.workerID)
	frame.Traceparent = l.startSpan(t)
	if timeout := t.spec.EffectiveTimeout(l.cfg.Settings); timeout > 0 {
		dl := t.startedAt.Add(timeout).UnixMilli()
		frame.Deadline = &dl
		t.timer = time.AfterFunc(timeout, func() { l.s.emit(event{kind: evJobTimeout, task: t}) })
	}
	l.s.metrics.jobStarted(t.job.Queue, t.job.Name)
	if !p.send(frame) {
		l.breakProcess(p, "unresponsive", fmt.Sprintf("handler %s process %d stopped reading its stdin", p.pool.h.Name, p.pid))
		return
	}
	if p.maxJobs > 0 && p.jobsRun >= p.maxJobs {
		l.s.log.Info("handler process reached max_jobs; recycling it when idle", "handler", p.pool.h.Name, "pid", p.pid, "jobs", p.jobsRun)
		l.retire(p)
	}
}

// startSpan opens the execution's span (OTel messaging conventions) and
// returns its W3C traceparent for the job frame, or nil when tracing is off.
func (l *loop) startSpan(t *task) *string {
	_, span := l.s.tracer.Start(context.Background(), "process "+t.job.Name,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithTimestamp(t.startedAt),
		trace.WithAttributes(
			attribute.String("messaging.system", "soniq"),
			attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.operation.name", "process"),
			attribute.String("messaging.destination.name", t.job.Queue),
			attribute.String("messaging.message.id", t.job.ID),
			attribute.String("soniq.job.name", t.job.Name),
			attribute.Int("soniq.job.attempt", t.job.Attempts),
			attribute.String("soniq.handler", t.pool.h.Name),
			attribute.Int("soniq.handler.pid", t.proc.pid),
		))
	t.span = span
	sc := span.SpanContext()
	if !sc.IsValid() {
		return nil
	}
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), sc), carrier)
	if tp := carrier.Get("traceparent"); tp != "" {
		return &tp
	}
	return nil
}

// ---- results ----

func (l *loop) onResult(p *process, r *protocol.Result) {
	t := p.tasks[r.ID]
	if t == nil && p.foreign != nil {
		t = l.orphanResult(p, r)
	}
	if t == nil {
		l.s.log.Warn("result for a job this process does not hold; discarded", "handler", p.pool.h.Name, "pid", p.pid, "job_id", r.ID, "status", string(r.Status))
		l.s.metrics.lateResult("", "unknown_id")
		return
	}
	delete(p.tasks, r.ID)
	if t.sync() {
		p.syncHeld--
	}
	if t.timer != nil {
		t.timer.Stop()
	}
	if t.state == taskAbandoned {
		// Late: the row was already failed (job_timeout) or NACKed
		// (shutdown_timeout). It never touches the row.
		l.s.log.Info("late result discarded", "job_id", t.job.ID, "job_name", t.job.Name, "queue", t.job.Queue,
			"status", string(r.Status), "abandoned_by", t.abandoned)
		l.s.metrics.lateResult(t.job.Name, t.abandoned)
	} else {
		delete(l.live, t.job.ID)
		l.record(t, r)
	}
	if p.state == procRetiring && len(p.tasks) == 0 {
		l.stopProcess(p, l.cfg.StopGrace)
	}
	l.tryDispatch(p.pool)
	l.maybeClaim(p.pool)
	l.checkDone()
}

// record turns a handler's result into the row's terminal write.
func (l *loop) record(t *task, r *protocol.Result) {
	j := t.job
	dur := time.Since(t.startedAt)
	switch r.Status {
	case protocol.StatusDone:
		t.endSpan("done", "")
		l.s.metrics.jobEnded(j.Queue, j.Name, "done", dur)
		l.writer.complete(backends.Completion{JobID: j.ID, Outcome: backends.OutcomeDone, Result: r.Result, ResultTTL: l.cfg.Settings.ResultTTL})
	case protocol.StatusSnooze:
		reason := ""
		if r.Reason != nil {
			reason = *r.Reason
		}
		t.endSpan("snoozed", "")
		l.s.metrics.jobEnded(j.Queue, j.Name, "snoozed", dur)
		l.writer.complete(backends.Completion{JobID: j.ID, Outcome: backends.OutcomeSnooze, Reason: reason,
			Delay: time.Duration(r.Seconds * float64(time.Second))})
	case protocol.StatusFailed:
		e := r.Error
		if e.Reason == protocol.ErrorReasonInvalidArguments {
			l.invalidArgs(t, e.Message)
			return
		}
		text := e.Type + ": " + e.Message
		if e.Traceback != nil && *e.Traceback != "" {
			text += "\n" + *e.Traceback
		}
		l.fail(t, text, e.Retryable, "failed")
	default: // cancelled without a cancel: the handler gave up on its own
		l.fail(t, "cancelled by the handler without a cancel request", true, "failed")
	}
}

// fail applies the retry policy: retry with the job's delay, or
// dead-letter when attempts are exhausted or the error is permanent.
func (l *loop) fail(t *task, text string, retryable bool, status string) {
	j := t.job
	delete(l.live, j.ID)
	if !t.startedAt.IsZero() {
		l.s.metrics.jobEnded(j.Queue, j.Name, status, time.Since(t.startedAt))
	}
	c := backends.Completion{JobID: j.ID, Error: text}
	t.endSpan(status, text)
	switch {
	case !retryable:
		c.Outcome, c.Reason = backends.OutcomeDeadLetter, backends.ReasonPermanentFailure
		c.Error = permanentText(text)
		l.s.log.Error("job failed permanently: dead-lettered", "job_id", j.ID, "job_name", j.Name, "queue", j.Queue, "attempt", j.Attempts, "error", firstLine(text))
	case j.Attempts >= j.MaxAttempts:
		c.Outcome, c.Reason = backends.OutcomeDeadLetter, backends.ReasonMaxRetriesExceeded
		c.Error = "Max retries exceeded: " + text
		l.s.log.Error("job failed and has no attempts left: dead-lettered", "job_id", j.ID, "job_name", j.Name, "queue", j.Queue, "attempt", j.Attempts, "error", firstLine(text))
	default:
		c.Outcome = backends.OutcomeRetry
		c.Delay = t.spec.Retry.Delay(j.Attempts, randFloat)
		l.s.log.Warn("job failed; will retry", "job_id", j.ID, "job_name", j.Name, "queue", j.Queue, "attempt", j.Attempts, "max_attempts", j.MaxAttempts, "retry_in", c.Delay, "error", firstLine(text))
	}
	l.writer.complete(c)
}

// invalidArgs dead-letters a job whose args the handler's validation
// refused: retrying cannot fix the data, whatever the attempts left. The
// message is the last_error as is ("Corrupted argument data: ..."), as
// Soniq's worker writes it for reason invalid_arguments.
func (l *loop) invalidArgs(t *task, message string) {
	j := t.job
	delete(l.live, j.ID)
	if !t.startedAt.IsZero() {
		l.s.metrics.jobEnded(j.Queue, j.Name, "failed", time.Since(t.startedAt))
	}
	t.endSpan("failed", message)
	l.s.log.Error("job args failed the handler's validation: dead-lettered", "job_id", j.ID, "job_name", j.Name, "queue", j.Queue, "attempt", j.Attempts, "error", firstLine(message))
	l.writer.complete(backends.Completion{JobID: j.ID, Outcome: backends.OutcomeDeadLetter,
		Reason: backends.ReasonInvalidArguments, Error: message})
}

func (l *loop) onJobTimeout(t *task) {
	if t.state != taskRunning || l.live[t.job.ID] != t {
		return
	}
	timeout := t.spec.EffectiveTimeout(l.cfg.Settings)
	t.state, t.abandoned = taskAbandoned, "job_timeout"
	if t.sync() {
		// The handler cannot be interrupted: the row fails per policy, the
		// process keeps running and keeps its sync slot until it returns
		// (its late result is discarded).
		l.s.log.Warn("sync job exceeded its timeout: row failed per policy; the handler keeps running and keeps its sync slot",
			"job_id", t.job.ID, "job_name", t.job.Name, "queue", t.job.Queue, "timeout", timeout, "pid", t.proc.pid)
	} else {
		t.proc.send(&protocol.Cancel{ID: t.job.ID, Reason: protocol.ReasonJobTimeout})
		l.s.log.Warn("async job exceeded its timeout: cancelled, failed per policy",
			"job_id", t.job.ID, "job_name", t.job.Name, "queue", t.job.Queue, "timeout", timeout, "pid", t.proc.pid)
	}
	l.fail(t, timeoutText(timeout), true, "timeout")
	l.checkDone()
}

// ---- shutdown state machine (docs/shutdown.md) ----

func (l *loop) onShutdownRequest() {
	switch l.state {
	case StateRunning:
		l.enterDraining("shutdown requested")
	case StateDraining:
		l.s.log.Warn("second shutdown request during DRAINING", "state", l.state.String())
		l.enterForce("second shutdown request")
	case StateStopped:
		l.s.log.Info("already stopping", "state", l.state.String())
	default:
		l.s.log.Warn("shutdown already forced; sync jobs are never killed by the sidecar (SIGKILL abandons them; stale-worker recovery requeues their rows)",
			"state", l.state.String(), "sync_jobs", l.syncJobIDs())
	}
}

func (l *loop) enterDraining(why string) {
	l.setState(StateDraining)
	l.s.log.Info("state transition: claiming stopped, waiting for in-flight jobs", "state", StateDraining.String(),
		"from", StateRunning.String(), "reason", why, "in_flight", len(l.live), "shutdown_timeout", l.cfg.Settings.ShutdownTimeout)
	l.shutdownTimer = time.AfterFunc(l.cfg.Settings.ShutdownTimeout, func() { l.s.emit(event{kind: evShutdownTimeout}) })
	l.checkDone()
}

func (l *loop) enterForce(why string) {
	if l.shutdownTimer != nil {
		l.shutdownTimer.Stop()
	}
	l.setState(StateForceTimeoutPath)
	var asyncN, syncN int
	for _, t := range l.live {
		if t.state == taskRunning && t.sync() {
			syncN++
		} else {
			asyncN++
		}
	}
	l.s.log.Warn("state transition: async jobs are cancelled and NACKed, sync jobs get their grace", "state", StateForceTimeoutPath.String(),
		"from", StateDraining.String(), "reason", why, "async_jobs", asyncN, "sync_jobs", syncN, "sync_grace", l.cfg.Settings.SyncHandlerGrace)
	for _, pl := range l.pools {
		for _, t := range pl.pending {
			l.nack(t, "shutdown_timeout")
		}
		pl.pending = nil
	}
	for _, t := range l.live {
		if t.state != taskRunning {
			continue
		}
		if t.sync() {
			// min(job_timeout, remaining shutdown_timeout): shutdown fired
			// first, so the job timeout no longer applies.
			if t.timer != nil {
				t.timer.Stop()
			}
			continue
		}
		t.proc.send(&protocol.Cancel{ID: t.job.ID, Reason: protocol.ReasonShutdownTimeout})
		l.nack(t, "shutdown_timeout")
	}
	if l.syncHeld() > 0 {
		l.graceTimer = time.AfterFunc(l.cfg.Settings.SyncHandlerGrace, func() { l.s.emit(event{kind: evGraceExpired}) })
	}
	l.checkDone()
}

// nack is the async branch of FORCE_TIMEOUT_PATH for one job.
func (l *loop) nack(t *task, reason string) {
	j := t.job
	delete(l.live, j.ID)
	if t.timer != nil {
		t.timer.Stop()
	}
	if t.state == taskRunning {
		t.state, t.abandoned = taskAbandoned, reason
		l.s.metrics.jobEnded(j.Queue, j.Name, "nacked", time.Since(t.startedAt))
	}
	t.endSpan("nacked", "")
	l.writer.nack(j.ID)
	l.s.metrics.shutdownNack(j.Queue, j.Name, reason)
	l.s.log.Warn("shutdown_nack", "job_id", j.ID, "job_name", j.Name, "queue", j.Queue, "reason", reason, "attempts", j.Attempts)
}

func (l *loop) syncHeld() int {
	n := 0
	for _, pl := range l.pools {
		for _, p := range pl.procs {
			if p != nil {
				n += p.syncHeld
			}
		}
	}
	return n
}

func (l *loop) syncJobIDs() []string {
	var ids []string
	for _, pl := range l.pools {
		for _, p := range pl.procs {
			if p == nil {
				continue
			}
			for id, t := range p.tasks {
				if t.sync() {
					ids = append(ids, id)
				}
			}
		}
	}
	slices.Sort(ids)
	return ids
}

// checkDone moves to STOPPED once nothing is left to wait for: in
// DRAINING every job has returned; after FORCE_TIMEOUT_PATH every sync job
// has returned (async ones were NACKed and are not waited for).
func (l *loop) checkDone() {
	switch l.state {
	case StateDraining:
		if len(l.live) > 0 || l.claims > 0 {
			return
		}
		for _, pl := range l.pools {
			for _, p := range pl.procs {
				if p != nil && len(p.tasks) > 0 {
					return
				}
			}
		}
	case StateForceTimeoutPath, StateWaitForThread:
		if len(l.live) > 0 || l.syncHeld() > 0 {
			return
		}
	default:
		return
	}
	l.enterStopped()
}

func (l *loop) enterStopped() {
	from := l.state
	for _, tm := range []*time.Timer{l.shutdownTimer, l.graceTimer} {
		if tm != nil {
			tm.Stop()
		}
	}
	l.setState(StateStopped)
	l.s.log.Info("state transition: every job returned or was NACKed; stopping handler processes", "state", StateStopped.String(), "from", from.String())
	grace := l.cfg.StopGrace
	if from != StateDraining {
		// What processes still hold are NACKed async jobs that were sent a
		// cancel: keep the exit bounded.
		grace = min(grace, 500*time.Millisecond)
	}
	for _, pl := range l.pools {
		for _, p := range pl.procs {
			if p != nil {
				if p.state == procStarting {
					p.signalGroup(syscall.SIGKILL)
				}
				l.stopProcess(p, grace)
			}
		}
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return truncate(line, 300)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
