package supervisor

import (
	"log/slog"
	"strconv"
	"sync"
	"syscall"

	"github.com/soniq-dev/soniq-sidecar/internal/config"
)

// A transport connects the loop to one handler process. start returns once
// the connection exists (a spawned child is forked); from then on the
// transport's goroutines, joined to te.wg:
//   - consume p.out, the process's send queue (p.send; closing it with
//     p.closeInput is the graceful close), and report what cannot be sent
//     (unsendableEvent, stdinFailedEvent);
//   - report every frame, protocol error and the end of the connection as
//     events through te.emit, exitEvent last;
//   - set p.conn, the handle the loop signals and names the process by.
//
// A transport may spawn the process it talks to (stdio, spawned unix) or
// connect to an endpoint it does not own; the conn says which, so the loop
// never signals what it did not start.
type transport interface {
	start(te transportEnv, p *process) error
}

// transportFunc adapts a function to transport (the built-in transports and
// the in-process fakes of the unit tests).
type transportFunc func(transportEnv, *process) error

func (f transportFunc) start(te transportEnv, p *process) error { return f(te, p) }

// transportFor is the transport of a handler, the one `run` and `manifest
// check` both use.
func transportFor(h *config.Handler) transport {
	if h.Attached() {
		return transportFunc(startAttach)
	}
	if h.Transport == config.TransportUnix {
		return transportFunc(startUnix)
	}
	return transportFunc(startStdio)
}

// transportEnv is what a transport needs from the loop to run one process.
type transportEnv struct {
	sp       *spawner
	maxFrame int
	log      *slog.Logger
	emit     func(event) bool
	wg       *sync.WaitGroup // the transport's goroutines join it
}

// conn is the loop's handle on a started connection, beyond its send queue.
type conn interface {
	// pid is the handler's process id when the sidecar spawned it and owns
	// its process group; 0 otherwise.
	pid() int
	// peer names the other end in logs: "pid 1234", or an address.
	peer() string
	// signal signals the process group the sidecar owns; a no-op for an
	// endpoint it only connects to.
	signal(sig syscall.Signal)
}

// spawnedConn is a child the sidecar forked as a process group leader
// (spawn_linux.go): signalling the group reaches the helpers it started.
type spawnedConn struct{ groupPID int }

func (c spawnedConn) pid() int     { return c.groupPID }
func (c spawnedConn) peer() string { return "pid " + strconv.Itoa(c.groupPID) }
func (c spawnedConn) signal(sig syscall.Signal) {
	if c.groupPID > 0 {
		_ = syscall.Kill(-c.groupPID, sig)
	}
}

// stderrMaxLine bounds one logged stderr line; a longer one is split.
const stderrMaxLine = 64 << 10

// stderrLines is the one stderr line splitter of every transport: written
// the child's stderr (in pieces of any size), it keeps the last lines in
// tail and logs each with the handler and its pid. flush emits an
// unterminated last line.
type stderrLines struct {
	log     *slog.Logger
	handler string
	pid     func() int
	tail    *stderrTail
	buf     []byte
}

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
}

func (s *stderrLines) emitLine() {
	line := string(s.buf)
	s.buf = s.buf[:0]
	s.tail.add(line)
	s.log.Info(line, "handler", s.handler, "pid", s.pid(), "stream", "stderr")
}
