package supervisor

// Cancel requests (soniq-sidecar cancel; docs/cancel.md): a running job is
// cancelled by the sidecar that holds it. The command records a request in
// the database and notifies; this sidecar reads its pending requests when a
// notification names a job it holds, and at every poll while it holds any
// (a notification may be missed: polling only, or a lost listen
// connection). What a request does to a job is decided in fate.go
// (userCancelFate); the row's write goes to the writer like every other.

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/protocol"
)

// cancelWakeEvent: a cancel was requested for a running job (the id); the
// loop looks whether it holds it.
type cancelWakeEvent struct{ jobID string }

// cancelsReadEvent: the pending cancel requests of this worker were read.
type cancelsReadEvent struct {
	ids []string
	err error
}

func (cancelWakeEvent) isEvent()  {}
func (cancelsReadEvent) isEvent() {}

// cancelReads is the state of the reads of the pending requests.
type cancelReads struct {
	reading bool // a read is in flight
	again   bool // a notification came during it: read once more after it
	off     bool // the table is missing (Soniq set the database up alone): never read
	failing bool // the last read failed; logged once until one succeeds
}

// onCancelWake: a notification named a job; read the requests if it is
// one this sidecar holds (every sidecar of the fleet hears every cancel).
func (l *loop) onCancelWake(jobID string) {
	if l.live[jobID] == nil {
		return
	}
	if l.cancels.reading {
		// The read in flight may have been taken before this request.
		l.cancels.again = true
		return
	}
	l.readCancels()
}

// readCancels reads this worker's pending cancel requests, unless a read is
// in flight, the table is missing, or nothing is held (no request can
// concern this sidecar then).
func (l *loop) readCancels() {
	if l.cancels.reading || l.cancels.off || len(l.live) == 0 {
		return
	}
	l.cancels.reading, l.cancels.again = true, false
	backend, workerID, emit, cut := l.cfg.Backend, l.host.workerID, l.emit, l.shut.cut
	l.wg.Add(1)
	go func() { // owned by the run's WaitGroup; bounded by writeTimeout and the shutdown's write deadline
		defer l.wg.Done()
		ctx, cancel := context.WithTimeout(cut, writeTimeout)
		defer cancel()
		ids, err := backend.PendingCancels(ctx, workerID)
		emit(cancelsReadEvent{ids: ids, err: err})
	}()
}

// onCancelsRead acts on the pending requests read.
func (l *loop) onCancelsRead(ids []string, err error) {
	l.cancels.reading = false
	switch {
	case errors.Is(err, backends.ErrNoCancelTable):
		l.cancels.off = true
		l.log.Warn("cancel requests are not read: this database has no soniq_sidecar_cancel_requests table; run `soniq-sidecar migrate` to create it (soniq-sidecar cancel then reaches running jobs)",
			"err", err)
		return
	case err != nil:
		if !l.cancels.failing {
			l.log.Warn("reading the cancel requests failed; the next poll reads them again", "err", err)
		}
		l.cancels.failing = true
		return
	}
	l.cancels.failing = false
	for _, id := range ids {
		if t := l.live[id]; t != nil {
			l.cancelOnRequest(t)
		}
	}
	if l.cancels.again {
		l.readCancels()
	}
}

// cancelOnRequest carries out a cancel request for t, a job this sidecar
// holds.
func (l *loop) cancelOnRequest(t *task) {
	j := t.job
	switch userCancelFate(t.state, t.sync()) {
	case cancelUnstarted:
		l.unqueue(t)
		l.log.Info("job cancelled", "job_id", j.ID, "job_name", j.Name, "queue", j.Queue, "state", "pending", "reason", string(protocol.ReasonUser))
		l.metrics.jobCancelled(protocol.ReasonUser)
		l.apply(t, cancelledOutcome(*j))
	case cancelRunning:
		t.state, t.abandoned = taskAbandoned, string(protocol.ReasonUser)
		l.sendCancel(t, protocol.ReasonUser)
		l.log.Info("job cancelled", "job_id", j.ID, "job_name", j.Name, "queue", j.Queue, "state", "running", "reason", string(protocol.ReasonUser),
			"handler", t.pool.h.Name, t.proc.who())
		l.apply(t, cancelledOutcome(*j))
	case refuseSync:
		l.refuseCancel(t)
	}
}

// sendCancel tells the handler of t to cancel it, for reason, and counts
// it (soniq_jobs_cancelled_total).
func (l *loop) sendCancel(t *task, reason protocol.CancelReason) {
	t.proc.send(&protocol.Cancel{ID: t.job.ID, Reason: reason})
	l.metrics.jobCancelled(reason)
}

// refuseCancel answers a request for a running sync job: refused, naming
// its handler. The job runs on.
func (l *loop) refuseCancel(t *task) {
	j, handler := t.job, t.pool.h.Name
	detail := fmt.Sprintf("a sync job cannot be interrupted (job %s, %s, handler %s)", j.ID, j.Name, handler)
	l.log.Info("cancel refused: a sync job cannot be interrupted; it runs on", "job_id", j.ID, "job_name", j.Name, "queue", j.Queue,
		"handler", handler, t.proc.who())
	backend, workerID, log, cut := l.cfg.Backend, l.host.workerID, l.log, l.shut.cut
	l.wg.Add(1)
	go func() { // owned by the run's WaitGroup; bounded by writeTimeout and the shutdown's write deadline
		defer l.wg.Done()
		ctx, cancel := context.WithTimeout(cut, writeTimeout)
		defer cancel()
		if _, err := backend.RefuseCancel(ctx, workerID, j.ID, handler, detail); err != nil {
			log.Warn("answering a cancel request failed; the next poll answers it again", "job_id", j.ID, "err", err)
		}
	}()
}

// jobCancelled counts a job this sidecar cancelled.
func (m *Metrics) jobCancelled(reason protocol.CancelReason) {
	if m == nil {
		return
	}
	m.cancelled.Add(context.Background(), 1, metric.WithAttributes(attribute.String("reason", string(reason))))
}
