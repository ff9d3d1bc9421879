package transport

import (
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/soniq-dev/soniq-sidecar/internal/session"
	"github.com/soniq-dev/soniq-sidecar/protocol"
)

// streamConn carries one process's v1 messages over a Session stream
// (internal/session), for the unix transport, spawned and attached alike:
// one long-lived bidirectional stream instead of a call per job. The
// sender turns l.out into messages; the receiver reports the handler's
// messages. A message is put through the same checks as the
// stdio frame it stands for (the session package does that).
type streamConn struct {
	l *link
	s *session.Session
	// recvDone is closed when the receiver has stopped.
	recvDone chan struct{}
	// ended reports how the stream ended once the receiver stops: nil
	// when the handler closed the session cleanly (after shutdown, or on
	// its own), else why it broke. Protocol errors are reported by
	// protocolError first.
	ended         func(err error)
	protocolError func(err error)
	// shutdownSent is set once `shutdown` went out on the stream: a clean
	// end of the session after it is the sidecar's doing.
	shutdownSent atomic.Bool
}

// run sends until l.out is closed (the caller closes it after `shutdown`, or
// once the process is gone), then waits for the receiver: the handler
// closes the session once it holds no job of it.
func (c *streamConn) run() {
	c.l.env.WG.Add(1)
	go func() {
		defer c.l.env.WG.Done()
		defer close(c.recvDone)
		c.receive()
	}()
	var next protocol.Message // taken from l.out while gathering jobs
	for {
		m := next
		next = nil
		if m == nil {
			var ok bool
			if m, ok = <-c.l.out; !ok {
				break
			}
		}
		select {
		case <-c.recvDone:
			continue // nothing reaches the handler any more; the exit is reported by the transport
		default:
		}
		if isJobs(m) {
			// A stream message costs far more than the job it carries: the
			// jobs waiting behind this one go with it.
			var jobs []*protocol.Job
			jobs, next = c.gather(m)
			c.sendJobs(jobs)
			continue
		}
		err := c.s.Send(toSession(m))
		if _, ok := m.(*protocol.Shutdown); ok && err == nil {
			c.shutdownSent.Store(true)
		}
		// A failed send: the stream is broken, and the receiver reports why.
	}
	<-c.recvDone
}

// isJobs reports whether m carries jobs (a job, or a claim's Jobs).
func isJobs(m protocol.Message) bool {
	switch m.(type) {
	case *protocol.Job, *Jobs:
		return true
	}
	return false
}

// gather returns the jobs of first and of the job messages queued right
// behind it (those the handler's decoder would refuse are reported, not
// returned), and the message after them, if it was taken from l.out.
func (c *streamConn) gather(first protocol.Message) ([]*protocol.Job, protocol.Message) {
	var jobs []*protocol.Job
	add := func(job *protocol.Job) {
		// Args the handler's decoder would refuse (or gRPC could not
		// marshal: not UTF-8) would end the session: report the one job
		// instead, as the stdio writer does.
		if err := jobUnsendable(job, c.l.env.MaxFrameBytes); err != nil {
			c.l.ev.Unsendable(job, err)
		} else {
			jobs = append(jobs, job)
		}
	}
	m := first
	for {
		switch m := m.(type) {
		case *protocol.Job:
			add(m)
		case *Jobs:
			if jobs == nil {
				jobs = make([]*protocol.Job, 0, len(m.Jobs)+len(c.l.out))
			}
			for _, j := range m.Jobs {
				add(j)
			}
		}
		select {
		case next, ok := <-c.l.out:
			if !ok {
				return jobs, nil
			}
			if !isJobs(next) {
				return jobs, next
			}
			m = next
		default:
			return jobs, nil
		}
	}
}

// sendJobs sends jobs in as few stream messages as the session allows. If
// the session refuses the batch because one of them could not be sent,
// each is sent alone, so that only that one is reported.
func (c *streamConn) sendJobs(jobs []*protocol.Job) {
	if len(jobs) == 0 {
		return
	}
	err := c.s.Send(&session.Jobs{Jobs: jobs})
	if !errors.Is(err, session.ErrUnsendable) {
		return // sent, or the stream is broken: the receiver reports why
	}
	for _, j := range jobs {
		if err := c.s.Send(j); errors.Is(err, session.ErrUnsendable) {
			c.l.ev.Unsendable(j, err)
		}
	}
}

func (c *streamConn) receive() {
	for {
		m, err := c.s.Recv()
		switch {
		case err == io.EOF:
			c.ended(nil)
			return
		case errors.Is(err, session.ErrProtocol):
			c.protocolError(err)
			_ = c.s.Close()
			c.ended(err)
			return
		case err != nil:
			c.ended(err)
			return
		}
		switch m.(type) {
		case *protocol.Result, *protocol.Pong, *protocol.Enqueue, *session.Draining:
			m = fromSession(m)
			if fb, ok := c.l.ev.(FrameBatcher); ok && c.s.Buffered() > 0 {
				// The rest of a Results message: handed over together.
				batch := make([]protocol.Message, 0, 1+c.s.Buffered())
				batch = append(batch, m)
				for c.s.Buffered() > 0 {
					next, err := c.s.Recv() // buffered and checked: fails only once closed
					if err != nil {
						break
					}
					batch = append(batch, fromSession(next))
				}
				fb.Frames(batch)
				continue
			}
			c.l.ev.Frame(m)
		default:
			c.protocolError(fmt.Errorf("protocol: unexpected %s message", m.Type()))
		}
	}
}
