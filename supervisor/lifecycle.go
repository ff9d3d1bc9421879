package supervisor

// Processes: spawning, the hello, breaking, exits, restarts with backoff,
// stopping, killing and recycling, all on the loop goroutine.

import (
	"fmt"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/soniq-dev/soniq-sidecar/config"
	"github.com/soniq-dev/soniq-sidecar/internal/transport"
	"github.com/soniq-dev/soniq-sidecar/protocol"
)

// crashLoopThreshold is how many consecutive failures make a crash loop.
const crashLoopThreshold = 5

// healthyAfter resets the restart backoff.
const healthyAfter = time.Minute

// The restart backoff of a handler process that failed: restartBackoffMin
// after the first failure, doubling up to restartBackoffMax.
const (
	restartBackoffMin = 100 * time.Millisecond
	restartBackoffMax = 30 * time.Second
)

func restartDelay(failures int) time.Duration {
	d := restartBackoffMin
	for i := 1; i < failures && d < restartBackoffMax; i++ {
		d *= 2
	}
	return min(d, restartBackoffMax)
}

// poolRestarts is a pool's restart state.
type poolRestarts struct {
	failures  int    // consecutive start failures or crashes
	crashLoop bool   // failures reached crashLoopThreshold: the handler is not ready
	started   bool   // a process of this pool was started once
	pending   []bool // by slot: a restart is scheduled
}

// pings is a process's liveness check (onTick).
type pings struct {
	seq    int64
	sentAt time.Time // zero when no ping is outstanding
}

// addSlot gives a pool one more slot (a new attach endpoint) and returns it.
func (l *loop) addSlot(pl *pool) int {
	pl.procs = append(pl.procs, nil)
	pl.restart.pending = append(pl.restart.pending, false)
	return len(pl.procs) - 1
}

func (l *loop) spawn(pl *pool, slot int) {
	h := pl.h
	var endpoint string
	if h.Attached() {
		endpoint = pl.attach.endpoints[slot]
	}
	p := &process{
		pool: pl, slot: slot,
		out:    transport.NewQueue(2*h.Concurrency + 16),
		state:  procStarting,
		tasks:  map[string]*task{},
		attach: procAttach{endpoint: endpoint},
	}
	// The transport starts the child, consumes p.out and reports frames,
	// protocol errors and the exit, which procEvents turns into events.
	start := transport.Start
	if l.cfg.startTransport != nil {
		start = l.cfg.startTransport // tests: an in-process fake handler
	}
	env := transport.Env{Spawner: l.sp, MaxFrameBytes: l.cfg.MaxFrameBytes, Log: l.log, WG: l.wg}
	c, err := start(env, transport.Spec{Handler: h, Endpoint: p.attach.endpoint, Out: p.out.Out(), Events: procEvents{emit: l.emit, p: p}})
	if err != nil {
		if !pl.restart.started && cannotStart(err) {
			// A command that was never started and cannot be is a
			// configuration error, not a crash to retry forever.
			se := &StartError{Handler: h.Name, Command: h.Command, Err: err}
			l.log.Error("handler command cannot be started; refusing to run", "handler", h.Name, "command", h.Command, "err", err)
			if l.fatal == nil {
				l.fatal = se
			}
			if l.shut.state == StateRunning {
				l.enterDraining("configuration error")
			}
			return
		}
		l.startFailed(pl, slot, err.Error(), "start_failure")
		return
	}
	p.conn, p.pid = c, c.PID()
	pl.restart.started = true
	pl.procs[slot] = p
	l.procs++
	l.metrics.processState(h.Name, procStarting, procStarting, true)
	if p.attach.endpoint != "" {
		// Its transport waits for the endpoint with backoff, as long as it takes.
		l.log.Info("attaching to handler endpoint", "handler", h.Name, "endpoint", p.attach.endpoint, "slot", slot)
		return
	}
	p.startTimer = time.AfterFunc(h.StartupTimeout, func() { l.emit(startTimeoutEvent{proc: p}) })
	l.log.Info("handler process started", "handler", h.Name, p.who(), "slot", slot)
}

