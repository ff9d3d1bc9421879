package supervisor

import (
	"slices"
	"time"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/config"
	"github.com/soniq-dev/soniq-sidecar/internal/transport"
)

// The rows a dead predecessor held (registerAtStart took them over: they
// are this sidecar's, still processing, attempts unchanged). Its attached
// handlers outlive it: each new session's hello lists the jobs a handler
// still runs and the results it kept. Those rows are kept and attached to
// the running execution (or written with the kept result); no other worker
// could claim them meanwhile, so a job is not run twice. The rows no
// attached handler reports are given back to the queue (a NACK: attempts
// unchanged) once every endpoint that could run them has said hello, or
// after the handlers' startup_timeout, or at FORCE_TIMEOUT_PATH.

// inheritedRows is the predecessor's rows no attached handler has
// reported yet, and the timer that gives them back.
type inheritedRows struct {
	rows  map[string]*task
	timer *time.Timer
}

// inherit takes the predecessor's rows; those no attached handler here
// could hold are given back at once.
func (l *loop) inherit(jobs []backends.Job) {
	if len(jobs) == 0 {
		return
	}
	l.inherited.rows = map[string]*task{}
	var wait time.Duration
	var back []string
	for i := range jobs {
		j := &jobs[i]
		pl, spec := l.attachPoolFor(j.Name)
		if pl == nil {
			back = append(back, j.ID)
			l.writer.Nack(*j)
			continue
		}
		l.inherited.rows[j.ID] = &task{job: j, pool: pl, spec: spec, state: taskPending}
		wait = max(wait, pl.h.StartupTimeout)
	}
	if len(back) > 0 {
		slices.Sort(back)
		l.log.Info("gave back the predecessor's jobs that no attached handler here serves: queued again, attempts unchanged", "job_ids", back)
	}
	if len(l.inherited.rows) > 0 {
		l.inherited.timer = time.AfterFunc(wait, func() { l.emit(settleEvent{}) })
		l.log.Info("waiting for the attached handlers to report the predecessor's jobs (still running, or finished with a kept result)",
			"jobs", len(l.inherited.rows), "wait_at_most", wait)
	}
}

// attachPoolFor is the attach handler serving job name, if any.
func (l *loop) attachPoolFor(name string) (*pool, *config.JobSpec) {
	for _, pl := range l.pools {
		if !pl.h.Attached() {
			continue
		}
		if spec := pl.h.Job(name); spec != nil {
			return pl, spec
		}
	}
	return nil, nil
}

// takeInherited keeps the predecessor's rows that a new session's hello
// reports, running or finished: each becomes a task of p. The endpoint has
// then reported all it holds.
func (l *loop) takeInherited(p *process, h *transport.SessionHello) {
	pl := p.pool
	l.heard(p)
	if len(l.inherited.rows) == 0 {
		return
	}
	ids := make([]string, 0, len(h.Running)+len(h.Kept))
	for _, r := range h.Running {
		ids = append(ids, r.ID)
	}
	ids = append(ids, h.Kept...)
	kept := map[string]bool{}
	for _, id := range h.Kept {
		kept[id] = true
	}
	for _, id := range ids {
		t := l.inherited.rows[id]
		if t == nil || t.pool != pl {
			continue
		}
		delete(l.inherited.rows, id)
		p.forgetForeign(id)
		l.hold(t)
		l.adopt(t, p)
		state := "running"
		if kept[id] {
			state = "finished; its kept result follows"
		}
		l.log.Info("the predecessor's job is reported by the attached handler: kept, not run again",
			"job_id", id, "job_name", t.job.Name, "queue", t.job.Queue, "attempt", t.job.Attempts,
			"handler", pl.h.Name, "endpoint", p.attach.endpoint, "state", state)
	}
	l.settleInherited(false, "every endpoint of its handler has reported")
}

// settleInherited gives back the predecessor's rows no endpoint reported:
// all of them, or only those whose handler's endpoints have all said hello.
func (l *loop) settleInherited(all bool, why string) {
	if len(l.inherited.rows) == 0 {
		return
	}
	var back []string
	for id, t := range l.inherited.rows {
		if all || allHeard(t.pool) {
			back = append(back, id)
		}
	}
	slices.Sort(back)
	for _, id := range back {
		l.writer.Nack(*l.inherited.rows[id].job)
		delete(l.inherited.rows, id)
	}
	if len(back) > 0 {
		l.log.Info("gave back the predecessor's jobs no attached handler reports (neither running nor finished there): queued again, attempts unchanged",
			"job_ids", back, "reason", why)
	}
	if len(l.inherited.rows) == 0 && l.inherited.timer != nil {
		l.inherited.timer.Stop()
	}
}

// onInheritWaitOver: the handlers' startup_timeout passed since the start;
// what no endpoint reported is given back.
func (l *loop) onInheritWaitOver() { l.settleInherited(true, "startup_timeout elapsed") }

// allHeard reports whether every endpoint of an attach pool has said hello
// since this sidecar started.
func allHeard(pl *pool) bool {
	if len(pl.attach.endpoints) == 0 {
		return false // a glob that matched nothing yet
	}
	for _, e := range pl.attach.endpoints {
		if !pl.attach.heard[e] {
			return false
		}
	}
	return true
}
