// Package session is the sidecar's side of the Session stream
// (rpc Session of protocol/handler.proto): one long-lived bidirectional gRPC
// stream per sidecar session with a handler process that serves a Unix
// socket. It dials the socket, opens the stream, receives the handler's
// hello and every later message converted to the protocol package's types
// and put through exactly the checks the stdio decoder applies, and sends
// jobs, cancels, pings and shutdown. docs/protocol.md ("The Session stream
// and attach mode") is the specification.
//
// The package starts no goroutine: Recv blocks in the caller's goroutine,
// and the stream lives until the context given to Open is done or Close is
// called. It knows nothing of processes or databases.
package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/soniq-dev/soniq-sidecar/protocol"
	"github.com/soniq-dev/soniq-sidecar/protocol/handlerpb"
)

// The errors a session reports, for errors.Is.
var (
	// ErrRefused: the handler refused the session because another one is
	// open (gRPC FAILED_PRECONDITION). A *RefusedError carries its message.
	ErrRefused = errors.New("session refused by the handler")
	// ErrBroken: the stream ended without the handler closing it cleanly
	// (the connection broke, the handler exited or aborted the session).
	ErrBroken = errors.New("session stream broken")
	// ErrProtocol: the handler sent a message that is not valid protocol v1
	// (a *protocol.FrameError is wrapped when the frame checks failed).
	ErrProtocol = errors.New("protocol error")
	// ErrUnsendable: a job the handler's decoder would refuse; the session
	// is unaffected, the job was not sent.
	ErrUnsendable = errors.New("job cannot be sent")
	// ErrClosed: Send or Recv after Close.
	ErrClosed = errors.New("session closed")
)

// RefusedError is the handler's refusal of a second session: Message names
// the session that is open.
type RefusedError struct{ Message string }

func (e *RefusedError) Error() string { return "session refused by the handler: " + e.Message }

// Is makes errors.Is(err, ErrRefused) true.
func (e *RefusedError) Is(target error) bool { return target == ErrRefused }

// TypeDraining is the type of the Draining message, which has no stdio frame.
const TypeDraining protocol.Type = "draining"

// Draining: the handler was told to stop and takes no new job; jobs it
// holds still report their results, and it exits when it holds none.
type Draining struct{}

// Type implements protocol.Message.
func (*Draining) Type() protocol.Type { return TypeDraining }

// TypeAck is the type of the Ack message, which has no stdio frame.
const TypeAck protocol.Type = "ack"

// Ack tells a handler that acknowledges results (Hello.Acks) that the
// results of IDs are settled, so it may forget them. An Ack with no id,
// sent right after the hello, says that this sidecar acknowledges results.
type Ack struct{ IDs []string }

// Type implements protocol.Message.
func (*Ack) Type() protocol.Type { return TypeAck }

// TypeJobs is the type of the Jobs message, which has no stdio frame.
const TypeJobs protocol.Type = "jobs"

// Jobs sends several jobs at once: as one stream message (or a few, each
// within the stream's message size) to a handler whose hello set Batches,
// else one message per job. Each job is checked as Send checks a job alone.
type Jobs struct{ Jobs []*protocol.Job }

// Type implements protocol.Message.
func (*Jobs) Type() protocol.Type { return TypeJobs }

// maxBatch bounds the entries of one Jobs or Results message; with the
// frame limit on their total it keeps a batch within the stream's message
// size.
const maxBatch = 256

// RunningJob is a job the handler still runs from an earlier session.
type RunningJob struct {
	ID   string
	Name string
}

// Hello is the handler's first message: the stdio hello, plus the jobs it
// still runs from an earlier session, the results it kept from earlier
// sessions (sent right after the hello) and whether it keeps each result
// until acknowledged.
type Hello struct {
	protocol.Hello
	Running []RunningJob
	Kept    []string
	Acks    bool
	// Batches: the handler takes Jobs messages and sends Results (several
	// results in one message) once the sidecar has sent it one. Open sends
	// it an empty one: this package takes Results.
	Batches bool
	// Features: the handler reads a Features message; Open sends it
	// Options.Features right after the hello.
	Features bool
}

