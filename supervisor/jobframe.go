package supervisor

import (
	"time"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/protocol"
)

// The times a job frame may carry: what every SDK's date type holds
// (Python's datetime stops at years 1 and 9999; a JavaScript Date and the
// protocol's ±(2^53−1) int reach further). Postgres stores years up to
// 294276, which only a hand-written row has; such a time is sent as null
// rather than as a frame some handler cannot turn into a date.
var (
	minFrameTime = time.Date(1, time.January, 1, 0, 0, 0, 0, time.UTC)
	maxFrameTime = time.Date(9999, time.December, 31, 23, 59, 59, 999_999_999, time.UTC)
)

// newJobFrame is the job frame for a claimed row: what the handler runs and
// the row's context (who claimed it, when it was created and scheduled).
// workerID is this sidecar's id, used when the row does not name one.
func newJobFrame(j *backends.Job, workerID string) *protocol.Job {
	f := &protocol.Job{ID: j.ID, Name: j.Name, Args: j.Args, Attempt: j.Attempts,
		MaxAttempts: j.MaxAttempts, Queue: j.Queue}
	// The claim wrote this sidecar's id into the row; the row is the truth
	// the handler is told about. The frame shares the row's string.
	if j.WorkerID != nil && *j.WorkerID != "" {
		f.WorkerID = j.WorkerID
	} else if workerID != "" {
		f.WorkerID = &workerID
	}
	if j.ScheduledAt != nil {
		f.ScheduledAt = frameTime(*j.ScheduledAt)
	}
	// A zero CreatedAt is how the backends read a NULL created_at.
	if !j.CreatedAt.IsZero() {
		f.CreatedAt = frameTime(j.CreatedAt)
	}
	return f
}

// frameTime is t in epoch milliseconds (rounded down, as for deadline), or
// nil when t is outside what every SDK can represent.
func frameTime(t time.Time) *int64 {
	if t.Before(minFrameTime) || t.After(maxFrameTime) {
		return nil
	}
	ms := t.UnixMilli()
	return &ms
}
