package supervisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/internal/backends"
	"github.com/soniq-dev/soniq-sidecar/internal/config"
	"github.com/soniq-dev/soniq-sidecar/protocol"
)

// writerRig runs writeFrames for a process whose stdin is a real pipe.
type writerRig struct {
	p      *process
	events chan event
	mu     sync.Mutex
	logs   []logRecord
	done   chan struct{}
}

func startWriter(t *testing.T, stdin *os.File) *writerRig {
	t.Helper()
	r := &writerRig{
		p:      &process{pool: &pool{h: &config.Handler{Name: "h"}}, pid: 4242, out: make(chan protocol.Message, 64)},
		events: make(chan event, 64),
		done:   make(chan struct{}),
	}
	te := transportEnv{
		maxFrame: protocol.DefaultMaxFrameBytes,
		log:      slog.New(captureHandler{mu: &r.mu, records: &r.logs}),
		emit:     func(e event) bool { r.events <- e; return true },
	}
	go func() { defer close(r.done); writeFrames(r.p, stdin, te) }()
	t.Cleanup(func() {
		if !r.p.outClosed {
			r.p.closeInput()
		}
		<-r.done
	})
	return r
}

func (r *writerRig) send(t *testing.T, m protocol.Message) {
	t.Helper()
	require.True(t, r.p.send(m), "send %s", m.Type())
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
			r.p.closeInput()

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
			assert.Same(t, r.p, e.proc)
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
	e, ok := (<-r.events).(stdinFailedEvent)
	require.True(t, ok, "a failed write report")
	assert.Same(t, r.p, e.proc)
	assert.ErrorIs(t, e.err, syscall.EPIPE)
	for i := range cap(r.p.out) - 1 {
		r.send(t, &protocol.Ping{Seq: int64(i + 2)})
	}
	r.p.closeInput()
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the writer did not end after its queue closed")
	}
	assert.Empty(t, r.events, "reported once")
	r.mu.Lock()
	defer r.mu.Unlock()
	var lines []logRecord
	for _, l := range r.logs {
		if l.msg == "writing to the handler's stdin failed; frames for it are dropped until it is replaced" {
			lines = append(lines, l)
		}
	}
	require.Len(t, lines, 1, "logged once: %+v", r.logs)
	assert.Equal(t, "h", lines[0].attrs["handler"])
	assert.EqualValues(t, 4242, lines[0].attrs["pid"])
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
			tp.p.closeInput()
			e := tp.next(10 * time.Second)
			x, ok := e.(exitEvent)
			require.True(t, ok, "want the exit, got %#v; stderr:\n%s", e, tp.p.stderr)
			assert.NoError(t, x.err, "a clean exit: the process never saw the bad jobs; stderr:\n%s", tp.p.stderr)
		})
	}
}

// interceptTransport is the fake handler of fakeWorld, except that every
// job frame first goes to handle, which may answer it itself (true) in the
// fake handler's place.
func (w *fakeWorld) interceptTransport(te transportEnv, p *process, handle func(*protocol.Job) bool) error {
	queue := p.out // what the loop sends to
	inner := make(chan protocol.Message, cap(queue))
	p.out = inner
	err := w.transport(te, p) // the fake handler reads inner
	p.out = queue
	if err != nil {
		return err
	}
	te.wg.Add(1)
	go func() {
		defer te.wg.Done()
		defer close(inner)
		for m := range queue {
			if j, ok := m.(*protocol.Job); ok && handle(j) {
				continue
			}
			inner <- m
		}
	}()
	return nil
}

// unsendableTransport reports every job with "unsendable" in its args as
// the stdio writer reports a frame it cannot encode.
func (w *fakeWorld) unsendableTransport(te transportEnv, p *process) error {
	return w.interceptTransport(te, p, func(j *protocol.Job) bool {
		if !bytes.Contains(j.Args, []byte("unsendable")) {
			return false
		}
		te.emit(unsendableEvent{proc: p, msg: j, err: errors.New("protocol: encode args: test")})
		return true
	})
}

// The loop's side of unsendableEvent: the job is dead-lettered with the
// reason, its (sync) slot is given back at once, and the process runs on.
func TestUnsendableJobIsDeadLetteredAndFreesItsSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t, fakeSettings(30*time.Second, time.Minute), 1, 1, nil)
		w.sup.cfg.startTransport = w.unsendableTransport
		bad, err := w.mem.Enqueue(context.Background(), backends.EnqueueParams{Name: "sync.sleep", Args: json.RawMessage(`{"seconds":1,"unsendable":true}`)})
		require.NoError(t, err)
		good := w.enqueue("sync.sleep", 1)
		w.run(1)
		for range 100 {
			if w.job(good).Status == backends.StatusDone {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		assert.Equal(t, backends.StatusDone, w.job(good).Status, "the one slot was given back")
		assert.Equal(t, 1, w.job(good).Attempts)
		dls, err := w.mem.ListDeadLetter(context.Background(), 0)
		require.NoError(t, err)
		require.Len(t, dls, 1)
		assert.Equal(t, bad.ID, dls[0].ID)
		assert.Equal(t, backends.ReasonInvalidArguments, dls[0].Reason)
		require.NotNil(t, dls[0].LastError)
		assert.Equal(t, "job frame not sent: protocol: encode args: test", *dls[0].LastError)
		assert.Equal(t, 1, dls[0].Attempts)
		w.mu.Lock()
		started := 0
		for _, r := range w.logs {
			if r.msg == "handler process started" {
				started++
			}
		}
		w.mu.Unlock()
		assert.Equal(t, 1, started, "the process was not replaced")
		w.sup.Shutdown()
		w.wait()
	})
}
