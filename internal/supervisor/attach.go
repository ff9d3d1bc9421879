package supervisor

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/soniq-dev/soniq-sidecar/internal/config"
	"github.com/soniq-dev/soniq-sidecar/protocol"
	"github.com/soniq-dev/soniq-sidecar/protocol/session"
)

// Attach mode: a handler whose processes run in a container of their own
// and serve the Handler service on a Unix socket (the SDKs' --listen). The
// sidecar spawns and signals nothing for it: each endpoint is one process,
// a Session stream (protocol/session, a plain gRPC client: go-plugin's
// reattach expects a process it started) is its life, and the end of the
// connection is its exit. The loop treats it like any other process: the
// hello is checked against the manifest, pings and jobs go over the
// stream, a lost connection is a crash for the jobs it held (the suspect
// rule), and a new connection (with backoff) is its restart.

// Backoff while an endpoint does not answer (its container is starting or
// restarting): quick at first, capped so a returning handler is found
// soon.
const (
	attachRetryFirst = 100 * time.Millisecond
	attachRetryMax   = 2 * time.Second
)

// errEndpointGone marks the end of an attached process's connection that
// was not the sidecar's doing.
var errEndpointGone = errors.New("connection lost")

// attachedConn is the loop's handle on an attached process: the sidecar
// owns no process there, so it signals nothing; a SIGKILL (the loop giving
// up on a broken process) ends the connection instead.
type attachedConn struct {
	path   string
	detach func()
}

func (c attachedConn) pid() int     { return 0 }
func (c attachedConn) peer() string { return "endpoint " + c.path }
func (c attachedConn) signal(sig syscall.Signal) {
	if sig == syscall.SIGKILL {
		c.detach()
	}
}

// attachProc is the transport of one attach endpoint.
type attachProc struct {
	te     transportEnv
	p      *process
	path   string
	ctx    context.Context
	cancel context.CancelFunc // detaches: ends the connection attempt or the session
}

// startAttach starts connecting to p's endpoint; the hello (or a protocol
// error) and the end of the connection are reported as events.
func startAttach(te transportEnv, p *process) error {
	a := &attachProc{te: te, p: p, path: p.endpoint}
	a.ctx, a.cancel = context.WithCancel(context.Background())
	p.conn = attachedConn{path: a.path, detach: a.cancel}
	te.wg.Add(1)
	go a.run()
	return nil
}

func (a *attachProc) run() {
	defer a.te.wg.Done()
	defer a.cancel()
	s, gaveUp := a.connect()
	if s == nil {
		if !gaveUp {
			// A protocol error or a refusal was reported: the loop
			// closes p.out as for a broken process; then this "process"
			// has exited.
			for range a.p.out {
			}
			a.te.emit(exitEvent{proc: a.p, err: fmt.Errorf("no session with the handler at %s", a.path)})
		}
		return
	}
	// The hello with its running jobs: the loop checks it as a spawned
	// process's.
	a.te.emit(frameEvent{proc: a.p, msg: s.Hello()})
	recvDone := make(chan struct{})
	var endErr error
	sc := &streamConn{te: a.te, p: a.p, s: s, recvDone: recvDone,
		ended: func(err error) { endErr = err },
		protocolError: func(err error) {
			a.te.emit(protocolErrorEvent{proc: a.p, err: err})
		}}
	exitDone := make(chan struct{})
	go func() {
		// The end of the stream is the process's exit for the loop; it
		// closes p.out when it handles it, which ends the sender. run
		// waits for this goroutine.
		defer close(exitDone)
		<-recvDone
		err := a.endError(endErr)
		_ = s.Close()
		a.te.emit(exitEvent{proc: a.p, err: err})
	}()
	sc.run()
	<-exitDone
}

