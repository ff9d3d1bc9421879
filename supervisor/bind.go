package supervisor

// Binding: the one owner of what the sidecar holds. Which rows are its to
// write (l.live), which process runs each job (p.tasks, p.syncHeld) and
// each execution's timeout timer change here and nowhere else, so "who
// holds this job, and may this process be signalled?" has one answer.

import (
	"time"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// hold records that t's row is this sidecar's to write: claimed, taken
// over from a predecessor, or queued again for a suspect's run alone. A
// task already held for the row is replaced (the caller has abandoned it).
func (l *loop) hold(t *task) {
	if old := l.live[t.job.ID]; old != nil {
		l.limitHeld(old, -1)
	}
	l.live[t.job.ID] = t
	l.limitHeld(t, 1)
}

// drop records that t's row is no longer this sidecar's to write: its
// write is queued, it was NACKed, or another worker owns it now. Its
// timeout no longer applies. A newer task held for the same row is left
// alone.
func (l *loop) drop(t *task) {
	if l.live[t.job.ID] == t {
		delete(l.live, t.job.ID)
		l.limitHeld(t, -1)
	}
	l.stopTimeout(t)
}

// bind hands t to p: it runs there from now, holds one of p's slots (and
// a sync slot for a sync job) until it is unbound, and its job timeout
// starts.
func (l *loop) bind(t *task, p *process) {
	t.proc, t.state, t.startedAt = p, taskRunning, time.Now()
	t.kids = taskChildren{} // a new execution has made no child yet
	p.tasks[t.job.ID] = t
	if t.sync() {
		p.syncHeld++
	}
	if timeout := t.spec.EffectiveTimeout(l.cfg.Settings); timeout > 0 {
		t.timer = time.AfterFunc(timeout, func() { l.emit(jobTimeoutEvent{task: t}) })
	}
}

// unbind takes t out of its process (its result arrived, or its frame
// never left): the slot is free again.
func (l *loop) unbind(t *task) {
	p := t.proc
	if p == nil || p.tasks[t.job.ID] != t {
		return
	}
	delete(p.tasks, t.job.ID)
	if t.sync() {
		p.syncHeld--
	}
	l.stopTimeout(t)
}

// vacate empties a process that exited: whatever it held is settled
// (settleCrash) and no slot of it is held any more.
func (l *loop) vacate(p *process) {
	for _, t := range p.tasks {
		l.stopTimeout(t)
	}
	p.tasks, p.syncHeld = nil, 0
}

// stopTimeout ends t's job timeout: its row was written, NACKed or lost,
// or shutdown has taken over the bound (a sync job at FORCE_TIMEOUT_PATH).
func (l *loop) stopTimeout(t *task) {
	if t.timer != nil {
		t.timer.Stop()
	}
}

// taskChildren is what one execution of a job asked for with ctx.enqueue:
// the deferred children, written with its done result and only with it;
// how many it made (immediate ones too), for max_children_per_job; and the
// first deferred child refused, which turns its done into a failure.
type taskChildren struct {
	deferred []backends.EnqueueParams
	made     int
	refused  string
}

// keepChild counts a child of t's execution; a deferred one is held until
// t's result: written with a done, dropped with any other end.
func (l *loop) keepChild(t *task, c backends.EnqueueParams, deferred bool) {
	t.kids.made++
	if deferred {
		t.kids.deferred = append(t.kids.deferred, c)
	}
}

// refuseChild records that a deferred child of t was refused (why names
// it): t's done result will be written as a failure, with no child.
func (l *loop) refuseChild(t *task, why string) {
	if t.kids.refused == "" {
		t.kids.refused = why
	}
}
