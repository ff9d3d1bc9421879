package transport

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/soniq-dev/soniq-sidecar/internal/config"
	"github.com/soniq-dev/soniq-sidecar/protocol"
)

// Both transports driven through the supervisor's seam (Start, the send
// queue, Events) against the example handlers of both SDKs, as the loop
// drives them: the same scenarios for every transport and SDK.

var transportExamples = []struct {
	name     string
	manifest string
}{
	{"python/stdio", "examples/python/manifest.yaml"},
	{"python/unix", "examples/python/manifest-unix.yaml"},
	{"node/stdio", "examples/node/manifest.yaml"},
	{"node/unix", "examples/node/manifest-unix.yaml"},
}

func repoPath(t testing.TB, rel string) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller")
	}
	return filepath.Join(filepath.Dir(filepath.Dir(filepath.Dir(file))), rel)
}

// testProc is one handler process started by a transport.
type testProc struct {
	t      testing.TB
	h      *config.Handler
	q      *Queue
	conn   Conn
	events recorder
	wg     *sync.WaitGroup
	hello  *protocol.Hello
	seq    int
	// trace is the unix SDK's record of each message it received
	// (HANDLER_TRACE_FRAMES); empty on stdio.
	trace   string
	pending []event // events read while waiting for something else
}

func startTestProc(t testing.TB, manifest string) *testProc {
	t.Helper()
	m, err := config.LoadManifest(repoPath(t, manifest))
	if err != nil {
		t.Fatalf("manifest: %v", err)
	}
	h := &m.Handlers[0]
	if _, err := exec.LookPath(h.Command[0]); err != nil {
		t.Fatalf("%s is required for the %s example handlers (not skipped: install it): %v", h.Command[0], h.Name, err)
	}
	sp := StartSpawner()
	tp := &testProc{t: t, h: h, events: make(recorder, 1024), wg: &sync.WaitGroup{}}
	if h.Transport == config.TransportUnix {
		tp.trace = filepath.Join(t.TempDir(), "trace")
		if h.Env == nil {
			h.Env = map[string]string{}
		}
		h.Env["HANDLER_TRACE_FRAMES"] = tp.trace
	}
	tp.q = NewQueue(2*h.Concurrency + 16)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(testWriter{t}, nil))
	}
	te := Env{Spawner: sp, MaxFrameBytes: protocol.DefaultMaxFrameBytes, Log: log, WG: tp.wg}
	c, err := Start(te, Spec{Handler: h, Out: tp.q.Out(), Events: tp.events})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	tp.conn = c
	t.Cleanup(func() {
		tp.conn.Signal(9)
		if !tp.q.closed {
			tp.q.Close()
		}
		done := make(chan struct{})
		go func() {
			for range tp.events {
			}
		}()
		go func() { tp.wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Errorf("transport goroutines did not end")
		}
		sp.Stop()
	})
	e := tp.next(h.StartupTimeout)
	hello, ok := frameMsg(e).(*protocol.Hello)
	if !ok {
		t.Fatalf("first event %#v, want the hello; stderr:\n%s", e, tp.conn.Stderr())
	}
	tp.hello = hello
	return tp
}

// frameMsg is the frame an event carries, nil when it is not a frame.
func frameMsg(e event) protocol.Message {
	if f, ok := e.(frameEvent); ok {
		return f.msg
	}
	return nil
}