// endError says how a session ended: nil for a clean end after the
// sidecar's `shutdown`, else the lost connection.
func (a *attachProc) endError(err error) error {
	switch {
	case a.ctx.Err() != nil:
		return fmt.Errorf("the connection to the handler at %s was closed by the sidecar", a.path)
	case err == nil && a.p.shutdownSent.Load():
		return nil
	case err == nil:
		return fmt.Errorf("the connection to the handler at %s was lost: the handler ended the session: %w", a.path, errEndpointGone)
	}
	return fmt.Errorf("the connection to the handler at %s was lost: %w: %w", a.path, errEndpointGone, err)
}

// connect opens a session, retrying with backoff while the endpoint does
// not answer. It returns nil when it gave up: the loop closed p.out (an
// exitEvent was emitted) or a protocol error or refusal was reported (gaveUp
// false).
func (a *attachProc) connect() (*session.Session, bool) {
	h := a.p.pool.h
	delay := attachRetryFirst
	waitingSince := time.Now()
	warned := false
	for {
		s, err := session.Open(a.ctx, a.path, session.Options{HelloTimeout: h.StartupTimeout, MaxFrameBytes: a.te.maxFrame})
		switch {
		case err == nil:
			return s, false
		case errors.Is(err, session.ErrProtocol):
			a.te.emit(protocolErrorEvent{proc: a.p, err: err})
			return nil, false
		case errors.Is(err, session.ErrRefused):
			// Another sidecar holds the endpoint: a deployment error
			// (two sidecars for one handler container), not a crash.
			a.te.emit(attachRefusedEvent{proc: a.p, err: err})
			return nil, false
		}
		if !warned && time.Since(waitingSince) >= h.StartupTimeout {
			warned = true
			a.te.log.Warn("attach endpoint does not answer yet; still trying", "handler", h.Name, "endpoint", a.path,
				"waiting", time.Since(waitingSince).Round(time.Millisecond), "err", err)
		}
		timer := time.NewTimer(delay)
		select {
		case _, open := <-a.p.out:
			timer.Stop()
			if !open {
				// The loop stopped waiting for it (shutdown).
				a.te.emit(exitEvent{proc: a.p, err: fmt.Errorf("never attached to %s: %w", a.path, err)})
				return nil, true
			}
		case <-a.ctx.Done():
			timer.Stop()
			a.te.emit(exitEvent{proc: a.p, err: fmt.Errorf("never attached to %s: %w", a.path, err)})
			for range a.p.out {
			}
			return nil, true
		case <-timer.C:
		}
		delay = min(2*delay, attachRetryMax)
	}
}

// ---- the loop's side ----

// initAttach gives an attach handler's pool its endpoints (the literal
// paths now; globs are expanded on every tick) and says what readiness
// waits for.
func (l *loop) initAttach(pl *pool) {
	if !pl.h.Attached() {
		return
	}
	for _, p := range pl.h.Attach {
		if !config.IsGlob(p) {
			pl.endpoints = append(pl.endpoints, p)
		}
	}
	l.s.setReady(pl.h.Name, l.attachNotReady(pl))
}

// attachNotReady is the /readyz reason of an attach handler with no
// attached endpoint.
func (l *loop) attachNotReady(pl *pool) string {
	return "no attached endpoint (waiting for " + strings.Join(pl.h.Attach, ", ") + ")"
}

// rescanAttach adds a slot for every new endpoint a glob matches.
func (l *loop) rescanAttach(pl *pool) {
	if !pl.h.Attached() || l.state > StateRunning || l.fatal != nil {
		return
	}
	for _, pat := range pl.h.Attach {
		if !config.IsGlob(pat) {
			continue
		}
		matches, _ := filepath.Glob(pat) // the pattern was checked at load
		for _, m := range matches {
			if slices.Contains(pl.endpoints, m) {
				continue
			}
			pl.endpoints = append(pl.endpoints, m)
			pl.procs = append(pl.procs, nil)
			pl.restarting = append(pl.restarting, false)
			l.log.Info("attach endpoint found", "handler", pl.h.Name, "endpoint", m, "pattern", pat)
			l.spawn(pl, len(pl.procs)-1)
		}
	}
}

