package config

import (
	"strconv"
	"strings"
	"time"
)

// kind is how a setting's text is read.
type kind uint8

const (
	// kindDuration: on a flag or in the manifest a Go duration (90s,
	// 1m30s) or a number of seconds (90, 1.5); in the environment a number
	// of seconds only, the form Soniq's own workers read from the same
	// variables.
	kindDuration kind = iota
	// kindText: a string, spaces around it trimmed.
	kindText
	// kindBool: a flag given alone, or with true or false.
	kindBool
	// kindQueues: a comma-separated list of queue names.
	kindQueues
	// kindInt: a whole number in base 10, in every layer (a YAML integer
	// in the manifest), never negative.
	kindInt
)

// Command is a set of the commands that read a setting or take its flag.
type Command uint8

const (
	// CommandRun is `run`.
	CommandRun Command = 1 << iota
	// CommandData is every command that opens the database without
	// running jobs: migrate, enqueue, status, job, cancel, dead-letter and
	// schedule (the CLI's dataCommand declares their flags).
	CommandData
)

// setting is one setting with its name in every layer that can set it:
// the manifest key under settings:, the environment variable and the
// flag. settingTable is the only place a setting is named: the manifest
// decoder, ResolveSettings, RegisterFlags and Flags.Options all read it.
type setting struct {
	// key is the manifest key under settings: for a setting the manifest
	// can set, else the setting's name in the same style (database_wait).
	key  string
	env  string // "" when no environment variable sets it
	flag string // with its dashes, as errors name it; "" when no flag sets it
	kind kind
	// zeroValid: a duration or number of 0 is allowed (it means "none" or
	// "off").
	zeroValid bool
	// emptyIsValue: an empty flag value is a value (--metrics-addr ""
	// turns the server off), not "not given".
	emptyIsValue bool
	def          time.Duration // a duration's default
	defInt       int           // a number's default
	defText      string        // a text setting's default
	// defHelp is how the flag's help names the default when the value
	// itself does not say it (a default chosen elsewhere, or what 0 means).
	defHelp string
	help    string
	// uses are the commands that read the setting; flagIn those that take
	// its flag.
	uses, flagIn Command

	// Engine settings (the manifest may set them): where each layer keeps
	// the value, a duration's in field, manifest and override, a number's
	// in intField, intManifest and intOverride.
	field       func(*Settings) *time.Duration
	manifest    func(*ManifestSettings) **time.Duration
	override    func(*SettingOverrides) **time.Duration
	intField    func(*Settings) *int
	intManifest func(*ManifestSettings) **int
	intOverride func(*SettingOverrides) **int
	// Command settings: the Options field (*string, *bool or
	// *time.Duration).
	option func(*Options) any
}

