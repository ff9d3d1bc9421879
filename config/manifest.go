package config

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"
)

// Transport names how the sidecar talks to a handler's processes
// (docs/protocol.md).
type Transport string

// The two transports of protocol version 1.
const (
	// TransportStdio: NDJSON frames over the child's stdin and stdout.
	TransportStdio Transport = "stdio"
	// TransportUnix: gRPC over a Unix socket, one Session stream per
	// process (go-plugin starts a spawned child; an attached handler serves
	// its own socket).
	TransportUnix Transport = "unix"
)

// Manifest is a loaded, validated manifest with every default filled in:
// the handlers to run, the jobs each serves and their branch (cancellable
// or not), and the optional settings. Paths in it are absolute. Its format
// is docs/manifest.md.
type Manifest struct {
	// Path is the manifest file's absolute path.
	Path string
	// Dir is the manifest's directory, the base of the relative paths in
	// it.
	Dir string
	// Version is the manifest format's version (1).
	Version int
	// Settings is the optional `settings:` block.
	Settings ManifestSettings
	// Handlers are the pools of handler processes, in declaration order.
	Handlers []Handler
	// Schedules are the recurring jobs the optional top-level
	// `schedules:` list declares; `run` declares them in the database at
	// start, as Soniq's @periodic registrations are.
	Schedules []Schedule
	// Limits are the groups of the top-level `limits:` list, caps shared
	// by the jobs that name them; a job's own caps are on its JobSpec.
	Limits []Limit
}

// Schedule is one recurring job of the manifest's `schedules:` list: a job
// name enqueued every interval or on a cron expression. Exactly one of
// Every and Cron is set.
type Schedule struct {
	// Name is the job name enqueued; it also names the schedule.
	Name string
	// Every is an interval schedule's period, whole seconds; 0 for cron.
	Every time.Duration
	// Cron is a five-field cron expression, in UTC; "" for an interval.
	Cron string
	// Args are the job's args, a JSON object; nil means {}.
	Args json.RawMessage
	// Queue, Priority and MaxAttempts are the fired jobs' ("" and nil:
	// Soniq's defaults, queue default, priority 100, 3 attempts).
	Queue       string
	Priority    *int
	MaxAttempts *int
	// Line is where the schedule is declared.
	Line int
}

// ManifestSettings is the manifest's optional `settings:` block. A nil
// field is not given here, so a lower layer (the default) applies;
// resolving the settings lays the environment and the flags over it.
type ManifestSettings struct {
	ShutdownTimeout      *time.Duration // shutdown_timeout
	ShutdownWriteTimeout *time.Duration // shutdown_write_timeout
	SyncHandlerGrace     *time.Duration // sync_handler_grace_seconds
	JobTimeout           *time.Duration // job_timeout
	HeartbeatInterval    *time.Duration // heartbeat_interval
	HeartbeatTimeout     *time.Duration // heartbeat_timeout
	CleanupInterval      *time.Duration // cleanup_interval
	AuditInterval        *time.Duration // audit_interval
	PollInterval         *time.Duration // poll_interval
	// ClaimAhead (claim_ahead) is the work a pool may hold in reserve
	// beyond its free slots, as time at its completion rate; 0 = none.
	ClaimAhead *time.Duration
	// ClaimAheadMax (claim_ahead_max) caps a pool's reserve, in rows.
	ClaimAheadMax *int
	// MaxChildrenPerJob (max_children_per_job) caps the child jobs one
	// execution of a job may make.
	MaxChildrenPerJob *int
	ResultTTL         *time.Duration // result_ttl
	Scheduler         *bool          // scheduler
	// Queues comes from `settings.queues` or the top-level `queues:` (one
	// of the two at most); nil means all queues.
	Queues []string
	// Where maps the key of each setting the block sets to the file:line
	// it is on, so errors found when the layers are combined can point at
	// the manifest. Loading a manifest fills it; it may be nil.
	Where map[string]string
}

