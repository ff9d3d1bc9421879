package transport

import (
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/soniq-dev/soniq-sidecar/protocol"
	"github.com/soniq-dev/soniq-sidecar/protocol/session"
)

// streamConn carries one process's v1 messages over a Session stream
// (protocol/session), for the unix transport, spawned and attached alike:
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
	for m := range c.l.out {
		select {
		case <-c.recvDone:
			continue // nothing reaches the handler any more; the exit is reported by the transport
		default:
		}
		if job, ok := m.(*protocol.Job); ok {
			// Args the handler's decoder would refuse (or gRPC could not
			// marshal: not UTF-8) would end the session: report the one
			// job instead, as the stdio writer does.
			if err := jobUnsendable(job, c.l.env.MaxFrameBytes); err != nil {
				c.l.ev.Unsendable(job, err)
				continue
			}
		}
		err := c.s.Send(m)
		if _, ok := m.(*protocol.Shutdown); ok && err == nil {
			c.shutdownSent.Store(true)
		}
		if err != nil {
			if errors.Is(err, session.ErrUnsendable) {
				c.l.ev.Unsendable(m, err)
			}
			// A broken stream: the receiver reports why.
		}
	}
	<-c.recvDone
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
		case *protocol.Result, *protocol.Pong, *session.Draining:
			c.l.ev.Frame(m)
		default:
			c.protocolError(fmt.Errorf("protocol: unexpected %s message", m.Type()))
		}
	}
}