// onAttachHello: the hello of a session; the jobs it still runs from an
// earlier session occupy capacity until their results arrive.
func (l *loop) onAttachHello(p *process, h *session.Hello) {
	p.foreign = map[string]bool{}
	for _, r := range h.Running {
		spec := p.pool.h.Job(r.Name)
		p.foreign[r.ID] = spec == nil || !spec.Cancellable
	}
	if len(h.Running) > 0 {
		l.log.Info("attached handler still runs jobs from an earlier session; they occupy its capacity until their results arrive",
			"handler", p.pool.h.Name, "endpoint", p.endpoint, "running", len(h.Running))
	}
	l.onHello(p, &h.Hello)
	if p.state == procReady {
		pl := p.pool
		l.metrics.attachEvent(pl.h.Name, "attached", "")
		if why, ok := pl.lastLoss[p.endpoint]; ok {
			l.metrics.attachEvent(pl.h.Name, "reconnected", why)
			delete(pl.lastLoss, p.endpoint)
		}
	}
}

// onDraining: the handler was told to stop (its container is terminating):
// nothing more is dispatched to it; its jobs report as usual and it ends
// the session when it holds none.
func (l *loop) onDraining(p *process) {
	if p.state != procReady && p.state != procStarting {
		return
	}
	l.log.Info("attached handler is draining: no more jobs go to it", "handler", p.pool.h.Name, "endpoint", p.endpoint, "jobs", len(p.tasks))
	l.setProcState(p, procRetiring)
	if len(p.tasks) == 0 {
		l.stopProcess(p, l.cfg.StopGrace)
	}
	if len(p.pool.ready()) == 0 {
		l.s.setReady(p.pool.h.Name, "every attached endpoint is draining; "+l.attachNotReady(p.pool))
	}
}

// onAttachRefused: the endpoint already has a session with another
// sidecar. Two sidecars for one handler process is a deployment error; this
// one keeps trying (the other may be a predecessor that is going away).
func (l *loop) onAttachRefused(p *process, err error) {
	l.log.Error("attach endpoint refused this sidecar's session: another session is open on it (two sidecars for one handler container?); retrying",
		"handler", p.pool.h.Name, "endpoint", p.endpoint, "err", err)
	p.brokenCause, p.brokenReason = fmt.Sprintf("handler %s: %v", p.pool.h.Name, err), "refused"
	l.setProcState(p, procStopping)
	p.closeInput()
}

// adoptForeign: a claimed job whose execution an attached process still
// runs from an earlier session (the row came back after a lost connection
// or a sidecar restart) is attached to that execution instead of running
// it twice. It reports whether t was adopted.
func (l *loop) adoptForeign(pl *pool, t *task) bool {
	for _, p := range pl.procs {
		if p == nil || p.foreign == nil || p.state == procDead {
			continue
		}
		if _, ok := p.foreign[t.job.ID]; !ok {
			continue
		}
		delete(p.foreign, t.job.ID)
		l.adopt(t, p)
		return true
	}
	return false
}

// adopt makes t the task of an execution p already runs.
func (l *loop) adopt(t *task, p *process) {
	t.proc, t.state, t.startedAt = p, taskRunning, time.Now()
	p.tasks[t.job.ID] = t
	if t.sync() {
		p.syncHeld++
	}
	if timeout := t.spec.EffectiveTimeout(l.cfg.Settings); timeout > 0 {
		t.timer = time.AfterFunc(timeout, func() { l.emit(jobTimeoutEvent{task: t}) })
	}
	l.metrics.jobStarted(t.job.Queue, t.job.Name)
	l.log.Info("claimed job is still running in the attached handler from an earlier session; adopted, not run again",
		"job_id", t.job.ID, "job_name", t.job.Name, "handler", p.pool.h.Name, "endpoint", p.endpoint)
}

