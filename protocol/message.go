// Package protocol is the handler protocol v1 wire contract: the message types exchanged
// between the sidecar and a handler process, and their NDJSON codec (one JSON object per
// line). docs/protocol.md is the specification; testdata/vectors.json holds the
// conformance vectors that the Go, Python and Node implementations all run.
//
// It is a public package, deliberately outside internal/: the wire contract is
// what a handler written in Go, or a tool that speaks to handlers, imports.
// Its surface is the messages and the codec; it changes only with the protocol.
//
// The package knows nothing of processes or databases. Decode and Decoder validate every
// frame completely, so a message they return is well-formed; whether its type may travel
// in the direction it came from (see Type.FromHandler) is for the caller to check.
package protocol

import "encoding/json"

// Version is the protocol version this package speaks.
const Version = 1

// DefaultMaxFrameBytes is the default frame size limit: 16 MiB, excluding the line's "\n".
const DefaultMaxFrameBytes = 16 << 20

// Type is the value of a frame's "type" field.
type Type string

// The message types.
const (
	TypeHello    Type = "hello"    // handler → sidecar, first frame
	TypeJob      Type = "job"      // sidecar → handler
	TypeResult   Type = "result"   // handler → sidecar
	TypeCancel   Type = "cancel"   // sidecar → handler
	TypePing     Type = "ping"     // sidecar → handler
	TypePong     Type = "pong"     // handler → sidecar
	TypeShutdown Type = "shutdown" // sidecar → handler
	TypeEnqueue  Type = "enqueue"  // handler → sidecar: a child job
	TypeEnqueued Type = "enqueued" // sidecar → handler: an immediate child written or refused
)

// FromHandler reports whether messages of type t travel from the handler to the sidecar
// (hello, result, pong, enqueue). The other types travel from the sidecar to the handler.
func (t Type) FromHandler() bool {
	return t == TypeHello || t == TypeResult || t == TypePong || t == TypeEnqueue
}

// Message is one decoded frame: *Hello, *Job, *Result, *Cancel, *Ping, *Pong, *Shutdown,
// *Enqueue or *Enqueued.
type Message interface {
	Type() Type
}

// Hello is the handler's first frame: the protocol version it chose, what it serves and
// how much at once.
type Hello struct {
	Protocol    int
	SDK         string
	PID         int
	Jobs        []HelloJob
	Concurrency int
	// SyncConcurrency is the number of sync jobs the process runs at once; 0 means the
	// field is absent (on the wire it is ≥ 1 when present).
	SyncConcurrency int
}

// HelloJob is one entry of Hello.Jobs.
type HelloJob struct {
	Name        string
	Cancellable bool
}

// Job hands one job to the handler.
type Job struct {
	ID   string
	Name string
	// Args is the job's arguments, a JSON object. The encoder writes nil as {}.
	Args        json.RawMessage
	Attempt     int
	MaxAttempts int
	Queue       string
	// Deadline is in epoch milliseconds; nil means no deadline.
	Deadline    *int64
	Traceparent *string
	// WorkerID is the soniq_workers id of the sidecar that claimed the job;
	// nil when not sent.
	WorkerID *string
	// ScheduledAt and CreatedAt are the row's scheduled_at and created_at in
	// epoch milliseconds; nil when the column is NULL (or not sent).
	ScheduledAt *int64
	CreatedAt   *int64
}

// Status is a result's outcome.
type Status string

// Result statuses.
const (
	StatusDone      Status = "done"
	StatusFailed    Status = "failed"
	StatusSnooze    Status = "snooze"
	StatusCancelled Status = "cancelled"
)

// Result is the handler's answer for one job. Which of the optional fields count depends
// on Status: Result for done, Error for failed, Seconds and Reason for snooze. The decoder
// leaves the others zero and the encoder does not write them.
type Result struct {
	ID     string
	Status Status
	// Result is the job's return value as JSON (done only); nil means null.
	Result  json.RawMessage
	Error   *ResultError
	Seconds float64
	Reason  *string
}

