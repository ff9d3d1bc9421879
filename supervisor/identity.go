package supervisor

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// When the heartbeat finds this sidecar's worker row gone or no longer
// active, another worker has recovered its jobs (it was silent longer than
// heartbeat_timeout: a frozen VM, a partition) or another program took the
// row. The loop stops claiming, registers the row again, and checks which
// of the rows it holds are still its own: those it keeps running and
// writing; the others were requeued (and maybe re-claimed elsewhere), so
// their executions here are abandoned and their results discarded.

// reregistration is a lost worker row being registered again.
type reregistration struct {
	active bool  // no claim until the row is registered again
	cause  error // what the heartbeat found
}

func (l *loop) onWorkerLost(cause error) {
	if l.rereg.active {
		return
	}
	l.rereg.active, l.rereg.cause = true, cause
	held := make([]string, 0, len(l.live))
	for id := range l.live {
		held = append(held, id)
	}
	slices.Sort(held)
	reregister, emit, cut := l.host.reregister, l.emit, l.shut.cut
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		ctx, cancel := context.WithTimeout(cut, writeTimeout)
		defer cancel()
		lost, err := reregister(ctx, held)
		emit(reregisteredEvent{ids: lost, err: err})
	}()
}

// reregister registers the worker row again and returns which of the held
// job ids are no longer processing under this worker.
func (s *Supervisor) reregister(ctx context.Context, held []string) ([]string, error) {
	if err := s.register(ctx); err != nil {
		return nil, err
	}
	// A row whose worker row was deleted (not recovered) is processing with
	// no worker; nobody else can claim it and no recovery would requeue it,
	// and this sidecar still runs it: take it back.
	if adopted, err := s.cfg.Backend.AdoptOrphans(ctx, s.workerID, held); err != nil {
		return nil, fmt.Errorf("taking back the jobs it holds: %w", err)
	} else if len(adopted) > 0 {
		s.log.Info("took back jobs left with no worker when this sidecar's worker row was deleted", "worker_id", s.workerID, "job_ids", adopted)
	}
	// One read of every row still processing under this worker, not one
	// per held job: a reserve may hold hundreds.
	rows, err := s.cfg.Backend.ProcessingJobs(ctx, s.workerID)
	if err != nil {
		return nil, fmt.Errorf("reading the jobs still processing under worker %s: %w", s.workerID, err)
	}
	ours := make(map[string]bool, len(rows))
	for _, j := range rows {
		ours[j.ID] = true
	}
	var lost []string
	for _, id := range held {
		if !ours[id] {
			lost = append(lost, id)
		}
	}
	return lost, nil
}

func (l *loop) onReregistered(ids []string, err error) {
	l.rereg.active = false
	if err != nil {
		l.log.Warn("registering the worker row again failed; claiming stays paused, retrying at the next heartbeat",
			"worker_id", l.host.workerID, "cause", l.rereg.cause.Error(), "err", err)
		return
	}
	for _, id := range ids {
		if t := l.live[id]; t != nil {
			l.abandonLost(t, "worker_lost")
		}
	}
	l.log.Warn("this sidecar's worker row was lost (another worker recovered its jobs after missing its heartbeats: a frozen VM or a network partition?); registered it again before claiming",
		"worker_id", l.host.workerID, "hostname", l.host.hostname(), "cause", l.rereg.cause.Error(),
		"jobs_requeued", ids, "jobs_kept", len(l.live))
	l.claimEverything()
}

// abandonSuperseded gives up an execution whose row was claimed again.
func (l *loop) abandonSuperseded(t *task) {
	l.log.Warn("job claimed again while an earlier execution here still runs (its row was recovered meanwhile); the earlier result will be discarded",
		"job_id", t.job.ID, "job_name", t.job.Name, "queue", t.job.Queue)
	l.abandonLost(t, "reclaimed")
}

// abandonLost forgets a job whose row is no longer this sidecar's to
// write: a pending one is dropped, a running one keeps its process slot
// until it returns, and its result is then discarded. Nothing is written.
func (l *loop) abandonLost(t *task, why string) {
	l.drop(t)
	switch t.state {
	case taskPending:
		l.unqueue(t)
	case taskRunning:
		t.state, t.abandoned = taskAbandoned, why
		l.metrics.jobEnded(t, "lost")
		t.endSpan("lost", "")
	}
}

// register upserts this sidecar's worker row and its task names.
func (s *Supervisor) register(ctx context.Context) error {
	return s.registerWith(ctx, func(w backends.Worker) error { return s.cfg.Backend.RegisterWorker(ctx, w) })
}

// registerWith registers this sidecar's worker row with do, then its task
// names. When another worker row holds the row's (hostname, pid) (a Soniq
// worker given the same hostname, or another live sidecar in the pod with
// the same instance name), the row is registered under a hostname made
// unique by the worker id instead: never taking the other row, never
// stalling.
func (s *Supervisor) registerWith(ctx context.Context, do func(backends.Worker) error) error {
	s.identityMu.Lock()
	defer s.identityMu.Unlock()
	w := s.identity
	err := do(w)
	if errors.Is(err, backends.ErrIdentityTaken) {
		alt := w
		alt.Hostname = w.Hostname + "#" + w.ID[:min(8, len(w.ID))]
		s.log.Warn("another worker row has this sidecar's hostname and pid; registering under a hostname made unique by the worker id (give every sidecar that shares a hostname its own --instance)",
			"worker_id", w.ID, "hostname", w.Hostname, "pid", w.PID, "registered_as", alt.Hostname, "err", err)
		if err = do(alt); err == nil {
			s.identity = alt
		}
	}
	if err != nil {
		return err
	}
	return s.cfg.Backend.RegisterTasks(ctx, w.ID, s.taskNames)
}

func (s *Supervisor) workerHostname() string {
	s.identityMu.Lock()
	defer s.identityMu.Unlock()
	return s.identity.Hostname
}
