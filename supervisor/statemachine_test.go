package supervisor

// The shutdown state machine of docs/shutdown.md on a fake clock: testing/synctest
// runs the real supervisor (loop, writer, heartbeats, memory backend) with
// in-process fake handlers instead of child processes, so every transition
// can be checked at its exact instant — the contract's bounds with zero
// tolerance. The black-box tests in integration/ check the same paths with
// real processes, signals and Postgres.

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/internal/config"
	"github.com/soniq-dev/soniq-sidecar/internal/logtest"
	"github.com/soniq-dev/soniq-sidecar/internal/memory"
	"github.com/soniq-dev/soniq-sidecar/internal/transport"
	"github.com/soniq-dev/soniq-sidecar/protocol"
)

// fakeWorld is one supervisor on a fake clock with fake handlers.
type fakeWorld struct {
	t       *testing.T
	mem     *memory.Backend
	sup     *Supervisor
	start   time.Time
	mu      sync.Mutex
	logs    []logtest.Record
	frames  []protocol.Message // what the fake handlers received
	procs   int                // fake processes started so far
	runs    []fakeRun          // every job a fake process received
	crashes []fakeCrash        // every fake process that crashed
	beats   []fakeBeat         // every heartbeat the backend accepted
	claims  []fakeClaim        // every claim of a handler's jobs (claimhold_test.go)
	nacks   [][]string         // the ids of every NACK write, one entry per write
	// busyNacking makes the loop take a millisecond over each shutdown
	// NACK it logs, as a loop with more to do between two NACKs (cancel
	// frames, spans) would: the writer then runs in between.
	busyNacking atomic.Bool
	runErr      chan error
	stopped     time.Time
	// unreachableAtStart: how many registrations find the database
	// unreachable before one gets through (registerwait_test.go).
	unreachableAtStart int
}

// fakeRun is one job frame a fake process received.
type fakeRun struct {
	proc      int // the fake process's number, from 1
	id        string
	attempt   int
	alongside []string // the jobs that process held when this one arrived
	at        time.Time
	end       time.Time // its result was sent or its process crashed; zero while it runs
}

// fakeCrash is a fake process dying on a crash job.
type fakeCrash struct {
	proc int
	held []string // every job it held, the crash job included
	at   time.Time
}

// fakeBeat is one heartbeat written, with the state it was written in.
type fakeBeat struct {
	at    time.Time
	state State
}

// beatRecorder is the memory backend with every accepted heartbeat
// recorded: the memory backend has no read of last_heartbeat.
type beatRecorder struct {
	backends.Backend
	w *fakeWorld
}

func (r beatRecorder) Heartbeat(ctx context.Context, workerID string) error {
	err := r.Backend.Heartbeat(ctx, workerID)
	if err == nil {
		r.w.mu.Lock()
		r.w.beats = append(r.w.beats, fakeBeat{at: time.Now(), state: r.w.sup.State()})
		r.w.mu.Unlock()
	}
	return err
}

// pausingHandler is the log recorder, which takes a millisecond (of the
// bubble's clock) over each shutdown NACK while busyNacking is set.
type pausingHandler struct {
	logtest.Handler
	w *fakeWorld
}

func (h pausingHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "shutdown_nack" && h.w.busyNacking.Load() {
		time.Sleep(time.Millisecond)
	}
	return h.Handler.Handle(ctx, r)
}

func (h pausingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return pausingHandler{Handler: h.Handler.WithAttrs(as).(logtest.Handler), w: h.w}
}

func (h pausingHandler) WithGroup(string) slog.Handler { return h }

func (r beatRecorder) Nack(ctx context.Context, workerID string, held []backends.Job) ([]string, error) {
	ids := make([]string, len(held))
	for i, j := range held {
		ids[i] = j.ID
	}
	r.w.mu.Lock()
	r.w.nacks = append(r.w.nacks, ids)
	r.w.mu.Unlock()
	return r.Backend.Nack(ctx, workerID, held)
}

// fakeJobs are the jobs of the fake handler: *.sleep jobs sleep args.seconds
// on the fake clock; async.sleep ends on a cancel, sync.sleep ignores it;
// crash sleeps args.seconds, then its whole process dies with exit status 7.
var fakeJobs = []config.JobSpec{
	{Name: "async.sleep", Cancellable: true, Retry: config.DefaultRetryPolicy()},
	{Name: "sync.sleep", Cancellable: false, Retry: config.DefaultRetryPolicy()},
	{Name: "crash", Cancellable: true, Retry: config.DefaultRetryPolicy()},
}