// ResultError describes a failure.
type ResultError struct {
	Type      string
	Message   string
	Traceback *string
	// Retryable false dead-letters the job at once. On the wire the field defaults to
	// true; the decoder fills that in, so false here always means the handler said false.
	Retryable bool
	// Reason classifies the failure beyond retryable; "" when absent. The only value is
	// ErrorReasonInvalidArguments.
	Reason ErrorReason
}

// ErrorReason classifies a failed result.
type ErrorReason string

// ErrorReasonInvalidArguments: the job's args failed the handler's validation. The
// sidecar dead-letters the job at once with reason invalid_arguments and the message as
// its last_error, as Soniq's worker does for args that fail its model.
const ErrorReasonInvalidArguments ErrorReason = "invalid_arguments"

// CancelReason says why the sidecar cancels a job.
type CancelReason string

// Cancel reasons.
const (
	ReasonJobTimeout      CancelReason = "job_timeout"
	ReasonShutdownTimeout CancelReason = "shutdown_timeout"
	// ReasonUser: someone asked for the job to be cancelled
	// (`soniq-sidecar cancel`); its row ends cancelled, never retried.
	ReasonUser CancelReason = "user"
)

// Cancel asks the handler to cancel a job it holds.
type Cancel struct {
	ID     string
	Reason CancelReason
}

// Ping checks the liveness of the handler's event loop.
type Ping struct{ Seq int64 }

// Pong answers the Ping with the same Seq.
type Pong struct{ Seq int64 }

// Shutdown tells the handler to finish what it holds and exit 0.
type Shutdown struct{}

// Enqueue asks the sidecar to write a child job of Parent, a job the process holds.
// The optional fields are nil when absent (the row then takes Soniq's default).
type Enqueue struct {
	Parent string
	// ID is the child's id, drawn by the handler: a canonical lower-case UUID.
	ID   string
	Name string
	// Args is the child's arguments, a JSON object.
	Args        json.RawMessage
	Queue       *string
	Priority    *int64
	MaxAttempts *int64
	// Delay is in seconds (≥ 0, finite).
	Delay    *float64
	DedupKey *string
	Unique   *bool
	// Immediate true: written at once and answered by an Enqueued; otherwise written
	// with the parent's done result.
	Immediate *bool
}

// FeatureEnqueue is the feature a sidecar announces when it takes Enqueue
// frames (SONIQ_FEATURES, the Session's Features message).
const FeatureEnqueue = "enqueue"

// IsImmediate reports whether the child is to be written at once.
func (e *Enqueue) IsImmediate() bool { return e.Immediate != nil && *e.Immediate }

// EnqueueErrorCode says why an immediate child was refused.
type EnqueueErrorCode string

// The refusal codes of an Enqueued.
const (
	EnqueueInvalid     EnqueueErrorCode = "invalid"     // a name, args or option the sidecar will not write
	EnqueueCap         EnqueueErrorCode = "cap"         // past max_children_per_job
	EnqueueParent      EnqueueErrorCode = "parent"      // the parent is not held by this process
	EnqueueUnavailable EnqueueErrorCode = "unavailable" // the database write failed
)

// EnqueuedError is an Enqueued's refusal.
type EnqueuedError struct {
	Code    EnqueueErrorCode
	Message string
}

// Enqueued answers an immediate Enqueue: JobID names the row that holds the child
// (the child's own id, or a queued duplicate's), or Error says why nothing was written.
type Enqueued struct {
	ID    string
	JobID *string
	Error *EnqueuedError
}

func (*Hello) Type() Type    { return TypeHello }
func (*Job) Type() Type      { return TypeJob }
func (*Result) Type() Type   { return TypeResult }
func (*Cancel) Type() Type   { return TypeCancel }
func (*Ping) Type() Type     { return TypePing }
func (*Pong) Type() Type     { return TypePong }
func (*Shutdown) Type() Type { return TypeShutdown }
func (*Enqueue) Type() Type  { return TypeEnqueue }
func (*Enqueued) Type() Type { return TypeEnqueued }
