// Package backends defines the storage contract the sidecar needs from a
// database holding Soniq's tables, and the types that cross it.
//
// Every implementation (postgres and sqlite here; a third party's, and the
// in-memory one the unit tests use) must pass the shared contract suite in
// backends/backendtest: write a Factory for fresh, migrated, empty
// instances and call backendtest.Run from a test. The row-level semantics of each
// operation, and where they differ from the released Soniq package, are in
// docs/compatibility.md.
//
// This package knows nothing of protocols or processes.
package backends

import (
	"context"
	"errors"
	"time"
)

// Job statuses allowed in soniq_jobs. There is deliberately no "dead_letter":
// dead-lettered jobs live only in soniq_dead_letter_jobs and every backend's
// schema rejects that status.
const (
	StatusQueued     = "queued"
	StatusProcessing = "processing"
	StatusDone       = "done"
	StatusCancelled  = "cancelled"
)

// Worker statuses allowed in soniq_workers.
const (
	WorkerActive   = "active"
	WorkerStopping = "stopping"
	WorkerStopped  = "stopped"
)

// Dead-letter reasons in use by Soniq.
const (
	ReasonMaxRetriesExceeded = "max_retries_exceeded"
	ReasonPermanentFailure   = "permanent_failure"
	ReasonJobNotFound        = "job_not_found"
	ReasonInvalidArguments   = "invalid_arguments"
)

// Limits shared by all backends.
const (
	// MaxErrorBytes bounds last_error; longer errors are truncated (on a
	// UTF-8 boundary) by the backend.
	MaxErrorBytes = 8 * 1024
	// MaxSnooze caps a snooze's delay.
	MaxSnooze = 24 * time.Hour
)

// ErrNotFound is returned (wrapped) when a job, dead-letter or worker row does not exist.
var ErrNotFound = errors.New("not found")

// ErrNoAttempt is returned (wrapped, naming the job) by Complete and Nack
// for a write that names no attempt (attempts < 1): guarded by the worker
// alone, a retried write could settle a later claim of the same row.
var ErrNoAttempt = errors.New("names no attempt (the row's attempts as claimed, at least 1)")

// ErrWorkerNotActive is returned (wrapped) by Heartbeat and Claim when the
// worker row exists but is no longer active: another worker's stale-worker recovery
// stopped it (this worker was silent too long: a frozen VM, a partition) and
// gave its processing rows back to the queue. The worker must register again
// before it claims, and must not write the rows it held without checking.
var ErrWorkerNotActive = errors.New("worker row is no longer active")

// ErrIdentityTaken is returned (wrapped) by RegisterWorker and TakeOver
// when a worker row with another id holds the same (hostname, pid):
// registering would take that row's id and release its jobs. Nothing is
// changed. (Only TakeOver replaces another row, and only a row its caller
// showed to be dead.)
var ErrIdentityTaken = errors.New("another worker row has this hostname and pid")

// ErrWorkerAlive is returned (wrapped) by TakeOver when a row it was asked
// to take over is no longer as its caller observed it (its heartbeat or
// status moved): the worker that owns it is alive. Nothing is changed.
var ErrWorkerAlive = errors.New("the worker row to take over is alive")

// ErrUnreachable is returned (wrapped) when the database server cannot be
// reached at all or is not accepting connections yet (starting up): a
// condition that may pass, unlike a bad URL or a refused login.
var ErrUnreachable = errors.New("database unreachable")

// ErrNoWakeups is returned by Subscribe when the backend is configured to
// poll only (Postgres behind a transaction-mode pooler with no listen URL).
var ErrNoWakeups = errors.New("new-job notifications are off; polling only")

// ErrNoSchema is returned (wrapped) when Soniq's tables do not exist yet.
//
//lint:ignore ST1005 the message starts with a product name and is shown to operators as is
var ErrNoSchema = errors.New("Soniq's tables do not exist in this database: run `soniq-sidecar migrate` (or Soniq's own setup) first")