// orphanResult handles a result for a job p does not hold: one it ran
// from an earlier session. When the row is claimed again and waits here,
// the result is its result; otherwise it is discarded.
func (l *loop) orphanResult(p *process, r *protocol.Result) *task {
	delete(p.foreign, r.ID)
	pl := p.pool
	for i, t := range pl.pending {
		if t.job.ID == r.ID && !t.suspect {
			pl.pending = slices.Delete(pl.pending, i, i+1)
			l.adopt(t, p)
			return t
		}
	}
	return nil
}

// foreignSync counts the sync jobs among p's foreign ones.
func (p *process) foreignSync() int {
	n := 0
	for _, sync := range p.foreign {
		if sync {
			n++
		}
	}
	return n
}

// label names a process in causes: its pid, or its endpoint.
func (p *process) label() string {
	if p.endpoint != "" {
		return "endpoint " + p.endpoint
	}
	return fmt.Sprintf("process %d", p.pid)
}

// endDescription says how a process ended, for logs and last_error.
func (p *process) endDescription(err error) string {
	if p.endpoint == "" {
		return exitDescription(err)
	}
	if err == nil {
		return "ended its session"
	}
	return err.Error()
}

// ---- metrics ----

type attachMetrics struct {
	endpoints metric.Int64UpDownCounter
	events    metric.Int64Counter
}

func (x *Metrics) initAttach(m metric.Meter) error {
	var err error
	x.attach.endpoints, err = m.Int64UpDownCounter("soniq_attach_endpoints",
		metric.WithDescription("Attached handler endpoints with an open session, per handler."))
	if err != nil {
		return err
	}
	x.attach.events, err = m.Int64Counter("soniq_attach_connections",
		metric.WithDescription("Attach connection events per handler: event=lost (with its reason) or reconnected."))
	return err
}

// attachEvent records an endpoint attaching or its connection ending.
func (x *Metrics) attachEvent(handler, what, reason string) {
	if x == nil {
		return
	}
	ctx := context.Background()
	h := attribute.String("handler", handler)
	switch what {
	case "attached":
		x.attach.endpoints.Add(ctx, 1, metric.WithAttributes(h))
	case "detached":
		x.attach.endpoints.Add(ctx, -1, metric.WithAttributes(h))
	default:
		x.attach.events.Add(ctx, 1, metric.WithAttributes(h, attribute.String("event", what), attribute.String("reason", reason)))
	}
}

// attachEnded records the end of an attached process's session.
func (l *loop) attachEnded(p *process, wasReady bool, err error) {
	if p.endpoint == "" {
		return
	}
	h := p.pool.h.Name
	if wasReady {
		l.metrics.attachEvent(h, "detached", "")
	}
	reason := p.brokenReason
	switch {
	case reason != "":
	case err == nil:
		reason = "shutdown"
	case errors.Is(err, errEndpointGone):
		reason = "connection_lost"
	default:
		reason = "not_attached"
	}
	if wasReady || reason == "refused" {
		l.metrics.attachEvent(h, "lost", reason)
		if p.pool.lastLoss == nil {
			p.pool.lastLoss = map[string]string{}
		}
		p.pool.lastLoss[p.endpoint] = reason
	}
}

// notReadyReason is the /readyz reason of a handler with no ready process.
func (l *loop) notReadyReason(pl *pool) string {
	if pl.h.Attached() {
		return l.attachNotReady(pl)
	}
	return "no ready process"
}

// respawn replaces a process that stopped as asked. An attached handler
// that ended its session after draining is exiting: look for its successor
// after a moment rather than at once.
func (l *loop) respawn(pl *pool, p *process) {
	if p.endpoint != "" {
		l.scheduleRestart(pl, p.slot, 5*attachRetryFirst)
		return
	}
	l.spawn(pl, p.slot)
}