// isPong reports whether e is the pong of ping seq.
func isPong(e event, seq int64) bool {
	pong, ok := frameMsg(e).(*protocol.Pong)
	return ok && pong.Seq == seq
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(b []byte) (int, error) { w.t.Log(string(b)); return len(b), nil }

func (tp *testProc) next(timeout time.Duration) event {
	tp.t.Helper()
	if len(tp.pending) > 0 {
		e := tp.pending[0]
		tp.pending = tp.pending[1:]
		return e
	}
	select {
	case e := <-tp.events:
		return e
	case <-time.After(timeout):
		tp.t.Fatalf("no event within %s; stderr:\n%s", timeout, tp.conn.Stderr())
		return nil
	}
}

func (tp *testProc) send(m protocol.Message) {
	tp.t.Helper()
	if !tp.q.Send(m) {
		tp.t.Fatalf("send %s: queue full or closed", m.Type())
	}
}

func (tp *testProc) job(name, args string) string {
	tp.seq++
	id := fmt.Sprintf("job-%d", tp.seq)
	tp.send(&protocol.Job{ID: id, Name: name, Args: json.RawMessage(args), Attempt: 1, MaxAttempts: 3, Queue: "default"})
	return id
}

// waitHeld waits until the handler holds the job id. On stdio a ping
// written after the job frame is answered only once the SDK has read and
// dispatched that frame (it reads its input in order); the unix SDKs record
// each message of the Session stream they receive in the trace file.
func (tp *testProc) waitHeld(id string) {
	tp.t.Helper()
	if tp.trace == "" {
		tp.seq++
		seq := int64(1_000_000 + tp.seq)
		tp.send(&protocol.Ping{Seq: seq})
		var other []event
		for {
			e := tp.next(10 * time.Second)
			if isPong(e, seq) {
				tp.pending = append(other, tp.pending...)
				return
			}
			other = append(other, e)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(tp.trace)
		for _, line := range strings.Split(string(b), "\n") {
			var m struct{ Type, ID string }
			if frame, ok := strings.CutPrefix(line, "> "); ok && json.Unmarshal([]byte(frame), &m) == nil && m.Type == "job" && m.ID == id {
				return
			}
		}
		if time.Now().After(deadline) {
			tp.t.Fatalf("the handler did not receive job %s within 10s (trace %s); stderr:\n%s", id, tp.trace, tp.conn.Stderr())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// result waits for the next frame, which must be the result of id.
func (tp *testProc) result(timeout time.Duration, id string) *protocol.Result {
	tp.t.Helper()
	e := tp.next(timeout)
	r, ok := frameMsg(e).(*protocol.Result)
	if !ok {
		tp.t.Fatalf("want the result of %s, got %#v", id, e)
	}
	if r.ID != id {
		tp.t.Fatalf("result for %s, want %s", r.ID, id)
	}
	return r
}

func TestTransports(t *testing.T) {
	for _, ex := range transportExamples {
		t.Run(ex.name, func(t *testing.T) {
			t.Parallel()
			tp := startTestProc(t, ex.manifest)
			if tp.hello.PID != tp.conn.PID() {
				t.Errorf("hello pid %d, process %d", tp.hello.PID, tp.conn.PID())
			}
			if err := helloAgrees(tp.h, tp.hello); err != nil {
				t.Fatal(err)
			}

			id := tp.job("examples.add", `{"a":2,"b":40}`)
			if r := tp.result(10*time.Second, id); r.Status != protocol.StatusDone || string(r.Result) != `{"sum":42}` {
				t.Fatalf("add: %+v", r)
			}

			id = tp.job("examples.fail", `{}`)
			if r := tp.result(10*time.Second, id); r.Status != protocol.StatusFailed || r.Error == nil || r.Error.Message != "boom" || !r.Error.Retryable {
				t.Fatalf("fail: %+v", r)
			}
			id = tp.job("examples.permanent", `{}`)
			if r := tp.result(10*time.Second, id); r.Status != protocol.StatusFailed || r.Error.Retryable {
				t.Fatalf("permanent: %+v %+v", r, r.Error)
			}
			id = tp.job("examples.snooze", `{}`)
			if r := tp.result(10*time.Second, id); r.Status != protocol.StatusSnooze || r.Seconds != 1 || r.Reason == nil || *r.Reason != "later" {
				t.Fatalf("snooze: %+v", r)
			}

			// A cancel of an async job: its result is `cancelled`, promptly.
			id = tp.job("examples.sleep_async", `{"seconds":30}`)
			tp.waitHeld(id)
			sent := time.Now()
			tp.send(&protocol.Cancel{ID: id, Reason: protocol.ReasonJobTimeout})
			if r := tp.result(5*time.Second, id); r.Status != protocol.StatusCancelled {
				t.Fatalf("cancel: %+v", r)
			}
			if d := time.Since(sent); d > time.Second {
				t.Errorf("cancelled after %s", d)
			}

			// A ping while a sync job runs is answered; the sync job ends normally.
			id = tp.job("examples.sleep_sync", `{"seconds":1}`)
			tp.waitHeld(id)
			tp.send(&protocol.Ping{Seq: 7})
			if e := tp.next(2 * time.Second); !isPong(e, 7) {
				t.Fatalf("want pong 7, got %#v", e)
			}
			if r := tp.result(10*time.Second, id); r.Status != protocol.StatusDone {
				t.Fatalf("sync: %+v", r)
			}

			// Shutdown: the process exits 0.
			tp.q.Close()
			e := tp.next(10 * time.Second)
			if x, ok := e.(exitEvent); !ok || x.err != nil {
				t.Fatalf("want a clean exit, got %#v; stderr:\n%s", e, tp.conn.Stderr())
			}
		})
	}
}

// BenchmarkRoundTrip is the per-job cost of each transport: one no-op job
// (examples.add) sent and its result received, sequentially, by a long-lived
// handler process of each SDK.
//
//	go test -run '^$' -bench RoundTrip ./internal/transport/
func BenchmarkRoundTrip(b *testing.B) {
	for _, ex := range transportExamples {
		b.Run(ex.name, func(b *testing.B) {
			tp := startTestProc(b, ex.manifest)
			b.ResetTimer()
			for b.Loop() {
				id := tp.job("examples.add", `{"a":1,"b":2}`)
				if r := tp.result(10*time.Second, id); r.Status != protocol.StatusDone {
					b.Fatalf("%+v", r)
				}
			}
			b.StopTimer()
			tp.q.Close()
			tp.next(10 * time.Second)
		})
	}
}

// A unix handler that does not shake hands is a protocol error naming what
// it printed; one that exits first is reported by its exit alone.
func TestUnixHandshakeFailures(t *testing.T) {
	cases := []struct {
		name, script string
		wantErr      string // "" = no protocol error, only the exit
		wantExit     string
	}{
		{"not a handshake", "echo not-a-handshake-line; sleep 30", "not-a-handshake-line", "killed by signal"},
		{"netrpc instead of grpc", "echo \"1|1|unix|/nonexistent|netrpc\"; sleep 30", "unsupported plugin protocol", "killed by signal"},
		{"exits first", "echo going away >&2; exit 3", "", "exited with status 3"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := &config.Handler{Name: "bad", Command: []string{"sh", "-c", c.script}, Transport: config.TransportUnix,
				StartupTimeout: 10 * time.Second, Concurrency: 1, Processes: 1}
			sp := StartSpawner()
			defer sp.Stop()
			events := make(recorder, 16)
			var wg sync.WaitGroup
			q := NewQueue(4)
			te := Env{Spawner: sp, MaxFrameBytes: protocol.DefaultMaxFrameBytes, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), WG: &wg}
			conn, err := Start(te, Spec{Handler: h, Out: q.ch, Events: events})
			if err != nil {
				t.Fatal(err)
			}
			var gotErr error
			for {
				e := <-events
				if pe, ok := e.(protocolErrorEvent); ok {
					gotErr = pe.err
					q.Close() // as the loop's breakProcess does
					continue
				}
				x, ok := e.(exitEvent)
				if !ok {
					t.Fatalf("unexpected event %#v", e)
				}
				if d := ExitDescription(x.err); !strings.Contains(d, c.wantExit) {
					t.Errorf("exit %q, want %q", d, c.wantExit)
				}
				break
			}
			switch {
			case c.wantErr == "" && gotErr != nil:
				t.Errorf("protocol error %v, want only the exit", gotErr)
			case c.wantErr != "" && (gotErr == nil || !strings.Contains(gotErr.Error(), c.wantErr)):
				t.Errorf("protocol error %v, want one containing %q", gotErr, c.wantErr)
			}
			if c.wantErr == "" && !strings.Contains(conn.Stderr(), "going away") {
				t.Errorf("stderr tail %q", conn.Stderr())
			}
			q.Close()
			wg.Wait()
		})
	}
}
