package supervisor

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/soniq-dev/soniq-sidecar/config"
	"github.com/soniq-dev/soniq-sidecar/internal/transport"
	"github.com/soniq-dev/soniq-sidecar/protocol"
)

// Attach mode, the loop's side: a handler whose processes run in a
// container of their own (the transport in internal/transport connects to
// each endpoint; the end of the connection is the process's exit). The
// loop treats such a process like any other: the hello is checked against
// the manifest, pings and jobs go to it, a lost connection is a crash for
// the jobs it held (the suspect rule), and a new connection is its
// restart. What is particular to it is here: its endpoints (globs
// rescanned on every tick), draining, the jobs it still runs from an
// earlier session, readiness and metrics.

// poolAttach is an attach handler's endpoints.
type poolAttach struct {
	endpoints []string          // each slot's socket
	heard     map[string]bool   // endpoints that said hello since the start (inherit.go reads it)
	lastLoss  map[string]string // why each endpoint's last session ended
}

// procAttach is an attached process's endpoint and the jobs it still ran
// from an earlier session (id → sync) when it said hello.
type procAttach struct {
	endpoint string
	foreign  map[string]bool
}

// heard records that p's endpoint has said hello since the start.
func (l *loop) heard(p *process) {
	pl := p.pool
	if pl.attach.heard == nil {
		pl.attach.heard = map[string]bool{}
	}
	pl.attach.heard[p.attach.endpoint] = true
}

// forgetForeign: the earlier session's job id is accounted for (its row
// was taken over, or its result arrived).
func (p *process) forgetForeign(id string) { delete(p.attach.foreign, id) }

// attachRespawnDelay is how long after an attached handler ended its
// session (after draining: its container is stopping) the loop looks for
// its successor on the endpoint.
const attachRespawnDelay = 500 * time.Millisecond

// initAttach gives an attach handler's pool its endpoints (the literal
// paths now; globs are expanded on every tick) and says what readiness
// waits for.
func (l *loop) initAttach(pl *pool) {
	if !pl.h.Attached() {
		return
	}
	for _, p := range pl.h.Attach {
		if !config.IsGlob(p) {
			pl.attach.endpoints = append(pl.attach.endpoints, p)
		}
	}
	l.host.setReady(pl.h.Name, l.attachNotReady(pl))
}

// attachNotReady is the /readyz reason of an attach handler with no
// attached endpoint.
func (l *loop) attachNotReady(pl *pool) string {
	return "no attached endpoint (waiting for " + strings.Join(pl.h.Attach, ", ") + ")"
}

// rescanAttach adds a slot for every new endpoint a glob matches.
func (l *loop) rescanAttach(pl *pool) {
	if !pl.h.Attached() || l.shut.state > StateRunning || l.fatal != nil {
		return
	}
	for _, pat := range pl.h.Attach {
		if !config.IsGlob(pat) {
			continue
		}
		matches, _ := filepath.Glob(pat) // the pattern was checked at load
		for _, m := range matches {
			if slices.Contains(pl.attach.endpoints, m) {
				continue
			}
			pl.attach.endpoints = append(pl.attach.endpoints, m)
			slot := l.addSlot(pl)
			l.log.Info("attach endpoint found", "handler", pl.h.Name, "endpoint", m, "pattern", pat)
			l.spawn(pl, slot)
		}
	}
}

