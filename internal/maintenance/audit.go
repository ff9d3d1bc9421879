package maintenance

import (
	"context"
	"fmt"
	"time"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// The self-audit: the defence against every bug that could leave a job
// processing under a live worker that is not running it. Such a row is
// never recovered by anyone else (the worker heartbeats, so no
// stale-worker recovery takes it), so it would wait forever. The worker
// periodically reads the rows processing under its id and compares them
// with the jobs it knows it holds; a row it does not know, seen so at two
// reads at least a grace apart and at the same attempt, is an orphan and is
// given back to the queue. Auditor reads, AuditTracker decides; what the
// worker holds, and the give-back, are the engine's.

// AuditReader is what an Auditor reads the rows with.
type AuditReader interface {
	ProcessingJobs(ctx context.Context, workerID string) ([]backends.Job, error)
}

// AuditReading is one read of the rows processing under the worker.
type AuditReading struct {
	Rows []backends.Job
	At   time.Time // when the read started: the rows are no older
	Err  error
}

// AuditConfig is what an Auditor reads with. Every field is required.
type AuditConfig struct {
	Backend  AuditReader
	WorkerID string
	Interval time.Duration
	// Report receives each reading, from the Auditor's goroutine; it must
	// not block (the engine queues it for its loop).
	Report func(AuditReading)
}

// Auditor reads the rows processing under the worker every Interval.
type Auditor struct {
	service
	cfg AuditConfig
}

// NewAuditor prepares an Auditor; nothing runs before Start.
func NewAuditor(cfg AuditConfig) *Auditor { return &Auditor{cfg: cfg} }

// Start reads every interval (the first a whole interval from now: at
// start the engine is still sorting out what it holds) until ctx ends or
// Stop is called.
func (a *Auditor) Start(ctx context.Context) {
	a.start(ctx, func(ctx context.Context) { every(ctx, a.cfg.Interval, false, a.read) })
}

// read is one reading. It is bounded by the interval, so a database that
// hangs delays the next reading instead of stacking them.
func (a *Auditor) read(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, a.cfg.Interval)
	defer cancel()
	at := time.Now()
	rows, err := a.cfg.Backend.ProcessingJobs(rctx, a.cfg.WorkerID)
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		err = fmt.Errorf("self-audit: read the rows processing under worker %s: %w", a.cfg.WorkerID, err)
	}
	a.cfg.Report(AuditReading{Rows: rows, At: at, Err: err})
}

// AuditTracker decides which rows are orphans. Its zero value is ready; it is
// not safe for concurrent use (the engine's loop owns it).
type AuditTracker struct {
	suspects map[string]suspect
}

type suspect struct {
	attempts int
	since    time.Time // the reading that first found it unknown
}

// Observe takes a reading's rows and whether the worker knows each one, and
// returns the orphans: rows unknown at this reading and at an earlier one
// at least grace before it, at the same attempt. A row known, gone, or
// claimed again (another attempt) in between is no suspect any more.
func (t *AuditTracker) Observe(rows []backends.Job, at time.Time, grace time.Duration, known func(id string) bool) []backends.Job {
	next := make(map[string]suspect, len(t.suspects))
	var orphans []backends.Job
	for _, j := range rows {
		if j.Status != backends.StatusProcessing || known(j.ID) {
			continue
		}
		s, ok := t.suspects[j.ID]
		if !ok || s.attempts != j.Attempts {
			next[j.ID] = suspect{attempts: j.Attempts, since: at}
			continue
		}
		if at.Sub(s.since) >= grace {
			orphans = append(orphans, j)
			continue
		}
		next[j.ID] = s
	}
	t.suspects = next
	return orphans
}

// Reset forgets every suspect: what the worker knows changed wholesale (its
// row was registered again, or it took over a predecessor's rows).
func (t *AuditTracker) Reset() { t.suspects = nil }

// Suspects is how many rows are unknown and waiting for their second look.
func (t *AuditTracker) Suspects() int { return len(t.suspects) }
