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
	"encoding/json"
	"errors"
	"fmt"
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

// Job is one soniq_jobs row.
type Job struct {
	ID          string          `json:"id"`
	Name        string          `json:"job_name"`
	Args        json.RawMessage `json:"args"`
	ArgsHash    *string         `json:"args_hash"`
	Status      string          `json:"status"`
	Attempts    int             `json:"attempts"`
	MaxAttempts int             `json:"max_attempts"`
	Queue       string          `json:"queue"`
	Priority    int             `json:"priority"`
	UniqueJob   bool            `json:"unique_job"`
	DedupKey    *string         `json:"dedup_key"`
	ScheduledAt *time.Time      `json:"scheduled_at"`
	ExpiresAt   *time.Time      `json:"expires_at"`
	LastError   *string         `json:"last_error"`
	Result      json.RawMessage `json:"result"` // nil when SQL NULL
	ProducerID  *string         `json:"producer_id"`
	CreatedAt   time.Time       `json:"created_at"`
	UpdatedAt   time.Time       `json:"updated_at"`
	WorkerID    *string         `json:"worker_id"`
}

// DeadLetterJob is one soniq_dead_letter_jobs row. Its ID is the original
// job's id, never remapped.
type DeadLetterJob struct {
	ID                 string          `json:"id"`
	Name               string          `json:"job_name"`
	Args               json.RawMessage `json:"args"`
	Queue              string          `json:"queue"`
	Priority           int             `json:"priority"`
	MaxAttempts        int             `json:"max_attempts"`
	Attempts           int             `json:"attempts"`
	LastError          *string         `json:"last_error"`
	Reason             string          `json:"dead_letter_reason"`
	OriginalCreatedAt  time.Time       `json:"original_created_at"`
	MovedAt            time.Time       `json:"moved_to_dead_letter_at"`
	ResurrectionCount  int             `json:"resurrection_count"`
	LastResurrectionAt *time.Time      `json:"last_resurrection_at"`
	Tags               json.RawMessage `json:"tags"`
	CreatedAt          time.Time       `json:"created_at"`
}

// DeadLetterFilter selects soniq_dead_letter_jobs rows for the bulk
// dead-letter operations. Each set field narrows the selection (they are
// ANDed); the zero value selects every row. Ages are measured by the
// database's clock against moved_to_dead_letter_at.
type DeadLetterFilter struct {
	JobNames []string // job_name is one of these
	Queues   []string // queue is one of these
	// Since keeps rows moved within the last Since (moved_to_dead_letter_at
	// >= now - Since); 0 = no bound.
	Since time.Duration
	// OlderThan keeps rows moved more than OlderThan ago
	// (moved_to_dead_letter_at < now - OlderThan, Soniq's cleanup --days);
	// 0 = no bound.
	OlderThan time.Duration
}

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

// Stats is the queue-stats contract: exactly six keys, in this
// canonical order, Total computed as the sum of the five buckets, DeadLetter
// counted from the dead-letter table. encoding/json emits fields in
// declaration order, so marshalling a Stats yields the canonical order.
type Stats struct {
	Total      int64 `json:"total"`
	Queued     int64 `json:"queued"`
	Processing int64 `json:"processing"`
	Done       int64 `json:"done"`
	DeadLetter int64 `json:"dead_letter"`
	Cancelled  int64 `json:"cancelled"`
}

// Count adds n rows of a status to its bucket ("dead_letter" for the count
// of the dead-letter table) and keeps Total the sum of the five buckets.
// Unknown statuses are ignored: they cannot exist.
func (s *Stats) Count(status string, n int64) {
	switch status {
	case StatusQueued:
		s.Queued += n
	case StatusProcessing:
		s.Processing += n
	case StatusDone:
		s.Done += n
	case StatusCancelled:
		s.Cancelled += n
	case "dead_letter":
		s.DeadLetter += n
	default:
		return
	}
	s.Total = s.Queued + s.Processing + s.Done + s.DeadLetter + s.Cancelled
}

// StatsKeys is the canonical key order of Stats.
var StatsKeys = [...]string{"total", "queued", "processing", "done", "dead_letter", "cancelled"}