// onAttachHello: the hello of a session; the jobs it still runs from an
// earlier session occupy capacity until their results arrive.
func (l *loop) onAttachHello(p *process, h *transport.SessionHello) {
	p.attach.foreign = map[string]bool{}
	for _, r := range h.Running {
		spec := p.pool.h.Job(r.Name)
		p.attach.foreign[r.ID] = spec == nil || !spec.Cancellable
	}
	// A kept result follows the hello at once; until it is handled it
	// counts like a running job, so no claim is made into its slot.
	for _, id := range h.Kept {
		p.attach.foreign[id] = false
	}
	if len(h.Running) > 0 || len(h.Kept) > 0 {
		l.log.Info("attached handler still runs jobs from an earlier session, or kept their results; running ones occupy its capacity until their results arrive",
			"handler", p.pool.h.Name, "endpoint", p.attach.endpoint, "running", len(h.Running), "kept", len(h.Kept))
	}
	l.startAcks(p, h)
	l.onHello(p, &h.Hello)
	if p.state == procReady {
		pl := p.pool
		// The predecessor's rows this handler reports are kept; then
		// what changed in its capacity is used.
		l.takeInherited(p, h)
		l.metrics.attachEvent(pl.h.Name, "attached", "")
		if why, ok := pl.attach.lastLoss[p.attach.endpoint]; ok {
			l.metrics.attachEvent(pl.h.Name, "reconnected", why)
			delete(pl.attach.lastLoss, p.attach.endpoint)
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
	l.log.Info("attached handler is draining: no more jobs go to it", "handler", p.pool.h.Name, "endpoint", p.attach.endpoint, "jobs", len(p.tasks))
	l.setProcState(p, procRetiring) // stopped by the settle step once it holds no job
	if len(p.pool.ready()) == 0 {
		l.host.setReady(p.pool.h.Name, "every attached endpoint is draining; "+l.attachNotReady(p.pool))
	}
}

// onAttachRefused: the endpoint already has a session with another
// sidecar. Two sidecars for one handler process is a deployment error; this
// one keeps trying (the other may be a predecessor that is going away).
func (l *loop) onAttachRefused(p *process, err error) {
	l.log.Error("attach endpoint refused this sidecar's session: another session is open on it (two sidecars for one handler container?); retrying",
		"handler", p.pool.h.Name, "endpoint", p.attach.endpoint, "err", err)
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
		if p == nil || p.attach.foreign == nil || p.state == procDead {
			continue
		}
		if _, ok := p.attach.foreign[t.job.ID]; !ok {
			continue
		}
		delete(p.attach.foreign, t.job.ID)
		l.adopt(t, p)
		l.log.Info("claimed job is still running in the attached handler from an earlier session; adopted, not run again",
			"job_id", t.job.ID, "job_name", t.job.Name, "handler", p.pool.h.Name, "endpoint", p.attach.endpoint)
		return true
	}
	return false
}

// adopt makes t the task of an execution p already runs.
func (l *loop) adopt(t *task, p *process) {
	l.bind(t, p)
	l.metrics.jobStarted(t)
}

// orphanResult handles a result for a job p does not hold: one it ran
// from an earlier session. When the row is claimed again and waits here,
// the result is its result; otherwise it is discarded.
func (l *loop) orphanResult(p *process, r *protocol.Result) *task {
	delete(p.attach.foreign, r.ID)
	pl := p.pool
	for _, t := range pl.pending {
		if t.job.ID == r.ID && !t.suspect {
			l.unqueue(t)
			l.adopt(t, p)
			l.log.Info("claimed job finished in the attached handler during an earlier session; its kept result is written, the job not run again",
				"job_id", t.job.ID, "job_name", t.job.Name, "handler", p.pool.h.Name, "endpoint", p.attach.endpoint)
			return t
		}
	}
	return nil
}

// foreignSync counts the sync jobs among p's foreign ones.
func (p *process) foreignSync() int {
	n := 0
	for _, sync := range p.attach.foreign {
		if sync {
			n++
		}
	}
	return n
}

// label names a process in causes: its pid, or its endpoint.
func (p *process) label() string {
	if p.attach.endpoint != "" {
		return "endpoint " + p.attach.endpoint
	}
	return fmt.Sprintf("process %d", p.pid)
}

// endDescription says how a process ended, for logs and last_error.
func (p *process) endDescription(err error) string {
	if p.attach.endpoint == "" {
		return transport.ExitDescription(err)
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
	if p.attach.endpoint == "" {
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
	case errors.Is(err, transport.ErrEndpointGone):
		reason = "connection_lost"
	default:
		reason = "not_attached"
	}
	if wasReady || reason == "refused" {
		l.metrics.attachEvent(h, "lost", reason)
		if p.pool.attach.lastLoss == nil {
			p.pool.attach.lastLoss = map[string]string{}
		}
		p.pool.attach.lastLoss[p.attach.endpoint] = reason
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
	if p.attach.endpoint != "" {
		l.scheduleRestart(pl, p.slot, attachRespawnDelay)
		return
	}
	l.spawn(pl, p.slot)
}
