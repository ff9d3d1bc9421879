package transport

import "github.com/soniq-dev/soniq-sidecar/protocol"

// Queue is a connection's send queue, what Spec.Out reads from. Send never
// blocks: a queue sized for a well-behaved handler only fills when the
// other end stopped reading. Close is the graceful end of a connection on
// every transport: `shutdown`, then the queue closes (stdio's EOF). One
// goroutine owns a Queue.
type Queue struct {
	ch     chan protocol.Message
	closed bool
}

// NewQueue makes a queue of n frames.
func NewQueue(n int) *Queue { return &Queue{ch: make(chan protocol.Message, n)} }

// Out is the receiving end, for Spec.Out.
func (q *Queue) Out() <-chan protocol.Message { return q.ch }

// Send queues m; false when the queue is full or closed.
func (q *Queue) Send(m protocol.Message) bool {
	if q.closed {
		return false
	}
	select {
	case q.ch <- m:
		return true
	default:
		return false
	}
}

// Close sends `shutdown` and closes the queue; later calls do nothing.
func (q *Queue) Close() {
	if q.closed {
		return
	}
	q.Send(&protocol.Shutdown{})
	close(q.ch)
	q.closed = true
}

// Closed reports whether Close was called.
func (q *Queue) Closed() bool { return q.closed }
