package supervisor

// The crash and restart paths of the loop, driven directly on a loop that
// is not running (the test goroutine is its owner): startFailed,
// scheduleRestart, breakProcess, onKill and retire, on the fake clock of
// testing/synctest, with a fake conn that records the signals it is sent.

import (
	"errors"
	"io"
	"log/slog"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/internal/config"
	"github.com/soniq-dev/soniq-sidecar/internal/memory"
	"github.com/soniq-dev/soniq-sidecar/internal/transport"
	"github.com/soniq-dev/soniq-sidecar/protocol"
)

// recConn is a spawned process's conn that records signals instead of
// sending them.
type recConn struct{ sigs []syscall.Signal }

func (c *recConn) PID() int                  { return 4242 }
func (c *recConn) Signal(sig syscall.Signal) { c.sigs = append(c.sigs, sig) }
func (c *recConn) Stderr() string            { return "" }

// crashRig is a loop that is not running, whose transport starts nothing
// and hands every process a recConn.
type crashRig struct {
	sup   *Supervisor
	l     *loop
	conns []*recConn
}

func newCrashRig(t *testing.T) *crashRig {
	m := &config.Manifest{Version: 1, Handlers: []config.Handler{{
		Name: "fake", Command: []string{"fake"}, Transport: config.TransportStdio, Processes: 1,
		Concurrency: 2, SyncConcurrency: 1, StartupTimeout: 10 * time.Second, Jobs: fakeJobs,
	}}}
	r := &crashRig{}
	sup, err := New(Config{Manifest: m, Settings: fakeSettings(30*time.Second, time.Minute), Backend: memory.New(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), StopGrace: time.Second,
		startTransport: func(transport.Env, transport.Spec) (transport.Conn, error) {
			c := &recConn{}
			r.conns = append(r.conns, c)
			return c, nil
		}})
	require.NoError(t, err)
	r.sup = sup
	r.l = newLoop(sup, nil, nil, &sync.WaitGroup{})
	r.l.pools[0].claim.more = false // nothing to claim: these paths never reach the database
	return r
}

// ready spawns slot 0 and gives it its hello.
func (r *crashRig) ready(t *testing.T) *process {
	pl := r.l.pools[0]
	r.l.spawn(pl, 0)
	p := pl.procs[0]
	require.NotNil(t, p)
	r.l.onFrame(p, &protocol.Hello{Protocol: 1, SDK: "fake/1", PID: 4242, Concurrency: 2, SyncConcurrency: 1,
		Jobs: []protocol.HelloJob{{Name: "async.sleep", Cancellable: true}, {Name: "sync.sleep"}, {Name: "crash", Cancellable: true}}})
	require.Equal(t, procReady, p.state)
	return p
}

// events drains the events the loop emitted so far.
func (r *crashRig) events() []event {
	var out []event
	for {
		select {
		case e := <-r.sup.events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// Each failure restarts the slot after restartDelay (doubling, capped); the
// fifth in a row is a crash loop: the handler stops being ready.
func TestStartFailedBacksOffThenReportsACrashLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newCrashRig(t)
		pl := r.l.pools[0]
		for n := 1; n <= crashLoopThreshold; n++ {
			start := time.Now()
			r.l.startFailed(pl, 0, "exited with status 3", "start_failure")
			assert.True(t, pl.restart.pending[0], "failure %d: a restart is pending", n)
			time.Sleep(restartDelay(n) - time.Millisecond)
			synctest.Wait()
			assert.Empty(t, r.events(), "failure %d: no restart before its backoff", n)
			time.Sleep(time.Millisecond)
			synctest.Wait()
			es := r.events()
			assert.Equal(t, []event{restartEvent{pool: pl, slot: 0}}, es, "failure %d", n)
			assert.Equal(t, restartDelay(n), time.Since(start), "failure %d", n)
			pl.restart.pending[0] = false // what onRestart does before spawning
			if n < crashLoopThreshold {
				assert.False(t, pl.restart.crashLoop, "failure %d is not a crash loop yet", n)
			}
		}
		assert.True(t, pl.restart.crashLoop)
		ready, why := r.sup.Ready()
		assert.False(t, ready)
		assert.Contains(t, why, "crash loop: exited with status 3")
	})
}

