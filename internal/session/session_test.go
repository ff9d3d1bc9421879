package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/soniq-dev/soniq-sidecar/protocol"
	"github.com/soniq-dev/soniq-sidecar/protocol/handlerpb"
)

type stream = grpc.BidiStreamingServer[handlerpb.SidecarMessage, handlerpb.HandlerMessage]

// fakeHandler serves Session with the test's function.
type fakeHandler struct {
	handlerpb.UnimplementedHandlerServer
	session func(stream) error
}

func (f *fakeHandler) Session(s stream) error { return f.session(s) }

// serve starts an in-test gRPC server on a Unix socket; it is stopped at
// the test's end.
func serve(t *testing.T, fn func(stream) error) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "h.sock")
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	handlerpb.RegisterHandlerServer(srv, &fakeHandler{session: fn})
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	return path
}

func goodHello() *handlerpb.HandlerMessage {
	return &handlerpb.HandlerMessage{Message: &handlerpb.HandlerMessage_Hello{Hello: &handlerpb.Hello{
		Protocol: 1, Sdk: "fake/1", Pid: 42, Concurrency: 2, SyncConcurrency: 1,
		Jobs:    []*handlerpb.HelloJob{{Name: "a", Cancellable: true}, {Name: "b"}},
		Running: []*handlerpb.RunningJob{{Id: "j0", Name: "b"}},
		Kept:    []string{"k0"}, Acks: true,
	}}}
}

func open(t *testing.T, path string, opt Options) *Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	s, err := Open(ctx, path, opt)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestSessionExchange: every message type both ways, converted as on stdio,
// then a clean end after shutdown.
func TestSessionExchange(t *testing.T) {
	got := make(chan *handlerpb.SidecarMessage, 8)
	path := serve(t, func(s stream) error {
		if err := s.Send(goodHello()); err != nil {
			return err
		}
		for {
			m, err := s.Recv()
			if err != nil {
				return err
			}
			got <- m
			var out *handlerpb.HandlerMessage
			switch m := m.GetMessage().(type) {
			case *handlerpb.SidecarMessage_Job:
				out = &handlerpb.HandlerMessage{Message: &handlerpb.HandlerMessage_Result{Result: &handlerpb.Result{
					Id: m.Job.GetId(), Status: handlerpb.Result_DONE, ResultJson: ptr(`{"x": 1}`)}}}
			case *handlerpb.SidecarMessage_Ping:
				out = &handlerpb.HandlerMessage{Message: &handlerpb.HandlerMessage_Pong{Pong: &handlerpb.Pong{Seq: m.Ping.GetSeq()}}}
			case *handlerpb.SidecarMessage_Cancel:
				out = &handlerpb.HandlerMessage{Message: &handlerpb.HandlerMessage_Draining{Draining: &handlerpb.Draining{}}}
			case *handlerpb.SidecarMessage_Shutdown:
				return nil // the clean end of the session
			case *handlerpb.SidecarMessage_Ack:
				continue // no answer
			}
			if err := s.Send(out); err != nil {
				return err
			}
		}
	})
	s := open(t, path, Options{})
	h := s.Hello()
	if h.PID != 42 || h.Concurrency != 2 || len(h.Jobs) != 2 || !h.Jobs[0].Cancellable ||
		len(h.Running) != 1 || h.Running[0] != (RunningJob{ID: "j0", Name: "b"}) ||
		len(h.Kept) != 1 || h.Kept[0] != "k0" || !h.Acks {
		t.Fatalf("hello: %+v", h)
	}
	if err := s.Send(&Ack{IDs: []string{"k0", "j9"}}); err != nil {
		t.Fatalf("Send ack: %v", err)
	}
	steps := []struct {
		send protocol.Message
		want func(protocol.Message) bool
	}{
		{&protocol.Job{ID: "j1", Name: "a", Args: []byte(`{"k": "v"}`), Attempt: 1, MaxAttempts: 3, Queue: "q"},
			func(m protocol.Message) bool {
				r, ok := m.(*protocol.Result)
				return ok && r.ID == "j1" && r.Status == protocol.StatusDone && string(r.Result) == `{"x":1}`
			}},
		{&protocol.Ping{Seq: 7}, func(m protocol.Message) bool { p, ok := m.(*protocol.Pong); return ok && p.Seq == 7 }},
		{&protocol.Cancel{ID: "j1", Reason: protocol.ReasonJobTimeout}, func(m protocol.Message) bool { _, ok := m.(*Draining); return ok }},
	}
	for _, st := range steps {
		if err := s.Send(st.send); err != nil {
			t.Fatalf("Send %T: %v", st.send, err)
		}
		m, err := s.Recv()
		if err != nil || !st.want(m) {
			t.Fatalf("after %T: %#v, %v", st.send, m, err)
		}
	}
	if err := s.Send(&protocol.Shutdown{}); err != nil {
		t.Fatal(err)
	}
	if m, err := s.Recv(); err != io.EOF {
		t.Fatalf("after shutdown: %v %v, want io.EOF", m, err)
	}
	if a := (<-got).GetAck(); len(a.GetIds()) != 2 || a.GetIds()[0] != "k0" || a.GetIds()[1] != "j9" {
		t.Errorf("ack as sent: %v", a)
	}
	job := (<-got).GetJob()
	if job.GetArgsJson() != `{"k": "v"}` || job.GetQueue() != "q" || job.GetMaxAttempts() != 3 {
		t.Errorf("job as sent: %v", job)
	}
	if c := (<-got); c.GetPing().GetSeq() != 7 {
		t.Errorf("ping as sent: %v", c)
	}
	if c := (<-got).GetCancel(); c.GetId() != "j1" || c.GetReason() != "job_timeout" {
		t.Errorf("cancel as sent: %v", c)
	}
	if _, ok := (<-got).GetMessage().(*handlerpb.SidecarMessage_Shutdown); !ok {
		t.Error("shutdown not received")
	}
}

