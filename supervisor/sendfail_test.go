package supervisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/internal/completer"
	"github.com/soniq-dev/soniq-sidecar/internal/memory"
	"github.com/soniq-dev/soniq-sidecar/internal/transport"
	"github.com/soniq-dev/soniq-sidecar/protocol"
)

// interceptTransport is the fake handler of fakeWorld, except that every
// job frame first goes to handle, which may answer it itself (true) in the
// fake handler's place.
func (w *fakeWorld) interceptTransport(te transport.Env, spec transport.Spec, handle func(*protocol.Job) bool) (transport.Conn, error) {
	queue := spec.Out // what the loop sends to
	inner := make(chan protocol.Message, cap(queue))
	fake := spec
	fake.Out = inner
	c, err := w.transport(te, fake) // the fake handler reads inner
	if err != nil {
		return nil, err
	}
	te.WG.Add(1)
	go func() {
		defer te.WG.Done()
		defer close(inner)
		for m := range queue {
			if b, ok := m.(*transport.Jobs); ok {
				// A claim's jobs: those handle does not take go on together.
				rest := &transport.Jobs{}
				for _, j := range b.Jobs {
					if !handle(j) {
						rest.Jobs = append(rest.Jobs, j)
					}
				}
				if len(rest.Jobs) > 0 {
					inner <- rest
				}
				continue
			}
			if j, ok := m.(*protocol.Job); ok && handle(j) {
				continue
			}
			inner <- m
		}
	}()
	return c, nil
}

// unsendableTransport reports every job with "unsendable" in its args as
// the stdio writer reports a frame it cannot encode.
func (w *fakeWorld) unsendableTransport(te transport.Env, spec transport.Spec) (transport.Conn, error) {
	return w.interceptTransport(te, spec, func(j *protocol.Job) bool {
		if !bytes.Contains(j.Args, []byte("unsendable")) {
			return false
		}
		spec.Events.Unsendable(j, errors.New("protocol: encode args: test"))
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
			if r.Msg == "handler process started" {
				started++
			}
		}
		w.mu.Unlock()
		assert.Equal(t, 1, started, "the process was not replaced")
		w.sup.Shutdown()
		w.wait()
	})
}

// A retiring attached process whose last job's frame could not be sent is
// idle, and is stopped the way every idle retiring process is: once the
// results it sent are acknowledged, not at once. Ending its session first
// would make a draining handler exit with results it cannot know were
// written.
func TestUnsendableLastJobOfARetiringProcessWaitsForItsAcks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newCrashRig(t)
		r.l.writer = completer.New(completer.Config{Backend: memory.New()}) // never started: the test reads the loop only
		p := r.ready(t)
		p.ack.wanted = true
		r.l.ackLater(p, "r0") // one of its results is being written
		j := &backends.Job{ID: "j1", Name: "async.sleep", Args: json.RawMessage(`{}`), Attempts: 1, MaxAttempts: 3}
		tk := &task{job: j, pool: p.pool, spec: p.pool.h.Job(j.Name), state: taskPending}
		r.l.live[j.ID] = tk
		r.l.start(tk, p)
		r.l.retire(p)
		require.Equal(t, procRetiring, p.state)
		r.l.handle(unsendableEvent{proc: p, msg: &protocol.Job{ID: j.ID}, err: errors.New("protocol: encode args: test")})
		assert.Empty(t, p.tasks)
		assert.Equal(t, procRetiring, p.state, "its session stays open until its result is acknowledged")
		assert.True(t, p.ack.stopAfter, "its stop waits for the acknowledgement")
		r.l.handle(settledEvent{ids: []string{"r0"}})
		assert.Equal(t, procStopping, p.state, "stopped once its result is acknowledged")
	})
}