func newFakeWorld(t *testing.T, s config.Settings, concurrency, syncConcurrency int, jobTimeout map[string]time.Duration) *fakeWorld {
	return newFakePool(t, s, 1, concurrency, syncConcurrency, jobTimeout)
}

// newFakePool is newFakeWorld with a pool of several processes.
func newFakePool(t *testing.T, s config.Settings, processes, concurrency, syncConcurrency int, jobTimeout map[string]time.Duration) *fakeWorld {
	w := &fakeWorld{t: t, mem: memory.New(), runErr: make(chan error, 1)}
	jobs := append([]config.JobSpec{}, fakeJobs...)
	for i := range jobs {
		if d, ok := jobTimeout[jobs[i].Name]; ok {
			jobs[i].Timeout, jobs[i].TimeoutSet = d, true
		}
	}
	m := &config.Manifest{Version: 1, Handlers: []config.Handler{{
		Name: "fake", Command: []string{"fake"}, Transport: config.TransportStdio, Processes: processes,
		Concurrency: concurrency, SyncConcurrency: syncConcurrency, StartupTimeout: 10 * time.Second, Jobs: jobs,
	}}}
	log := slog.New(pausingHandler{Handler: logtest.Handler{Mu: &w.mu, Records: &w.logs}, w: w})
	sup, err := New(Config{Manifest: m, Settings: s, Backend: beatRecorder{Backend: w.mem, w: w}, Logger: log, startTransport: w.transport})
	require.NoError(t, err)
	w.sup = sup
	t.Cleanup(func() {
		// Every scenario of these tests keeps to the process state diagram.
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, r := range w.logs {
			assert.NotContains(t, r.Msg, "impossible process state transition", "%v", r.Attrs)
		}
	})
	return w
}

// transport starts an in-process fake handler for spec.
func (w *fakeWorld) transport(te transport.Env, spec transport.Spec) (transport.Conn, error) {
	out := spec.Out
	h := spec.Handler
	ev := spec.Events
	w.mu.Lock()
	w.procs++
	fp := w.procs
	w.mu.Unlock()
	hello := &protocol.Hello{Protocol: 1, SDK: "fake/1", PID: 1, Concurrency: h.Concurrency, SyncConcurrency: h.SyncConcurrency}
	for _, j := range h.Jobs {
		hello.Jobs = append(hello.Jobs, protocol.HelloJob{Name: j.Name, Cancellable: j.Cancellable})
	}
	te.WG.Add(1)
	go func() {
		defer te.WG.Done()
		ev.Frame(hello)
		results := make(chan *protocol.Result)
		crashed := make(chan struct{})
		dead := make(chan struct{}) // closed when this fake process ends: its jobs' goroutines give up
		defer close(dead)
		cancels := map[string]chan struct{}{}
		held := map[string]bool{}
		runOf := map[string]int{} // held job → its index in w.runs
		inflight, closed := 0, false
		onMsg := func(m protocol.Message) {
			w.mu.Lock()
			w.frames = append(w.frames, m)
			w.mu.Unlock()
			switch m := m.(type) {
			case *protocol.Ping:
				ev.Frame(&protocol.Pong{Seq: m.Seq})
			case *protocol.Cancel:
				if c, ok := cancels[m.ID]; ok {
					close(c)
					delete(cancels, m.ID)
				}
			case *protocol.Job:
				var args struct{ Seconds float64 }
				_ = json.Unmarshal(m.Args, &args)
				cancel := make(chan struct{})
				if m.Name == "async.sleep" {
					cancels[m.ID] = cancel // a sync job is never reachable by a cancel
				}
				w.mu.Lock()
				runOf[m.ID] = len(w.runs)
				w.runs = append(w.runs, fakeRun{proc: fp, id: m.ID, attempt: m.Attempt, alongside: sortedSet(held), at: time.Now()})
				w.mu.Unlock()
				held[m.ID] = true
				inflight++
				go func(id string, crash bool, d time.Duration) {
					r := &protocol.Result{ID: id, Status: protocol.StatusDone, Result: json.RawMessage(`{"ok":true}`)}
					select {
					case <-time.After(d):
						if crash {
							select {
							case crashed <- struct{}{}:
							case <-dead:
							}
							return
						}
					case <-cancel:
						r = &protocol.Result{ID: id, Status: protocol.StatusCancelled}
					case <-dead:
						return // its process crashed
					}
					select {
					case results <- r:
					case <-dead:
					}
				}(m.ID, m.Name == "crash", time.Duration(args.Seconds*float64(time.Second)))
			}
		}
		for !closed || inflight > 0 {
			select {
			case m, ok := <-out:
				if !ok {
					closed, out = true, nil
					continue
				}
				if b, ok := m.(*transport.Jobs); ok {
					// A claim's jobs for this process: each as if sent alone.
					for _, j := range b.Jobs {
						onMsg(j)
					}
					continue
				}
				onMsg(m)
			case r := <-results:
				inflight--
				delete(cancels, r.ID)
				delete(held, r.ID)
				w.mu.Lock()
				w.runs[runOf[r.ID]].end = time.Now()
				w.mu.Unlock()
				delete(runOf, r.ID)
				ev.Frame(r)
			case <-crashed:
				w.mu.Lock()
				w.crashes = append(w.crashes, fakeCrash{proc: fp, held: sortedSet(held), at: time.Now()})
				for _, i := range runOf {
					w.runs[i].end = time.Now()
				}
				w.mu.Unlock()
				ev.Exited(errors.New("exited with status 7"))
				return
			}
		}
		ev.Exited(nil)
	}()
	return fakeConn{}, nil
}

