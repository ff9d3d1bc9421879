package supervisor

import (
	"slices"
	"time"

	"github.com/soniq-dev/soniq-sidecar/internal/transport"
)

// Acknowledgements (attach mode). A handler that outlives its sidecars
// cannot know whether a result it sent reached a sidecar that wrote it: the
// session may break (the sidecar killed) with the result in a socket
// buffer. A handler whose hello sets `acks` therefore keeps every result
// until a session acknowledges it, and offers the unacknowledged ones to
// the next session (hello.kept). The sidecar says it acknowledges with an
// empty Ack right after the hello, then acknowledges each result once it
// is settled: written, or refused by the row's guard, or discarded.

// procAcks is a process's acknowledgements: whether its hello asked for
// them, how many of its results are being written, and a stop deferred
// until then.
type procAcks struct {
	wanted    bool
	unacked   int
	stopAfter bool
	stopGrace time.Duration
	timer     *time.Timer
}

// startAcks: the hello of a session whose handler acknowledges results.
func (l *loop) startAcks(p *process, h *transport.SessionHello) {
	p.ack.wanted = h.Acks
	if p.ack.wanted {
		l.host.acking()
		p.send(&transport.Ack{})
	}
}

// ackLater records that p's result for id is acknowledged once written.
func (l *loop) ackLater(p *process, id string) {
	if !p.ack.wanted {
		return
	}
	if l.ackWait == nil {
		l.ackWait = map[string]*process{}
	}
	if old := l.ackWait[id]; old != nil {
		old.ack.unacked--
	}
	l.ackWait[id] = p
	p.ack.unacked++
}

// ackNow acknowledges a result that is settled without a write.
func (l *loop) ackNow(p *process, id string) {
	if p.ack.wanted && p.state != procDead {
		p.send(&transport.Ack{IDs: []string{id}})
	}
}

// onSettled: the writer settled these completions; acknowledge the results
// among them.
func (l *loop) onSettled(ids []string) {
	by := map[*process][]string{}
	for _, id := range ids {
		p := l.ackWait[id]
		if p == nil {
			continue
		}
		delete(l.ackWait, id)
		p.ack.unacked--
		by[p] = append(by[p], id)
	}
	for p, ids := range by {
		if p.state != procDead {
			slices.Sort(ids)
			p.send(&transport.Ack{IDs: ids})
		}
		if p.ack.stopAfter && p.ack.unacked == 0 {
			l.stopAcked(p)
		}
	}
}

// stopAcked stops a process whose stop waited for acknowledgements.
func (l *loop) stopAcked(p *process) {
	p.ack.stopAfter = false
	if p.ack.timer != nil {
		p.ack.timer.Stop()
	}
	l.stopProcess(p, p.ack.stopGrace)
}

// stopIdle stops a retiring process that holds no job, once the results it
// sent are acknowledged: ending its session first would make a draining
// handler exit with results it cannot know were written.
func (l *loop) stopIdle(p *process) {
	if !l.deferStop(p, l.cfg.StopGrace) {
		l.stopProcess(p, l.cfg.StopGrace)
	}
}

// deferStop: an attached process with results still being written (at
// STOPPED, or retiring and idle) is stopped once they are acknowledged (at
// most ackWaitMax).
func (l *loop) deferStop(p *process, grace time.Duration) bool {
	if !p.ack.wanted || p.ack.unacked == 0 || p.state == procStopping || p.state == procDead {
		return false
	}
	if p.ack.stopAfter {
		return true // already waiting
	}
	p.ack.stopAfter, p.ack.stopGrace = true, grace
	p.ack.timer = time.AfterFunc(ackWaitMax, func() { l.emit(ackTimeoutEvent{proc: p}) })
	return true
}

func (l *loop) onAckTimeout(p *process) {
	if !p.ack.stopAfter || p.state == procDead {
		return
	}
	l.log.Warn("results not acknowledged in time (the database is slow); ending the session anyway: the handler offers them to the next session",
		"handler", p.pool.h.Name, "endpoint", p.attach.endpoint, "unacknowledged", p.ack.unacked)
	l.stopAcked(p)
}
