package supervisor

// Child jobs: the enqueue frames of handlers (ctx.enqueue). What the
// sidecar keeps of them is bind.go's (taskChildren), whether it takes one
// is fate.go's (childFate) and what they do to a result is fate.go's too
// (childrenOutcome); here they are received, and the children asked for at
// once are handed to the Enqueuer and answered.

import (
	"fmt"
	"os"
	"time"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/internal/completer"
	"github.com/soniq-dev/soniq-sidecar/protocol"
)

// onEnqueue takes a child job process p asked for.
func (l *loop) onEnqueue(p *process, e *protocol.Enqueue) {
	t := p.tasks[e.Parent]
	held := t != nil && t.state == taskRunning && l.live[t.job.ID] == t
	made := 0
	if held {
		made = t.kids.made
	}
	if code, why := childFate(e, held, made, l.cfg.Settings.MaxChildrenPerJob, l.cfg.MaxFrameBytes); code != "" {
		l.log.Warn("child job refused", "handler", p.pool.h.Name, p.who(), "parent_id", e.Parent, "child_id", e.ID,
			"child_name", e.Name, "immediate", e.IsImmediate(), "code", string(code), "why", why)
		switch {
		case e.IsImmediate():
			l.answerChild(p, &protocol.Enqueued{ID: e.ID, Error: &protocol.EnqueuedError{Code: code, Message: why}})
		case held:
			l.refuseChild(t, fmt.Sprintf("child job %s (%s) refused: %s", e.Name, e.ID, why))
		}
		return
	}
	c := childParams(e, l.host.producerID)
	if e.IsImmediate() && l.enqueuer == nil { // a loop built by a test without services
		l.answerChild(p, &protocol.Enqueued{ID: e.ID, Error: &protocol.EnqueuedError{Code: protocol.EnqueueUnavailable,
			Message: "this sidecar writes no child job at once"}})
		return
	}
	l.keepChild(t, c, !e.IsImmediate())
	if e.IsImmediate() {
		l.enqueuer.Enqueue(completer.EnqueueRequest{Key: childKey{proc: p, id: e.ID}, Params: c})
	}
}

// childKey names an immediate child's request: who asked, which child.
type childKey struct {
	proc *process
	id   string
}

// onEnqueued answers an immediate child once its write is over.
func (l *loop) onEnqueued(p *process, id, jobID string, err error) {
	m := &protocol.Enqueued{ID: id}
	if err != nil {
		m.Error = &protocol.EnqueuedError{Code: protocol.EnqueueUnavailable, Message: err.Error()}
	} else {
		m.JobID = &jobID
		l.metrics.jobsEnqueued("child", 1)
	}
	l.answerChild(p, m)
}

// answerChild sends an enqueued frame to p unless p is gone or being
// stopped (its input may be closed already: an answer its handler did not
// wait for is moot); a process that no longer reads what it is sent is
// broken, as for a job.
func (l *loop) answerChild(p *process, m *protocol.Enqueued) {
	if p.state == procDead || p.state == procStopping || p.brokenCause != "" {
		return
	}
	if !p.send(m) {
		l.breakProcess(p, "unresponsive", fmt.Sprintf("handler %s process %d stopped reading its stdin", p.pool.h.Name, p.pid))
	}
}

// producerID is the producer_id of the rows this sidecar makes (fired
// schedules, child jobs), as Soniq's producers write host:pid:program.
func (s *Supervisor) producerID() string {
	return fmt.Sprintf("%s:%d:soniq-sidecar:%s", s.workerHostname(), os.Getpid(), s.workerID)
}

// newEnqueuer is the writer of the children asked for at once, answering
// through the loop.
func (s *Supervisor) newEnqueuer() *completer.Enqueuer {
	return completer.NewEnqueuer(completer.EnqueuerConfig{Backend: s.cfg.Backend, Log: s.log,
		Answered: func(a completer.EnqueueAnswer) {
			k := a.Key.(childKey)
			s.emit(enqueuedEvent{proc: k.proc, id: k.id, jobID: a.JobID, err: a.Err})
		}})
}

// childParams is the row an enqueue frame asks for.
func childParams(e *protocol.Enqueue, producer string) backends.EnqueueParams {
	c := backends.EnqueueParams{ID: e.ID, Name: e.Name, Args: e.Args, ProducerID: producer}
	if e.Queue != nil {
		c.Queue = *e.Queue
	}
	if e.Priority != nil {
		n := int(*e.Priority)
		c.Priority = &n
	}
	if e.MaxAttempts != nil {
		n := int(*e.MaxAttempts)
		c.MaxAttempts = &n
	}
	if e.Delay != nil {
		c.Delay = time.Duration(*e.Delay * float64(time.Second))
	}
	if e.DedupKey != nil {
		c.DedupKey = *e.DedupKey
	}
	if e.Unique != nil {
		c.UniqueJob = *e.Unique
	}
	return c
}
