// Package transport starts, talks to and stops one handler process: the
// spawner thread and process-group spawning, the stdio transport (NDJSON
// over the child's pipes), the spawned unix transport (go-plugin and one
// gRPC Session stream) and the attach transport (a Session stream to an
// endpoint another container serves), the stderr tail, the check of what
// a job frame may carry, and `manifest check`'s start-and-hello probe.
//
// It knows nothing of pools, tasks, rows or the supervisor's event loop:
// the caller hands Start a send queue and an Events to report to, and gets
// back a Conn to signal the process by.
package transport

import (
	"log/slog"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/soniq-dev/soniq-sidecar/config"
	"github.com/soniq-dev/soniq-sidecar/protocol"
)

// Env is what every connection of one run shares.
type Env struct {
	Spawner       *Spawner // forks spawned children (not used by attach)
	MaxFrameBytes int
	Log           *slog.Logger
	WG            *sync.WaitGroup // the transport's goroutines join it
}

// Spec is one connection to start.
type Spec struct {
	Handler *config.Handler
	// Endpoint is the socket of an attach handler's connection; "" for a
	// handler the sidecar spawns.
	Endpoint string
	// Out is the process's send queue (Queue.Out). The transport consumes
	// it until it is closed; Queue.Close is the graceful close. It is the
	// caller's to size and to close.
	Out <-chan protocol.Message
	// Events receives what happens to the connection.
	Events Events
}

// Events is how a transport reports what happens to one connection. Its
// methods are called from the transport's goroutines (several of them, so
// concurrently). Exited comes once, after every frame the handler sent;
// only Unsendable, for a frame queued after it, may follow.
type Events interface {
	// Frame: a frame from the handler (a hello first; an attach handler's
	// hello is a *SessionHello, and its session may report *Draining).
	Frame(m protocol.Message)
	// ProtocolError: the handler broke the protocol; the caller should
	// close Out and kill the process.
	ProtocolError(err error)
	// Unsendable: a frame from Out could not be encoded, or a job carries
	// args the handler could not read; it was skipped, the rest go on.
	Unsendable(m protocol.Message, err error)
	// WriteFailed: writing to the handler's stdin failed; frames after it
	// are dropped until the process exits (reported once).
	WriteFailed(err error)
	// StdoutClosed: a stdio process closed its stdout and did not exit.
	StdoutClosed()
	// Refused: an attach endpoint refused the session (it has one with
	// another sidecar); Exited follows once Out is closed.
	Refused(err error)
	// Exited: the process exited or the connection ended (err says how;
	// see ExitDescription).
	Exited(err error)
}

// FrameBatcher is an Events that also takes several frames at once: a
// reader that finds more whole frames already read hands them over
// together, in order, as if by one Frame call each. One report per batch
// rather than per frame saves a hand-off between goroutines per result
// under load.
type FrameBatcher interface {
	Frames(ms []protocol.Message)
}

// Conn is the caller's handle on a started connection, beyond its send
// queue.
type Conn interface {
	// PID is the handler's process id when the sidecar spawned it and owns
	// its process group; 0 otherwise.
	PID() int
	// Signal signals the process group the sidecar owns; for an endpoint
	// it only connects to, SIGKILL ends the connection and other signals
	// do nothing.
	Signal(sig syscall.Signal)
	// Stderr is the last lines the process wrote to stderr, for the
	// last_error of jobs that die with it; "" when there are none.
	Stderr() string
}

// Start starts the connection of spec's handler with the transport `run`
// and `manifest check` both use, and returns once it exists (a spawned
// child is forked; an attach connection is still being made). From then on
// the transport consumes spec.Out and reports to spec.Events, Exited last.
func Start(env Env, spec Spec) (Conn, error) {
	l := &link{env: env, h: spec.Handler, out: spec.Out, ev: spec.Events, stderr: &stderrTail{}}
	switch {
	case spec.Handler.Attached():
		return startAttach(l, spec.Endpoint), nil
	case spec.Handler.Transport == config.TransportUnix:
		return startUnix(l)
	default:
		return startStdio(l)
	}
}

// link is the transport's side of one connection: what Start was given,
// shared by that connection's goroutines.
type link struct {
	env    Env
	h      *config.Handler
	out    <-chan protocol.Message
	ev     Events
	pid    int // a spawned child's, once forked
	stderr *stderrTail
}

// spawnedConn is a child the sidecar forked as a process group leader
// (spawn_linux.go): signalling the group reaches the helpers it started.
type spawnedConn struct {
	groupPID int
	stderr   *stderrTail
}