// EnqueueParams describes a new job. Zero values take Soniq's defaults
// (queue "default", priority 100, max_attempts 3).
type EnqueueParams struct {
	Name        string
	Args        json.RawMessage // a JSON object; nil means {}
	Queue       string
	Priority    *int
	MaxAttempts *int
	Delay       time.Duration // scheduled_at = now() + Delay when > 0
	DedupKey    string        // "" = none
	UniqueJob   bool          // dedupe on (job_name, args_hash) while queued
	ProducerID  string        // "" = NULL
}

// ClaimParams selects what a worker may claim.
type ClaimParams struct {
	WorkerID string
	// Queues to claim from; empty means every queue (as Soniq's worker does).
	Queues []string
	// Names the worker serves; empty means any name. Claiming only served
	// names is what lets the sidecar share queues with Soniq's own workers.
	Names []string
	// ExcludeNames are never claimed (used with --dead-letter-unknown to
	// claim exactly the names nobody here serves).
	ExcludeNames []string
	// Limit is the maximum number of rows to claim for free slots, taken
	// first in claim order whatever their attempts.
	Limit int
	// Ahead is how many more rows the claim may take, for the caller's
	// reserve of claimed jobs waiting for a slot: the rows that follow the
	// first Limit in claim order, less those on their last attempt
	// (attempts + 1 >= max_attempts), which are skipped and stay queued. A
	// reserved row may be lost with its worker before it runs, and the
	// attempt its claim charged must never dead-letter a job that never
	// ran. Limit + Ahead must be > 0.
	Ahead int
}

// Outcome is the terminal write a Completion asks for.
type Outcome int

// The outcomes of a job execution.
const (
	// OutcomeDone: status='done', result, expires_at = now()+ResultTTL;
	// ResultTTL == 0 deletes the row instead.
	OutcomeDone Outcome = iota + 1
	// OutcomeRetry: status='queued', attempts as claimed, last_error,
	// scheduled_at = now()+Delay (NULL when Delay == 0), worker_id NULL.
	OutcomeRetry
	// OutcomeDeadLetter: in one transaction copy the row to
	// soniq_dead_letter_jobs (Reason, Error, attempts) and delete it.
	OutcomeDeadLetter
	// OutcomeSnooze: status='queued', attempts = attempts-1 (floor 0),
	// scheduled_at = now()+Delay (capped at MaxSnooze),
	// last_error = 'SNOOZE: <Reason>', worker_id NULL.
	OutcomeSnooze
	// OutcomeCancelled: status='cancelled', updated_at; attempts,
	// last_error, result and worker_id untouched; never retried. In the
	// same transaction the job's pending cancel request, if any, becomes
	// acknowledged (see RequestCancel).
	OutcomeCancelled
)

func (o Outcome) String() string {
	switch o {
	case OutcomeDone:
		return "done"
	case OutcomeRetry:
		return "retry"
	case OutcomeDeadLetter:
		return "dead_letter"
	case OutcomeSnooze:
		return "snooze"
	case OutcomeCancelled:
		return "cancelled"
	}
	return "unknown"
}

// Completion is one job's terminal write. Every completion is guarded by
// status='processing' AND worker_id=<worker>: a completion for a row that
// was NACKed, recovered or re-claimed changes nothing.
type Completion struct {
	JobID     string
	Outcome   Outcome
	Result    json.RawMessage // OutcomeDone; nil leaves result NULL
	ResultTTL time.Duration   // OutcomeDone
	Error     string          // OutcomeRetry, OutcomeDeadLetter: last_error
	Reason    string          // OutcomeDeadLetter: dead_letter_reason; OutcomeSnooze: snooze reason
	Delay     time.Duration   // OutcomeRetry, OutcomeSnooze
}