func (l *loop) setProcState(p *process, to procState) {
	if p.state == to {
		return
	}
	if !p.state.canBecome(to) {
		// A bug in the loop, not a fault of the process: said loudly, and
		// the process keeps its state rather than jump the diagram.
		l.log.Error("impossible process state transition refused (a sidecar bug; please report it)",
			"handler", p.pool.h.Name, p.who(), "from", p.state.String(), "to", to.String())
		return
	}
	l.metrics.processState(p.pool.h.Name, p.state, to, false)
	p.state = to
}

// startFailed schedules a restart of a pool slot with exponential backoff
// and reports a crash loop once.
func (l *loop) startFailed(pl *pool, slot int, why, reason string) {
	pl.restart.failures++
	delay := restartDelay(pl.restart.failures)
	l.metrics.restart(pl.h.Name, reason)
	if pl.restart.failures >= crashLoopThreshold && !pl.restart.crashLoop {
		pl.restart.crashLoop = true
		l.host.setReady(pl.h.Name, "crash loop: "+why)
		l.log.Error("handler is crash-looping: not ready, its jobs are not claimed until a process starts; retrying with backoff up to 30s",
			"handler", pl.h.Name, "failures", pl.restart.failures, "last_error", why)
	} else if !pl.restart.crashLoop {
		l.log.Warn("handler process failed; restarting with backoff", "handler", pl.h.Name, "slot", slot, "retry_in", delay, "err", why)
	}
	l.scheduleRestart(pl, slot, delay)
}

func (l *loop) scheduleRestart(pl *pool, slot int, delay time.Duration) {
	if pl.restart.pending[slot] || l.shut.state > StateDraining {
		return
	}
	pl.restart.pending[slot] = true
	time.AfterFunc(delay, func() { l.emit(restartEvent{pool: pl, slot: slot}) })
}

// onFrames handles frames a process sent together, in order.
func (l *loop) onFrames(p *process, ms []protocol.Message) {
	for _, m := range ms {
		l.onFrame(p, m)
	}
}

func (l *loop) onProtocolError(p *process, err error) {
	l.breakProcess(p, "protocol_error", fmt.Sprintf("protocol error from handler %s process %d: %v", p.pool.h.Name, p.pid, err))
}

// onStdoutClosed: no result can come back from the process, so it is
// handled as a crash. A process already stopping is left to its stop's
// escalation.
func (l *loop) onStdoutClosed(p *process) {
	if p.state == procStopping || p.state == procDead {
		return
	}
	reason := "start_failure"
	if p.hello != nil {
		reason = "crashed"
	}
	l.breakProcess(p, reason, fmt.Sprintf("handler %s process %d closed its stdout while still running", p.pool.h.Name, p.pid))
}

func (l *loop) onStartTimeout(p *process) {
	if p.state == procStarting {
		l.breakProcess(p, "startup_timeout", fmt.Sprintf("handler %s process %d sent no hello within startup_timeout %s", p.pool.h.Name, p.pid, p.pool.h.StartupTimeout))
	}
}

// onRestart: a slot's backoff is over; it gets a process unless the
// sidecar is past DRAINING or cannot run.
func (l *loop) onRestart(pl *pool, slot int) {
	pl.restart.pending[slot] = false
	if l.shut.state <= StateDraining && pl.procs[slot] == nil && l.fatal == nil {
		l.spawn(pl, slot)
	}
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
	case *transport.SessionHello:
		if p.state != procStarting {
			l.breakProcess(p, "protocol_error", fmt.Sprintf("protocol error from handler %s %s: a second hello", p.pool.h.Name, p.label()))
			return
		}
		l.onAttachHello(p, msg)
	case *transport.Draining:
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
		if msg.Seq == p.ping.seq {
			p.ping.sentAt = time.Time{}
		}
	case *protocol.Enqueue:
		if p.hello == nil {
			l.breakProcess(p, "protocol_error", fmt.Sprintf("protocol error from handler %s process %d: an enqueue before hello", p.pool.h.Name, p.pid))
			return
		}
		l.onEnqueue(p, msg)
	}
}

