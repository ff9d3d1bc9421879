package transport

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A child's exit is observed by waiting for the process itself, never by
// EOF on its pipes: a descendant that inherited the pipes (a helper it
// started, even one that called setsid) keeps them open after the child is
// gone, and a child may close its stdout and keep running.

// exitDrain bounds how long the readers of an exited child's pipes get to
// deliver what it wrote before it exited. They normally reach EOF at once;
// only a descendant still holding a write end makes them wait that long.
const exitDrain = time.Second

// stdoutEOFGrace is how long a stdio process whose stdout reached EOF gets
// to exit before it counts as broken: a process closes its stdout as it
// exits, a moment before it can be reaped.
const stdoutEOFGrace = time.Second

// childPipes are the sidecar's ends of a child's stdio pipes. Every child
// gets fresh pipes, so whatever a dead child's descendants still hold never
// mixes with its replacement's streams.
type childPipes struct {
	stdin  *os.File // write end; nil when the child's stdin is /dev/null
	stdout *os.File // read end
	stderr *os.File // read end
}

// close closes the sidecar's ends (a closed pipe's Close is a no-op error).
func (pp childPipes) close() {
	for _, f := range []*os.File{pp.stdin, pp.stdout, pp.stderr} {
		if f != nil {
			_ = f.Close()
		}
	}
}

// attachPipes creates the pipes of cmd's stdout, stderr and (withStdin)
// stdin and sets the child's ends as its stdio. They are plain *os.File
// pipes, so exec starts no copying goroutine and cmd.Wait waits for the
// process alone; the sidecar owns its ends and closes them itself (see
// drainPipes). The returned child ends must be closed once cmd is started.
func attachPipes(cmd *exec.Cmd, withStdin bool) (childPipes, []*os.File, error) {
	var pp childPipes
	var child []*os.File
	fail := func(what string, err error) (childPipes, []*os.File, error) {
		pp.close()
		for _, f := range child {
			_ = f.Close()
		}
		return childPipes{}, nil, fmt.Errorf("creating the %s pipe: %w", what, err)
	}
	if withStdin {
		r, w, err := os.Pipe()
		if err != nil {
			return fail("stdin", err)
		}
		pp.stdin, cmd.Stdin = w, r
		child = append(child, r)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return fail("stdout", err)
	}
	pp.stdout, cmd.Stdout = r, w
	child = append(child, w)
	if r, w, err = os.Pipe(); err != nil {
		return fail("stderr", err)
	}
	pp.stderr, cmd.Stderr = r, w
	child = append(child, w)
	return pp, child, nil
}

// reapChild waits until cmd's process has exited, whatever its pipes do,
// SIGKILLs what is left of its process group, and reaps it. The first wait
// leaves the process a zombie: until it is reaped its pid, which is its
// process group id, cannot be reused, so the signal reaches only leftovers
// of this child's group. A descendant that called setsid has left the group
// and is not reached; its ends of the pipes are cut by drainPipes.
func reapChild(cmd *exec.Cmd) error {
	pid := cmd.Process.Pid
	waitExited(pid)
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	return cmd.Wait()
}

// drainPipes is called once the child has exited. It gives the readers of
// its pipes up to drain to finish by themselves, so that what the child
// wrote before it exited is delivered first, then closes the read ends,
// which ends any read still blocked because a descendant holds a write end
// (that descendant then gets EPIPE/SIGPIPE), and waits for the readers.
func drainPipes(drain time.Duration, ends []*os.File, readers ...<-chan struct{}) {
	timer := time.NewTimer(drain)
	defer timer.Stop()
wait:
	for _, done := range readers {
		select {
		case <-done:
		case <-timer.C:
			break wait
		}
	}
	for _, f := range ends {
		_ = f.Close()
	}
	for _, done := range readers {
		<-done
	}
}

// endReader is a read end handed to a reader the sidecar does not own
// (go-plugin's): done is closed at its first error (EOF, or the read end
// closed), which tells drainPipes the reader is finished with it; said
// records whether anything was read.
type endReader struct {
	f    *os.File
	said *atomic.Bool // optional
	once sync.Once
	done chan struct{}
}

func newEndReader(f *os.File, said *atomic.Bool) *endReader {
	return &endReader{f: f, said: said, done: make(chan struct{})}
}

func (r *endReader) Read(b []byte) (int, error) {
	n, err := r.f.Read(b)
	if n > 0 && r.said != nil {
		r.said.Store(true)
	}
	if err != nil {
		r.once.Do(func() { close(r.done) })
	}
	return n, err
}

func (r *endReader) Close() error { return r.f.Close() }

var _ io.ReadCloser = (*endReader)(nil)

// ExitDescription says how a process ended, for logs and last_error:
// "exited with status N", "killed by signal SIGKILL", or the error.
func ExitDescription(err error) string {
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
