package integration

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/internal/config"
	"github.com/soniq-dev/soniq-sidecar/protocol"
)

// handlerProc is one handler process of an SDK's example manifest, driven frame by frame
// over stdio the way the sidecar drives it.
type handlerProc struct {
	t       *testing.T
	handler *config.Handler
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	enc     *protocol.Encoder
	frames  chan frameOrErr // closed at stdout EOF
	stderr  *syncBuffer
	exited  chan struct{} // closed when the process has been waited for
	waitErr error
	hello   *protocol.Hello
	// trace is the unix SDK's record of each message it received
	// (HANDLER_TRACE_FRAMES); empty on stdio.
	trace   string
	pending []frameOrErr // frames read while waiting for something else
	pings   int64
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
	m, err := config.LoadManifest(manifestPath)
	require.NoError(t, err, "example manifest")
	require.NotEmpty(t, m.Handlers)
	h := &m.Handlers[0]
	if h.Transport == config.TransportUnix {
		return startUnixHandler(t, h)
	}
	require.Equal(t, config.TransportStdio, h.Transport)

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
	if len(p.pending) > 0 {
		f := p.pending[0]
		p.pending = p.pending[1:]
		return f
	}
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

// waitHeld waits until the handler holds the jobs with these ids. On stdio
// a ping written after their job frames is answered only once the SDK has
// read and dispatched those frames (it reads its input in order); the unix
// SDKs record each message of the Session stream they receive in the trace file.
func (p *handlerProc) waitHeld(ids ...string) {
	p.t.Helper()
	if p.trace == "" {
		p.pings++
		seq := 1_000_000 + p.pings
		p.send(&protocol.Ping{Seq: seq})
		var other []frameOrErr
		for {
			f := p.nextFrame(10*time.Second, fmt.Sprintf("the pong after the job frames of %v", ids))
			if pong, ok := f.msg.(*protocol.Pong); ok && pong.Seq == seq {
				p.pending = append(other, p.pending...)
				return
			}
			other = append(other, f)
		}
	}
	require.Eventually(p.t, func() bool {
		b, err := os.ReadFile(p.trace)
		if err != nil {
			return false
		}
		held := map[string]bool{}
		for _, line := range strings.Split(string(b), "\n") {
			if frame, ok := strings.CutPrefix(line, "> "); ok {
				var m struct{ Type, ID string }
				if json.Unmarshal([]byte(frame), &m) == nil && m.Type == "job" {
					held[m.ID] = true
				}
			}
		}
		for _, id := range ids {
			if !held[id] {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond, "the handler received the jobs %v (%s)", ids, p.trace)
}

// waitStderr waits until the handler's stderr matches re.
func (p *handlerProc) waitStderr(re *regexp.Regexp, what string) {
	p.t.Helper()
	require.Eventually(p.t, func() bool { return re.MatchString(p.stderr.String()) },
		10*time.Second, 10*time.Millisecond, "%s: no stderr line matching %s", what, re)
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
