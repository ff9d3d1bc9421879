// Package backendtest is the shared contract suite every backend must pass.
// Each backend's own _test.go calls Run with a factory for fresh, migrated,
// empty instances, plus the few raw hooks the suite needs to reach past the
// Backend interface (to age timestamps, or to prove the store itself rejects
// an invalid status).
package backendtest

import (
	"context"
	"testing"
	"time"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// Harness is one fresh backend under test and its raw hooks.
type Harness struct {
	Backend backends.Backend

	// SetRawStatus writes soniq_jobs.status directly, bypassing every check
	// of the Backend implementation, so the suite can prove the store itself
	// rejects 'dead_letter'. It must return the store's error.
	SetRawStatus func(ctx context.Context, jobID, status string) error
	// InsertRawStatus inserts a minimal soniq_jobs row with the given status
	// directly; it must return the store's error.
	InsertRawStatus func(ctx context.Context, status string) error
	// BackdateHeartbeat moves soniq_workers.last_heartbeat back by d.
	BackdateHeartbeat func(ctx context.Context, workerID string, d time.Duration) error
	// BackdateExpiry moves soniq_jobs.expires_at back by d.
	BackdateExpiry func(ctx context.Context, jobID string, d time.Duration) error
	// BackdateCreated moves soniq_jobs.created_at back by d.
	BackdateCreated func(ctx context.Context, jobID string, d time.Duration) error
	// BackdateCancelRequest moves a cancel request's requested_at and
	// resolved_at (when set) back by d.
	BackdateCancelRequest func(ctx context.Context, jobID string, d time.Duration) error
	// BackdateDeadLetter moves soniq_dead_letter_jobs.moved_to_dead_letter_at
	// back by d.
	BackdateDeadLetter func(ctx context.Context, jobID string, d time.Duration) error
	// OrphanJob sets a job's worker_id to NULL, as Postgres's foreign key
	// does when the worker row is deleted.
	OrphanJob func(ctx context.Context, jobID string) error
	// SetRawAttempts writes soniq_jobs.attempts directly, for rows no
	// Backend operation produces (processing at attempts 0, as a
	// hand-written row or another program's claim can leave one).
	SetRawAttempts func(ctx context.Context, jobID string, attempts int) error
	// Migrate, when set, migrates the store the way its operators are told
	// to (Postgres behind a transaction-mode pooler: over a direct
	// connection, since migrations refuse to run through the pooler); nil
	// means Backend.Migrate.
	Migrate func(ctx context.Context) error
	// TaskRegistry reads every soniq_task_registry row, in any order.
	TaskRegistry func(ctx context.Context) ([]TaskRow, error)
	// StallClaim, for a backend whose Claim runs more than one statement,
	// holds back the next Claim's statement that takes rows (the ones
	// before it run) until release is called; stalled returns once a
	// Claim waits there. It lets the suite commit a change between the
	// two, as another connection could at any time. nil when a Claim is
	// one critical section with nothing to interleave (SQLite's write
	// transaction, the memory backend's lock).
	StallClaim func(ctx context.Context) (stalled func() error, release func() error, err error)
	// HoldJob, for a backend whose writes to one row from two connections
	// can interleave, locks the job's row on a connection of its own until
	// release is called; waiting(n) returns once n other statements wait
	// for a lock in this database. It lets the suite start two writes to
	// the row that then run in the order they queued, each re-reading the
	// row the other left. nil when every write is one critical section
	// (SQLite's write transaction, the memory backend's lock).
	HoldJob func(ctx context.Context, jobID string) (waiting func(n int) error, release func() error, err error)
}

// TaskRow is one soniq_task_registry row.
type TaskRow struct {
	TaskName   string
	WorkerID   string
	LastSeenAt time.Time
}

// Factory returns a fresh, migrated, empty backend for one test. It
// registers its own cleanup with t.Cleanup, and is called from parallel
// subtests, so what it shares between calls must be safe for that.
type Factory func(t *testing.T) Harness
