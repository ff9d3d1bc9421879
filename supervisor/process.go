package supervisor

import (
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/soniq-dev/soniq-sidecar/internal/transport"
	"github.com/soniq-dev/soniq-sidecar/protocol"
)

// procState is where a handler process is in its life.
type procState int

const (
	procStarting procState = iota // spawned, waiting for hello
	procReady                     // takes jobs
	procRetiring                  // recycling: takes no new jobs, stops when idle
	procStopping                  // asked to exit; waiting for it
	procDead                      // exited; only its exit is left to handle
)

func (s procState) String() string {
	return [...]string{"starting", "ready", "retiring", "stopping", "dead"}[s]
}

// procTransitions is every state change a process may make (the diagram in
// docs/architecture.md); setProcState refuses any other as a bug.
var procTransitions = [...][]procState{
	procStarting: {procReady, procStopping, procDead},
	procReady:    {procRetiring, procStopping, procDead},
	procRetiring: {procStopping, procDead},
	procStopping: {procDead},
	procDead:     nil,
}

func (s procState) canBecome(to procState) bool {
	return slices.Contains(procTransitions[s], to)
}

// process is one long-lived handler child. Its fields are owned by the
// supervisor's event loop; its transport's goroutines only consume out and
// talk back through events (procEvents).
type process struct {
	pool    *pool
	slot    int
	pid     int              // conn's pid, kept for logs; 0 for an in-process fake
	conn    transport.Conn   // nil until the transport has started it
	out     *transport.Queue // the transport's send queue; closing it closes stdin
	state   procState        // setProcState (lifecycle.go)
	hello   *protocol.Hello
	readyAt time.Time

	tasks    map[string]*task // every job it holds, live or abandoned (bind.go)
	syncHeld int              // sync jobs among tasks: their slot is held until they return (bind.go)
	jobsRun  int
	// jobsOut is the jobs of the dispatch under way, sent together when it
	// ends (loop.sendJobs).
	jobsOut []*protocol.Job
	maxJobs int // jittered recycle threshold; 0 = never

	ping         pings  // lifecycle.go
	brokenCause  string // set on a protocol error or unresponsiveness: the last_error for its jobs
	brokenReason string // the restart reason metric label: protocol_error, unresponsive, ...
	startTimer   *time.Timer
	killTimers   []*time.Timer

	attach procAttach // attach.go
	ack    procAcks   // acks.go
}

// who names the process in a log line: its pid when the sidecar spawned
// it, its endpoint when it is attached (another container's process has
// no pid here).
func (p *process) who() slog.Attr {
	if p.attach.endpoint != "" {
		return slog.String("endpoint", p.attach.endpoint)
	}
	return slog.Int("pid", p.pid)
}

// capacity is how many jobs the process takes at once: the manifest's
// concurrency, lowered by the handler's own if it announced fewer.
func (p *process) capacity() int {
	c := p.pool.h.Concurrency
	if p.hello != nil && p.hello.Concurrency < c {
		c = p.hello.Concurrency
	}
	return c
}

func (p *process) syncCapacity() int {
	c := p.pool.h.SyncConcurrency
	if p.hello != nil && p.hello.SyncConcurrency > 0 && p.hello.SyncConcurrency < c {
		c = p.hello.SyncConcurrency
	}
	return min(c, p.capacity())
}

func (p *process) free() int     { return p.capacity() - len(p.tasks) - len(p.attach.foreign) }
func (p *process) syncFree() int { return p.syncCapacity() - p.syncHeld - p.foreignSync() }

// send queues a frame for the process. The queue is sized so that it never
// fills for a well-behaved process (jobs and cancels are bounded by its
// concurrency, pings by one outstanding); a full queue means the process
// stopped reading its stdin and it is treated as broken.
func (p *process) send(m protocol.Message) bool { return p.out.Send(m) }

// closeInput sends `shutdown` and then closes stdin (EOF means the same).
func (p *process) closeInput() { p.out.Close() }

// signalGroup signals the process's whole process group (it is a group
// leader), so helpers it started go with it; for an attached process a
// SIGKILL ends the connection.
func (p *process) signalGroup(sig syscall.Signal) {
	if p.conn != nil {
		p.conn.Signal(sig)
	}
}

// stderrTail is the last lines the process wrote to stderr, "" if none.
func (p *process) stderrTail() string {
	if p.conn == nil {
		return ""
	}
	return p.conn.Stderr()
}

// rssMB reads the resident set size from /proc (Linux). 0 when unknown.
func (p *process) rssMB() int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p.pid) + "/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, err := strconv.Atoi(f[1])
	if err != nil {
		return 0
	}
	return pages * os.Getpagesize() / (1 << 20)
}

// procEvents turns what p's transport reports into the loop's events for
// p (events.go).
type procEvents struct {
	emit func(event) bool
	p    *process
}

func (e procEvents) Frame(m protocol.Message) { e.emit(frameEvent{proc: e.p, msg: m}) }

var _ transport.FrameBatcher = procEvents{}

// Frames is transport.FrameBatcher: the frames the reader found together.
func (e procEvents) Frames(ms []protocol.Message) { e.emit(framesEvent{proc: e.p, msgs: ms}) }
func (e procEvents) ProtocolError(err error)      { e.emit(protocolErrorEvent{proc: e.p, err: err}) }
func (e procEvents) StdoutClosed()                { e.emit(stdoutClosedEvent{proc: e.p}) }
func (e procEvents) WriteFailed(err error)        { e.emit(stdinFailedEvent{proc: e.p, err: err}) }
func (e procEvents) Refused(err error)            { e.emit(attachRefusedEvent{proc: e.p, err: err}) }
func (e procEvents) Exited(err error)             { e.emit(exitEvent{proc: e.p, err: err}) }
func (e procEvents) Unsendable(m protocol.Message, err error) {
	e.emit(unsendableEvent{proc: e.p, msg: m, err: err})
}
