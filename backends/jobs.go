package backends

import (
	"context"
	"encoding/json"
	"time"
)

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
	// ID is the new row's id, a UUID the caller drew (a handler's child
	// job); "" = the backend draws one. A dedup or unique conflict still
	// returns the queued duplicate, whose id is not ID.
	ID          string
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
	// ran. Limit + Ahead must be > 0. Rows of a limited scope (Limits)
	// are never taken for the reserve.
	Ahead int
	// Limits are the scopes whose caps the claim obeys (limits.go): a row
	// of a name in a scope's Names is taken only into the first Limit,
	// and only while its scope and key are under every cap, counted in
	// the whole database. A scope or key at its cap never holds back the
	// rows of another key or of an unlimited name.
	Limits []ClaimLimit
	// Report, when set, is told what the caps held back.
	Report LimitReport
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
// status='processing' AND worker_id=<worker> AND attempts=Attempts: a
// completion for a row that was NACKed, recovered or claimed again changes
// nothing, even when the same worker claimed it again (a write retried
// after its first try committed and its reply was lost must not settle the
// later attempt).
type Completion struct {
	JobID string
	// Attempts is the row's attempts as the worker claimed it (Job.Attempts
	// of the claimed row): the attempt this write settles. A completion
	// naming none (< 1) is refused with an error: every claimed row has
	// attempts >= 1.
	Attempts  int
	Outcome   Outcome
	Result    json.RawMessage // OutcomeDone; nil leaves result NULL
	ResultTTL time.Duration   // OutcomeDone
	Error     string          // OutcomeRetry, OutcomeDeadLetter: last_error
	Reason    string          // OutcomeDeadLetter: dead_letter_reason; OutcomeSnooze: snooze reason
	Delay     time.Duration   // OutcomeRetry, OutcomeSnooze
	// Children (OutcomeDone only) are jobs the run made: written in the
	// same transaction as the done write and only when its guard matched,
	// each as Enqueue writes it (args_hash, the new-job notification); a
	// child whose dedup_key or unique job conflicts with a queued row, or
	// whose ID is taken, is not written. A completion whose guard fails
	// writes none of them.
	Children []EnqueueParams
}

// Backend is the storage contract. Methods are safe for concurrent use.
// Jobs is the storage of soniq_jobs rows: making them, reading them, and
// the claims and guarded writes of the workers that run them.
type Jobs interface {
	// Enqueue inserts a queued job and wakes subscribers. A dedup_key or
	// unique_job conflict returns the existing queued row instead.
	Enqueue(ctx context.Context, p EnqueueParams) (Job, error)
	// Get returns one job row; ErrNotFound if absent.
	Get(ctx context.Context, id string) (Job, error)
	// Cancel sets status='cancelled' on a queued job; false if it was not
	// queued. It is Soniq's cancel_job; RequestCancel also reaches running
	// jobs.
	Cancel(ctx context.Context, id string) (bool, error)

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
	// worker and the attempt: status='queued', worker_id=NULL,
	// updated_at=now(), scheduled_at=now() for each row of held still
	// processing under workerID at the attempts held says. attempts and
	// last_error are untouched. A late NACK (delayed by a partition, or
	// retried after its first try committed and its reply was lost) on a
	// row claimed again since, by another worker or by this one, changes
	// nothing. Returns the ids nacked, in held's order.
	Nack(ctx context.Context, workerID string, held []Job) (nacked []string, err error)

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
}
