package supervisor

import (
	"context"
	"slices"
	"time"

	"github.com/soniq-dev/soniq-sidecar/internal/maintenance"
)

// The self-audit: every AuditInterval the rows processing under this
// worker are read and compared with what the loop knows it holds. A row it
// does not know at two readings at least half an interval apart (and at
// the same attempt) is an orphan: whatever left it there, nobody else will
// ever take it back while this worker heartbeats, so it is given back to
// the queue. See internal/maintenance (audit.go) for the decision.

// auditEvent carries one reading to the loop.
type auditEvent struct{ reading maintenance.AuditReading }

func (auditEvent) isEvent() {}

// newAudit is the reading service, reporting to the loop.
func (s *Supervisor) newAudit() *maintenance.Auditor {
	return maintenance.NewAuditor(maintenance.AuditConfig{Backend: s.cfg.Backend, WorkerID: s.workerID,
		Interval: s.cfg.Settings.AuditInterval,
		Report:   func(r maintenance.AuditReading) { s.emit(auditEvent{reading: r}) }})
}

// knows reports whether the sidecar holds job id in any way: claimed or
// running (live, which includes jobs attach sessions reported), inherited
// from a dead predecessor and not yet settled, a result being written or
// acknowledged, or still running in an attached handler from an earlier
// session.
func (l *loop) knows(id string) bool {
	if l.live[id] != nil || l.inherited.rows[id] != nil || l.ackWait[id] != nil || l.writer.Holds(id) {
		return true
	}
	for _, pl := range l.pools {
		for _, p := range pl.procs {
			if p == nil {
				continue
			}
			if _, ok := p.attach.foreign[id]; ok { // id → sync: present is what counts
				return true
			}
		}
	}
	return false
}

// onAudit weighs one reading and gives the orphans back.
func (l *loop) onAudit(r maintenance.AuditReading) {
	if r.Err != nil {
		// The heartbeat and the claims report a database in trouble; the
		// next reading tries again.
		l.log.Debug("self-audit reading failed", "err", r.Err)
		return
	}
	if l.rereg.active || l.shut.state == StateStopped || l.claim.reconcile {
		// The rows under this id are being sorted out by the registration,
		// or by the reconciliation of a claim whose reply was lost: that
		// gives its rows back unstarted, where a release here would keep
		// the attempt the claim charged without a run.
		l.audit.Reset()
		return
	}
	orphans := l.audit.Observe(r.Rows, r.At, l.cfg.Settings.AuditInterval/2, l.knows)
	if len(orphans) == 0 {
		return
	}
	backend, workerID, log, metrics := l.cfg.Backend, l.host.workerID, l.log, l.metrics
	interval, wake, cut := l.cfg.Settings.AuditInterval, l.emit, l.shut.cut
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		ctx, cancel := context.WithTimeout(cut, writeTimeout)
		defer cancel()
		released, err := backend.ReleaseJobs(ctx, workerID, orphans)
		if err != nil {
			log.Error("self-audit: giving back jobs this worker held but was not running failed; the next readings try again",
				"worker_id", workerID, "jobs", len(orphans), "err", err)
			return
		}
		for _, j := range orphans {
			if !slices.Contains(released, j.ID) {
				continue // finished or claimed again since the reading
			}
			log.Error("self-audit: released a job this worker held but was not running",
				"job_id", j.ID, "job_name", j.Name, "queue", j.Queue, "attempts", j.Attempts, "worker_id", workerID,
				"claimed_at", j.UpdatedAt.Format(time.RFC3339Nano), "audit_interval", interval)
		}
		metrics.auditReleased(len(released))
		if len(released) > 0 {
			wake(wakeEvent{})
		}
	}()
}
