package transport

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/internal/config"
	"github.com/soniq-dev/soniq-sidecar/internal/session"
	"github.com/soniq-dev/soniq-sidecar/protocol"
)

// The attach transport against the SDKs' example handlers serving a socket
// of their own (--listen), started by the test as another container would
// start them: the sidecar's side connects, and never spawns or signals.

type listenSDK struct {
	name string
	argv func(root, sock string) []string
	env  func(root string) []string
}

var listenSDKs = []listenSDK{
	{"python", func(_, sock string) []string {
		return []string{"python3", "-u", "-m", "soniq_handler_examples", "--listen", sock}
	}, func(root string) []string {
		return []string{"PYTHONPATH=" + filepath.Join(root, "examples/python") + string(os.PathListSeparator) + filepath.Join(root, "sdk/python")}
	}},
	{"node", func(root, sock string) []string {
		return []string{"node", filepath.Join(root, "examples/node/examples.js"), "--listen", sock}
	}, func(string) []string { return nil }},
}

// listener is an example handler serving a socket, in a process group of
// its own.
type listener struct {
	cmd       *exec.Cmd
	listening chan struct{} // closed at its "listening on" line
	exited    chan struct{}
	mu        sync.Mutex
	stderr    []string
}

// socketPath is a fresh socket path short enough for the 108-byte limit.
func socketPath(t *testing.T) string {
	dir, err := os.MkdirTemp("", "soniq-at-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return filepath.Join(dir, "h.sock")
}

// listen starts sdk's example handler on sock; it is killed at the test's
// end. It does not wait for the socket: see waitListening.
func listen(t *testing.T, sdk listenSDK, sock string) *listener {
	t.Helper()
	root := repoPath(t, "")
	argv := sdk.argv(root, sock)
	if _, err := exec.LookPath(argv[0]); err != nil {
		t.Fatalf("%s is required for the %s example handler (not skipped: install it): %v", argv[0], sdk.name, err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), sdk.env(root)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	ln := &listener{cmd: cmd, listening: make(chan struct{}), exited: make(chan struct{})}
	go func() { // owned by ln: ends at the pipe's EOF, then reaps the process
		sc := bufio.NewScanner(stderr)
		said := false
		for sc.Scan() {
			ln.mu.Lock()
			ln.stderr = append(ln.stderr, sc.Text())
			ln.mu.Unlock()
			if !said && strings.Contains(sc.Text(), "listening on") {
				said = true
				close(ln.listening)
			}
		}
		_ = cmd.Wait()
		close(ln.exited)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-ln.exited
		if t.Failed() {
			ln.mu.Lock()
			t.Logf("%s handler stderr:\n%s", sdk.name, strings.Join(ln.stderr, "\n"))
			ln.mu.Unlock()
		}
	})
	return ln
}

func (ln *listener) waitListening(t *testing.T) {
	t.Helper()
	select {
	case <-ln.listening:
	case <-ln.exited:
		t.Fatal("the handler exited before listening")
	case <-time.After(20 * time.Second):
		t.Fatal("the handler did not listen within 20s")
	}
}

// attachConn is one connection of the attach transport under test.
type attachConn struct {
	q      *Queue
	conn   Conn
	events recorder
	wg     *sync.WaitGroup
}

func startAttachConn(t *testing.T, sock string) *attachConn {
	t.Helper()
	return startAttachConnOpts(t, sock, attachOpts{concurrency: 2, queue: 8})
}

// attachOpts: the handler's concurrency, the send queue's size, and, when
// batches is set, events that also take frames in batches (their sizes go
// to batches).
type attachOpts struct {
	concurrency, queue int
	batches            chan int
}

func startAttachConnOpts(t *testing.T, sock string, o attachOpts) *attachConn {
	t.Helper()
	h := &config.Handler{Name: "attached", Attach: []string{sock}, StartupTimeout: 20 * time.Second, Concurrency: o.concurrency, Processes: 1}
	a := &attachConn{q: NewQueue(o.queue), events: make(recorder, 64), wg: &sync.WaitGroup{}}
	var ev Events = a.events
	if o.batches != nil {
		ev = batchRecorder{recorder: a.events, batches: o.batches}
	}
	env := Env{MaxFrameBytes: protocol.DefaultMaxFrameBytes, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), WG: a.wg}
	c, err := Start(env, Spec{Handler: h, Endpoint: sock, Out: a.q.Out(), Events: ev})
	require.NoError(t, err)
	a.conn = c
	t.Cleanup(func() {
		a.conn.Signal(syscall.SIGKILL)
		a.q.Close()
		go func() {
			for range a.events {
			}
		}()
		done := make(chan struct{})
		go func() { a.wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Errorf("transport goroutines did not end")
		}
	})
	return a
}

