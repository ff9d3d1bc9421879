package integration

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/soniq-dev/soniq-sidecar/internal/session"
	"github.com/soniq-dev/soniq-sidecar/protocol"
)

// The harness of the attach-mode tests: an SDK's example handler started by
// hand with --listen (its own process, no sidecar), driven through the
// internal/session client. Each SDK describes itself with an attachSDK.

// attachSDK says how to start an SDK's example handler in attach mode and
// how to run its probe command.
type attachSDK struct {
	name string
	// command serves the SDK's example handler (examples.add, examples.fail,
	// examples.sleep_async, examples.sleep_sync) on the socket at sock.
	command func(root, sock string) []string
	// probe runs the SDK's health probe against sock.
	probe func(root, sock string) []string
	env   func(root string) map[string]string
	// failType is the error type examples.fail reports.
	failType string
}

var pythonAttach = attachSDK{
	name: "python",
	command: func(root, sock string) []string {
		return []string{"python3", "-u", "-m", "soniq_handler_examples", "--listen", sock}
	},
	probe: func(root, sock string) []string {
		return []string{"python3", "-m", "soniq_handler", "probe", sock}
	},
	env: func(root string) map[string]string {
		return map[string]string{"PYTHONPATH": filepath.Join(root, "examples/python") + string(os.PathListSeparator) + filepath.Join(root, "sdk/python")}
	},
	failType: "ValueError",
}

// attached is one handler process serving a socket of its own.
type attached struct {
	stderrLog
	sdk  attachSDK
	root string
	sock string
	cmd  *exec.Cmd

	exited chan struct{}
	code   int // its exit status once exited is closed
}

// stderrLog is a handler process's stderr, line by line, for tests that wait
// on what the handler says.
type stderrLog struct {
	t     *testing.T
	mu    sync.Mutex
	lines []string
}

func (l *stderrLog) add(line string) {
	l.mu.Lock()
	l.lines = append(l.lines, line)
	l.mu.Unlock()
}

// attachPath is a socket path in a fresh directory of the test's.
func attachPath(t *testing.T) string {
	return filepath.Join(t.TempDir(), "handler.sock")
}

// startAttached starts the SDK's example handler on sock; it is killed at
// the test's end if still running.
func startAttached(t *testing.T, sdk attachSDK, sock string) *attached {
	t.Helper()
	root := repoRoot(t)
	argv := sdk.command(root, sock)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = os.Environ()
	for k, v := range sdk.env(root) {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	a := &attached{stderrLog: stderrLog{t: t}, sdk: sdk, root: root, sock: sock, cmd: cmd, exited: make(chan struct{})}
	go func() { // owned by a: ends at the pipe's EOF, then reaps the process
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			a.add(sc.Text())
		}
		_ = cmd.Wait()
		a.code = cmd.ProcessState.ExitCode()
		close(a.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-a.exited:
		default:
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-a.exited
		}
		if t.Failed() {
			t.Logf("%s handler stderr:\n%s", sdk.name, strings.Join(a.stderr(), "\n"))
		}
	})
	return a
}

// startListening starts the handler and waits for its "listening" line.
func startListening(t *testing.T, sdk attachSDK, sock string) *attached {
	t.Helper()
	a := startAttached(t, sdk, sock)
	a.waitStderr(20*time.Second, "listening on")
	return a
}

func (l *stderrLog) stderr() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// waitStderr waits for a stderr line containing substr and returns it.
func (l *stderrLog) waitStderr(timeout time.Duration, substr string) string {
	l.t.Helper()
	var found string
	eventually(l.t, timeout, "handler stderr line containing "+substr, func() bool {
		for _, line := range l.stderr() {
			if strings.Contains(line, substr) {
				found = line
				return true
			}
		}
		return false
	})
	return found
}

