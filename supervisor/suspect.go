package supervisor

import (
	"cmp"
	"slices"
)

// Crash attribution. A handler process that dies takes every job it holds
// down with it, but usually one job killed it (os._exit, a segfault in a
// native extension, an OOM kill). Charging an attempt to every job in the
// process would dead-letter innocent neighbours of a poison job, so:
//
//   - a job alone in its process when it died is the culprit: the crash
//     counts against it (retry policy, exit status and stderr in last_error);
//   - jobs that shared the dying process are suspects: each re-runs alone in
//     a process (no other job is dispatched there while it runs) with its
//     attempt unchanged, and only a crash of that isolated run counts.
//
// A suspect's row stays `processing` under this worker between the crash
// and its isolated run: nothing is written, so the attempt the neighbour's
// crash would have cost is never charged and no schema change is needed. If
// the sidecar dies meanwhile, stale-worker recovery requeues the row with
// attempts preserved, as for any job in flight.

// settleCrash settles the jobs a process held when it died; cause is the
// last_error of a crash that counts, desc the exit status alone.
func (l *loop) settleCrash(p *process, cause, desc string) {
	pl := p.pool
	isolated := pl.isolated[p]
	delete(pl.isolated, p)
	var running []*task
	for _, t := range p.tasks {
		if t.state == taskRunning { // abandoned: its row was written or NACKed already
			running = append(running, t)
		}
	}
	slices.SortFunc(running, func(a, b *task) int {
		return cmp.Or(a.startedAt.Compare(b.startedAt), cmp.Compare(a.job.ID, b.job.ID))
	})
	if crashCounts(len(p.tasks)) {
		if isolated != nil && p.tasks[isolated.job.ID] == isolated {
			l.log.Warn("suspect convicted: it crashed its process running alone; the crash counts against it",
				"job_id", isolated.job.ID, "job_name", isolated.job.Name, "queue", isolated.job.Queue,
				"handler", pl.h.Name, p.who(), "exit", desc, "attempt", isolated.job.Attempts)
		}
		for _, t := range running {
			l.fail(t, cause, true, "crashed")
		}
		return
	}
	if len(running) == 0 {
		return
	}
	ids := make([]string, len(running))
	for i, t := range running {
		ids[i] = t.job.ID
	}
	l.log.Warn("handler process died holding several jobs: they are suspects, each re-runs alone before a crash counts against it",
		"handler", pl.h.Name, p.who(), "exit", desc, "suspects", len(running), "job_ids", ids)
	for _, t := range running {
		l.suspect(t)
	}
}

// suspect ends t's execution without charging it and queues a fresh task
// for its isolated run, ahead of every job that is not a suspect.
func (l *loop) suspect(t *task) {
	j := t.job
	l.drop(t) // this execution is over; n holds the row from here
	l.metrics.jobEnded(t, "suspected")
	t.endSpan("suspected", "")
	// A new task, so that a timer event of the ended execution still in
	// flight cannot touch the isolated run (onJobTimeout checks live).
	n := &task{job: j, pool: t.pool, spec: t.spec, state: taskPending, suspect: true}
	if l.shut.state >= StateForceTimeoutPath && nackedAtForce(false, n.sync()) {
		l.nack(n, "shutdown_timeout")
		return
	}
	l.hold(n)
	l.queueSuspect(n)
}

// pickEmpty returns the first ready process (by slot) that holds no job at
// all, not even an abandoned one that still runs: a suspect's isolated run
// must be the only code running there. nil when none is.
func (pl *pool) pickEmpty(sync bool) *process {
	for _, p := range pl.procs {
		if p != nil && p.state == procReady && len(p.tasks) == 0 && pl.isolated[p] == nil && (!sync || p.syncFree() > 0) {
			return p
		}
	}
	return nil
}

// isolate reserves p for the suspect t: pick skips p until t leaves it.
func (l *loop) isolate(t *task, p *process) {
	if t.pool.isolated == nil {
		t.pool.isolated = map[*process]*task{}
	}
	t.pool.isolated[p] = t
	l.log.Info("suspect re-running alone in a process", "job_id", t.job.ID, "job_name", t.job.Name, "queue", t.job.Queue,
		"handler", p.pool.h.Name, p.who(), "attempt", t.job.Attempts)
}

// releaseIsolated frees the processes whose suspect has returned (its
// result arrived, late or not): it ran alone without crashing its process.
func (l *loop) releaseIsolated(pl *pool) {
	for p, t := range pl.isolated {
		if p.tasks[t.job.ID] == t {
			continue
		}
		delete(pl.isolated, p)
		l.log.Info("suspect cleared: it ran alone without crashing its process", "job_id", t.job.ID, "job_name", t.job.Name,
			"queue", t.job.Queue, "handler", pl.h.Name, p.who(), "attempt", t.job.Attempts)
	}
}