func (a *attachConn) next(t *testing.T, timeout time.Duration) event {
	t.Helper()
	select {
	case e := <-a.events:
		return e
	case <-time.After(timeout):
		t.Fatalf("no event within %s", timeout)
		return nil
	}
}

// hello waits for the session's hello.
func (a *attachConn) hello(t *testing.T) *SessionHello {
	t.Helper()
	e := a.next(t, 20*time.Second)
	h, ok := frameMsg(e).(*SessionHello)
	require.True(t, ok, "first event %#v, want the session's hello", e)
	return h
}

// exit waits for the connection's last report.
func (a *attachConn) exit(t *testing.T) error {
	t.Helper()
	for {
		e := a.next(t, 20*time.Second)
		if x, ok := e.(exitEvent); ok {
			return x.err
		}
	}
}

// A session: the hello, a job and its result, and the sidecar's
// `shutdown` ending it cleanly; the handler serves the next session, and
// its death ends that one as a lost connection. The conn has no pid and no
// stderr: the process is not the sidecar's.
func TestAttachTransport(t *testing.T) {
	for _, sdk := range listenSDKs {
		t.Run(sdk.name, func(t *testing.T) {
			t.Parallel()
			sock := socketPath(t)
			ln := listen(t, sdk, sock)
			ln.waitListening(t)

			a := startAttachConn(t, sock)
			hello := a.hello(t)
			assert.Equal(t, ln.cmd.Process.Pid, hello.PID)
			assert.Zero(t, a.conn.PID())
			assert.Empty(t, a.conn.Stderr())
			require.True(t, a.q.Send(&protocol.Job{ID: "j1", Name: "examples.add", Args: json.RawMessage(`{"a":2,"b":40}`), Attempt: 1, MaxAttempts: 1, Queue: "default"}))
			r, ok := frameMsg(a.next(t, 10*time.Second)).(*protocol.Result)
			require.True(t, ok, "want the result")
			assert.Equal(t, "j1", r.ID)
			assert.JSONEq(t, `{"sum":42}`, string(r.Result))
			a.q.Close()
			assert.NoError(t, a.exit(t), "a clean end after the sidecar's shutdown")

			b := startAttachConn(t, sock)
			b.hello(t)
			require.NoError(t, syscall.Kill(-ln.cmd.Process.Pid, syscall.SIGKILL))
			err := b.exit(t)
			require.ErrorIs(t, err, ErrEndpointGone)
			assert.Contains(t, err.Error(), "the connection to the handler at "+sock+" was lost")
		})
	}
}

// An endpoint that does not answer yet is tried again with backoff until it
// does; SIGKILL on the conn ends the session (the sidecar's doing, not a
// lost connection).
func TestAttachTransportWaitsForTheEndpoint(t *testing.T) {
	t.Parallel()
	sock := socketPath(t)
	a := startAttachConn(t, sock) // nothing listens yet
	ln := listen(t, listenSDKs[0], sock)
	ln.waitListening(t)
	a.hello(t)
	a.conn.Signal(syscall.SIGTERM) // not the sidecar's process: nothing happens
	a.conn.Signal(syscall.SIGKILL)
	err := a.exit(t)
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrEndpointGone)
	assert.Contains(t, err.Error(), "was closed by the sidecar")
	select {
	case <-ln.exited:
		t.Fatal("the handler exited: the sidecar must never stop it")
	default:
	}
}

// A second session on an endpoint is refused while the first is open; the
// refused connection ends once its queue is closed, the first goes on.
func TestAttachTransportRefusedWhileAnotherSessionIsOpen(t *testing.T) {
	t.Parallel()
	sock := socketPath(t)
	listen(t, listenSDKs[0], sock).waitListening(t)
	a := startAttachConn(t, sock)
	a.hello(t)
	b := startAttachConn(t, sock)
	e := b.next(t, 20*time.Second)
	ref, ok := e.(refusedEvent)
	require.True(t, ok, "want the refusal, got %#v", e)
	assert.ErrorIs(t, ref.err, session.ErrRefused)
	b.q.Close() // as the loop does for a refused process
	assert.ErrorContains(t, b.exit(t), "no session with the handler at "+sock)
	require.True(t, a.q.Send(&protocol.Ping{Seq: 3}))
	pong, ok := frameMsg(a.next(t, 10*time.Second)).(*protocol.Pong)
	require.True(t, ok, "the first session goes on")
	assert.EqualValues(t, 3, pong.Seq)
}