func sortedSet(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func (w *fakeWorld) enqueue(name string, seconds float64) string {
	j, err := w.mem.Enqueue(context.Background(), backends.EnqueueParams{Name: name, Args: json.RawMessage(`{"seconds":` + jsonNumber(seconds) + `}`)})
	require.NoError(w.t, err)
	return j.ID
}

func jsonNumber(f float64) string { b, _ := json.Marshal(f); return string(b) }

// run starts the supervisor and waits (on the fake clock) until every job
// is running in a fake handler.
func (w *fakeWorld) run(running int) {
	go func() {
		err := w.sup.Run(context.Background())
		w.stopped = time.Now()
		w.runErr <- err
	}()
	for range 1000 {
		synctest.Wait()
		if w.jobsSent() >= running {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	require.Equal(w.t, running, w.jobsSent(), "jobs handed to the fake handler")
	w.start = time.Now()
}

func (w *fakeWorld) jobsSent() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, f := range w.frames {
		if _, ok := f.(*protocol.Job); ok {
			n++
		}
	}
	return n
}

// wait waits for Run to return and gives how long after start it did.
func (w *fakeWorld) wait() time.Duration {
	require.NoError(w.t, <-w.runErr)
	return w.stopped.Sub(w.start)
}

// transitions lists the state transitions with their offset from start.
func (w *fakeWorld) transitions() map[string]time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]time.Duration{}
	for _, r := range w.logs {
		if st, ok := r.Attrs["state"].(string); ok && len(r.Msg) > 16 && r.Msg[:16] == "state transition" {
			out[st] = r.At.Sub(w.start)
		}
	}
	return out
}

func (w *fakeWorld) cancels(id string) []protocol.CancelReason {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []protocol.CancelReason
	for _, f := range w.frames {
		if c, ok := f.(*protocol.Cancel); ok && c.ID == id {
			out = append(out, c.Reason)
		}
	}
	return out
}

func (w *fakeWorld) job(id string) backends.Job {
	j, err := w.mem.Get(context.Background(), id)
	require.NoError(w.t, err)
	return j
}

func fakeSettings(shutdown, grace time.Duration) config.Settings {
	s := config.DefaultSettings()
	s.ShutdownTimeout, s.SyncHandlerGrace, s.SyncGraceSet = shutdown, grace, true
	s.PollInterval = 100 * time.Millisecond
	return s
}

func TestStateMachineDrainCompletes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t, fakeSettings(30*time.Second, time.Minute), 8, 4, nil)
		a, s := w.enqueue("async.sleep", 10), w.enqueue("sync.sleep", 12)
		w.run(2)
		w.sup.Shutdown()
		took := w.wait()
		assert.Equal(t, 12*time.Second, took, "STOPPED when the last job returns")
		tr := w.transitions()
		assert.Equal(t, time.Duration(0), tr["DRAINING"])
		assert.Equal(t, 12*time.Second, tr["STOPPED"])
		assert.NotContains(t, tr, "FORCE_TIMEOUT_PATH")
		assert.Equal(t, backends.StatusDone, w.job(a).Status)
		assert.Equal(t, backends.StatusDone, w.job(s).Status)
		assert.Empty(t, w.cancels(a))
	})
}