// Options tune Open. The zero value is usable.
type Options struct {
	// HelloTimeout bounds the wait for the hello, dialing included
	// (the manifest's startup_timeout); 0 means 30 s.
	HelloTimeout time.Duration
	// MaxFrameBytes is the frame limit every message is checked against;
	// 0 means protocol.DefaultMaxFrameBytes.
	MaxFrameBytes int
	// Features are announced to a handler whose hello reads them (the
	// names SONIQ_FEATURES gives a spawned handler), e.g. "enqueue".
	Features []string
}

const (
	defaultHelloTimeout = 30 * time.Second
	// envelope is what a gRPC message may carry beyond a frame's payload.
	envelope = 64 << 10
)

// Session is one open Session stream. Send may be called from any
// goroutine; Recv from one goroutine at a time.
type Session struct {
	conn     *grpc.ClientConn
	stream   grpc.BidiStreamingClient[handlerpb.SidecarMessage, handlerpb.HandlerMessage]
	cancel   context.CancelFunc
	hello    *Hello
	maxFrame int

	// pending holds the rest of a Results message for the next Recvs
	// (Recv is called from one goroutine at a time).
	pending []protocol.Message

	sendMu sync.Mutex
	mu     sync.Mutex
	closed bool
}

// window is a flow-control window of n bytes, within what HTTP/2 allows.
func window(n int) int32 {
	return int32(min(n, math.MaxInt32))
}

// Open dials the Unix socket at path, opens a Session and receives the
// hello. ctx governs the whole session: when it is done the stream ends.
// A refused session is a *RefusedError (ErrRefused); a hello that fails
// the checks is ErrProtocol.
func Open(ctx context.Context, path string, opt Options) (*Session, error) {
	if opt.HelloTimeout <= 0 {
		opt.HelloTimeout = defaultHelloTimeout
	}
	if opt.MaxFrameBytes <= 0 {
		opt.MaxFrameBytes = protocol.DefaultMaxFrameBytes
	}
	conn, err := grpc.NewClient("passthrough:///soniq-handler",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}),
		// A fixed flow-control window, as large as a message may be: with the
		// default dynamic one, gRPC pings the handler about once per round trip
		// while results flow, to size the window, and each ping wakes the
		// handler to answer it (about one per results message).
		grpc.WithInitialWindowSize(window(opt.MaxFrameBytes+envelope)),
		grpc.WithInitialConnWindowSize(window(opt.MaxFrameBytes+envelope)),
		grpc.WithDefaultCallOptions(
			grpc.MaxCallRecvMsgSize(opt.MaxFrameBytes+envelope),
			grpc.MaxCallSendMsgSize(opt.MaxFrameBytes+envelope),
		),
	)
	if err != nil {
		return nil, fmt.Errorf("session with %s: creating the client: %w", path, err)
	}
	sctx, cancel := context.WithCancel(ctx)
	s := &Session{conn: conn, cancel: cancel, maxFrame: opt.MaxFrameBytes}
	// The hello must come within HelloTimeout: past it the stream is cancelled.
	timer := time.AfterFunc(opt.HelloTimeout, cancel)
	hello, err := s.open(sctx, path)
	timer.Stop()
	if err != nil {
		if sctx.Err() != nil && ctx.Err() == nil {
			// Only the timer cancels sctx before Open returns.
			err = fmt.Errorf("session with %s: no hello within %s: %w", path, opt.HelloTimeout, err)
		}
		_ = s.Close()
		return nil, err
	}
	s.hello = hello
	if hello.Features {
		// First after the hello: what this sidecar speaks beyond v1.
		f := &handlerpb.Features{Names: opt.Features}
		if err := s.send(&handlerpb.SidecarMessage{Message: &handlerpb.SidecarMessage_Features{Features: f}}); err != nil {
			_ = s.Close()
			return nil, fmt.Errorf("session with %s: after the hello: %w", path, err)
		}
	}
	if hello.Batches {
		// An empty Jobs message: this sidecar takes Results.
		if err := s.send(&handlerpb.SidecarMessage{Message: &handlerpb.SidecarMessage_Jobs{Jobs: &handlerpb.Jobs{}}}); err != nil {
			_ = s.Close()
			return nil, fmt.Errorf("session with %s: after the hello: %w", path, err)
		}
	}
	return s, nil
}

