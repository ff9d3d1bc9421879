package supervisor

import (
	"syscall"
	"time"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/protocol"
)

// event is something that happened, sent to the loop, which is the only
// reader of events and the only goroutine that acts on them (loop.handle).
// Each kind is its own type carrying only what it needs; the set is closed
// to this package.
type event interface{ isEvent() }

// Events about one handler process, from its transport.
type (
	// frameEvent: a frame from a handler process.
	frameEvent struct {
		proc *process
		msg  protocol.Message
	}
	// framesEvent: frames a handler process sent together, in order.
	framesEvent struct {
		proc *process
		msgs []protocol.Message
	}
	// protocolErrorEvent: a handler process broke the protocol.
	protocolErrorEvent struct {
		proc *process
		err  error
	}
	// exitEvent: a handler process exited (err says how); a transport's
	// last event for a process.
	exitEvent struct {
		proc *process
		err  error
	}
	// stdoutClosedEvent: a stdio process closed its stdout and did not exit.
	stdoutClosedEvent struct{ proc *process }
	// unsendableEvent: a frame for a handler process could not be encoded.
	unsendableEvent struct {
		proc *process
		msg  protocol.Message
		err  error
	}
	// stdinFailedEvent: writing to a handler process failed.
	stdinFailedEvent struct {
		proc *process
		err  error
	}
	// attachRefusedEvent: an attach endpoint refused the session (attach.go).
	attachRefusedEvent struct {
		proc *process
		err  error
	}
)

// Events from the loop's own timers.
type (
	// startTimeoutEvent: no hello within startup_timeout.
	startTimeoutEvent struct{ proc *process }
	// restartEvent: backoff over, start a process in a pool slot.
	restartEvent struct {
		pool *pool
		slot int
	}
	// killEvent: escalate a process stop (SIGTERM, then SIGKILL).
	killEvent struct {
		proc *process
		sig  syscall.Signal
	}
	// jobTimeoutEvent: a job's timeout fired.
	jobTimeoutEvent struct{ task *task }
	// pollEvent: the poll interval elapsed: claim whatever is due.
	pollEvent struct{}
	// tickEvent: the ping interval elapsed (onTick).
	tickEvent struct{}
	// shutdownRequestEvent: Shutdown was called (a signal, --once's end).
	shutdownRequestEvent struct{}
	// shutdownTimeoutEvent: shutdown_timeout elapsed in DRAINING.
	shutdownTimeoutEvent struct{}
	// graceExpiredEvent: sync_handler_grace_seconds elapsed.
	graceExpiredEvent struct{}
	// reserveWaitEvent: a pool's oldest reserved row reached its wait
	// bound (settleReserve).
	reserveWaitEvent struct{ pool *pool }
	// claimHoldEvent: a pool's claim hold reached its time bound (holdClaim).
	claimHoldEvent struct{ pool *pool }
	// fleetSizeEvent: the live sidecars sharing this one's queues were
	// counted (maintenance.FleetSizer).
	fleetSizeEvent struct{ n int }
	// settleEvent: the wait for attached handlers to report the
	// predecessor's jobs is over (inherit.go).
	settleEvent struct{}
	// ackTimeoutEvent: a stopping process waited ackWaitMax for the
	// acknowledgements of its results (acks.go).
	ackTimeoutEvent struct{ proc *process }
)

// Events from the database side.
type (
	// claimedEvent: a claim statement returned.
	claimedEvent struct {
		pool  *pool
		jobs  []backends.Job
		limit int
		ahead int
		err   error
		// allNames: the claim asked for every job name of its pool, when
		// the writer had written writtenAt batches (run --once).
		allNames  bool
		writtenAt int64
		// sentAt is when the claimer sent the claim (claimStale).
		sentAt time.Time
		// capped: a cap held back runnable rows (limits.go); rated: a rate
		// cap did.
		capped, rated bool
	}
	// unknownClaimedEvent: a --dead-letter-unknown claim returned.
	unknownClaimedEvent struct {
		jobs []backends.Job
		err  error
	}
	// reconcileReadEvent: the rows processing under this worker, read
	// after a claim failed (claim.go, reconcile).
	reconcileReadEvent struct {
		rows []backends.Job
		err  error
	}
	// reconciledEvent: the rows a lost claim took were given back.
	reconciledEvent struct {
		held     []backends.Job
		returned []string
		err      error
	}
	// wakeEvent: new-job notification for a queue ("" wakes every pool).
	wakeEvent struct{ queue string }
	// overridesReadEvent: the limits' overrides and the live sidecars'
	// declared caps were read (limits.go).
	overridesReadEvent struct {
		overrides []backends.LimitOverride
		peers     []peerCaps
		err       error
	}
	// rateRetryEvent: a rate-capped pool may claim again (claim.go).
	rateRetryEvent struct{ pool *pool }
	// writtenEvent: the writer wrote a batch of results, which may have
	// freed slots of a limited scope (limits.go).
	writtenEvent struct{}
	// workerLostEvent: the heartbeat found our worker row gone or not active.
	workerLostEvent struct{ err error }
	// settledEvent: the writer settled these completions (written, or
	// refused by their guard).
	settledEvent struct{ ids []string }
	// enqueuedEvent: a child asked for at once was written (jobID: the
	// row that holds it) or not (err); proc asked for it (children.go).
	enqueuedEvent struct {
		proc  *process
		id    string
		jobID string
		err   error
	}
	// reregisteredEvent: the worker row is registered again; ids are rows
	// no longer ours.
	reregisteredEvent struct {
		ids []string
		err error
	}
)

func (frameEvent) isEvent()           {}
func (framesEvent) isEvent()          {}
func (protocolErrorEvent) isEvent()   {}
func (exitEvent) isEvent()            {}
func (stdoutClosedEvent) isEvent()    {}
func (unsendableEvent) isEvent()      {}
func (stdinFailedEvent) isEvent()     {}
func (attachRefusedEvent) isEvent()   {}
func (startTimeoutEvent) isEvent()    {}
func (restartEvent) isEvent()         {}
func (killEvent) isEvent()            {}
func (jobTimeoutEvent) isEvent()      {}
func (shutdownTimeoutEvent) isEvent() {}
func (pollEvent) isEvent()            {}
func (tickEvent) isEvent()            {}
func (shutdownRequestEvent) isEvent() {}
func (graceExpiredEvent) isEvent()    {}
func (claimHoldEvent) isEvent()       {}
func (reserveWaitEvent) isEvent()     {}
func (fleetSizeEvent) isEvent()       {}
func (claimedEvent) isEvent()         {}
func (unknownClaimedEvent) isEvent()  {}
func (wakeEvent) isEvent()            {}
func (reconcileReadEvent) isEvent()   {}
func (reconciledEvent) isEvent()      {}
func (workerLostEvent) isEvent()      {}
func (reregisteredEvent) isEvent()    {}
func (settleEvent) isEvent()          {}
func (ackTimeoutEvent) isEvent()      {}
func (settledEvent) isEvent()         {}
func (enqueuedEvent) isEvent()        {}
func (writtenEvent) isEvent()         {}
func (rateRetryEvent) isEvent()       {}
func (overridesReadEvent) isEvent()   {}