// A slot has one pending restart at most, and none is scheduled once
// shutdown is past DRAINING.
func TestScheduleRestartOncePerSlotAndNotPastDraining(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newCrashRig(t)
		pl := r.l.pools[0]
		r.l.scheduleRestart(pl, 0, time.Second)
		r.l.scheduleRestart(pl, 0, time.Second)
		time.Sleep(2 * time.Second)
		synctest.Wait()
		assert.Equal(t, []event{restartEvent{pool: pl, slot: 0}}, r.events())

		pl.restart.pending[0] = false
		r.l.shut.state = StateForceTimeoutPath
		r.l.scheduleRestart(pl, 0, time.Second)
		time.Sleep(2 * time.Second)
		synctest.Wait()
		assert.Empty(t, r.events())
		assert.False(t, pl.restart.pending[0])
	})
}

// A broken process is closed and SIGKILLed at once; the first cause is the
// one its jobs and the restart reason get; its exit restarts the slot with
// that reason.
func TestBreakProcessKillsAndKeepsTheFirstCause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newCrashRig(t)
		p := r.ready(t)
		r.l.breakProcess(p, "protocol_error", "first cause")
		r.l.breakProcess(p, "unresponsive", "second cause")
		assert.Equal(t, procStopping, p.state)
		assert.True(t, p.out.Closed(), "its input is closed")
		assert.Equal(t, "first cause", p.brokenCause)
		assert.Equal(t, "protocol_error", p.brokenReason)
		assert.Equal(t, []syscall.Signal{syscall.SIGKILL, syscall.SIGKILL}, r.conns[0].sigs)

		r.l.onExit(p, errors.New("signal: killed"))
		assert.Equal(t, procDead, p.state)
		assert.Nil(t, r.l.pools[0].procs[0], "the slot is free")
		assert.True(t, r.l.pools[0].restart.pending[0], "the slot restarts")
		assert.Equal(t, 1, r.l.pools[0].restart.failures, "a broken process counts as a failure")
		r.l.breakProcess(p, "protocol_error", "after its exit")
		assert.Len(t, r.conns[0].sigs, 2, "a dead process is never signalled")
	})
}

// A process that did not exit after `shutdown` is signalled, unless it holds
// a sync job (never killed) or a job whose row is still the sidecar's.
func TestOnKillSparesSyncAndRunningJobs(t *testing.T) {
	tests := []struct {
		name  string
		setup func(p *process)
		want  []syscall.Signal
	}{
		{"idle: signalled", func(*process) {}, []syscall.Signal{syscall.SIGTERM}},
		{"holding a sync job: never", func(p *process) { p.syncHeld = 1 }, nil},
		{"holding a running async job: not yet", func(p *process) {
			p.tasks["j1"] = &task{job: &backends.Job{ID: "j1"}, state: taskRunning}
		}, nil},
		{"holding only an abandoned job: signalled", func(p *process) {
			p.tasks["j1"] = &task{job: &backends.Job{ID: "j1"}, state: taskAbandoned}
		}, []syscall.Signal{syscall.SIGTERM}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newCrashRig(t)
				p := r.ready(t)
				tt.setup(p)
				r.l.onKill(p, syscall.SIGTERM)
				assert.Equal(t, tt.want, r.conns[0].sigs)
			})
		})
	}
}

// Recycling: an idle process is stopped by the step that follows (shutdown,
// then SIGTERM and SIGKILL a StopGrace apart); a busy one only stops taking
// jobs, and a retiring or stopping one is left as it is.
func TestRetire(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newCrashRig(t)
		p := r.ready(t)
		r.l.retire(p)
		assert.Equal(t, procRetiring, p.state)
		r.l.settle(p.pool)
		assert.Equal(t, procStopping, p.state)
		assert.True(t, p.out.Closed())
		time.Sleep(time.Second)
		synctest.Wait()
		assert.Equal(t, []event{killEvent{proc: p, sig: syscall.SIGTERM}}, r.events())
		time.Sleep(time.Second)
		synctest.Wait()
		assert.Equal(t, []event{killEvent{proc: p, sig: syscall.SIGKILL}}, r.events())
		r.l.retire(p)
		assert.Equal(t, procStopping, p.state, "a stopping process is not retired again")
	})
	synctest.Test(t, func(t *testing.T) {
		r := newCrashRig(t)
		p := r.ready(t)
		p.tasks["j1"] = &task{job: &backends.Job{ID: "j1"}, state: taskRunning}
		r.l.retire(p)
		r.l.settle(p.pool)
		assert.Equal(t, procRetiring, p.state, "busy: takes no new job, stops when idle")
		assert.False(t, p.out.Closed())
		time.Sleep(time.Minute)
		synctest.Wait()
		assert.Empty(t, r.events(), "no kill is scheduled while it works")
	})
}