// A connection that never attached ends when its queue is closed.
func TestAttachTransportClosedBeforeAttaching(t *testing.T) {
	t.Parallel()
	sock := socketPath(t)
	a := startAttachConn(t, sock)
	a.q.Close()
	err := a.exit(t)
	assert.ErrorContains(t, err, "never attached to "+sock)
	assert.False(t, errors.Is(err, ErrEndpointGone))
}

// Jobs queued together go to an attached handler in Jobs messages, and its
// Results messages reach a FrameBatcher as batches, every result once.
func TestAttachTransportBatches(t *testing.T) {
	for _, sdk := range listenSDKs {
		t.Run(sdk.name, func(t *testing.T) {
			t.Parallel()
			sock := socketPath(t)
			ln := listen(t, sdk, sock)
			ln.waitListening(t)
			batches := make(chan int, 256)
			a := startAttachConnOpts(t, sock, attachOpts{concurrency: 64, queue: 64, batches: batches})
			a.hello(t)
			const n = 48
			for i := range n {
				require.True(t, a.q.Send(&protocol.Job{ID: fmt.Sprintf("j%02d", i), Name: "examples.add",
					Args: json.RawMessage(`{"a":1,"b":2}`), Attempt: 1, MaxAttempts: 1, Queue: "default"}))
			}
			seen := map[string]bool{}
			for len(seen) < n {
				if r, ok := frameMsg(a.next(t, 20*time.Second)).(*protocol.Result); ok {
					require.False(t, seen[r.ID], "result %s twice", r.ID)
					assert.Equal(t, protocol.StatusDone, r.Status, r.ID)
					seen[r.ID] = true
				}
			}
			largest := 0
			for drained := false; !drained; {
				select {
				case b := <-batches:
					largest = max(largest, b)
				default:
					drained = true
				}
			}
			assert.Greater(t, largest, 1, "results of one Results message reach the loop together")
		})
	}
}

// The Session stream's own messages cross the transport as its types: an
// Ack taken from the queue reaches the handler (the result it settles is
// not kept for the next session; one left unacknowledged is, and the next
// hello says so), and the handler's draining arrives as *Draining.
func TestAttachTransportAcksKeptResultsAndDraining(t *testing.T) {
	for _, sdk := range listenSDKs {
		t.Run(sdk.name, func(t *testing.T) {
			t.Parallel()
			sock := socketPath(t)
			ln := listen(t, sdk, sock)
			ln.waitListening(t)
			job := func(id string) *protocol.Job {
				return &protocol.Job{ID: id, Name: "examples.add", Args: json.RawMessage(`{"a":1,"b":2}`), Attempt: 1, MaxAttempts: 1, Queue: "default"}
			}
			result := func(a *attachConn, id string) {
				t.Helper()
				r, ok := frameMsg(a.next(t, 10*time.Second)).(*protocol.Result)
				require.True(t, ok, "want the result of %s", id)
				require.Equal(t, id, r.ID)
			}

			a := startAttachConn(t, sock)
			hello := a.hello(t)
			require.True(t, hello.Acks, "the SDK keeps results until acknowledged")
			assert.Empty(t, hello.Kept)
			require.True(t, a.q.Send(&Ack{})) // this sidecar acknowledges results
			require.True(t, a.q.Send(job("settled")))
			result(a, "settled")
			require.True(t, a.q.Send(&Ack{IDs: []string{"settled"}}))
			require.True(t, a.q.Send(job("unsettled")))
			result(a, "unsettled")
			a.q.Close()
			require.NoError(t, a.exit(t))

			b := startAttachConn(t, sock)
			hello = b.hello(t)
			assert.Equal(t, []string{"unsettled"}, hello.Kept, "only the unacknowledged result is kept")
			assert.Empty(t, hello.Running)
			result(b, "unsettled")
			require.NoError(t, syscall.Kill(ln.cmd.Process.Pid, syscall.SIGTERM))
			_, ok := frameMsg(b.next(t, 10*time.Second)).(*Draining)
			assert.True(t, ok, "the handler's draining is reported as *Draining")
		})
	}
}
