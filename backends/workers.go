package backends

import (
	"context"
	"encoding/json"
	"time"
)

// Worker is one soniq_workers row.
type Worker struct {
	ID            string          `json:"id"`
	Hostname      string          `json:"hostname"`
	PID           int             `json:"pid"`
	Queues        []string        `json:"queues"`
	Concurrency   int             `json:"concurrency"`
	Status        string          `json:"status"`
	LastHeartbeat time.Time       `json:"last_heartbeat"`
	StartedAt     time.Time       `json:"started_at"`
	Version       string          `json:"version"`
	Metadata      json.RawMessage `json:"metadata"`
	// HeartbeatAge is how long ago last_heartbeat was, by the database's
	// clock, when the row was read (SameIdentity fills it; it is never
	// written).
	HeartbeatAge time.Duration `json:"-"`
}

// Workers is the storage of soniq_workers rows: registration, liveness, and
// the maintenance that runs under the leadership (stale-worker recovery,
// expired rows).
type Workers interface {
	// RegisterWorker upserts the worker row, status 'active', heartbeat
	// now. Registering an id that exists re-activates it. A row with the
	// same (hostname, pid) and another id is never replaced, whoever
	// registered it (another program, or another instance of this one):
	// ErrIdentityTaken, nothing changed. Only TakeOver replaces a row.
	RegisterWorker(ctx context.Context, w Worker) error
	// SameIdentity returns the worker rows other than w's own whose
	// metadata names the same identity as w's (IdentityOf: program, instance
	// and host; the pid plays no part), whatever their status, with
	// HeartbeatAge set. They are w's predecessors, or, when one is alive
	// (its heartbeat moves), another live instance given the same name.
	SameIdentity(ctx context.Context, w Worker) ([]Worker, error)
	// TakeOver registers w (as RegisterWorker) in place of dead workers of
	// its identity, in one transaction: each row of dead that still exists
	// must have the LastHeartbeat and Status its caller observed (else
	// ErrWorkerAlive, nothing changed); its processing rows become w's
	// (worker_id = w.ID, still processing, attempts unchanged: the
	// executions may still run in handler processes that outlive the dead
	// worker, and w decides which to keep and which to give back with
	// Nack); its other rows are detached (worker_id NULL); the dead row is
	// deleted. It returns the rows w now holds. A row of dead that is gone
	// is skipped.
	TakeOver(ctx context.Context, w Worker, dead []Worker) ([]Job, error)
	// Heartbeat sets last_heartbeat = now(). ErrNotFound when the row is
	// gone (deleted, or re-keyed by another program's registration),
	// ErrWorkerNotActive when it is no longer active.
	Heartbeat(ctx context.Context, workerID string) error
	// SetWorkerStatus sets a worker's status (active, stopping, stopped).
	SetWorkerStatus(ctx context.Context, workerID, status string) error
	// LiveWorkers returns the active workers whose last heartbeat is
	// younger than within (any program's: Soniq workers and sidecars), by
	// id. Queues empty means every queue; Metadata is nil when NULL.
	LiveWorkers(ctx context.Context, within time.Duration) ([]Worker, error)
	// RegisterTasks upserts (task_name, worker_id, last_seen_at=now()).
	RegisterTasks(ctx context.Context, workerID string, names []string) error

	// RecoverStaleWorkers takes every worker silent for longer than
	// olderThan, whatever its status says (a worker left 'stopping' by a
	// crash, or 'stopped' while it still held rows, is as dead as an
	// 'active' one): it marks it stopped and requeues its processing rows
	// (worker_id NULL, attempts preserved), in one transaction. It returns
	// the workers it changed (marked stopped or relieved of rows) and the
	// rows it requeued. The row of except (the caller's own worker id, or
	// "") is never recovered: a worker that is running the recovery is
	// alive, however old its last heartbeat looks.
	RecoverStaleWorkers(ctx context.Context, olderThan time.Duration, except string) (workers, jobs int, err error)
	// DeleteExpired deletes done rows whose expires_at has passed, and
	// returns how many. It also removes cancel requests settled more than
	// CancelRequestTTL ago, and pending ones as old whose job is no longer
	// queued or processing (not counted).
	DeleteExpired(ctx context.Context) (int, error)

	// TryLeader tries to become the maintenance leader without blocking.
	// When ok, release must be called to give leadership up; its ctx
	// bounds how long it waits for the database (a shutdown passes its
	// write deadline), and the leadership ends in any case.
	TryLeader(ctx context.Context) (release func(ctx context.Context), ok bool, err error)
}