// wait waits for the process to exit and returns its status.
func (a *attached) wait(timeout time.Duration) int {
	a.t.Helper()
	select {
	case <-a.exited:
		return a.code
	case <-time.After(timeout):
		a.t.Fatalf("%s handler still running after %s", a.sdk.name, timeout)
		return -1
	}
}

func (a *attached) running() bool {
	select {
	case <-a.exited:
		return false
	default:
		return true
	}
}

func (a *attached) signal(sig syscall.Signal) {
	a.t.Helper()
	require.NoError(a.t, a.cmd.Process.Signal(sig))
}

// probe runs the SDK's probe command; its exit status and output.
func (a *attached) probe() (int, string) {
	a.t.Helper()
	argv := a.sdk.probe(a.root, a.sock)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = os.Environ()
	for k, v := range a.sdk.env(a.root) {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), string(out)
	}
	require.NoError(a.t, err)
	return 0, string(out)
}

// health asks the handler's health service about service name.
func (a *attached) health(service string) healthpb.HealthCheckResponse_ServingStatus {
	a.t.Helper()
	conn, err := grpc.NewClient("unix:"+a.sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(a.t, err)
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	require.NoError(a.t, err)
	return r.GetStatus()
}

// peer is one open session and the goroutine that receives its messages.
type peer struct {
	t    *testing.T
	s    *session.Session
	msgs chan protocol.Message
	done chan struct{}
	err  error // why Recv ended, once done is closed
}

// openSession opens a session on sock; it is closed at the test's end.
func openSession(t *testing.T, sock string) (*peer, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s, err := session.Open(ctx, sock, session.Options{HelloTimeout: 20 * time.Second})
	if err != nil {
		cancel()
		return nil, err
	}
	p := &peer{t: t, s: s, msgs: make(chan protocol.Message, 64), done: make(chan struct{})}
	go func() { // owned by p: ends when Recv fails (the stream ended or was closed)
		defer close(p.done)
		for {
			m, err := s.Recv()
			if err != nil {
				p.err = err
				return
			}
			p.msgs <- m
		}
	}()
	t.Cleanup(func() { p.close(); cancel() })
	return p, nil
}

func mustOpen(t *testing.T, sock string) *peer {
	t.Helper()
	p, err := openSession(t, sock)
	require.NoError(t, err, "opening a session")
	return p
}

// close closes the session and waits for its receiver.
func (p *peer) close() {
	_ = p.s.Close()
	<-p.done
}

func (p *peer) send(m protocol.Message) {
	p.t.Helper()
	require.NoError(p.t, p.s.Send(m), "sending %s", m.Type())
}

// next is the session's next message.
func (p *peer) next(timeout time.Duration) protocol.Message {
	p.t.Helper()
	select {
	case m := <-p.msgs:
		return m
	case <-p.done:
		select {
		case m := <-p.msgs:
			return m
		default:
		}
		p.t.Fatalf("session ended (%v) while a message was awaited", p.err)
	case <-time.After(timeout):
		p.t.Fatalf("no message within %s", timeout)
	}
	return nil
}

// result is the next message, which must be a result.
func (p *peer) result(timeout time.Duration) *protocol.Result {
	p.t.Helper()
	m := p.next(timeout)
	r, ok := m.(*protocol.Result)
	require.True(p.t, ok, "want a result, got %#v", m)
	return r
}

// ended waits for the end of the stream and returns why Recv stopped
// (io.EOF for a clean end by the handler).
func (p *peer) ended(timeout time.Duration) error {
	p.t.Helper()
	select {
	case <-p.done:
		return p.err
	case m := <-p.msgs:
		p.t.Fatalf("want the session's end, got %#v", m)
	case <-time.After(timeout):
		p.t.Fatalf("session still open after %s", timeout)
	}
	return nil
}

// job is a job frame for the example handlers.
func sessionJob(id, name, args string) *protocol.Job {
	return &protocol.Job{ID: id, Name: name, Args: []byte(args), Attempt: 1, MaxAttempts: 3, Queue: "default"}
}