func TestStateMachineAsyncForcedIsBoundedByShutdownTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t, fakeSettings(30*time.Second, time.Minute), 8, 4, nil)
		a := w.enqueue("async.sleep", 1000)
		w.run(1)
		w.sup.Shutdown()
		took := w.wait()
		assert.Equal(t, 30*time.Second, took, "exit exactly at shutdown_timeout")
		assert.Equal(t, 30*time.Second, w.transitions()["FORCE_TIMEOUT_PATH"])
		j := w.job(a)
		assert.Equal(t, backends.StatusQueued, j.Status)
		assert.Equal(t, 1, j.Attempts, "attempts preserved")
		assert.Nil(t, j.WorkerID)
		assert.Nil(t, j.LastError)
		assert.Equal(t, []protocol.CancelReason{protocol.ReasonShutdownTimeout}, w.cancels(a))
	})
}

// FORCE_TIMEOUT_PATH hands its NACKs to the writer together: one write,
// one round trip, however many async jobs were running (handed over one
// by one, the writer woke at the first and wrote the rest in a second
// round trip, which a slow link to the database showed in the exit).
func TestStateMachineForceNacksInOneWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t, fakeSettings(30*time.Second, time.Minute), 8, 4, nil)
		var ids []string
		for range 6 {
			ids = append(ids, w.enqueue("async.sleep", 1000))
		}
		w.run(6)
		w.busyNacking.Store(true)
		w.sup.Shutdown()
		w.wait()
		w.mu.Lock()
		nacks := slices.Clone(w.nacks)
		w.mu.Unlock()
		require.Len(t, nacks, 1, "one NACK write: %v", nacks)
		assert.ElementsMatch(t, ids, nacks[0])
		for _, id := range ids {
			assert.Equal(t, backends.StatusQueued, w.job(id).Status)
		}
	})
}

func TestStateMachineSyncReturnsInsideGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t, fakeSettings(30*time.Second, time.Minute), 8, 4, nil)
		s := w.enqueue("sync.sleep", 50)
		w.run(1)
		w.sup.Shutdown()
		took := w.wait()
		assert.Equal(t, 50*time.Second, took)
		tr := w.transitions()
		assert.Equal(t, 30*time.Second, tr["FORCE_TIMEOUT_PATH"])
		assert.NotContains(t, tr, "WAIT_FOR_THREAD", "it returned within the grace (30 s + 60 s)")
		assert.Equal(t, backends.StatusDone, w.job(s).Status)
		assert.Empty(t, w.cancels(s), "a sync job is never sent a cancel")
	})
}

func TestStateMachineSyncBeyondGraceWaitsWithoutEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t, fakeSettings(30*time.Second, time.Minute), 8, 4, nil)
		s := w.enqueue("sync.sleep", 1800)
		w.run(1)
		w.sup.Shutdown()
		time.Sleep(1000 * time.Second)
		synctest.Wait()
		assert.Equal(t, StateWaitForThread, w.sup.State(), "still waiting, never killed")
		assert.Equal(t, backends.StatusProcessing, w.job(s).Status, "no NACK on the sync branch")
		took := w.wait()
		assert.Equal(t, 1800*time.Second, took, "STOPPED when the job returns on its own")
		tr := w.transitions()
		assert.Equal(t, 30*time.Second, tr["FORCE_TIMEOUT_PATH"])
		assert.Equal(t, 90*time.Second, tr["WAIT_FOR_THREAD"], "flat grace from the FORCE_TIMEOUT_PATH instant")
		assert.Equal(t, backends.StatusDone, w.job(s).Status)
		assert.Empty(t, w.cancels(s))
	})
}

// Heartbeats go on in every state until Run returns: DRAINING,
// FORCE_TIMEOUT_PATH and WAIT_FOR_THREAD included, each beat on time.
func TestStateMachineHeartbeatsInEveryState(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := fakeSettings(30*time.Second, time.Minute)
		w := newFakeWorld(t, s, 8, 4, nil)
		w.enqueue("sync.sleep", 200)
		w.run(1)
		w.sup.Shutdown()
		require.Equal(t, 200*time.Second, w.wait())
		tr := w.transitions()
		require.Equal(t, 30*time.Second, tr["FORCE_TIMEOUT_PATH"])
		require.Equal(t, 90*time.Second, tr["WAIT_FOR_THREAD"])

		w.mu.Lock()
		beats := slices.Clone(w.beats)
		w.mu.Unlock()
		interval := s.HeartbeatInterval
		require.NotEmpty(t, beats)
		for i := 1; i < len(beats); i++ {
			assert.Equal(t, interval, beats[i].at.Sub(beats[i-1].at), "beat %d (%s) follows beat %d by the interval", i, beats[i].state, i-1)
		}
		// ≤: when Run returns at the very instant of a tick, that beat may
		// or may not be written (the heartbeat is stopping then).
		assert.LessOrEqual(t, w.stopped.Sub(beats[len(beats)-1].at), interval, "beats go on until Run returns")
		perState := map[State]int{}
		for _, b := range beats {
			perState[b.state]++
		}
		// A beat at the very instant of a transition may count in either state.
		for st, window := range map[State]time.Duration{
			StateDraining: 30 * time.Second, StateForceTimeoutPath: 60 * time.Second, StateWaitForThread: 110 * time.Second,
		} {
			assert.GreaterOrEqual(t, perState[st], int(window/interval)-1, "heartbeats written in %s (%s long, one every %s)", st, window, interval)
		}
	})
}

func TestStateMachineSecondSignalForcesAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t, fakeSettings(30*time.Second, time.Minute), 8, 4, nil)
		a := w.enqueue("async.sleep", 1000)
		w.run(1)
		w.sup.Shutdown()
		time.Sleep(5 * time.Second)
		w.sup.Shutdown()
		took := w.wait()
		assert.Equal(t, 5*time.Second, took)
		assert.Equal(t, 5*time.Second, w.transitions()["FORCE_TIMEOUT_PATH"])
		assert.Equal(t, backends.StatusQueued, w.job(a).Status)
	})
}

func TestStateMachineAsyncJobTimeoutDuringDraining(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t, fakeSettings(30*time.Second, time.Minute), 8, 4, map[string]time.Duration{"async.sleep": 20 * time.Second})
		a := w.enqueue("async.sleep", 1000)
		w.run(1)
		time.Sleep(5 * time.Second) // the job has run 5 s of its 20 s
		w.sup.Shutdown()
		took := w.wait()
		assert.Equal(t, 20*time.Second, took, "min(job_timeout 20 s, remaining shutdown_timeout 5+30 s): the job timeout fired first")
		assert.NotContains(t, w.transitions(), "FORCE_TIMEOUT_PATH")
		j := w.job(a)
		assert.Equal(t, backends.StatusQueued, j.Status, "retried per policy")
		assert.Equal(t, 1, j.Attempts, "the attempt counts")
		require.NotNil(t, j.LastError)
		assert.Equal(t, "Job timed out after 20.0s", *j.LastError, "Soniq's text for a timeout")
		assert.Equal(t, []protocol.CancelReason{protocol.ReasonJobTimeout}, w.cancels(a))
	})
}

func TestStateMachineClaimedNotYetRunningIsNacked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Two slots, one sync slot: the second sync job is claimed but waits.
		w := newFakeWorld(t, fakeSettings(30*time.Second, 10*time.Minute), 2, 1, nil)
		first, second := w.enqueue("sync.sleep", 100), w.enqueue("sync.sleep", 100)
		w.run(1)
		synctest.Wait()
		require.Equal(t, backends.StatusProcessing, w.job(second).Status, "claimed, not yet running")
		w.sup.Shutdown()
		took := w.wait()
		assert.Equal(t, 100*time.Second, took)
		assert.Equal(t, backends.StatusDone, w.job(first).Status)
		j := w.job(second)
		assert.Equal(t, backends.StatusQueued, j.Status, "NACKed at FORCE_TIMEOUT_PATH: the async branch")
		assert.Equal(t, 1, j.Attempts)
		assert.Equal(t, 1, w.jobsSent(), "it never ran")
	})
}

// In DRAINING the loop hurries the writer: a result arriving right after
// another is written when it arrives, not held back by the
// completer's linger.
func TestDrainingResultsAreNotHeldBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Budget 8: a batch below 2 results would linger while results flow.
		w := newFakeWorld(t, fakeSettings(30*time.Second, time.Minute), 8, 4, nil)
		// The third job keeps the sidecar DRAINING (the writer closing
		// would write at once anyway).
		ids := []string{w.enqueue("async.sleep", 10), w.enqueue("async.sleep", 10.001), w.enqueue("async.sleep", 20)}
		w.run(3)
		w.sup.Shutdown()
		w.wait()
		runs, _ := w.snapshot()
		require.Len(t, runs, 3)
		for _, r := range runs {
			require.Contains(t, ids, r.id)
			assert.Equal(t, r.end.UTC(), w.job(r.id).UpdatedAt.UTC(), "job %s's row written when its result arrived", r.id)
		}
	})
}