// Handler is one pool of long-lived handler processes.
type Handler struct {
	// Name is the handler's name: lower-case letters, digits, '.', '_'
	// and '-'.
	Name string
	// Command is the argv; Command[0] is absolute when the manifest gave a
	// relative path containing a '/', and a bare name (looked up in PATH)
	// otherwise. Empty for an attached handler.
	Command []string
	// Attach lists the Unix socket endpoints (paths or globs, absolute) of
	// handler processes the sidecar attaches to instead of spawning them;
	// each endpoint is one process. Empty for a spawned handler.
	Attach []string
	// Transport is how the sidecar talks to the handler's processes
	// (default stdio; attached handlers use unix).
	Transport Transport
	// Processes is the number of processes of a spawned handler (default
	// 1).
	Processes int
	// Concurrency is the number of jobs one process runs at once (default
	// 8).
	Concurrency int
	// SyncConcurrency is the number of sync (non-cancellable) jobs one
	// process runs at once (default 4).
	SyncConcurrency int
	// Env is the child's whole environment apart from the SONIQ_* protocol
	// variables. Never nil.
	Env map[string]string
	// EnvFrom names variables of the sidecar's own environment passed
	// through to the child when set (Env wins for a name in both).
	EnvFrom []string
	// StartupTimeout is the time a process has to say hello (default 10s).
	StartupTimeout time.Duration
	// MaxJobs recycles a process after about this many jobs; 0 = never.
	MaxJobs int
	// MaxMemoryMB is a soft limit on a process's resident size: above it
	// the process is recycled when idle, never killed while busy; 0 = none.
	MaxMemoryMB int
	// Workdir is the child's working directory (absolute); it defaults to
	// the manifest's directory.
	Workdir string
	// Jobs are the job names the handler serves.
	Jobs []JobSpec
	// Line is where the handler is declared, for later errors such as a
	// hello that disagrees with the manifest.
	Line int
}

// JobSpec is one job name a handler serves.
type JobSpec struct {
	// Name is the job's name, as producers enqueue it.
	Name string
	// Cancellable selects the shutdown contract's branch: true = async
	// (cancelled and NACKed at shutdown_timeout), false = sync (never
	// interrupted).
	Cancellable bool
	// Timeout applies only when TimeoutSet; otherwise the resolved
	// settings' job timeout does (see EffectiveTimeout). 0 = none.
	Timeout    time.Duration
	TimeoutSet bool
	// Retry is when a failed attempt is tried again.
	Retry RetryPolicy
	// Limit is the scope whose caps the job's claims obey: its own
	// `limit:` or the group it names (a copy of the group's); nil = none.
	Limit *Limit
	// Line is where the job is declared.
	Line int
}

// ManifestError is one problem in a manifest, located by file, line and
// field path. Loading a manifest reports every problem it finds, each a
// *ManifestError, joined (errors.Join); errors.As finds the first.
type ManifestError struct {
	// File is the manifest's path as the caller gave it.
	File string
	// Line is 1-based; 0 when unknown (the file cannot be read).
	Line int
	// Field is the field's path, e.g. handlers[0].jobs[1].timeout; empty
	// when the problem is not about one field.
	Field string
	// Msg says what is wrong.
	Msg string
}

// Error is "file:line: field: message".
func (e *ManifestError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteString(":")
		b.WriteString(strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Job returns the handler's spec for a job name, or nil.
func (h *Handler) Job(name string) *JobSpec {
	for i := range h.Jobs {
		if h.Jobs[i].Name == name {
			return &h.Jobs[i]
		}
	}
	return nil
}

// JobNames lists the handler's job names in declaration order.
func (h *Handler) JobNames() []string {
	names := make([]string, len(h.Jobs))
	for i, j := range h.Jobs {
		names[i] = j.Name
	}
	return names
}

// Job finds the handler serving a job name and its spec; both are nil when
// the manifest does not declare it.
func (m *Manifest) Job(name string) (*Handler, *JobSpec) {
	for i := range m.Handlers {
		if j := m.Handlers[i].Job(name); j != nil {
			return &m.Handlers[i], j
		}
	}
	return nil, nil
}

// EffectiveTimeout is the job's own timeout when the manifest sets one, else
// the settings' job timeout. 0 means no timeout.
func (j *JobSpec) EffectiveTimeout(s Settings) time.Duration {
	if j.TimeoutSet {
		return j.Timeout
	}
	return s.JobTimeout
}

// IsGlob reports whether an attach entry is a pattern rather than a path.
func IsGlob(p string) bool { return strings.ContainsAny(p, "*?[") }

// Attached reports whether the sidecar attaches to this handler's
// processes instead of spawning them.
func (h *Handler) Attached() bool { return len(h.Attach) > 0 }