// Backend is the storage contract. Methods are safe for concurrent use.
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

	// Enqueue inserts a queued job and wakes subscribers. A dedup_key or
	// unique_job conflict returns the existing queued row instead.
	Enqueue(ctx context.Context, p EnqueueParams) (Job, error)
	// Get returns one job row; ErrNotFound if absent.
	Get(ctx context.Context, id string) (Job, error)
	// Cancel sets status='cancelled' on a queued job; false if it was not
	// queued. It is Soniq's cancel_job; RequestCancel also reaches running
	// jobs.
	Cancel(ctx context.Context, id string) (bool, error)

	// RequestCancel cancels a job wherever it is, in one transaction: a
	// queued job becomes cancelled at once (CancelledQueued, as Cancel); a
	// processing job gets a pending request naming the worker that holds
	// it (replacing an earlier request for the job), and subscribers are
	// woken with Wakeup.CancelJobID (CancelRequested); a done or cancelled
	// job is left alone (CancelFinished). ErrNotFound when no soniq_jobs
	// row has the id (a dead-lettered job has left the table).
	RequestCancel(ctx context.Context, id string) (CancelResult, error)
	// PendingCancels returns the ids of the jobs processing under
	// workerID that have a pending cancel request, whichever worker held
	// them when it was made. This is the holder's poll.
	PendingCancels(ctx context.Context, workerID string) ([]string, error)
	// RefuseCancel answers a pending request for a job processing under
	// workerID with refused, naming the handler and why (a sync job cannot
	// be interrupted). False when there was no such pending request.
	RefuseCancel(ctx context.Context, workerID, jobID, handler, detail string) (bool, error)
	// GetCancelRequest returns a job's cancel request; ErrNotFound if none.
	GetCancelRequest(ctx context.Context, jobID string) (CancelRequest, error)

	// Claim locks up to p.Limit runnable rows in one statement (priority,
	// scheduled_at nulls first, created_at; SKIP LOCKED), sets them
	// processing, attempts+1, worker_id, updated_at, and returns the full
	// rows as updated. Rows whose attempts now exceed max_attempts are
	// returned like any other; the caller dead-letters them.
	//
	// A claim is proof of life: in the same transaction it requires the
	// worker's row to be active and sets its last_heartbeat to now, so a
	// stale-worker recovery can never requeue rows a live worker has just
	// claimed, and a worker whose row was recovered (it was silent too
	// long) claims nothing until it has registered again. It then returns
	// ErrWorkerNotActive, or ErrNotFound when the row is gone. Whether the
	// worker is active and which rows it takes are decided together: a
	// Claim that returns an error has taken no row, and every row it took
	// is returned, even when the worker row changed meanwhile.
	Claim(ctx context.Context, p ClaimParams) ([]Job, error)
	// Complete applies a batch of guarded terminal writes (one statement
	// per outcome kind, never one round trip per row) and returns the ids
	// whose guard matched.
	Complete(ctx context.Context, workerID string, cs []Completion) (applied []string, err error)
	// Nack is the shutdown contract's nack_job, batched and guarded by the
	// worker: status='queued', worker_id=NULL, updated_at=now(),
	// scheduled_at=now() WHERE id IN ids AND status='processing' AND
	// worker_id=workerID. attempts and last_error are untouched. A late
	// NACK (delayed by a partition) on a row that stale recovery requeued
	// and another worker claimed again changes nothing. Returns the ids
	// that were processing under workerID.
	Nack(ctx context.Context, workerID string, ids []string) (nacked []string, err error)

	// AdoptOrphans sets worker_id = workerID on the rows among ids that are
	// processing with no worker: rows whose worker row was deleted while
	// the worker still ran them (the foreign key's ON DELETE SET NULL). No
	// recovery would ever requeue them; the worker that holds them in
	// memory takes them back. Returns the adopted ids.
	AdoptOrphans(ctx context.Context, workerID string, ids []string) (adopted []string, err error)

	// ProcessingJobs returns the rows processing under workerID, in any
	// order: what a worker's self-audit compares with the jobs it knows it
	// runs.
	ProcessingJobs(ctx context.Context, workerID string) ([]Job, error)
	// ReleaseJobs gives back the rows of held that are still processing
	// under workerID at the attempt held says, with Nack's writes (queued,
	// no worker, scheduled now, attempts and last_error untouched). A row
	// claimed again since (its attempts changed), finished, or held by
	// another worker is left alone. Returns the ids released.
	ReleaseJobs(ctx context.Context, workerID string, held []Job) (released []string, err error)
	// ReturnJobs gives back the rows of held that the worker claimed but
	// never sent to a handler: status='queued', worker_id=NULL, attempts =
	// attempts-1 (floor 0: the claim's charge is refunded, nothing ran),
	// updated_at=now(). scheduled_at and last_error are untouched, so the
	// row keeps its place in the claim order and the next claim takes it
	// ahead of rows queued after it. Guarded as ReleaseJobs is: only a row
	// still processing under workerID at the attempts held says changes, so
	// a second call changes nothing and a row another worker took, a row
	// recovered (and perhaps claimed again, even by this worker id) or a
	// row finished meanwhile is left alone. One statement for the batch;
	// subscribers are woken with the queues of the rows returned. Returns
	// the ids returned, in held's order.
	ReturnJobs(ctx context.Context, workerID string, held []Job) (returned []string, err error)

	// Stats is the queue-stats contract (see Stats).
	Stats(ctx context.Context) (Stats, error)

	// ListDeadLetter returns dead-letter rows, newest move first, at most limit (0 = all).
	ListDeadLetter(ctx context.Context, limit int) ([]DeadLetterJob, error)
	// ReplayDeadLetter enqueues a new job (fresh id, attempts=0, queued)
	// from a dead-letter row and bumps its resurrection_count and
	// last_resurrection_at, as Soniq's dead-letter service does.
	ReplayDeadLetter(ctx context.Context, id string) (newJobID string, err error)
	// PurgeDeadLetter deletes a dead-letter row; ErrNotFound if absent.
	PurgeDeadLetter(ctx context.Context, id string) error
	// CountDeadLetters counts the dead-letter rows f selects.
	CountDeadLetters(ctx context.Context, f DeadLetterFilter) (int64, error)
	// EachDeadLetter calls fn with each dead-letter row f selects, newest
	// move first (ties by id), at most limit rows (0 = all). Rows are read
	// from the database as fn consumes them, never gathered first, so a
	// million-row table exports in bounded memory; an error from fn stops
	// the iteration and is returned as is. fn must not call the backend:
	// the iteration holds one of its connections.
	EachDeadLetter(ctx context.Context, f DeadLetterFilter, limit int, fn func(DeadLetterJob) error) error
	// ReplayDeadLetters replays every row f selects as ReplayDeadLetter
	// replays one, in one transaction, and wakes the replayed queues'
	// subscribers. It returns the number of rows replayed.
	ReplayDeadLetters(ctx context.Context, f DeadLetterFilter) (int64, error)
	// PurgeDeadLetters deletes every row f selects, in one transaction,
	// and returns how many it deleted.
	PurgeDeadLetters(ctx context.Context, f DeadLetterFilter) (int64, error)

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
	// When ok, release must be called to give leadership up.
	TryLeader(ctx context.Context) (release func(), ok bool, err error)
	// Subscribe delivers a Wakeup for every newly enqueued job (its
	// queue; Postgres: LISTEN soniq_new_job; others: local enqueues) and
	// every cancel requested for a running job (its id; Postgres: LISTEN
	// soniq_sidecar_cancel on the same connection). Delivery is best
	// effort and may coalesce; callers also poll. The channel is closed
	// once ctx is done. ErrNoWakeups means the backend is configured to
	// poll only.
	Subscribe(ctx context.Context) (<-chan Wakeup, error)

	// Schedules are the recurring schedules (soniq_recurring_jobs).
	Schedules
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

