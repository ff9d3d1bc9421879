package transport

import (
	"github.com/soniq-dev/soniq-sidecar/internal/session"
	"github.com/soniq-dev/soniq-sidecar/protocol"
)

// The messages of a Session stream that have no stdio frame, as a transport
// reports them to (and takes them from) its user. The session package's
// own types stay behind the transport: what the engine switches on is
// these and the protocol package's messages, whatever carried them.

// SessionHello is the hello of an attached handler's session: the stdio
// hello, the jobs the handler still runs from an earlier session, the
// results it kept from earlier sessions (reported right after the hello)
// and whether it keeps each result until an Ack settles it.
type SessionHello struct {
	protocol.Hello
	Running []RunningJob
	Kept    []string
	Acks    bool
}

// RunningJob is a job a handler still runs from an earlier session.
type RunningJob struct {
	ID   string
	Name string
}

// Draining is reported when a handler says it was told to stop: it takes
// no new job; the jobs it holds still report their results.
type Draining struct{}

// Type implements protocol.Message.
func (*Draining) Type() protocol.Type { return session.TypeDraining }

// Ack, sent to a handler whose hello set Acks, settles the results of IDs
// so the handler may forget them. An Ack with no id, sent right after the
// hello, says that this sidecar acknowledges results. Other transports
// have no use for it and report it Unsendable.
type Ack struct{ IDs []string }

// Type implements protocol.Message.
func (*Ack) Type() protocol.Type { return session.TypeAck }

// Jobs is the jobs a claim hands to one process, queued as one message so
// that they reach it in one write (stdio) or one stream message (a
// Session): a write per job cost a system call, or a stream message, per
// job. A job the handler could not read is reported Unsendable on its own
// (as the *protocol.Job), and the others go.
type Jobs struct{ Jobs []*protocol.Job }

// Type implements protocol.Message.
func (*Jobs) Type() protocol.Type { return session.TypeJobs }

// sessionHello is h as the transport reports it.
func sessionHello(h *session.Hello) *SessionHello {
	out := &SessionHello{Hello: h.Hello, Kept: h.Kept, Acks: h.Acks}
	for _, r := range h.Running {
		out.Running = append(out.Running, RunningJob(r))
	}
	return out
}

// fromSession is a message received on a session as the transport reports
// it: the protocol's own messages as they are.
func fromSession(m protocol.Message) protocol.Message {
	if _, ok := m.(*session.Draining); ok {
		return &Draining{}
	}
	return m
}

// toSession is a message taken from the send queue as the session sends it.
func toSession(m protocol.Message) protocol.Message {
	if a, ok := m.(*Ack); ok {
		return &session.Ack{IDs: a.IDs}
	}
	return m
}
