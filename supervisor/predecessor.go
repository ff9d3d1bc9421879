package supervisor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// A sidecar's identity is its instance name and its host's name (the
// worker row's metadata), not its pid: a container restart gives pid 1
// again, but a systemd or Compose restart, or a container sharing the
// pod's process namespace, gives another pid. At start the sidecar looks
// for earlier rows of its identity. A dead one is its predecessor and is
// taken over at once: the rows it held become this sidecar's, still
// processing, so no other worker can claim them while attached handlers
// may still run them (the loop keeps those that a handler reports and gives
// the others back; see inherit). A live one is another sidecar given the
// same instance name on this host: a deployment error, reported, never
// taken over.
//
// Dead or alive is told by the heartbeat. A row whose last heartbeat is
// older than heartbeat_timeout, or which a clean exit marked stopped, is
// dead. A fresh one may belong to a sidecar killed a moment ago, or to a
// live twin: it is watched until it has missed two of its beats (the
// interval its metadata declares, plus a second for a slow write). If its
// heartbeat moves meanwhile it is alive; if not it is dead. TakeOver checks
// again, in its transaction, that the row is still as last seen.

// beatWindow is how long a live row's heartbeat can stand still: two of
// its beats plus a second.
func (s *Supervisor) beatWindow(w backends.Worker) time.Duration {
	iv := backends.HeartbeatInterval(w.Metadata)
	if iv <= 0 {
		iv = s.cfg.Settings.HeartbeatInterval
	}
	return 2*iv + time.Second
}

// registerWaitMax bounds how long Run waits for a database that becomes
// unreachable while it registers (a restart, a failover, a pooler's login
// retry): as long as `run` waits for one at start.
const registerWaitMax = time.Minute

// errStoppedBeforeStart: a shutdown request came while Run waited to
// register.
var errStoppedBeforeStart = errors.New("stopped before the worker was registered")

// registerWaiting is registerAtStart, retried with backoff (250 ms
// doubling to 5 s) while the database is unreachable, for at most
// registerWaitMax; a shutdown request ends the wait. Other errors are final.
func (s *Supervisor) registerWaiting(ctx context.Context) ([]backends.Job, error) {
	deadline := time.Now().Add(registerWaitMax)
	delay := 250 * time.Millisecond
	for attempt := 1; ; attempt++ {
		jobs, err := s.registerAtStart(ctx)
		if err == nil || !errors.Is(err, backends.ErrUnreachable) || time.Now().After(deadline) {
			return jobs, err
		}
		s.log.Warn("registering the worker row: the database is unreachable; retrying",
			"worker_id", s.workerID, "attempt", attempt, "retry_in", delay, "err", err)
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-s.shutdown:
			t.Stop()
			return nil, errStoppedBeforeStart
		case <-ctx.Done():
			t.Stop()
			return nil, errStoppedBeforeStart
		}
		delay = min(2*delay, 5*time.Second)
	}
}

