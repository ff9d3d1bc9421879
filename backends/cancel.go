package backends

import (
	"context"
	"errors"
	"time"
)

// Cancelling a job (Backend.RequestCancel). A queued job is cancelled at
// once, as Soniq's cancel_job does. A running job belongs to the worker
// that claimed it, and only that worker can stop its handler: the request
// is recorded in the sidecar's own table, soniq_sidecar_cancel_requests
// (Migrate creates it; Soniq's tables are not touched), and a notification
// wakes the holder (Subscribe). A holder that misses the notification finds
// the request with PendingCancels at its next poll. It then either cancels
// the job, writing the row cancelled with a Completion of OutcomeCancelled
// (which acknowledges the request in the same transaction), or refuses
// (RefuseCancel: a sync job, which nothing may interrupt).

// Cancel request statuses (soniq_sidecar_cancel_requests.status).
const (
	// CancelPending: recorded; the holder has not answered yet.
	CancelPending = "pending"
	// CancelAcknowledged: the holder cancelled the job; its row was written
	// cancelled in the same transaction as this status.
	CancelAcknowledged = "acknowledged"
	// CancelRefused: the holder cannot cancel the job (a sync job); the
	// request's Handler and Detail say why. The job runs on.
	CancelRefused = "refused"
)

// CancelOutcome is what RequestCancel did.
type CancelOutcome int

// The outcomes of RequestCancel.
const (
	// CancelledQueued: the job was queued; its row is cancelled now.
	CancelledQueued CancelOutcome = iota + 1
	// CancelRequested: the job is running; a pending request names the
	// worker holding it, and that worker was notified.
	CancelRequested
	// CancelFinished: the job had already finished (done or cancelled);
	// nothing changed.
	CancelFinished
)

func (o CancelOutcome) String() string {
	switch o {
	case CancelledQueued:
		return "cancelled_queued"
	case CancelRequested:
		return "requested"
	case CancelFinished:
		return "finished"
	}
	return "unknown"
}

// CancelResult is RequestCancel's answer: what it did, and the job's row as
// it is after the call.
type CancelResult struct {
	Outcome CancelOutcome
	Job     Job
}

// CancelRequest is one soniq_sidecar_cancel_requests row: at most one per
// job.
type CancelRequest struct {
	JobID string `json:"job_id"`
	// WorkerID is the worker that held the job when the cancel was
	// requested. The request is for the job, whoever holds it when it is
	// read: PendingCancels matches on the job's current worker_id.
	WorkerID *string `json:"worker_id"`
	Status   string  `json:"status"`
	// Handler and Detail are set by RefuseCancel: the manifest handler
	// running the job, and why it cannot be cancelled.
	Handler     *string    `json:"handler"`
	Detail      *string    `json:"detail"`
	RequestedAt time.Time  `json:"requested_at"`
	ResolvedAt  *time.Time `json:"resolved_at"`
}

// CancelRequestTTL is how long a settled request (acknowledged, refused, or
// pending for a job that has since finished or gone) is kept before
// DeleteExpired removes it: long enough for the command that asked to read
// the answer.
const CancelRequestTTL = time.Hour

// ErrNoCancelTable is returned (wrapped) by the cancel-request operations
// when the sidecar's table does not exist: the database was set up by
// Soniq alone.
var ErrNoCancelTable = errors.New("the table soniq_sidecar_cancel_requests does not exist in this database: run `soniq-sidecar migrate` first")

// Cancels is the storage of cancel requests (soniq_sidecar_cancel_requests).
type Cancels interface {
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
}
