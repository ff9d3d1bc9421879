package supervisor

import (
	"fmt"
	"time"

	"github.com/soniq-dev/soniq-sidecar/protocol"
)

// stdinSettle is how long a process whose stdin refused a write has to exit
// on its own (it usually died, and its exit status says more) before it is
// treated as broken.
const stdinSettle = 2 * time.Second

// onUnsendable handles a frame the transport could not encode for p. The
// claim check keeps such args from being dispatched, so this is the last
// line: the job never reached the handler, so its slot is given back and its
// row dead-lettered (encoding the same args again cannot succeed); the
// process and its other jobs are not affected.
func (l *loop) onUnsendable(p *process, m protocol.Message, err error) {
	job, ok := m.(*protocol.Job)
	if !ok {
		// Pings, cancels and shutdowns always encode; should one not, the
		// process simply never sees it.
		l.log.Error("a frame for the handler could not be encoded; not sent", "handler", p.pool.h.Name, p.who(),
			"frame", string(m.Type()), "err", err)
		return
	}
	t := p.tasks[job.ID]
	if t == nil {
		return // its process is gone and the job settled already
	}
	l.unbind(t)
	if t.state == taskRunning && l.live[job.ID] == t {
		l.apply(t, unsendableOutcome(*t.job, err), "handler", p.pool.h.Name, p.who())
	}
}

// onStdinFailed handles a write to p's stdin that failed: nothing sent to it
// arrives any more. A process that died exits within moments and its exit
// is handled as a crash; one still running after stdinSettle has closed its
// stdin while alive and is broken (killed, its jobs failed through the retry
// policy) rather than left until a ping times out.
func (l *loop) onStdinFailed(p *process, err error) {
	if p.state == procStopping || p.state == procDead {
		return // being stopped: its exit follows
	}
	cause := fmt.Errorf("its stdin is closed (writing a frame failed: %w)", err)
	p.killTimers = append(p.killTimers, time.AfterFunc(stdinSettle, func() {
		l.emit(protocolErrorEvent{proc: p, err: cause})
	}))
}
