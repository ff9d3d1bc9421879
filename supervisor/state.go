package supervisor

// State is a state of the shutdown diagram in docs/shutdown.md:
//
//	RUNNING --SIGTERM--> DRAINING --all jobs done--> STOPPED
//	                        |
//	                        +--shutdown_timeout elapsed--> FORCE_TIMEOUT_PATH
//	                              async branch: cancel + nack_job --> STOPPED
//	                              sync branch:  grace (flat sync_handler_grace_seconds)
//	                                            --> WAIT_FOR_THREAD (no end, never a kill)
//	                                            --> jobs return --> STOPPED
//
// Log lines carry these exact names in the `state` attribute.
type State int32

// The states, in the order they are passed through.
const (
	StateRunning State = iota
	StateDraining
	StateForceTimeoutPath
	StateWaitForThread
	StateStopped
)

func (s State) String() string {
	switch s {
	case StateRunning:
		return "RUNNING"
	case StateDraining:
		return "DRAINING"
	case StateForceTimeoutPath:
		return "FORCE_TIMEOUT_PATH"
	case StateWaitForThread:
		return "WAIT_FOR_THREAD"
	case StateStopped:
		return "STOPPED"
	}
	return "UNKNOWN"
}