func (c spawnedConn) PID() int { return c.groupPID }
func (c spawnedConn) Signal(sig syscall.Signal) {
	if c.groupPID > 0 {
		_ = syscall.Kill(-c.groupPID, sig)
	}
}
func (c spawnedConn) Stderr() string { return c.stderr.String() }

// stderrMaxLine bounds one logged stderr line; a longer one is split.
const stderrMaxLine = 64 << 10

// stderrLines is the one stderr line splitter of every transport: written
// the child's stderr (in pieces of any size), it keeps the last lines in
// tail and logs each with the handler and its pid. flush emits an
// unterminated last line.
//
// Logging is rate-limited per process (a byte budget that refills over
// time): a handler printing megabytes per job would otherwise fill the
// node's disk through the sidecar's log. Lines over the budget are still
// kept in tail, so a crash's last_error shows them; they are only not
// logged, and the count of what was dropped is logged when logging
// resumes.
type stderrLines struct {
	log     *slog.Logger
	handler string
	pid     func() int
	tail    *stderrTail
	buf     []byte

	budget       float64   // bytes that may be logged now
	refilled     time.Time // when budget was last topped up; zero before the first line
	dropping     bool
	droppedLines int
	droppedBytes int
}

const (
	// stderrBurst is how much a process may log at once; stderrRate is
	// how fast that allowance comes back (bytes per second). Once lines
	// are dropped, logging resumes when half the burst is back, so a
	// handler that never stops printing gets one count line every few
	// seconds, not one per line.
	stderrBurst = 1 << 20
	stderrRate  = 128 << 10
)

func (s *stderrLines) Write(b []byte) (int, error) {
	for _, c := range b {
		if c == '\n' || len(s.buf) >= stderrMaxLine {
			s.emitLine()
			if c == '\n' {
				continue
			}
		}
		s.buf = append(s.buf, c)
	}
	return len(b), nil
}

func (s *stderrLines) flush() {
	if len(s.buf) > 0 {
		s.emitLine()
	}
	s.reportDropped()
}

func (s *stderrLines) emitLine() {
	line := string(s.buf)
	s.buf = s.buf[:0]
	s.tail.add(line)
	if !s.admit(len(line) + 1) {
		return
	}
	s.log.Info(line, "handler", s.handler, "pid", s.pid(), "stream", "stderr")
}

// admit takes n bytes from the budget, or counts the line as dropped.
func (s *stderrLines) admit(n int) bool {
	now := time.Now()
	if s.refilled.IsZero() {
		s.budget = stderrBurst
	} else {
		s.budget = min(stderrBurst, s.budget+now.Sub(s.refilled).Seconds()*stderrRate)
	}
	s.refilled = now
	if s.dropping && s.budget >= stderrBurst/2 {
		s.reportDropped()
	}
	if s.dropping || s.budget < float64(n) {
		if !s.dropping {
			s.dropping = true
			s.log.Warn("handler stderr over its rate limit: lines are dropped from this log until the rate falls (the last lines are still kept for last_error)",
				"handler", s.handler, "pid", s.pid(), "burst_bytes", stderrBurst, "bytes_per_second", stderrRate)
		}
		s.droppedLines++
		s.droppedBytes += n
		return false
	}
	s.budget -= float64(n)
	return true
}

// reportDropped logs how much was dropped since logging stopped, and
// resumes logging.
func (s *stderrLines) reportDropped() {
	if s.droppedLines > 0 {
		s.log.Warn("handler stderr: lines dropped over the rate limit",
			"handler", s.handler, "pid", s.pid(), "dropped_lines", s.droppedLines, "dropped_bytes", s.droppedBytes)
	}
	s.dropping, s.droppedLines, s.droppedBytes = false, 0, 0
}

// stderrTail keeps the last lines a process wrote to stderr, for the
// last_error of jobs that die with it.
type stderrTail struct {
	mu    sync.Mutex
	lines []string
}

const stderrTailLines = 20

func (t *stderrTail) add(line string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.lines) == stderrTailLines {
		copy(t.lines, t.lines[1:])
		t.lines = t.lines[:stderrTailLines-1]
	}
	t.lines = append(t.lines, line)
}

func (t *stderrTail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.lines, "\n")
}

// Features are what this sidecar speaks beyond protocol v1, announced to
// every handler: in SONIQ_FEATURES to a spawned one, in a Features message
// on a Session whose hello reads it. "enqueue": child jobs from handlers
// (docs/protocol.md, "Child jobs").
func Features() []string { return []string{protocol.FeatureEnqueue} }