// Backend is the storage contract. Methods are safe for concurrent use.
// It is split by concern: the jobs (Jobs), cancel requests (Cancels), the
// dead-letter table (DeadLetters), the workers and their maintenance
// (Workers), and the recurring schedules (Schedules), each in the file of
// that name.
type Backend interface {
	// Migrate creates Soniq's tables and indexes if they do not exist, and
	// the sidecar's own soniq_sidecar_cancel_requests (RequestCancel). It is
	// harmless before or after Soniq's own setup and never alters a table
	// Soniq created.
	Migrate(ctx context.Context) error
	// Ping checks that the database is reachable.
	Ping(ctx context.Context) error
	// Close releases every connection.
	Close() error

	Jobs
	Cancels
	DeadLetters
	Workers
	Schedules
	Limits

	// Subscribe delivers a Wakeup for every newly enqueued job (its
	// queue; Postgres: LISTEN soniq_new_job; others: local enqueues) and
	// every cancel requested for a running job (its id; Postgres: LISTEN
	// soniq_sidecar_cancel on the same connection). Delivery is best
	// effort and may coalesce; callers also poll. The channel is closed
	// once ctx is done. ErrNoWakeups means the backend is configured to
	// poll only.
	Subscribe(ctx context.Context) (<-chan Wakeup, error)
}

// Wakeup is one notification Subscribe delivers: exactly one field is set.
type Wakeup struct {
	// Queue is the queue a job was enqueued on.
	Queue string
	// CancelJobID is a running job a cancel was requested for.
	CancelJobID string
}

// PoolStats is a snapshot of a backend's connection pool.
type PoolStats struct {
	Max, InUse int32
	// Waited counts, since the pool opened, acquires that started with
	// every connection the pool may have in use: they waited for one to be
	// released (or gave up).
	Waited int64
	// WaitedFor is the time those acquires spent waiting, summed.
	WaitedFor time.Duration
}

// PoolStater is implemented by backends with a connection pool (Postgres),
// for the pool metric and /readyz.
type PoolStater interface {
	PoolStats() PoolStats
}

// CompleteClaimer is implemented by backends that can write completions
// and claim in one round trip (Postgres: one pipelined batch, one implicit
// transaction). At full load results arrive just as slots free up, so a
// claim usually has completions to carry; a separate write would cost the
// database another statement round and commit for each claim.
type CompleteClaimer interface {
	// CompleteAndClaim is Complete(ctx, workerID, cs) and Claim(ctx, p) in
	// one transaction, p.WorkerID being workerID. err means neither is
	// known to have taken effect (as either call failing would); claimErr
	// is the claim's own refusal (ErrWorkerNotActive, ErrNotFound), with
	// the completions written and applied naming them as Complete does.
	CompleteAndClaim(ctx context.Context, workerID string, cs []Completion, p ClaimParams) (applied []string, jobs []Job, claimErr, err error)
}

// NackStopper is implemented by backends that can write a shutdown's last
// NACKs and the worker's stop mark in one round trip, one transaction: the
// mark is written only with the NACKs. Over a slow link the two as separate
// calls, one after the other, cost the exit a round trip.
type NackStopper interface {
	// NackAndStop is Nack(ctx, workerID, held) followed by
	// SetWorkerStatus(ctx, workerID, WorkerStopped). stopped is false when
	// the worker row is gone (the NACKs are written all the same); err
	// means neither is known to have taken effect.
	NackAndStop(ctx context.Context, workerID string, held []Job) (nacked []string, stopped bool, err error)
}

// ClaimIndexer is implemented by backends that can add the index matching
// the claim order (priority, scheduled_at nulls first, created_at) over
// queued rows. Soniq's schema has none, so without it each claim sorts every
// queued row and its cost grows with the queue's depth. The index is
// additive to Soniq's DDL: `soniq-sidecar migrate` creates it unless told
// not to, and `run` warns when it is missing.
type ClaimIndexer interface {
	// CreateClaimIndex builds the index if it is not there (rebuilding one
	// that an interrupted build left invalid).
	CreateClaimIndex(ctx context.Context) error
	// HasClaimIndex reports whether a valid claim-order index exists.
	HasClaimIndex(ctx context.Context) (bool, error)
}
