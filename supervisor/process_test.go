package supervisor

import (
	"errors"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/soniq-dev/soniq-sidecar/internal/transport"
	"github.com/soniq-dev/soniq-sidecar/protocol"
)

// fakeConn is the conn of an in-process fake handler: pid 0, so that
// nothing is ever signalled.
type fakeConn struct{}

func (fakeConn) PID() int              { return 0 }
func (fakeConn) Signal(syscall.Signal) {}
func (fakeConn) Stderr() string        { return "" }

// Every report of a process's transport becomes the loop's event of that
// process, carrying what was reported.
func TestProcEventsAreEventsOfTheirProcess(t *testing.T) {
	p := &process{pid: 4242}
	var got []event
	var ev transport.Events = procEvents{emit: func(e event) bool { got = append(got, e); return true }, p: p}
	err := errors.New("x")
	ping := &protocol.Ping{Seq: 1}
	ev.Frame(ping)
	ev.ProtocolError(err)
	ev.Unsendable(ping, err)
	ev.WriteFailed(err)
	ev.StdoutClosed()
	ev.Refused(err)
	ev.Exited(err)
	assert.Equal(t, []event{
		frameEvent{proc: p, msg: ping},
		protocolErrorEvent{proc: p, err: err},
		unsendableEvent{proc: p, msg: ping, err: err},
		stdinFailedEvent{proc: p, err: err},
		stdoutClosedEvent{proc: p},
		attachRefusedEvent{proc: p, err: err},
		exitEvent{proc: p, err: err},
	}, got)
	// assert.Equal compares what pointers point to: check identity too.
	for _, e := range got {
		var proc *process
		switch e := e.(type) {
		case frameEvent:
			proc = e.proc
		case protocolErrorEvent:
			proc = e.proc
		case unsendableEvent:
			proc = e.proc
		case stdinFailedEvent:
			proc = e.proc
		case stdoutClosedEvent:
			proc = e.proc
		case attachRefusedEvent:
			proc = e.proc
		case exitEvent:
			proc = e.proc
		}
		assert.Same(t, p, proc, "%T", e)
	}
}
