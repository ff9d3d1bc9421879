package supervisor

// The shutdown state machine of docs/shutdown.md: DRAINING, FORCE, the sync
// grace, WAIT_FOR_THREAD and STOPPED, all on the loop goroutine.

import (
	"context"
	"slices"
	"syscall"
	"time"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/protocol"
)

// The deadlines of a shutdown, all of them, as an operator adds them up
// against an orchestrator's grace period (docs/shutdown.md does the sum):
//
//   - shutdown_timeout (Settings.ShutdownTimeout): DRAINING waits this long
//     for in-flight jobs, then FORCE_TIMEOUT_PATH cancels and NACKs the
//     async ones.
//   - sync_handler_grace_seconds (Settings.SyncHandlerGrace): from
//     FORCE_TIMEOUT_PATH, the sync jobs still running get this long, then
//     WAIT_FOR_THREAD waits for them without end. A sync job's own
//     job_timeout no longer applies from FORCE_TIMEOUT_PATH on.
//   - the stop grace (Config.StopGrace, defaultStopGrace): at STOPPED each
//     process is sent `shutdown` and EOF, SIGTERM one stop grace later and
//     SIGKILL after a second one; after a forced path the stop grace is at
//     most forcedStopGrace, since what processes still hold was cancelled.
//     A process holding a sync job is never signalled.
//   - the ack wait (ackWaitMax): an attached handler's session stays open at
//     most this long for the acknowledgement of results still being written.
//   - each database call the engine makes itself is bounded by writeTimeout,
//     and each result batch by the writer's own bound.
const (
	defaultStopGrace = 5 * time.Second
	forcedStopGrace  = 500 * time.Millisecond
	// ackWaitMax: past it the session ends anyway, and the handler offers
	// those results to the next session, whose sidecar finds the rows
	// written and only acknowledges them.
	ackWaitMax = 5 * time.Second
)

// shutdownState is where the shutdown state machine is.
type shutdownState struct {
	state        State
	timer        *time.Timer // shutdown_timeout, from DRAINING
	graceTimer   *time.Timer // sync_handler_grace_seconds, from FORCE_TIMEOUT_PATH
	lastWaitWarn time.Time   // the last WAIT_FOR_THREAD reminder
	// cut is the parent of the loop's own database calls (claims, the
	// audit's release, a registration again), ended at the write deadline:
	// from FORCE_TIMEOUT_PATH or STOPPED, the shutdown's database work gets
	// shutdown_write_timeout in all.
	cut           context.Context
	endCut        context.CancelFunc
	writeDeadline time.Time
	cutTimer      *time.Timer
	// forceNacks collects FORCE_TIMEOUT_PATH's NACKs while it takes every
	// job (nil otherwise): the writer gets them together, in one batch.
	forceNacks *[]backends.Job
}

func newShutdownState() shutdownState {
	cut, end := context.WithCancel(context.Background())
	return shutdownState{cut: cut, endCut: end}
}

// fixWriteDeadline starts the shutdown's write deadline, once: the writer
// gives up there and cuts the write in flight, a claim still in flight is
// abandoned (its rows, should it have taken any, stay processing for
// recovery), and the stop mark gets what remains.
func (l *loop) fixWriteDeadline() {
	if !l.shut.writeDeadline.IsZero() {
		return
	}
	d := l.cfg.Settings.ShutdownWriteTimeout
	l.shut.writeDeadline = time.Now().Add(d)
	if l.writer != nil {
		l.writer.Deadline(l.shut.writeDeadline, d)
	}
	l.shut.cutTimer = time.AfterFunc(d, l.shut.endCut)
	l.host.setWriteDeadline(l.shut.writeDeadline)
}

func (l *loop) setState(s State) {
	l.shut.state = s
	l.host.setState(s)
	l.metrics.state(s)
}

