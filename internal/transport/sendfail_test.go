package transport

import (
	"encoding/json"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/internal/config"
	"github.com/soniq-dev/soniq-sidecar/internal/logtest"
	"github.com/soniq-dev/soniq-sidecar/protocol"
)

// writerRig runs writeFrames for a process whose stdin is a real pipe.
type writerRig struct {
	q      *Queue
	events recorder
	mu     sync.Mutex
	logs   []logtest.Record
	done   chan struct{}
}

func startWriter(t *testing.T, stdin *os.File) *writerRig {
	t.Helper()
	r := &writerRig{q: NewQueue(64), events: make(recorder, 64), done: make(chan struct{})}
	l := &link{
		env: Env{MaxFrameBytes: protocol.DefaultMaxFrameBytes, Log: slog.New(logtest.Handler{Mu: &r.mu, Records: &r.logs})},
		h:   &config.Handler{Name: "h"}, out: r.q.Out(), ev: r.events, pid: 4242, stderr: &stderrTail{},
	}
	go func() { defer close(r.done); writeFrames(l, stdin) }()
	t.Cleanup(func() {
		if !r.q.closed {
			r.q.Close()
		}
		<-r.done
	})
	return r
}

func (r *writerRig) send(t *testing.T, m protocol.Message) {
	t.Helper()
	require.True(t, r.q.Send(m), "send %s", m.Type())
}

// A frame that cannot be encoded, or a job the handler could not read, is
// reported alone and the frames after it still reach the handler.
func TestWriteFramesReportsAnUnsendableFrameAndGoesOn(t *testing.T) {
	tests := []struct {
		name string
		msg  protocol.Message
		want string
	}{
		{"args not JSON", &protocol.Job{ID: "bad", Name: "n", Args: json.RawMessage(`{not json`), Attempt: 1, MaxAttempts: 1}, "args are not valid JSON"},
		{"args NaN", &protocol.Job{ID: "bad", Name: "n", Args: json.RawMessage(`{"x":NaN}`), Attempt: 1, MaxAttempts: 1}, "args.x: NaN and Infinity are not JSON"},
		{"args not an object", &protocol.Job{ID: "bad", Name: "n", Args: json.RawMessage(`[1]`), Attempt: 1, MaxAttempts: 1}, "args are not a JSON object"},
		{"args out of range", &protocol.Job{ID: "bad", Name: "n", Args: json.RawMessage(`{"big":1e400}`), Attempt: 1, MaxAttempts: 1}, "args.big: number 1e400 is out of range"},
		{"args not UTF-8", &protocol.Job{ID: "bad", Name: "n", Args: json.RawMessage("{\"s\":\"\xff\"}"), Attempt: 1, MaxAttempts: 1}, "args.s: invalid UTF-8 byte 0xff"},
		// Not a frame the sidecar sends, but one the encoder refuses: the
		// encoder's own error is reported.
		{"encoder error", &protocol.Result{ID: "bad", Status: protocol.StatusFailed}, "protocol: encode"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rd, wr, err := os.Pipe()
			require.NoError(t, err)
			t.Cleanup(func() { _ = rd.Close() })
			r := startWriter(t, wr)
			r.send(t, &protocol.Ping{Seq: 1})
			r.send(t, tc.msg)
			r.send(t, &protocol.Job{ID: "good", Name: "n", Args: json.RawMessage(`{"a":1}`), Attempt: 1, MaxAttempts: 1, Queue: "q"})
			r.send(t, &protocol.Ping{Seq: 2})
			r.q.Close()

			dec := protocol.NewDecoder(rd)
			var got []string
			for {
				m, err := dec.Decode()
				if err != nil {
					break // EOF: the writer closed the pipe
				}
				switch m := m.(type) {
				case *protocol.Ping:
					got = append(got, "ping")
				case *protocol.Job:
					got = append(got, "job "+m.ID)
				default:
					got = append(got, string(m.Type()))
				}
			}
			<-r.done
			assert.Equal(t, []string{"ping", "job good", "ping", "shutdown"}, got, "every other frame reached the handler, in order")
			require.Len(t, r.events, 1, "one report")
			e, ok := (<-r.events).(unsendableEvent)
			require.True(t, ok, "an unsendable report")
			assert.Same(t, tc.msg, e.msg)
			require.Error(t, e.err)
			assert.Contains(t, e.err.Error(), tc.want)
		})
	}
}

// A write that fails (the handler closed its stdin) is logged once with the
// handler and pid and reported once; later frames are drained, so the loop
// never blocks on the queue, and the writer ends when the queue closes.
func TestWriteFramesReportsAFailedWriteOnce(t *testing.T) {
	rd, wr, err := os.Pipe()
	require.NoError(t, err)
	require.NoError(t, rd.Close()) // nobody reads: writes fail with EPIPE
	r := startWriter(t, wr)
	r.send(t, &protocol.Ping{Seq: 1})
	e, ok := (<-r.events).(writeFailedEvent)
	require.True(t, ok, "a failed write report")
	assert.ErrorIs(t, e.err, syscall.EPIPE)
	for i := range cap(r.q.Out()) - 1 {
		r.send(t, &protocol.Ping{Seq: int64(i + 2)})
	}
	r.q.Close()
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the writer did not end after its queue closed")
	}
	assert.Empty(t, r.events, "reported once")
	r.mu.Lock()
	defer r.mu.Unlock()
	var lines []logtest.Record
	for _, l := range r.logs {
		if l.Msg == "writing to the handler's stdin failed; frames for it are dropped until it is replaced" {
			lines = append(lines, l)
		}
	}
	require.Len(t, lines, 1, "logged once: %+v", r.logs)
	assert.Equal(t, "h", lines[0].Attrs["handler"])
	assert.EqualValues(t, 4242, lines[0].Attrs["pid"])
}

// Both transports, both SDKs: a job whose args the handler could not read
// is reported and never reaches it; the same process runs the next job.
func TestTransportsReportAnUnsendableJobAndKeepTheProcess(t *testing.T) {
	for _, ex := range transportExamples {
		t.Run(ex.name, func(t *testing.T) {
			t.Parallel()
			tp := startTestProc(t, ex.manifest)
			for _, args := range []string{`{not json`, `{"big":1e400}`, `{"s":"\ud800"}`, "{\"s\":\"\xff\"}"} {
				bad := tp.job("examples.add", args)
				e := tp.next(10 * time.Second)
				u, ok := e.(unsendableEvent)
				require.True(t, ok, "args %q: got %#v", args, e)
				assert.Equal(t, bad, u.msg.(*protocol.Job).ID)
			}
			id := tp.job("examples.add", `{"a":2,"b":40}`)
			if r := tp.result(10*time.Second, id); r.Status != protocol.StatusDone || string(r.Result) != `{"sum":42}` {
				t.Fatalf("add after the unsendable jobs: %+v", r)
			}
			tp.q.Close()
			e := tp.next(10 * time.Second)
			x, ok := e.(exitEvent)
			require.True(t, ok, "want the exit, got %#v; stderr:\n%s", e, tp.conn.Stderr())
			assert.NoError(t, x.err, "a clean exit: the process never saw the bad jobs; stderr:\n%s", tp.conn.Stderr())
		})
	}
}
