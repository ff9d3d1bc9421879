package supervisor

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/soniq-dev/soniq-sidecar/internal/config"
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

// process is one long-lived handler child. Its fields are owned by the
// supervisor's event loop; the goroutines it starts only read its pipes and
// talk back through events.
type process struct {
	pool      *pool
	slot      int
	pid       int                   // conn's pid, kept for logs; 0 for an in-process fake
	conn      conn                  // nil until the transport has started it
	out       chan protocol.Message // frames for the writer goroutine; closed to close stdin
	outClosed bool
	state     procState
	hello     *protocol.Hello
	spawnedAt time.Time
	readyAt   time.Time

	tasks    map[string]*task // every job it holds, live or abandoned
	syncHeld int              // sync jobs among tasks (their slot is held until they return)
	jobsRun  int
	maxJobs  int // jittered recycle threshold; 0 = never

	pingSeq      int64
	pingSentAt   time.Time // zero when no ping is outstanding
	brokenCause  string    // set on a protocol error or unresponsiveness: the last_error for its jobs
	brokenReason string    // the restart reason metric label: protocol_error, unresponsive, ...

	startTimer *time.Timer
	killTimers []*time.Timer

	stderr *stderrTail

	// Attach mode (attach.go): the endpoint, the jobs it still ran from an
	// earlier session (id → sync), and whether the sidecar sent `shutdown`
	// on the stream.
	endpoint     string
	foreign      map[string]bool
	shutdownSent atomic.Bool
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

func (p *process) free() int     { return p.capacity() - len(p.tasks) - len(p.foreign) }
func (p *process) syncFree() int { return p.syncCapacity() - p.syncHeld - p.foreignSync() }

// send queues a frame for the process. The queue is sized so that it never
// fills for a well-behaved process (jobs and cancels are bounded by its
// concurrency, pings by one outstanding); a full queue means the process
// stopped reading its stdin and it is treated as broken.
func (p *process) send(m protocol.Message) bool {
	if p.outClosed {
		return false
	}
	select {
	case p.out <- m:
		return true
	default:
		return false
	}
}

// closeInput sends `shutdown` and then closes stdin (EOF means the same).
func (p *process) closeInput() {
	if p.outClosed {
		return
	}
	p.send(&protocol.Shutdown{})
	close(p.out)
	p.outClosed = true
}

// signalGroup signals the process's whole process group (it is a group
// leader), so helpers it started go with it.
func (p *process) signalGroup(sig syscall.Signal) {
	if p.conn != nil {
		p.conn.signal(sig)
	}
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

// spawnRequest asks the spawner to run a function that forks a child.
type spawnRequest struct {
	fork  func() error
	reply chan error
}

// spawner starts every child from one goroutine locked to its OS thread.
// Linux delivers the parent-death signal when the *thread* that forked the
// child exits, not the process; Go may retire idle threads, so children
// forked from arbitrary goroutines could be killed at random. The spawner's
// thread lives exactly as long as the supervisor, so its children are killed
// if the sidecar dies and never before.
type spawner struct {
	reqs chan spawnRequest
	done chan struct{}
}

func newSpawner() *spawner {
	return &spawner{reqs: make(chan spawnRequest), done: make(chan struct{})}
}

// run serves spawn requests until stop is closed. It deliberately never
// unlocks the thread: when run returns, the thread exits with it.
func (s *spawner) run(stop <-chan struct{}) {
	defer close(s.done)
	runtime.LockOSThread()
	for {
		select {
		case r := <-s.reqs:
			r.reply <- r.fork()
		case <-stop:
			return
		}
	}
}

// start starts cmd on the spawner's thread.
func (s *spawner) start(cmd *exec.Cmd) error { return s.do(cmd.Start) }

// do runs fork, which starts a child process (e.g. a go-plugin client's
// Start), on the spawner's thread.
func (s *spawner) do(fork func() error) error {
	reply := make(chan error, 1)
	select {
	case s.reqs <- spawnRequest{fork: fork, reply: reply}:
	case <-s.done:
		return errors.New("spawner stopped")
	}
	return <-reply
}

// childEnv is the child's whole environment: the manifest's env, the
// variables it names in env_from, and the protocol variables. Nothing else
// of the sidecar's environment (notably the database URL) reaches the handler.
func childEnv(h *config.Handler, maxFrame int) []string {
	env := make([]string, 0, len(h.Env)+len(h.EnvFrom)+4)
	for _, k := range h.EnvFrom {
		if _, set := h.Env[k]; set {
			continue
		}
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	for k, v := range h.Env {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	return append(env,
		"SONIQ_PROTOCOL_VERSIONS="+strconv.Itoa(protocol.Version),
		"SONIQ_TRANSPORT="+string(h.Transport),
		"SONIQ_HANDLER="+h.Name,
		"SONIQ_MAX_FRAME_BYTES="+strconv.Itoa(maxFrame),
	)
}

// handlerCommand builds (does not start) the command of a handler: its own
// process group, the parent-death signal, the restricted environment, the
// manifest's working directory. Both transports start children from it.
func handlerCommand(h *config.Handler, maxFrame int) (*exec.Cmd, error) {
	path := h.Command[0]
	if !strings.Contains(path, "/") {
		// Resolve with the sidecar's PATH: the child's environment is the
		// manifest's alone and may not have one. The child is started by
		// the resolved path, argv[0] included: an interpreter finds its
		// virtualenv (pyvenv.cfg beside it) or its nvm/pyenv install from
		// its own path, and with a bare name and no PATH it would run as
		// the base interpreter without the venv's packages.
		lp, err := exec.LookPath(path)
		if err != nil {
			return nil, fmt.Errorf("handler %s: command %q: %w", h.Name, path, err)
		}
		if path, err = filepath.Abs(lp); err != nil {
			return nil, fmt.Errorf("handler %s: command %q: %w", h.Name, lp, err)
		}
	}
	cmd := exec.Command(path, h.Command[1:]...)
	cmd.Dir = h.Workdir
	cmd.Env = childEnv(h, maxFrame)
	cmd.SysProcAttr = childSysProcAttr()
	return cmd, nil
}

// startChild starts a stdio handler child through the spawner.
func startChild(sp *spawner, h *config.Handler, maxFrame int) (*exec.Cmd, childPipes, error) {
	cmd, err := handlerCommand(h, maxFrame)
	if err != nil {
		return nil, childPipes{}, err
	}
	pp, child, err := attachPipes(cmd, true)
	if err != nil {
		return nil, pp, fmt.Errorf("handler %s: %w", h.Name, err)
	}
	err = sp.start(cmd)
	for _, f := range child {
		_ = f.Close() // the child has its copies; ours would hide its EOF
	}
	if err != nil {
		pp.close()
		return nil, childPipes{}, fmt.Errorf("handler %s: starting %s: %w", h.Name, strings.Join(h.Command, " "), err)
	}
	return cmd, pp, nil
}

// writeFrames is a process's writer goroutine: it encodes queued frames to
// stdin until the queue is closed, then closes stdin. A frame that cannot
// be encoded, or a job the handler could not read, is reported to the loop
// (unsendableEvent) and skipped: the stream goes on. A failed write (the child
// closed its stdin or died) is logged once and reported (stdinFailedEvent);
// the frames after it cannot be delivered and are drained, so senders never
// block.
func writeFrames(p *process, stdin io.WriteCloser, te transportEnv) {
	w := bufio.NewWriterSize(stdin, 64<<10)
	var buf []byte
	var failed error
	for m := range p.out {
		if failed != nil {
			continue
		}
		var err error
		if j, ok := m.(*protocol.Job); ok {
			err = jobUnsendable(j, te.maxFrame)
		}
		var frame []byte
		if err == nil {
			frame, err = protocol.Append(buf[:0], m)
		}
		if err != nil {
			te.emit(unsendableEvent{proc: p, msg: m, err: err})
			continue
		}
		frame = append(frame, '\n')
		if cap(frame) <= 1<<20 {
			buf = frame // reuse, but do not pin a huge frame's memory
		}
		// One Write per frame; flush when nothing else is queued: batches
		// frames under load, no latency when idle.
		if _, err := w.Write(frame); err != nil {
			failed = err
		} else if len(p.out) == 0 {
			failed = w.Flush()
		}
		switch {
		case failed == nil:
		case errors.Is(failed, os.ErrClosed):
			// The reaper closed stdin: the process has exited, and its exit
			// event tells the rest.
			te.log.Debug("the handler exited before this frame was written", "handler", p.pool.h.Name, "pid", p.pid, "frame", string(m.Type()))
		case m.Type() == protocol.TypeShutdown:
			// The process is being stopped and is already gone or has
			// closed its stdin: its exit tells the rest.
			te.log.Debug("the handler's stdin closed before the shutdown frame", "handler", p.pool.h.Name, "pid", p.pid, "err", failed)
		default:
			te.log.Error("writing to the handler's stdin failed; frames for it are dropped until it is replaced",
				"handler", p.pool.h.Name, "pid", p.pid, "frame", string(m.Type()), "err", failed)
			te.emit(stdinFailedEvent{proc: p, err: failed})
		}
	}
	_ = stdin.Close()
}

// readStderr is a process's stderr goroutine: it logs each line and keeps
// the last ones for last_error, until EOF or the read end is closed.
func readStderr(p *process, stderr io.Reader, log *slog.Logger) {
	lines := &stderrLines{log: log, handler: p.pool.h.Name, pid: func() int { return p.pid }, tail: p.stderr}
	_, _ = io.Copy(lines, stderr)
	lines.flush()
}

// readFrames is a process's stdout goroutine: it decodes frames into events
// until EOF or the read end is closed (after the exit, by drainPipes).
// EOF while the process still runs is reported as stdoutClosedEvent: no result
// can come back from it.
func readFrames(p *process, stdout io.Reader, exited <-chan struct{}, maxFrame int, emit func(event) bool) {
	dec := protocol.NewDecoder(stdout)
	dec.SetMaxFrameBytes(maxFrame)
	broken := false
	for {
		m, err := dec.Decode()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			var fe *protocol.FrameError
			if !errors.As(err, &fe) {
				return // the pipe itself failed or was closed; the exit tells the rest
			}
			if !broken {
				broken = true
				emit(protocolErrorEvent{proc: p, err: err})
			}
			continue // keep draining so the child never blocks on stdout
		}
		if broken {
			continue
		}
		if !m.Type().FromHandler() {
			broken = true
			emit(protocolErrorEvent{proc: p, err: fmt.Errorf("protocol: a %q frame travels from the sidecar to the handler, not back", m.Type())})
			continue
		}
		emit(frameEvent{proc: p, msg: m})
	}
	if broken {
		return // already being killed
	}
	grace := time.NewTimer(stdoutEOFGrace)
	defer grace.Stop()
	select {
	case <-exited:
	case <-grace.C:
		emit(stdoutClosedEvent{proc: p})
	}
}

// exitDescription says how a process ended, for logs and last_error.
func exitDescription(err error) string {
	if err == nil {
		return "exited with status 0"
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return "killed by signal " + unix.SignalName(ws.Signal()) // e.g. SIGKILL
		}
		return "exited with status " + strconv.Itoa(ee.ExitCode())
	}
	return err.Error()
}
