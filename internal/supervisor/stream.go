package supervisor

import (
	"errors"
	"fmt"
	"io"

	"github.com/soniq-dev/soniq-sidecar/protocol"
	"github.com/soniq-dev/soniq-sidecar/protocol/session"
)

// streamConn carries one process's v1 messages over a Session stream
// (protocol/session), for the unix transport, spawned and attached alike:
// one long-lived bidirectional stream instead of a call per job. The
// sender turns p.out into messages; the receiver turns the handler's
// messages into events. A message is put through the same checks as the
// stdio frame it stands for (the session package does that).
type streamConn struct {
	te transportEnv
	p  *process
	s  *session.Session
	// recvDone is closed when the receiver has stopped.
	recvDone chan struct{}
	// ended reports how the stream ended once the receiver stops: nil
	// when the handler closed the session cleanly (after shutdown, or on
	// its own), else why it broke. Protocol errors are reported by
	// protocolError first.
	ended         func(err error)
	protocolError func(err error)
}

// run sends until p.out is closed (the loop closes it after `shutdown`, or
// once the process is gone), then waits for the receiver: the handler
// closes the session once it holds no job of it.
func (c *streamConn) run() {
	c.te.wg.Add(1)
	go func() {
		defer c.te.wg.Done()
		defer close(c.recvDone)
		c.receive()
	}()
	for m := range c.p.out {
		select {
		case <-c.recvDone:
			continue // nothing reaches the handler any more; the exit is reported by the transport
		default:
		}
		if job, ok := m.(*protocol.Job); ok {
			// Args the handler's decoder would refuse (or gRPC could not
			// marshal: not UTF-8) would end the session: report the one
			// job instead, as the stdio writer does.
			if err := jobUnsendable(job, c.te.maxFrame); err != nil {
				c.te.emit(unsendableEvent{proc: c.p, msg: job, err: err})
				continue
			}
		}
		err := c.s.Send(m)
		if _, ok := m.(*protocol.Shutdown); ok && err == nil {
			c.p.shutdownSent.Store(true)
		}
		if err != nil {
			if errors.Is(err, session.ErrUnsendable) {
				c.te.emit(unsendableEvent{proc: c.p, msg: m, err: err})
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
			c.te.emit(frameEvent{proc: c.p, msg: m})
		default:
			c.protocolError(fmt.Errorf("protocol: unexpected %s message", m.Type()))
		}
	}
}