// TestSessionErrors: each way a session fails is told apart.
func TestSessionErrors(t *testing.T) {
	cases := []struct {
		name    string
		serve   func(stream) error
		openErr error  // from Open
		recvErr error  // from the first Recv after Open
		frame   bool   // the error carries a *protocol.FrameError
		text    string // in the error's text
	}{
		{name: "refused", serve: func(stream) error {
			return status.Error(codes.FailedPrecondition, "a session is already open (opened at T by P)")
		}, openErr: ErrRefused, text: "opened at T by P"},
		{name: "aborted before hello", serve: func(stream) error {
			return status.Error(codes.Unavailable, "going away")
		}, openErr: ErrBroken, text: "going away"},
		{name: "closed before hello", serve: func(stream) error { return nil }, openErr: ErrProtocol},
		{name: "first message not hello", serve: func(s stream) error {
			_ = s.Send(&handlerpb.HandlerMessage{Message: &handlerpb.HandlerMessage_Pong{Pong: &handlerpb.Pong{Seq: 1}}})
			<-s.Context().Done()
			return nil
		}, openErr: ErrProtocol, text: "pong, not hello"},
		{name: "hello without jobs", serve: func(s stream) error {
			_ = s.Send(&handlerpb.HandlerMessage{Message: &handlerpb.HandlerMessage_Hello{Hello: &handlerpb.Hello{Protocol: 1, Sdk: "x", Pid: 1, Concurrency: 1}}})
			<-s.Context().Done()
			return nil
		}, openErr: ErrProtocol, text: "jobs"},
		{name: "hello with a running job without id", serve: func(s stream) error {
			h := goodHello()
			h.GetHello().Running = []*handlerpb.RunningJob{{Name: "a"}}
			_ = s.Send(h)
			<-s.Context().Done()
			return nil
		}, openErr: ErrProtocol, text: "running[0].id"},
		{name: "hello with an empty kept id", serve: func(s stream) error {
			h := goodHello()
			h.GetHello().Kept = []string{""}
			_ = s.Send(h)
			<-s.Context().Done()
			return nil
		}, openErr: ErrProtocol, text: "kept[0] is empty"},
		{name: "hello with a kept id that also runs", serve: func(s stream) error {
			h := goodHello()
			h.GetHello().Kept = []string{"j0"}
			_ = s.Send(h)
			<-s.Context().Done()
			return nil
		}, openErr: ErrProtocol, text: `kept[0] "j0" is listed twice`},
		{name: "bad result", recvErr: ErrProtocol, frame: true, text: "seconds", serve: sendAfterHello(
			&handlerpb.HandlerMessage{Message: &handlerpb.HandlerMessage_Result{Result: &handlerpb.Result{Id: "j", Status: handlerpb.Result_SNOOZE, Seconds: -1}}})},
		{name: "result with an empty id", recvErr: ErrProtocol, frame: true, text: "id", serve: sendAfterHello(
			&handlerpb.HandlerMessage{Message: &handlerpb.HandlerMessage_Result{Result: &handlerpb.Result{Status: handlerpb.Result_DONE}}})},
		{name: "negative pong", recvErr: ErrProtocol, frame: true, text: "seq", serve: sendAfterHello(
			&handlerpb.HandlerMessage{Message: &handlerpb.HandlerMessage_Pong{Pong: &handlerpb.Pong{Seq: -1}}})},
		{name: "second hello", recvErr: ErrProtocol, text: "second hello", serve: sendAfterHello(goodHello())},
		{name: "results without batches", recvErr: ErrProtocol, text: "did not offer batches", serve: sendAfterHello(
			results(&handlerpb.Result{Id: "j", Status: handlerpb.Result_DONE}))},
		{name: "empty results", recvErr: ErrProtocol, text: "no result", serve: sendAfterHelloWith(batchHello(),
			results())},
		{name: "a bad result in a batch", recvErr: ErrProtocol, frame: true, text: "results[1]: result: protocol: invalid_value at seconds", serve: sendAfterHelloWith(batchHello(),
			results(&handlerpb.Result{Id: "j1", Status: handlerpb.Result_DONE}, &handlerpb.Result{Id: "j2", Status: handlerpb.Result_SNOOZE, Seconds: -1}))},
		{name: "empty message", recvErr: ErrProtocol, text: "no message", serve: sendAfterHello(&handlerpb.HandlerMessage{})},
		{name: "broken after hello", recvErr: ErrBroken, text: "protocol error: bad", serve: func(s stream) error {
			_ = s.Send(goodHello())
			return status.Error(codes.InvalidArgument, "protocol error: bad")
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := serve(t, c.serve)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			s, err := Open(ctx, path, Options{})
			if c.openErr != nil {
				if !errors.Is(err, c.openErr) || !strings.Contains(err.Error(), c.text) {
					t.Fatalf("Open: %v, want %v containing %q", err, c.openErr, c.text)
				}
				if c.openErr == ErrRefused {
					var re *RefusedError
					if !errors.As(err, &re) || re.Message != "a session is already open (opened at T by P)" {
						t.Fatalf("refusal's message: %v", err)
					}
				}
				if errors.Is(err, ErrBroken) && c.openErr != ErrBroken || errors.Is(err, ErrRefused) && c.openErr != ErrRefused {
					t.Fatalf("errors not distinct: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer s.Close()
			_, err = s.Recv()
			if !errors.Is(err, c.recvErr) || !strings.Contains(err.Error(), c.text) {
				t.Fatalf("Recv: %v, want %v containing %q", err, c.recvErr, c.text)
			}
			var fe *protocol.FrameError
			if errors.As(err, &fe) != c.frame {
				t.Fatalf("Recv: %v: FrameError %v, want %v", err, fe != nil, c.frame)
			}
		})
	}
}

func sendAfterHello(m *handlerpb.HandlerMessage) func(stream) error {
	return sendAfterHelloWith(goodHello(), m)
}

func sendAfterHelloWith(hello, m *handlerpb.HandlerMessage) func(stream) error {
	return func(s stream) error {
		if err := s.Send(hello); err != nil {
			return err
		}
		_ = s.Send(m)
		<-s.Context().Done()
		return nil
	}
}

// TestSessionHelloTimeout: a handler that never says hello is given up
// within the timeout (plus a generous tolerance for a loaded machine).
func TestSessionHelloTimeout(t *testing.T) {
	path := serve(t, func(s stream) error { <-s.Context().Done(); return nil })
	start := time.Now()
	_, err := Open(context.Background(), path, Options{HelloTimeout: 200 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "no hello within 200ms") {
		t.Fatalf("Open: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("gave up after %s", d)
	}
}

// TestSessionNoSocket: nothing listens at the path.
func TestSessionNoSocket(t *testing.T) {
	_, err := Open(context.Background(), filepath.Join(t.TempDir(), "none.sock"), Options{HelloTimeout: 5 * time.Second})
	if !errors.Is(err, ErrBroken) {
		t.Fatalf("Open: %v, want ErrBroken", err)
	}
}

// TestSessionUnsendableJob: a job the handler's decoder would refuse is not
// sent; the session goes on.
func TestSessionUnsendableJob(t *testing.T) {
	got := make(chan *handlerpb.SidecarMessage, 4)
	path := serve(t, func(s stream) error {
		_ = s.Send(goodHello())
		for {
			m, err := s.Recv()
			if err != nil {
				return err
			}
			got <- m
		}
	})
	s := open(t, path, Options{MaxFrameBytes: 200})
	for name, j := range map[string]*protocol.Job{
		"args an array":  {ID: "j", Name: "a", Args: []byte(`[1]`), Attempt: 1, MaxAttempts: 1},
		"over the limit": {ID: "j", Name: "a", Args: []byte(`{"x":"` + strings.Repeat("y", 300) + `"}`), Attempt: 1, MaxAttempts: 1},
		"empty id":       {ID: "", Name: "a", Attempt: 1, MaxAttempts: 1},
	} {
		if err := s.Send(j); !errors.Is(err, ErrUnsendable) {
			t.Errorf("%s: %v, want ErrUnsendable", name, err)
		}
	}
	if err := s.Send(&protocol.Ping{Seq: 3}); err != nil {
		t.Fatal(err)
	}
	if m := <-got; m.GetPing().GetSeq() != 3 {
		t.Fatalf("first message that arrived: %v", m)
	}
}

// TestSessionClose: Close ends the stream (the handler sees it end) and
// later calls say the session is closed.
func TestSessionClose(t *testing.T) {
	ended := make(chan struct{})
	path := serve(t, func(s stream) error {
		_ = s.Send(goodHello())
		<-s.Context().Done()
		close(ended)
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ended:
	case <-ctx.Done():
		t.Fatal("the handler never saw the session end")
	}
	if _, err := s.Recv(); !errors.Is(err, ErrClosed) {
		t.Errorf("Recv after Close: %v", err)
	}
	if err := s.Send(&protocol.Ping{}); !errors.Is(err, ErrClosed) {
		t.Errorf("Send after Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func ptr[T any](v T) *T { return &v }

// batchHello is goodHello offering batches.
func batchHello() *handlerpb.HandlerMessage {
	h := goodHello()
	h.GetHello().Batches = true
	return h
}

func results(rs ...*handlerpb.Result) *handlerpb.HandlerMessage {
	return &handlerpb.HandlerMessage{Message: &handlerpb.HandlerMessage_Results{Results: &handlerpb.Results{Results: rs}}}
}

// TestSessionBatches: to a handler that offers batches, Open announces
// that it takes Results (an empty Jobs message), Send(&Jobs) sends the jobs
// in as few messages as the frame limit allows, and the results of one
// Results message come out of Recv one by one, in order. To a handler that
// does not offer them, the same jobs go one message each.
func TestSessionBatches(t *testing.T) {
	const maxFrame = 4096
	big := `{"pad":"` + strings.Repeat("x", 1500) + `"}` // three such frames exceed 4096 bytes
	var jobs []*protocol.Job
	for i, args := range []string{`{}`, big, big, big, `{"a":1}`} {
		jobs = append(jobs, &protocol.Job{ID: fmt.Sprintf("j%d", i), Name: "a", Args: json.RawMessage(args),
			Attempt: 1, MaxAttempts: 3, Queue: "default"})
	}
	for _, offer := range []bool{true, false} {
		t.Run(fmt.Sprintf("batches=%v", offer), func(t *testing.T) {
			got := make(chan []string, 10) // the ids of each message the handler received
			path := serve(t, func(s stream) error {
				hello := goodHello()
				hello.GetHello().Batches = offer
				if err := s.Send(hello); err != nil {
					return err
				}
				var ids []string
				for len(ids) < len(jobs) {
					m, err := s.Recv()
					if err != nil {
						return err
					}
					var msg []string
					switch {
					case m.GetJobs() != nil && len(m.GetJobs().GetJobs()) == 0:
						msg = []string{"(accepts results)"}
					case m.GetJobs() != nil:
						for _, j := range m.GetJobs().GetJobs() {
							msg = append(msg, j.GetId())
						}
					case m.GetJob() != nil:
						msg = []string{m.GetJob().GetId()}
					default:
						continue // the empty Ack of a sidecar that acknowledges
					}
					got <- msg
					if msg[0] != "(accepts results)" {
						ids = append(ids, msg...)
					}
				}
				if offer {
					_ = s.Send(results(&handlerpb.Result{Id: "j0", Status: handlerpb.Result_DONE},
						&handlerpb.Result{Id: "j1", Status: handlerpb.Result_FAILED, Error: &handlerpb.ResultError{Type: "E", Message: "m"}}))
					_ = s.Send(&handlerpb.HandlerMessage{Message: &handlerpb.HandlerMessage_Pong{Pong: &handlerpb.Pong{Seq: 7}}})
				}
				<-s.Context().Done()
				return nil
			})
			s := open(t, path, Options{MaxFrameBytes: maxFrame})
			if s.Hello().Batches != offer {
				t.Fatalf("hello's Batches = %v, want %v", s.Hello().Batches, offer)
			}
			if err := s.Send(&Jobs{Jobs: jobs}); err != nil {
				t.Fatalf("Send(Jobs): %v", err)
			}
			want := [][]string{{"(accepts results)"}, {"j0", "j1", "j2"}, {"j3", "j4"}}
			if !offer {
				want = [][]string{{"j0"}, {"j1"}, {"j2"}, {"j3"}, {"j4"}}
			}
			for i, w := range want {
				select {
				case m := <-got:
					if !slices.Equal(m, w) {
						t.Fatalf("message %d carried %v, want %v", i, m, w)
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("message %d never came", i)
				}
			}
			if !offer {
				return
			}
			var out []string
			for range 3 {
				m, err := s.Recv()
				if err != nil {
					t.Fatalf("Recv: %v", err)
				}
				switch m := m.(type) {
				case *protocol.Result:
					out = append(out, m.ID+" "+string(m.Status))
				case *protocol.Pong:
					out = append(out, fmt.Sprintf("pong %d", m.Seq))
				}
			}
			if w := []string{"j0 done", "j1 failed", "pong 7"}; !slices.Equal(out, w) {
				t.Fatalf("received %v, want %v", out, w)
			}
		})
	}
}

// TestSessionJobsUnsendable: a batch holding a job the handler's decoder
// would refuse is not sent at all.
func TestSessionJobsUnsendable(t *testing.T) {
	got := make(chan int, 10)
	path := serve(t, func(s stream) error {
		if err := s.Send(batchHello()); err != nil {
			return err
		}
		for {
			m, err := s.Recv()
			if err != nil {
				return nil
			}
			if m.GetJobs() != nil {
				got <- len(m.GetJobs().GetJobs())
			}
		}
	})
	s := open(t, path, Options{})
	good := &protocol.Job{ID: "g", Name: "a", Args: json.RawMessage(`{}`), Attempt: 1, MaxAttempts: 1, Queue: "q"}
	bad := &protocol.Job{ID: "b", Name: "a", Args: json.RawMessage(`[1]`), Attempt: 1, MaxAttempts: 1, Queue: "q"}
	err := s.Send(&Jobs{Jobs: []*protocol.Job{good, bad}})
	if !errors.Is(err, ErrUnsendable) || !strings.Contains(err.Error(), "job b") {
		t.Fatalf("Send: %v, want ErrUnsendable naming job b", err)
	}
	if n := <-got; n != 0 {
		t.Fatalf("first Jobs message carried %d jobs, want the empty announcement", n)
	}
	if err := s.Send(&Jobs{Jobs: []*protocol.Job{good}}); err != nil {
		t.Fatal(err)
	}
	if n := <-got; n != 1 {
		t.Fatalf("the next Jobs message carried %d jobs, want 1 (nothing of the refused batch)", n)
	}
}
