package integration

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/protocol"
	"github.com/soniq-dev/soniq-sidecar/supervisor"
)

// handlerProc is one handler process of an SDK's example manifest, driven frame by frame
// over stdio the way the sidecar drives it.
type handlerProc struct {
	t       *testing.T
	handler *supervisor.Handler
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	enc     *protocol.Encoder
	frames  chan frameOrErr // closed at stdout EOF
	stderr  *syncBuffer
	exited  chan struct{} // closed when the process has been waited for
	waitErr error
	hello   *protocol.Hello
}

type frameOrErr struct {
	msg protocol.Message
	err error
	at  time.Time
}

// startHandler starts the first handler of the manifest with the environment the sidecar
// gives it (the manifest's env plus the SONIQ_* protocol variables, nothing else) and waits
// for its hello within the handler's startup_timeout.
func startHandler(t *testing.T, manifestPath string) *handlerProc {
	t.Helper()
	m, err := supervisor.LoadManifest(manifestPath)
	require.NoError(t, err, "example manifest")
	require.NotEmpty(t, m.Handlers)
	h := &m.Handlers[0]
	if h.Transport == supervisor.TransportUnix {
		return startUnixHandler(t, h)
	}
	require.Equal(t, supervisor.TransportStdio, h.Transport)

	path := h.Command[0]
	if !strings.Contains(path, "/") {
		path, err = exec.LookPath(path)
		require.NoError(t, err, "%s is required to run the %s example handlers (not skipped: install it)", h.Command[0], h.Name)
	}
	cmd := exec.Command(path, h.Command[1:]...)
	cmd.Dir = h.Workdir
	env := []string{}
	for k, v := range h.Env {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	cmd.Env = append(env,
		"SONIQ_PROTOCOL_VERSIONS="+strconv.Itoa(protocol.Version),
		"SONIQ_TRANSPORT=stdio",
		"SONIQ_HANDLER="+h.Name)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p := &handlerProc{t: t, handler: h, cmd: cmd, frames: make(chan frameOrErr, 64),
		stderr: &syncBuffer{}, exited: make(chan struct{})}
	cmd.Stderr = p.stderr
	p.stdin, err = cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start(), "start %v", h.Command)
	p.enc = protocol.NewEncoder(p.stdin)

	var readDone sync.WaitGroup
	readDone.Add(1)
	go func() {
		defer readDone.Done()
		defer close(p.frames)
		dec := protocol.NewDecoder(stdout)
		for {
			msg, err := dec.Decode()
			if errors.Is(err, io.EOF) {
				return
			}
			p.frames <- frameOrErr{msg: msg, err: err, at: time.Now()}
			var fe *protocol.FrameError
			if err != nil && !errors.As(err, &fe) {
				return
			}
		}
	}()
	go func() {
		readDone.Wait() // Wait closes stdout; read it to the end first
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
		if t.Failed() {
			t.Logf("%s stderr:\n%s", h.Name, p.stderr.String())
		}
	})

	msg := p.next(h.StartupTimeout, "hello")
	hello, ok := msg.(*protocol.Hello)
	require.True(t, ok, "first frame is %T, want hello", msg)
	p.hello = hello
	return p
}

// send writes one frame to the handler's stdin.
func (p *handlerProc) send(m protocol.Message) {
	p.t.Helper()
	require.NoError(p.t, p.enc.Encode(m), "write %s frame", m.Type())
}

// job sends a job frame with a fresh id and returns the id.
func (p *handlerProc) job(name string, args string) string {
	p.t.Helper()
	id := fmt.Sprintf("%s-%d", name, time.Now().UnixNano())
	p.send(&protocol.Job{ID: id, Name: name, Args: []byte(args), Attempt: 1, MaxAttempts: 3, Queue: "default"})
	return id
}

// next returns the next frame from the handler's stdout. It fails the test on a timeout, a
// malformed frame (the stream is corrupted), a frame of the wrong direction, or EOF.
func (p *handlerProc) next(timeout time.Duration, what string) protocol.Message {
	p.t.Helper()
	f := p.nextFrame(timeout, what)
	return f.msg
}

func (p *handlerProc) nextFrame(timeout time.Duration, what string) frameOrErr {
	p.t.Helper()
	select {
	case f, ok := <-p.frames:
		require.True(p.t, ok, "handler stdout ended while waiting for %s", what)
		require.NoError(p.t, f.err, "handler wrote a bad frame while waiting for %s", what)
		require.True(p.t, f.msg.Type().FromHandler(), "handler wrote a %s frame (wrong direction)", f.msg.Type())
		return f
	case <-time.After(timeout):
		require.FailNow(p.t, "timeout", "no frame within %s while waiting for %s", timeout, what)
		return frameOrErr{}
	}
}

// results reads frames until it holds a result for every id, and returns them with their
// arrival times. Any other frame fails the test.
func (p *handlerProc) results(timeout time.Duration, ids ...string) (map[string]*protocol.Result, map[string]time.Time) {
	p.t.Helper()
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	got := map[string]*protocol.Result{}
	at := map[string]time.Time{}
	deadline := time.Now().Add(timeout)
	for len(got) < len(ids) {
		f := p.nextFrame(time.Until(deadline), fmt.Sprintf("results for %v (have %d)", ids, len(got)))
		r, ok := f.msg.(*protocol.Result)
		require.True(p.t, ok, "got a %s frame while waiting for results", f.msg.Type())
		require.True(p.t, want[r.ID], "result for an id never sent: %q", r.ID)
		require.NotContains(p.t, got, r.ID, "second result for %q", r.ID)
		got[r.ID] = r
		at[r.ID] = f.at
	}
	return got, at
}

func (p *handlerProc) result(timeout time.Duration, id string) *protocol.Result {
	p.t.Helper()
	rs, _ := p.results(timeout, id)
	return rs[id]
}

// expectExit waits for stdout EOF with no further frame, then for exit status 0.
func (p *handlerProc) expectExit(timeout time.Duration) {
	p.t.Helper()
	select {
	case f, ok := <-p.frames:
		require.False(p.t, ok, "unexpected frame before exit: %+v", f)
	case <-time.After(timeout):
		require.FailNow(p.t, "timeout", "stdout still open %s after shutdown", timeout)
	}
	select {
	case <-p.exited:
		require.NoError(p.t, p.waitErr, "handler exit status")
		require.Equal(p.t, 0, p.cmd.ProcessState.ExitCode())
	case <-time.After(timeout):
		require.FailNow(p.t, "timeout", "handler did not exit within %s after closing stdout", timeout)
	}
}

// syncBuffer collects a process's stderr.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
