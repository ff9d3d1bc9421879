package transport

// The runner go-plugin starts a unix handler with: the child is forked on the
// spawner's thread, its exit seen by waiting for it, its pipes drained.

import (
	"context"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/hashicorp/go-plugin/runner"
)

// childRunner is go-plugin's runner for a handler: the command of
// handlerCommand, forked on the spawner's thread (see Spawner), killed with
// its process group. It reaps the child itself as soon as it exits:
// go-plugin calls Wait only once both pipes reached EOF, which a descendant
// holding them (a helper the handler started) would put off for ever.
type childRunner struct {
	sp        *Spawner
	wg        *sync.WaitGroup // the reaper joins it
	cmd       *exec.Cmd
	pipes     childPipes // the sidecar's ends
	childEnds []*os.File // closed once the child is forked
	stdout    *endReader
	stderr    *endReader
	pid       int
	once      sync.Once
	started   chan struct{} // closed once the fork succeeded or failed
	isUp      atomic.Bool
	said      atomic.Bool // the child wrote to its stdout
	// startErr and waitErr are written before started and exited close.
	startErr error
	exited   chan struct{}
	waitErr  error
	drained  chan struct{} // closed after exited, once the pipes are drained and closed
}

var _ runner.Runner = (*childRunner)(nil)

// prepare adds go-plugin's variables to the restricted environment and
// opens the pipes. The child's stdin is /dev/null. Whether the child ever
// wrote to its stdout tells a failed handshake (it printed something else:
// a protocol error) from a child that died before saying anything (its
// exit tells more).
func (r *childRunner) prepare(pluginEnv []string) error {
	r.cmd.Env = append(r.cmd.Env, pluginEnv...)
	r.cmd.Stdin = nil
	pp, child, err := attachPipes(r.cmd, false)
	if err != nil {
		return err
	}
	r.pipes, r.childEnds = pp, child
	r.stdout = newEndReader(pp.stdout, &r.said)
	r.stderr = newEndReader(pp.stderr, nil)
	return nil
}

func (r *childRunner) startedOnce(err error) {
	r.once.Do(func() {
		r.startErr = err
		close(r.started)
	})
}

func (r *childRunner) forked() bool { return r.isUp.Load() }

func (r *childRunner) Start(context.Context) error {
	err := r.sp.do(r.cmd.Start)
	for _, f := range r.childEnds {
		_ = f.Close() // the child has its copies; ours would hide its EOF
	}
	if err == nil {
		r.pid = r.cmd.Process.Pid
		r.isUp.Store(true)
		r.wg.Add(1)
		go r.reap()
	} else {
		r.pipes.close()
	}
	r.startedOnce(err)
	return err
}

// reap observes the exit directly, then bounds go-plugin's pipe readers
// (see drainPipes), which lets its own Wait call return.
func (r *childRunner) reap() {
	defer r.wg.Done()
	r.waitErr = reapChild(r.cmd)
	close(r.exited)
	drainPipes(exitDrain, []*os.File{r.pipes.stdout, r.pipes.stderr}, r.stdout.done, r.stderr.done)
	close(r.drained)
}

// Wait is go-plugin's, called once it has finished reading the pipes.
func (r *childRunner) Wait(context.Context) error {
	<-r.exited
	return r.waitErr
}

// Kill is go-plugin's last resort (a failed handshake, or no exit 2 s after
// the graceful Shutdown); the transport calls Kill only for a process that
// holds no job.
func (r *childRunner) Kill(context.Context) error {
	select {
	case <-r.exited:
		return nil // reaped: its pid may belong to someone else now
	default:
	}
	if r.pid > 0 {
		_ = syscall.Kill(-r.pid, syscall.SIGKILL)
	}
	return nil
}

func (r *childRunner) Diagnose(context.Context) string {
	return "the handler must print go-plugin's handshake line (1|1|unix|<socket>|grpc) on stdout; see docs/protocol.md"
}
func (r *childRunner) Stdout() io.ReadCloser { return r.stdout }
func (r *childRunner) Stderr() io.ReadCloser { return r.stderr }
func (r *childRunner) Name() string          { return r.cmd.Path }
func (r *childRunner) ID() string            { return strconv.Itoa(r.pid) }
func (r *childRunner) PluginToHost(network, addr string) (string, string, error) {
	return network, addr, nil
}
func (r *childRunner) HostToPlugin(network, addr string) (string, string, error) {
	return network, addr, nil
}