// settingTable lists the settings: the engine's in the order of
// docs/manifest.md, then the command line's own.
var settingTable = []setting{
	{key: "shutdown_timeout", env: "SONIQ_SHUTDOWN_TIMEOUT", flag: "--shutdown-timeout", def: 30 * time.Second,
		help:     "after SIGTERM, how long in-flight jobs may drain before async jobs are cancelled and NACKed",
		field:    func(s *Settings) *time.Duration { return &s.ShutdownTimeout },
		manifest: func(m *ManifestSettings) **time.Duration { return &m.ShutdownTimeout },
		override: func(f *SettingOverrides) **time.Duration { return &f.ShutdownTimeout }},
	{key: "shutdown_write_timeout", env: "SONIQ_SHUTDOWN_WRITE_TIMEOUT", flag: "--shutdown-write-timeout", def: 5 * time.Second,
		help:     "from the forced path (or the stop, if sooner), how long the shutdown's NACKs, last results and stop mark may take in all",
		field:    func(s *Settings) *time.Duration { return &s.ShutdownWriteTimeout },
		manifest: func(m *ManifestSettings) **time.Duration { return &m.ShutdownWriteTimeout },
		override: func(f *SettingOverrides) **time.Duration { return &f.ShutdownWriteTimeout }},
	{key: "sync_handler_grace_seconds", env: "SONIQ_SYNC_HANDLER_GRACE_SECONDS", flag: "--sync-handler-grace", zeroValid: true,
		def: 300 * time.Second, defHelp: "the resolved job timeout",
		help:     "extra wait for sync jobs once shutdown_timeout has expired",
		field:    func(s *Settings) *time.Duration { return &s.SyncHandlerGrace },
		manifest: func(m *ManifestSettings) **time.Duration { return &m.SyncHandlerGrace },
		override: func(f *SettingOverrides) **time.Duration { return &f.SyncHandlerGrace }},
	{key: "job_timeout", env: "SONIQ_JOB_TIMEOUT", flag: "--job-timeout", zeroValid: true, def: 300 * time.Second,
		help:     "default timeout of jobs that set none; 0 = no timeout",
		field:    func(s *Settings) *time.Duration { return &s.JobTimeout },
		manifest: func(m *ManifestSettings) **time.Duration { return &m.JobTimeout },
		override: func(f *SettingOverrides) **time.Duration { return &f.JobTimeout }},
	{key: "heartbeat_interval", env: "SONIQ_HEARTBEAT_INTERVAL", flag: "--heartbeat-interval", def: 5 * time.Second,
		help:     "how often the worker row is heartbeated",
		field:    func(s *Settings) *time.Duration { return &s.HeartbeatInterval },
		manifest: func(m *ManifestSettings) **time.Duration { return &m.HeartbeatInterval },
		override: func(f *SettingOverrides) **time.Duration { return &f.HeartbeatInterval }},
	{key: "heartbeat_timeout", env: "SONIQ_HEARTBEAT_TIMEOUT", flag: "--heartbeat-timeout", def: 300 * time.Second,
		help:     "silence after which a worker counts as stale and its jobs are recovered",
		field:    func(s *Settings) *time.Duration { return &s.HeartbeatTimeout },
		manifest: func(m *ManifestSettings) **time.Duration { return &m.HeartbeatTimeout },
		override: func(f *SettingOverrides) **time.Duration { return &f.HeartbeatTimeout }},
	{key: "cleanup_interval", env: "SONIQ_CLEANUP_INTERVAL", flag: "--cleanup-interval", def: 300 * time.Second,
		help:     "how often maintenance runs",
		field:    func(s *Settings) *time.Duration { return &s.CleanupInterval },
		manifest: func(m *ManifestSettings) **time.Duration { return &m.CleanupInterval },
		override: func(f *SettingOverrides) **time.Duration { return &f.CleanupInterval }},
	{key: "audit_interval", env: "SONIQ_AUDIT_INTERVAL", flag: "--audit-interval", def: 60 * time.Second,
		help:     "how often the self-audit compares the rows processing under this worker with the jobs it holds",
		field:    func(s *Settings) *time.Duration { return &s.AuditInterval },
		manifest: func(m *ManifestSettings) **time.Duration { return &m.AuditInterval },
		override: func(f *SettingOverrides) **time.Duration { return &f.AuditInterval }},
	{key: "poll_interval", env: "SONIQ_POLL_INTERVAL", flag: "--poll-interval", def: 5 * time.Second,
		help:     "polling fallback when no new-job notification arrives",
		field:    func(s *Settings) *time.Duration { return &s.PollInterval },
		manifest: func(m *ManifestSettings) **time.Duration { return &m.PollInterval },
		override: func(f *SettingOverrides) **time.Duration { return &f.PollInterval }},
	// 100 ms of work: enough rows per claim at a fast pool's rate, little
	// held back from other sidecars and from new work of a better
	// priority.
	{key: "claim_ahead", env: "SONIQ_CLAIM_AHEAD", flag: "--claim-ahead", zeroValid: true, def: 100 * time.Millisecond,
		help:     "how much work, as time at the pool's measured completion rate, a pool may claim beyond its free slots and hold in reserve; 0 = claim only free slots",
		field:    func(s *Settings) *time.Duration { return &s.ClaimAhead },
		manifest: func(m *ManifestSettings) **time.Duration { return &m.ClaimAhead },
		override: func(f *SettingOverrides) **time.Duration { return &f.ClaimAhead }},
	{key: "claim_ahead_max", env: "SONIQ_CLAIM_AHEAD_MAX", flag: "--claim-ahead-max", kind: kindInt, defInt: 500,
		help:        "the most rows a pool's reserve holds, whatever claim_ahead and the rate allow",
		intField:    func(s *Settings) *int { return &s.ClaimAheadMax },
		intManifest: func(m *ManifestSettings) **int { return &m.ClaimAheadMax },
		intOverride: func(f *SettingOverrides) **int { return &f.ClaimAheadMax }},
	{key: "max_children_per_job", env: "SONIQ_MAX_CHILDREN_PER_JOB", flag: "--max-children-per-job", kind: kindInt, defInt: 1000,
		help:        "the most child jobs one execution of a job may make (ctx.enqueue); past it a child is refused",
		intField:    func(s *Settings) *int { return &s.MaxChildrenPerJob },
		intManifest: func(m *ManifestSettings) **int { return &m.MaxChildrenPerJob },
		intOverride: func(f *SettingOverrides) **int { return &f.MaxChildrenPerJob }},
	{key: "result_ttl", env: "SONIQ_RESULT_TTL", flag: "--result-ttl", zeroValid: true, def: 300 * time.Second,
		help:     "how long done rows are kept; 0 = deleted at completion",
		field:    func(s *Settings) *time.Duration { return &s.ResultTTL },
		manifest: func(m *ManifestSettings) **time.Duration { return &m.ResultTTL },
		override: func(f *SettingOverrides) **time.Duration { return &f.ResultTTL }},
	{key: queuesKey, env: "SONIQ_QUEUES", flag: "--queues", kind: kindQueues, defHelp: "all",
		help: "comma-separated `queues` to claim from"},
	{key: schedulerKey, env: "SONIQ_SCHEDULER", flag: "--scheduler", kind: kindBool, defHelp: "true",
		help: "fire the due recurring schedules of soniq_recurring_jobs (one scheduler of the database leads at a time); --scheduler=false turns it off"},

	{key: "database_url", env: "SONIQ_DATABASE_URL", flag: "--database-url", kind: kindText, defHelp: "sqlite:soniq.db",
		help: "database `URL`", uses: CommandRun | CommandData, flagIn: CommandRun | CommandData,
		option: func(o *Options) any { return &o.DatabaseURL }},
	{key: "database_pooler", env: "SONIQ_DATABASE_POOLER", flag: "--database-pooler", kind: kindText, defHelp: "session",
		help: "how --database-url is reached, a `mode`: session, or transaction when it goes through a transaction-mode pooler such as PgBouncer (see docs/operations.md)",
		uses: CommandRun | CommandData, flagIn: CommandRun,
		option: func(o *Options) any { return &o.DatabasePooler }},
	{key: "database_listen_url", env: "SONIQ_DATABASE_LISTEN_URL", flag: "--listen-url", kind: kindText, defHelp: "none",
		help: "optional postgres:// `URL` for the one LISTEN connection, straight to Postgres or a session-mode pool",
		uses: CommandRun | CommandData, flagIn: CommandRun,
		option: func(o *Options) any { return &o.ListenURL }},
	{key: "manifest", env: "SONIQ_MANIFEST", flag: "--manifest", kind: kindText, defHelp: DefaultManifest + " if it exists",
		help: "manifest `file`", uses: CommandRun, flagIn: CommandRun,
		option: func(o *Options) any { return &o.Manifest }},
	{key: "instance", env: "SONIQ_INSTANCE", flag: "--instance", kind: kindText, defHelp: "soniq-sidecar",
		help: "this sidecar's `name` among programs sharing its hostname and pid, e.g. two sidecars in one pod",
		uses: CommandRun, flagIn: CommandRun,
		option: func(o *Options) any { return &o.Instance }},
	// 60 s: long enough for a database that starts beside the sidecar (a
	// pod, a compose file), short enough that a wrong address fails the
	// deploy.
	{key: "database_wait", env: "SONIQ_DATABASE_WAIT", flag: "--database-wait", zeroValid: true, def: 60 * time.Second,
		help: "how long to retry an unreachable database at start", uses: CommandRun, flagIn: CommandRun,
		option: func(o *Options) any { return &o.DatabaseWait }},
	{key: "metrics_final_scrape_wait", env: "SONIQ_METRICS_FINAL_SCRAPE_WAIT", flag: "--metrics-final-scrape-wait", zeroValid: true, defHelp: "0: off",
		help: "after shutdown NACKs, hold the exit (at most this long) until /metrics has been scraped once more, so Prometheus sees them; only when something has scraped /metrics before",
		uses: CommandRun, flagIn: CommandRun,
		option: func(o *Options) any { return &o.MetricsFinalScrapeWait }},
	{key: "metrics_addr", flag: "--metrics-addr", kind: kindText, emptyIsValue: true, defText: ":9464",
		help: "HTTP `address` for /metrics, /healthz and /readyz (empty disables)", uses: CommandRun, flagIn: CommandRun,
		option: func(o *Options) any { return &o.MetricsAddr }},
	{key: "log_format", flag: "--log-format", kind: kindText, defText: "auto",
		help: "the log `format`: auto (text on a terminal, else JSON), text or json", uses: CommandRun, flagIn: CommandRun,
		option: func(o *Options) any { return &o.LogFormat }},
	{key: "once", flag: "--once", kind: kindBool,
		help: "run the jobs that are due, then stop as on SIGTERM and exit 0 (for cron and CI)", uses: CommandRun, flagIn: CommandRun,
		option: func(o *Options) any { return &o.Once }},
	{key: "dead_letter_unknown", flag: "--dead-letter-unknown", kind: kindBool,
		help: "dead-letter jobs whose name no handler serves (only for a sidecar that owns its queues)", uses: CommandRun, flagIn: CommandRun,
		option: func(o *Options) any { return &o.DeadLetterUnknown }},
}