func (s *Session) open(ctx context.Context, path string) (*Hello, error) {
	stream, err := handlerpb.NewHandlerClient(s.conn).Session(ctx)
	if err != nil {
		return nil, fmt.Errorf("session with %s: opening the stream: %w", path, classify(err))
	}
	s.stream = stream
	m, err := stream.Recv()
	if err != nil {
		if err == io.EOF {
			return nil, fmt.Errorf("session with %s: stream closed before the hello: %w", path, ErrProtocol)
		}
		return nil, fmt.Errorf("session with %s: waiting for the hello: %w", path, classify(err))
	}
	h := m.GetHello()
	if h == nil {
		return nil, fmt.Errorf("session with %s: first message is %s, not hello: %w", path, kind(m), ErrProtocol)
	}
	hello, err := convertHello(h, s.maxFrame)
	if err != nil {
		return nil, fmt.Errorf("session with %s: %w: %w", path, ErrProtocol, err)
	}
	return hello, nil
}

// Hello is the hello the session opened with.
func (s *Session) Hello() *Hello { return s.hello }

// Recv returns the handler's next message: *protocol.Result,
// *protocol.Pong or *Draining. It returns io.EOF once the handler has
// closed the session cleanly (after shutdown), an error wrapping ErrBroken
// when the stream broke, and one wrapping ErrProtocol for a message that
// fails the checks (the caller should then Close the session).
func (s *Session) Recv() (protocol.Message, error) {
	if s.isClosed() {
		return nil, ErrClosed
	}
	if len(s.pending) > 0 {
		m := s.pending[0]
		s.pending[0] = nil
		s.pending = s.pending[1:]
		return m, nil
	}
	m, err := s.stream.Recv()
	if err == io.EOF {
		return nil, io.EOF
	}
	if err != nil {
		if s.isClosed() {
			return nil, ErrClosed
		}
		return nil, fmt.Errorf("receiving: %w", classify(err))
	}
	if rs := m.GetResults(); rs != nil {
		return s.recvResults(rs)
	}
	msg, err := convert(m, s.maxFrame)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrProtocol, err)
	}
	return msg, nil
}

// Buffered is the number of messages Recv returns next without reading
// the stream: the rest of a Results message.
func (s *Session) Buffered() int { return len(s.pending) }

// recvResults checks every result of a Results message (one that fails is
// a protocol error, as it would be alone) and returns the first; Recv
// returns the others next.
func (s *Session) recvResults(rs *handlerpb.Results) (protocol.Message, error) {
	switch {
	case !s.hello.Batches:
		return nil, fmt.Errorf("%w: a Results message, but the hello did not offer batches", ErrProtocol)
	case len(rs.GetResults()) == 0:
		return nil, fmt.Errorf("%w: a Results message with no result", ErrProtocol)
	case len(rs.GetResults()) > maxBatch:
		return nil, fmt.Errorf("%w: a Results message with %d results (at most %d)", ErrProtocol, len(rs.GetResults()), maxBatch)
	}
	out := make([]protocol.Message, 0, len(rs.GetResults()))
	for i, r := range rs.GetResults() {
		msg, err := r.ToProtocol(r.GetId(), s.maxFrame)
		if err != nil {
			return nil, fmt.Errorf("%w: results[%d]: %w", ErrProtocol, i, err)
		}
		out = append(out, msg)
	}
	s.pending = out[1:]
	return out[0], nil
}

