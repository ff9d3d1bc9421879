package backends

import (
	"context"
	"encoding/json"
	"time"
)

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

// DeadLetters is the storage of soniq_dead_letter_jobs rows.
type DeadLetters interface {
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
}