// queuesKey is the manifest key of the one list-valued setting.
const queuesKey = "queues"

// schedulerKey is the manifest key of the one on/off engine setting.
const schedulerKey = "scheduler"

// DefaultManifest is the manifest `run` reads when none is named and one
// is there.
const DefaultManifest = "manifest.yaml"

// lookupSetting returns the setting of a key.
func lookupSetting(key string) *setting {
	for i := range settingTable {
		if settingTable[i].key == key {
			return &settingTable[i]
		}
	}
	panic("config: no setting " + key)
}

// engine reports whether the setting is one of the engine's (Settings),
// which the manifest may set too.
func (sp *setting) engine() bool { return sp.option == nil }

// usage is the flag's help: what it sets, and where its value comes from
// when the flag is not given.
func (sp *setting) usage() string {
	var b strings.Builder
	b.WriteString(sp.help)
	switch sp.kind {
	case kindDuration:
		b.WriteString("; a `duration` like 90s or 1.5")
	case kindInt:
		b.WriteString("; a whole `number`")
	}
	var from []string
	if sp.env != "" {
		from = append(from, "$"+sp.env)
	}
	if sp.engine() {
		from = append(from, "the manifest's "+sp.key)
	}
	switch {
	case sp.defHelp != "":
		from = append(from, sp.defHelp)
	case sp.kind == kindDuration:
		from = append(from, sp.def.String())
	case sp.kind == kindInt:
		from = append(from, strconv.Itoa(sp.defInt))
	case sp.defText != "":
		from = append(from, sp.defText)
	}
	if len(from) > 0 && (sp.kind != kindBool || sp.engine()) {
		b.WriteString(" (default " + strings.Join(from, ", else ") + ")")
	}
	return b.String()
}