// Send sends a *protocol.Job, *Jobs, *protocol.Cancel, *protocol.Ping,
// *protocol.Shutdown, *protocol.Enqueued or *Ack. A job the handler's decoder would refuse is not sent
// (ErrUnsendable; for *Jobs, none of them is sent); a failed send means the stream is broken (ErrBroken:
// Recv tells why).
func (s *Session) Send(m protocol.Message) error {
	var out *handlerpb.SidecarMessage
	switch m := m.(type) {
	case *protocol.Job:
		if _, err := checkJob(m, s.maxFrame); err != nil {
			return fmt.Errorf("job %s: %w: %w", m.ID, ErrUnsendable, err)
		}
		out = &handlerpb.SidecarMessage{Message: &handlerpb.SidecarMessage_Job{Job: handlerpb.FromJob(m)}}
	case *Jobs:
		return s.sendJobs(m.Jobs)
	case *protocol.Cancel:
		out = &handlerpb.SidecarMessage{Message: &handlerpb.SidecarMessage_Cancel{
			Cancel: &handlerpb.CancelRequest{Id: m.ID, Reason: string(m.Reason)}}}
	case *protocol.Ping:
		out = &handlerpb.SidecarMessage{Message: &handlerpb.SidecarMessage_Ping{Ping: &handlerpb.Ping{Seq: m.Seq}}}
	case *protocol.Shutdown:
		out = &handlerpb.SidecarMessage{Message: &handlerpb.SidecarMessage_Shutdown{Shutdown: &handlerpb.Shutdown{}}}
	case *Ack:
		out = &handlerpb.SidecarMessage{Message: &handlerpb.SidecarMessage_Ack{Ack: &handlerpb.Ack{Ids: m.IDs}}}
	case *protocol.Enqueued:
		out = &handlerpb.SidecarMessage{Message: &handlerpb.SidecarMessage_Enqueued{Enqueued: handlerpb.FromEnqueued(m)}}
	default:
		return fmt.Errorf("sending %T: not a sidecar message", m)
	}
	if err := s.send(out); err != nil {
		return fmt.Errorf("sending %s: %w", m.Type(), err)
	}
	return nil
}

// sendJobs checks every job, then sends them in as few messages as the
// batch bounds allow (one message per job to a handler without batches).
func (s *Session) sendJobs(jobs []*protocol.Job) error {
	sizes := make([]int, len(jobs))
	for i, j := range jobs {
		n, err := checkJob(j, s.maxFrame)
		if err != nil {
			return fmt.Errorf("job %s: %w: %w", j.ID, ErrUnsendable, err)
		}
		sizes[i] = n
	}
	if !s.hello.Batches {
		for _, j := range jobs {
			if err := s.send(&handlerpb.SidecarMessage{Message: &handlerpb.SidecarMessage_Job{Job: handlerpb.FromJob(j)}}); err != nil {
				return fmt.Errorf("sending job %s: %w", j.ID, err)
			}
		}
		return nil
	}
	for start := 0; start < len(jobs); {
		end, total := start, 0
		for end < len(jobs) && end-start < maxBatch && (end == start || total+sizes[end] <= s.maxFrame) {
			total += sizes[end]
			end++
		}
		batch := &handlerpb.Jobs{Jobs: make([]*handlerpb.Job, 0, end-start)}
		for _, j := range jobs[start:end] {
			batch.Jobs = append(batch.Jobs, handlerpb.FromJob(j))
		}
		if err := s.send(&handlerpb.SidecarMessage{Message: &handlerpb.SidecarMessage_Jobs{Jobs: batch}}); err != nil {
			return fmt.Errorf("sending %d jobs: %w", end-start, err)
		}
		start = end
	}
	return nil
}

// send puts one message on the stream.
func (s *Session) send(out *handlerpb.SidecarMessage) error {
	if s.isClosed() {
		return ErrClosed
	}
	s.sendMu.Lock()
	err := s.stream.Send(out)
	s.sendMu.Unlock()
	if err != nil {
		// io.EOF: the stream ended; its status comes from Recv.
		return fmt.Errorf("%w: %v", ErrBroken, err)
	}
	return nil
}

// Close ends the session: the stream is cancelled (the handler sees it
// break unless it already closed it) and the connection closed. Jobs a
// handler serving its own socket still runs keep running there.
func (s *Session) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	if err := s.conn.Close(); err != nil {
		return fmt.Errorf("closing the session's connection: %w", err)
	}
	return nil
}

func (s *Session) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// classify maps a gRPC error to the package's errors.
func classify(err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("%w: %w", ErrBroken, err)
	}
	if st.Code() == codes.FailedPrecondition {
		return &RefusedError{Message: st.Message()}
	}
	return fmt.Errorf("%w: %s: %s", ErrBroken, st.Code(), st.Message())
}

func kind(m *handlerpb.HandlerMessage) string {
	switch m.GetMessage().(type) {
	case *handlerpb.HandlerMessage_Hello:
		return "hello"
	case *handlerpb.HandlerMessage_Result:
		return "result"
	case *handlerpb.HandlerMessage_Pong:
		return "pong"
	case *handlerpb.HandlerMessage_Draining:
		return "draining"
	case *handlerpb.HandlerMessage_Results:
		return "results"
	case *handlerpb.HandlerMessage_Enqueue:
		return "enqueue"
	}
	return "an empty message"
}
