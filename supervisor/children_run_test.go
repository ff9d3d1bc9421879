package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/internal/config"
	"github.com/soniq-dev/soniq-sidecar/internal/memory"
	"github.com/soniq-dev/soniq-sidecar/internal/transport"
	"github.com/soniq-dev/soniq-sidecar/protocol"
)

// kidsHandler is an in-process handler of the job "kids", one job at a
// time: it sends n enqueue frames for the job's attempt (immediate ones
// wait for their answer), then fails while its attempt is below
// fail_until, else is done. It records every child it sent and every answer.
type kidsHandler struct {
	mu      sync.Mutex
	sent    map[string]sentChild // by child id
	answers map[string]*protocol.Enqueued
}

// sentChild is a child the handler asked for, by the attempt that asked.
type sentChild struct {
	attempt   int
	immediate bool
}

func (k *kidsHandler) start(te transport.Env, spec transport.Spec) (transport.Conn, error) {
	out, ev := spec.Out, spec.Events
	te.WG.Add(1)
	go func() {
		defer te.WG.Done()
		ev.Frame(&protocol.Hello{Protocol: 1, SDK: "fake/1", PID: 1, Concurrency: 1,
			Jobs: []protocol.HelloJob{{Name: "kids", Cancellable: true}}})
		// next is the next message for the handler, answering pings on the way.
		next := func() (protocol.Message, bool) {
			for m := range out {
				if p, ok := m.(*protocol.Ping); ok {
					ev.Frame(&protocol.Pong{Seq: p.Seq})
					continue
				}
				return m, true
			}
			return nil, false
		}
		for {
			m, ok := next()
			if !ok {
				ev.Exited(nil)
				return
			}
			if b, ok := m.(*transport.Jobs); ok && len(b.Jobs) == 1 {
				m = b.Jobs[0]
			}
			j, ok := m.(*protocol.Job)
			if !ok {
				continue
			}
			var args struct {
				N         int
				FailUntil int `json:"fail_until"`
				Immediate bool
				Stranger  bool
			}
			_ = json.Unmarshal(j.Args, &args)
			parent := j.ID
			if args.Stranger {
				parent = backends.NewID() // a job this process does not hold
			}
			for range args.N {
				id := backends.NewID()
				imm := args.Immediate
				k.mu.Lock()
				k.sent[id] = sentChild{attempt: j.Attempt, immediate: imm}
				k.mu.Unlock()
				ev.Frame(&protocol.Enqueue{Parent: parent, ID: id, Name: "kid", Args: json.RawMessage(`{"attempt":` + itoa(j.Attempt) + `}`), Immediate: &imm})
				if !imm {
					continue
				}
				for {
					m, ok := next()
					if !ok {
						ev.Exited(nil)
						return
					}
					if a, ok := m.(*protocol.Enqueued); ok {
						k.mu.Lock()
						k.answers[a.ID] = a
						k.mu.Unlock()
						break
					}
				}
			}
			r := &protocol.Result{ID: j.ID, Status: protocol.StatusDone}
			if j.Attempt < args.FailUntil {
				r = &protocol.Result{ID: j.ID, Status: protocol.StatusFailed, Error: &protocol.ResultError{Type: "E", Message: "on purpose", Retryable: true}}
			}
			ev.Frame(r)
		}
	}()
	return fakeConn{}, nil
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// TestChildJobsRideTheirParentsDone runs the engine on the memory backend
// with an in-process handler: a deferred child is written with its parent's
// done and never with a failure; an immediate one at once, answered with its
// row's id; past the cap a deferred child fails its parent (ChildJobRefused)
// and an immediate one is refused (cap); a child of a job the process does
// not hold is refused (parent).
func TestChildJobsRideTheirParentsDone(t *testing.T) {
	t.Parallel()
	mem := memory.New()
	k := &kidsHandler{sent: map[string]sentChild{}, answers: map[string]*protocol.Enqueued{}}
	m := &config.Manifest{Version: 1, Handlers: []config.Handler{{
		Name: "fake", Command: []string{"fake"}, Transport: config.TransportStdio, Processes: 1,
		Concurrency: 1, SyncConcurrency: 1, StartupTimeout: 10 * time.Second,
		Jobs: []config.JobSpec{{Name: "kids", Cancellable: true, Retry: config.DefaultRetryPolicy()}},
	}}}
	s := config.DefaultSettings()
	s.PollInterval, s.MaxChildrenPerJob = 50*time.Millisecond, 3
	sup, err := New(Config{Manifest: m, Settings: s, Backend: mem, Once: true, startTransport: k.start})
	require.NoError(t, err)

	ctx := context.Background()
	enqueue := func(args string, maxAttempts int) string {
		j, err := mem.Enqueue(ctx, backends.EnqueueParams{Name: "kids", Args: json.RawMessage(args), MaxAttempts: &maxAttempts})
		require.NoError(t, err)
		return j.ID
	}
	retried := enqueue(`{"n":2,"fail_until":2}`, 3)
	capped := enqueue(`{"n":4}`, 1)
	now := enqueue(`{"n":4,"immediate":true,"fail_until":9}`, 1)
	stranger := enqueue(`{"n":1,"immediate":true,"stranger":true}`, 1)

	runCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	require.NoError(t, sup.Run(runCtx))

	k.mu.Lock()
	defer k.mu.Unlock()
	exists := func(id string) bool {
		_, err := mem.Get(ctx, id)
		if errors.Is(err, backends.ErrNotFound) {
			return false
		}
		require.NoError(t, err)
		return true
	}
	var written, deferredOfAFailure int
	for id, c := range k.sent {
		if exists(id) {
			written++
			if !c.immediate && c.attempt == 1 {
				deferredOfAFailure++
			}
		}
	}
	assert.Zero(t, deferredOfAFailure, "no deferred child of a failed attempt, nor of a refused one")
	// retried's second attempt: 2 deferred; now: 3 immediate (the fourth past the cap).
	assert.Equal(t, 5, written)
	j, err := mem.Get(ctx, retried)
	require.NoError(t, err)
	assert.Equal(t, backends.StatusDone, j.Status)

	dl, err := mem.ListDeadLetter(ctx, 0)
	require.NoError(t, err)
	reasons := map[string]string{}
	for _, d := range dl {
		reasons[d.ID] = *d.LastError
	}
	assert.Contains(t, reasons[capped], "ChildJobRefused")
	assert.Contains(t, reasons[capped], "max_children_per_job")
	assert.Contains(t, reasons[now], "on purpose", "the immediate children stay whatever their parent does")

	codes := map[protocol.EnqueueErrorCode]int{}
	for id, a := range k.answers {
		if a.Error != nil {
			codes[a.Error.Code]++
			continue
		}
		require.NotNil(t, a.JobID)
		assert.Equal(t, id, *a.JobID, "answered with the row's id")
		assert.True(t, exists(id))
	}
	assert.Equal(t, map[protocol.EnqueueErrorCode]int{protocol.EnqueueCap: 1, protocol.EnqueueParent: 1}, codes)
	j, err = mem.Get(ctx, stranger)
	require.NoError(t, err)
	assert.Equal(t, backends.StatusDone, j.Status, "a refused immediate child does not fail the job that asked")
}