// checkHello compares a hello with the manifest's declaration.
func checkHello(h *config.Handler, hello *protocol.Hello) error {
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
		l.log.Error("handler hello disagrees with the manifest; refusing to run", "handler", pl.h.Name, p.who(), "err", err)
		if l.fatal == nil {
			l.fatal = err
		}
		l.breakProcess(p, "hello_mismatch", err.Error())
		if l.shut.state == StateRunning {
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
	if pl.restart.crashLoop {
		l.log.Info("handler recovered from its crash loop", "handler", pl.h.Name, p.who())
	}
	pl.restart.crashLoop = false
	l.host.setReady(pl.h.Name, "")
	l.log.Info("handler process ready", "handler", pl.h.Name, p.who(), "sdk", hello.SDK,
		"concurrency", p.capacity(), "sync_concurrency", p.syncCapacity())
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
		l.log.Error("handler process is broken; killing it", "handler", p.pool.h.Name, p.who(), "err", cause)
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
	if p.ack.timer != nil {
		p.ack.timer.Stop()
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
	if tail := p.stderrTail(); tail != "" && !expected {
		cause += "\nstderr (last lines):\n" + tail
	}
	l.settleCrash(p, cause, desc)
	l.vacate(p)
	if len(pl.ready()) == 0 && !expected {
		// A recycled process is replaced at once; only a failure makes
		// the handler not ready.
		l.host.setReady(pl.h.Name, l.notReadyReason(pl))
	}
	switch {
	case expected:
		l.log.Info("handler process stopped", "handler", pl.h.Name, p.who(), "exit", desc)
		if l.shut.state <= StateDraining && l.fatal == nil {
			// A recycled process: replace it at once.
			l.metrics.restart(pl.h.Name, "recycle")
			l.respawn(pl, p)
		}
	default:
		if wasReady && time.Since(p.readyAt) >= healthyAfter {
			pl.restart.failures = 0
		}
		if wasReady {
			l.log.Error("handler process exited unexpectedly; a job it held alone fails through the retry policy, jobs it held together re-run alone first", "handler", pl.h.Name, p.who(), "exit", desc)
		}
		if l.shut.state <= StateDraining && l.fatal == nil {
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
		l.emit(killEvent{proc: p, sig: syscall.SIGTERM})
	}), time.AfterFunc(2*grace, func() {
		l.emit(killEvent{proc: p, sig: syscall.SIGKILL})
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
	l.log.Warn("handler process did not exit after shutdown; signalling it", "handler", p.pool.h.Name, p.who(), "signal", sig.String())
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
				p.ping.sentAt = time.Time{}
			} else if !p.ping.sentAt.IsZero() && now.Sub(p.ping.sentAt) > l.cfg.PingTimeout {
				l.breakProcess(p, "unresponsive", fmt.Sprintf("handler %s process %d did not answer a ping for %s", pl.h.Name, p.pid, l.cfg.PingTimeout))
				continue
			} else if p.ping.sentAt.IsZero() {
				p.ping.seq++
				if p.send(&protocol.Ping{Seq: p.ping.seq}) {
					p.ping.sentAt = now
				}
			}
			if pl.h.MaxMemoryMB > 0 && p.state == procReady {
				if rss := p.rssMB(); rss > pl.h.MaxMemoryMB {
					l.log.Info("handler process over max_memory_mb; recycling it when idle", "handler", pl.h.Name, p.who(), "rss_mb", rss, "max_memory_mb", pl.h.MaxMemoryMB)
					l.retire(p)
				}
			}
		}
	}
	l.remindWaiting(now)
}

// retire stops giving a process jobs and stops it once idle.
func (l *loop) retire(p *process) {
	if p.state != procReady {
		return
	}
	l.setProcState(p, procRetiring) // stopped by the settle step once it holds no job
}