// Schedule statuses allowed in soniq_recurring_jobs.
const (
	ScheduleActive = "active"
	SchedulePaused = "paused"
)

// Schedule is one soniq_recurring_jobs row. A schedule is keyed by its
// job name, as Soniq's scheduler keys it: one schedule per name. The JSON
// keys are the table's column names.
type Schedule struct {
	ID          string          `json:"id"`
	Name        string          `json:"job_name"`
	Type        string          `json:"schedule_type"`  // interval or cron
	Value       string          `json:"schedule_value"` // seconds, or the cron expression
	Priority    int             `json:"priority"`
	Queue       string          `json:"queue"`
	MaxAttempts int             `json:"max_attempts"`
	Args        json.RawMessage `json:"job_kwargs"`
	Status      string          `json:"status"`
	CreatedAt   *time.Time      `json:"created_at"`
	LastRun     *time.Time      `json:"last_run"`
	NextRun     *time.Time      `json:"next_run"`
	RunCount    int             `json:"run_count"`
	LastJobID   *string         `json:"last_job_id"`
	UpdatedAt   *time.Time      `json:"updated_at"`
}

// ScheduleParams declares a schedule (UpsertSchedule). Zero values take
// Soniq's defaults (queue "default", priority 100, max_attempts 3).
type ScheduleParams struct {
	Name        string
	Type        string // interval or cron
	Value       string
	Args        json.RawMessage // a JSON object; nil means {}
	Queue       string
	Priority    *int
	MaxAttempts *int
	// NextRun is the first run, computed by the caller from now. It is
	// written when the schedule is new, when its timing (type or value)
	// changed, or when the row has none; a re-declared schedule with the
	// same timing keeps the next_run it had, so restarting every sidecar
	// neither postpones nor skips its next run.
	NextRun time.Time
}