func (l *loop) onShutdownRequest() {
	switch l.shut.state {
	case StateRunning:
		l.enterDraining("shutdown requested")
	case StateDraining:
		l.log.Warn("second shutdown request during DRAINING", "state", l.shut.state.String())
		l.enterForce("second shutdown request")
	case StateStopped:
		l.log.Info("already stopping", "state", l.shut.state.String())
	default:
		l.log.Warn("shutdown already forced; sync jobs are never killed by the sidecar (SIGKILL abandons them; stale-worker recovery requeues their rows)",
			"state", l.shut.state.String(), "sync_jobs", l.syncJobIDs())
	}
}

func (l *loop) enterDraining(why string) {
	l.setState(StateDraining)
	l.log.Info("state transition: claiming stopped, waiting for in-flight jobs", "state", StateDraining.String(),
		"from", StateRunning.String(), "reason", why, "in_flight", len(l.live), "shutdown_timeout", l.cfg.Settings.ShutdownTimeout)
	l.shut.timer = time.AfterFunc(l.cfg.Settings.ShutdownTimeout, func() { l.emit(shutdownTimeoutEvent{}) })
	l.writer.Hurry() // results written from here on are not held back
}

func (l *loop) enterForce(why string) {
	if l.shut.timer != nil {
		l.shut.timer.Stop()
	}
	l.setState(StateForceTimeoutPath)
	l.fixWriteDeadline()
	var asyncN, syncN int
	for _, t := range l.live {
		if t.state == taskRunning && t.sync() {
			syncN++
		} else {
			asyncN++
		}
	}
	l.log.Warn("state transition: async jobs are cancelled and NACKed, sync jobs get their grace", "state", StateForceTimeoutPath.String(),
		"from", StateDraining.String(), "reason", why, "async_jobs", asyncN, "sync_jobs", syncN, "sync_grace", l.cfg.Settings.SyncHandlerGrace)
	// The predecessor's rows no handler has reported yet are not running
	// here: given back like claimed-not-yet-running ones.
	l.settleInherited(true, "shutdown_timeout")
	var nacks []backends.Job
	l.shut.forceNacks = &nacks
	defer func() {
		l.shut.forceNacks = nil
		if len(l.live) == 0 && l.syncHeld() == 0 {
			// STOPPED follows at once: these are the shutdown's last
			// writes, and they wait (as long as the processes are given to
			// leave) to go out with the stop mark in one round trip.
			l.writer.NackFinal(nacks, forcedStopGrace)
			return
		}
		l.writer.NackAll(nacks)
	}()
	for _, pl := range l.pools {
		for _, t := range l.takePending(pl) {
			l.nack(t, "shutdown_timeout")
		}
	}
	for _, t := range l.live {
		if t.state != taskRunning {
			continue
		}
		if !nackedAtForce(true, t.sync()) {
			// From here shutdown bounds the job, not its job_timeout: it
			// gets the sync grace and is then waited for; it is never
			// failed for its timeout while the sidecar stops.
			l.stopTimeout(t)
			continue
		}
		l.sendCancel(t, protocol.ReasonShutdownTimeout)
		l.nack(t, "shutdown_timeout")
	}
	if l.syncHeld() > 0 {
		l.shut.graceTimer = time.AfterFunc(l.cfg.Settings.SyncHandlerGrace, func() { l.emit(graceExpiredEvent{}) })
	}
}

func (l *loop) onShutdownTimeout() {
	if l.shut.state == StateDraining {
		l.enterForce("shutdown_timeout elapsed")
	}
}

// onGraceExpired: sync_handler_grace_seconds passed in FORCE_TIMEOUT_PATH;
// the sync jobs still running are waited for without end.
func (l *loop) onGraceExpired() {
	if l.shut.state != StateForceTimeoutPath {
		return
	}
	l.setState(StateWaitForThread)
	l.shut.lastWaitWarn = time.Now()
	l.log.Warn("state transition: sync_handler_grace_seconds expired; waiting for sync jobs without end (never killed; SIGKILL from the supervisor is the only hard stop)",
		"state", StateWaitForThread.String(), "from", StateForceTimeoutPath.String(),
		"sync_grace", l.cfg.Settings.SyncHandlerGrace, "sync_jobs", l.syncJobIDs())
}