// registerAtStart registers the worker row, taking over dead predecessors
// of this identity, and returns the rows it inherited from them.
func (s *Supervisor) registerAtStart(ctx context.Context) ([]backends.Job, error) {
	bg := context.WithoutCancel(ctx)
	rctx, cancel := context.WithTimeout(bg, writeTimeout)
	rows, err := s.cfg.Backend.SameIdentity(rctx, s.identity)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("looking for earlier worker rows of instance %s: %w", s.cfg.Instance, err)
	}
	dead, live, err := s.sortEarlierRows(ctx, rows)
	if err != nil {
		return nil, err
	}
	for {
		rctx, cancel := context.WithTimeout(bg, writeTimeout)
		if len(live) > 0 {
			// Taking over nothing while another live sidecar has this
			// identity: its rows and any dead row's are left to it (or to
			// stale-worker recovery).
			s.reportClash(live)
			err = s.register(rctx)
			cancel()
			return nil, err
		}
		if len(dead) == 0 {
			err = s.register(rctx)
			cancel()
			return nil, err
		}
		var jobs []backends.Job
		err = s.registerWith(rctx, func(w backends.Worker) error {
			var err error
			jobs, err = s.cfg.Backend.TakeOver(rctx, w, dead)
			return err
		})
		cancel()
		if errors.Is(err, backends.ErrWorkerAlive) {
			// A row beat after it was watched: it is alive after all.
			live = append(live, dead...)
			dead = nil
			s.log.Warn("an earlier worker row of this instance moved while it was being taken over; it is alive", "err", err)
			continue
		}
		if err != nil {
			return nil, err
		}
		ids := make([]string, 0, len(dead))
		for _, d := range dead {
			ids = append(ids, d.ID)
		}
		s.log.Info("took over the worker row of this sidecar's dead predecessor (same instance on this host); the jobs it held are kept while an attached handler reports them, and given back otherwise",
			"worker_id", s.workerID, "instance", s.cfg.Instance, "predecessors", ids, "jobs", len(jobs))
		return jobs, nil
	}
}

// sortEarlierRows tells dead rows from live ones, watching the fresh ones
// for at most their beat window. When ctx ends first, the rows still
// undecided are left alone (neither taken over nor reported).
func (s *Supervisor) sortEarlierRows(ctx context.Context, rows []backends.Worker) (dead, live []backends.Worker, err error) {
	var watch []backends.Worker
	var wait time.Duration
	for _, r := range rows {
		window := s.beatWindow(r)
		switch {
		case r.Status == backends.WorkerStopped, r.HeartbeatAge >= s.cfg.Settings.HeartbeatTimeout, r.HeartbeatAge >= window:
			dead = append(dead, r)
		default:
			watch = append(watch, r)
			wait = max(wait, window-r.HeartbeatAge)
		}
	}
	if len(watch) == 0 {
		return dead, nil, nil
	}
	for _, r := range watch {
		s.log.Info("an earlier worker row of this instance on this host was heard from recently; watching its heartbeat to tell a dead predecessor from a live sidecar with the same instance name",
			"instance", s.cfg.Instance, "other_worker_id", r.ID, "other_hostname", r.Hostname, "other_pid", r.PID,
			"heartbeat_age", r.HeartbeatAge.Round(time.Millisecond), "watch", wait.Round(time.Millisecond))
	}
	timer := time.NewTimer(wait)
	select {
	case <-ctx.Done():
		timer.Stop()
		return dead, nil, nil
	case <-timer.C:
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
	again, err := s.cfg.Backend.SameIdentity(rctx, s.identity)
	cancel()
	if err != nil {
		return nil, nil, fmt.Errorf("looking for earlier worker rows of instance %s: %w", s.cfg.Instance, err)
	}
	now := map[string]backends.Worker{}
	for _, r := range again {
		now[r.ID] = r
	}
	for _, r := range watch {
		n, ok := now[r.ID]
		switch {
		case !ok:
			// Gone meanwhile: nothing to take over.
		case !n.LastHeartbeat.Equal(r.LastHeartbeat) || n.Status != r.Status:
			live = append(live, n)
		default:
			dead = append(dead, n)
		}
	}
	return dead, live, nil
}

// reportClash says, once per live row, that another sidecar runs with this
// instance name on this host.
func (s *Supervisor) reportClash(live []backends.Worker) {
	for _, r := range live {
		s.log.Error("another live sidecar on this host has this instance name: its worker row is alive (its heartbeat moves), so it is not this sidecar's predecessor and is never taken over; a restart of either cannot recognise its own predecessor. Give every sidecar that shares a hostname its own --instance (SONIQ_INSTANCE)",
			"instance", s.cfg.Instance, "worker_id", s.workerID, "other_worker_id", r.ID, "other_hostname", r.Hostname, "other_pid", r.PID)
	}
}
