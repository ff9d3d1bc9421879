package config

import (
	"fmt"
	"time"
)

// Settings are the engine's resolved runtime settings (docs/manifest.md,
// "Settings"): Soniq's defaults, laid under the manifest's settings block,
// the SONIQ_* environment and the flags.
type Settings struct {
	// ShutdownTimeout is how long in-flight jobs may drain after a
	// shutdown request before async jobs are cancelled and NACKed.
	ShutdownTimeout time.Duration
	// ShutdownWriteTimeout bounds the database work of a shutdown: from
	// FORCE_TIMEOUT_PATH (or STOPPED, whichever comes first) the NACKs,
	// the last results and the stop mark get this long in all, whatever
	// the database does; what could not be written is left processing
	// for recovery, attempts preserved.
	ShutdownWriteTimeout time.Duration
	// ClaimAhead is how much work a pool may claim beyond its free slots,
	// as time at its measured completion rate: the reserve holds at most
	// rate × ClaimAhead rows (Little's law), and 0 claims only free slots.
	ClaimAhead time.Duration
	// ClaimAheadMax caps a pool's reserve, in rows; > 0.
	ClaimAheadMax int
	// MaxChildrenPerJob caps the child jobs one execution of a job may
	// make (ctx.enqueue); > 0.
	MaxChildrenPerJob int
	// SyncHandlerGrace is the flat extra wait for sync jobs once
	// ShutdownTimeout has expired. Unless set explicitly (SyncGraceSet) it
	// equals the resolved JobTimeout, as in Soniq; when that is 0 (no job
	// timeout) the grace is 0 too: no extra grace, straight to
	// WAIT_FOR_THREAD, where sync jobs are still never killed.
	SyncHandlerGrace time.Duration
	// JobTimeout is the timeout of jobs whose spec sets none; 0 = none.
	JobTimeout time.Duration
	// HeartbeatInterval is how often the worker row is heartbeated.
	HeartbeatInterval time.Duration
	// HeartbeatTimeout is the silence after which a worker counts as
	// stale and its jobs are recovered.
	HeartbeatTimeout time.Duration
	// CleanupInterval is how often the maintenance pass runs.
	CleanupInterval time.Duration
	// AuditInterval is how often the self-audit reads the rows processing
	// under this worker; a row the sidecar does not hold at two readings
	// is given back to the queue. Negative (only programmatically) turns
	// the audit off.
	AuditInterval time.Duration
	// PollInterval is the polling fallback when no new-job notification
	// arrives.
	PollInterval time.Duration
	// ResultTTL is how long done rows are kept; 0 = deleted by the
	// completion's own statement, as Soniq's worker does.
	ResultTTL time.Duration
	// SyncGraceSet says SyncHandlerGrace was set by a layer, not derived
	// from JobTimeout.
	SyncGraceSet bool
	// Queues restricts claiming to these queues; nil means all queues (the
	// sidecar claims only the job names it serves in any case).
	Queues []string
	// Scheduler runs the recurring-job scheduler: the due schedules of
	// soniq_recurring_jobs are enqueued by whichever scheduler of the
	// database leads. DefaultSettings (and so `run`) turns it on.
	Scheduler bool
}

// SettingOverrides are values that outrank the environment and the
// manifest: the command line's flags, or a program's own. A nil field is
// not given.
type SettingOverrides struct {
	// Queues is a comma-separated list, read like SONIQ_QUEUES.
	Queues *string
	// Scheduler turns the scheduler on or off.
	Scheduler *bool

	ShutdownTimeout      *time.Duration
	ShutdownWriteTimeout *time.Duration
	SyncHandlerGrace     *time.Duration
	JobTimeout           *time.Duration
	HeartbeatInterval    *time.Duration
	HeartbeatTimeout     *time.Duration
	CleanupInterval      *time.Duration
	AuditInterval        *time.Duration
	PollInterval         *time.Duration
	// ClaimAhead is the work a pool may hold in reserve beyond its free
	// slots, as time at its completion rate; 0 = none.
	ClaimAhead *time.Duration
	// ClaimAheadMax caps a pool's reserve, in rows; > 0.
	ClaimAheadMax *int
	ResultTTL     *time.Duration
	// MaxChildrenPerJob caps the child jobs one execution may make; > 0.
	MaxChildrenPerJob *int
}

// Source is the layer a setting's value came from.
type Source string

// The layers, lowest first.
const (
	SourceDefault     Source = "default"
	SourceManifest    Source = "manifest"
	SourceEnvironment Source = "environment"
	SourceFlag        Source = "flag"
)

// SettingError is a bad setting: a value that cannot be read, or one that
// does not fit with another (a heartbeat timeout shorter than two
// heartbeat intervals). It is a configuration error (the command exits
// 2). Resolving reports every one it finds, joined (errors.Join);
// errors.As finds the first.
type SettingError struct {
	// Setting is the setting's manifest key (job_timeout, queues) or, for
	// a setting of the command line's own, its name (database_wait).
	Setting string
	// Source is the layer the value came from.
	Source Source
	// Name is how that layer names the setting: SONIQ_JOB_TIMEOUT,
	// --queues, or the manifest key.
	Name string
	// Value is the value as given.
	Value string
	// Msg says what is wrong.
	Msg string
}

// Error is `name="value": message`.
func (e *SettingError) Error() string {
	return fmt.Sprintf("%s=%q: %s", e.Name, e.Value, e.Msg)
}