// ScheduleFiring is one firing of a due schedule (FireSchedule).
type ScheduleFiring struct {
	ScheduleID string
	// Due is the next_run the caller read: the firing happens only if
	// the row still has it (the compare-and-swap that makes each due run
	// fire once, whichever scheduler gets there first).
	Due time.Time
	// NextRun replaces it.
	NextRun time.Time
	// FiredAt is written to last_run.
	FiredAt time.Time
	// ProducerID is the fired job's producer_id ("" = NULL).
	ProducerID string
}

// Schedules is the storage of recurring schedules (soniq_recurring_jobs).
type Schedules interface {
	// UpsertSchedule declares a schedule by name, as Soniq's
	// scheduler.add does: an existing schedule of that name keeps its id,
	// status, created_at, last_run, run_count and last_job_id, and takes
	// the new timing, args, queue, priority and max_attempts (next_run:
	// see ScheduleParams.NextRun). created reports a new row.
	UpsertSchedule(ctx context.Context, p ScheduleParams) (s Schedule, created bool, err error)
	// ListSchedules returns every schedule, by job name.
	ListSchedules(ctx context.Context) ([]Schedule, error)
	// SetScheduleStatus sets status (active or paused); ErrNotFound when
	// no schedule has that name.
	SetScheduleStatus(ctx context.Context, name, status string) error
	// RemoveSchedule deletes the schedule; ErrNotFound when none has that
	// name.
	RemoveSchedule(ctx context.Context, name string) error
	// DueSchedules returns the active schedules whose next_run is at or
	// before now, or NULL (a row written without one), oldest first. A
	// scheduler passes a time ahead of its clock to learn what falls due
	// before it looks again.
	DueSchedules(ctx context.Context, now time.Time) ([]Schedule, error)
	// InitScheduleNextRun sets next_run on a schedule that has none;
	// false when it has one (or is gone).
	InitScheduleNextRun(ctx context.Context, id string, next time.Time) (bool, error)
	// FireSchedule fires a due schedule in one transaction: if the row is
	// active and its next_run is still f.Due, it moves next_run to
	// f.NextRun, sets last_run, run_count+1 and last_job_id, and enqueues
	// a job with the row's name, args (job_kwargs), queue, priority and
	// max_attempts (waking subscribers as Enqueue does). fired is false,
	// and nothing changed, when the row has moved on (another scheduler
	// fired it), was paused or removed.
	FireSchedule(ctx context.Context, f ScheduleFiring) (job Job, fired bool, err error)
	// ScheduleLeader is the scheduler's leadership: on Postgres Soniq's
	// session advisory lock advisory_key("soniq.scheduler"), so that one
	// scheduler of the database, a sidecar or Soniq's own, evaluates due
	// schedules at a time. Each firing's compare-and-swap keeps the
	// firings exactly-once whatever the lock does.
	ScheduleLeader() ScheduleLeader
}

// ScheduleLeader is a scheduler's hold on the leadership.
type ScheduleLeader interface {
	// Hold takes or keeps the leadership for one tick: true when this
	// scheduler leads. done must be called once the tick's work is over
	// (a leadership that lasts only a transaction ends there; a session
	// lock is kept for the next tick). A lost connection loses the
	// leadership; Hold then tries again.
	Hold(ctx context.Context) (leader bool, done func(), err error)
	// Close gives the leadership up and releases its connection.
	Close()
}

// LocalScheduleLeader is the leadership of a backend without locks
// across processes (SQLite, memory): it always leads. Each firing's write
// transaction is the compare-and-swap that keeps two processes sharing a
// SQLite file from firing one run twice.
type LocalScheduleLeader struct{}

// Hold always leads.
func (LocalScheduleLeader) Hold(ctx context.Context) (bool, func(), error) {
	if err := ctx.Err(); err != nil {
		return false, nil, fmt.Errorf("holding scheduler leadership: %w", err)
	}
	return true, func() {}, nil
}

// Close does nothing.
func (LocalScheduleLeader) Close() {}