// remindWaiting repeats the WAIT_FOR_THREAD warning every WaitWarn.
func (l *loop) remindWaiting(now time.Time) {
	if l.shut.state == StateWaitForThread && now.Sub(l.shut.lastWaitWarn) >= l.cfg.WaitWarn {
		l.shut.lastWaitWarn = now
		l.log.Warn("still waiting for sync jobs to return (WAIT_FOR_THREAD); heartbeats continue",
			"state", StateWaitForThread.String(), "sync_jobs", l.syncJobIDs())
	}
}

// nack is the async branch of FORCE_TIMEOUT_PATH for one job.
func (l *loop) nack(t *task, reason string) {
	j := t.job
	l.drop(t)
	if t.state == taskRunning {
		t.state, t.abandoned = taskAbandoned, reason
		l.metrics.jobEnded(t, "nacked")
	}
	t.endSpan("nacked", "")
	if l.shut.forceNacks != nil {
		*l.shut.forceNacks = append(*l.shut.forceNacks, *j)
	} else {
		l.writer.Nack(*j)
	}
	l.metrics.shutdownNack(j.Queue, j.Name, reason)
	l.log.Warn("shutdown_nack", "job_id", j.ID, "job_name", j.Name, "queue", j.Queue, "reason", reason, "attempts", j.Attempts)
}

func (l *loop) syncHeld() int {
	n := 0
	for _, pl := range l.pools {
		for _, p := range pl.procs {
			if p != nil {
				n += p.syncHeld
			}
		}
	}
	return n
}

func (l *loop) syncJobIDs() []string {
	var ids []string
	for _, pl := range l.pools {
		for _, p := range pl.procs {
			if p == nil {
				continue
			}
			for id, t := range p.tasks {
				if t.sync() {
					ids = append(ids, id)
				}
			}
		}
	}
	slices.Sort(ids)
	return ids
}

// checkDone moves to STOPPED once nothing is left to wait for: in
// DRAINING every job has returned; after FORCE_TIMEOUT_PATH every sync job
// has returned (async ones were NACKed and are not waited for).
func (l *loop) checkDone() {
	switch l.shut.state {
	case StateDraining:
		if len(l.live) > 0 || l.claim.inFlight > 0 || len(l.inherited.rows) > 0 {
			return
		}
		for _, pl := range l.pools {
			for _, p := range pl.procs {
				if p != nil && len(p.tasks) > 0 {
					return
				}
			}
		}
	case StateForceTimeoutPath, StateWaitForThread:
		if len(l.live) > 0 || l.syncHeld() > 0 {
			return
		}
	default:
		return
	}
	l.enterStopped()
}

func (l *loop) enterStopped() {
	from := l.shut.state
	for _, tm := range []*time.Timer{l.shut.timer, l.shut.graceTimer} {
		if tm != nil {
			tm.Stop()
		}
	}
	l.setState(StateStopped)
	l.fixWriteDeadline()
	l.log.Info("state transition: every job returned or was NACKed; stopping handler processes", "state", StateStopped.String(), "from", from.String())
	grace := l.cfg.StopGrace
	if from != StateDraining {
		// What processes still hold are NACKed async jobs that were sent a
		// cancel: keep the exit bounded.
		grace = min(grace, forcedStopGrace)
	}
	for _, pl := range l.pools {
		for _, p := range pl.procs {
			if p != nil {
				if p.state == procStarting {
					p.signalGroup(syscall.SIGKILL)
				}
				if l.deferStop(p, grace) {
					continue // its session ends once its last results are acknowledged
				}
				l.stopProcess(p, grace)
			}
		}
	}
}
