package main

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/soniq-dev/soniq-sidecar/internal/proc"
)

// The nemesis plays the schedule: each step is handed, at its offset, to
// the worker of its target (a sidecar, Postgres, PgBouncer), which applies
// the fault and heals it (SIGCONT, restart) before it takes the next one.
// Faults on different targets overlap; faults on one target never do.
// A sidecar's worker also restarts it when it exits on its own, which is a
// problem of the run.

func (c *cluster) runNemesis(ctx context.Context, plan []Step, start time.Time) {
	queues := map[string]chan Step{}
	var wg sync.WaitGroup
	for _, s := range c.sidecars {
		q := make(chan Step, len(plan))
		queues[s.name] = q
		wg.Go(func() { s.serve(ctx, q) })
	}
	for _, s := range c.sidecars {
		q := make(chan Step, len(plan))
		queues[netTarget(s.name)] = q
		wg.Go(func() {
			for st := range q {
				if ctx.Err() == nil {
					s.applyNet(st)
				}
			}
		})
	}
	for _, name := range []string{"postgres", "pgbouncer", "cpu", "cancel"} {
		q := make(chan Step, len(plan))
		queues[name] = q
		wg.Go(func() {
			for st := range q {
				if ctx.Err() == nil {
					c.applyInfra(ctx, st)
				}
			}
		})
	}
	for _, st := range plan {
		select {
		case <-ctx.Done():
		case <-time.After(time.Until(start.Add(st.At))):
			queues[st.Target] <- st
			continue
		}
		break
	}
	<-ctx.Done() // the workers watch their sidecars until the end of the run
	for _, q := range queues {
		close(q)
	}
	wg.Wait()
}

// serve is the worker of one sidecar until its queue is closed.
func (s *sidecar) serve(ctx context.Context, steps <-chan Step) {
	for {
		in := s.current()
		var handlerDone <-chan struct{}
		if s.name == "attach" {
			if p := s.c.handler.current(); p != nil {
				handlerDone = p.Done()
			}
		}
		select {
		case st, ok := <-steps:
			if !ok {
				return
			}
			if ctx.Err() == nil {
				s.apply(ctx, st)
			}
		case <-in.p.Done():
			s.mu.Lock()
			expected := in.expected
			s.mu.Unlock()
			if !expected {
				s.c.rec.problem("sidecar %s pid %d exited on its own with status %d (log %s): %s", s.name, in.PID, in.p.ExitCode(), in.Log, lastLine(proc.Tail(in.Log, 4000)))
			}
			s.restart(ctx)
		case <-handlerDone:
			s.c.rec.problem("the attached handler pid %d exited on its own (log %s)", s.c.handler.current().PID, s.c.handler.current().Log)
			s.restartHandler(ctx)
		case <-ctx.Done():
			return
		}
	}
}

func (s *sidecar) restart(ctx context.Context) {
	if err := s.start(ctx); err != nil && ctx.Err() == nil {
		s.c.rec.problem("sidecar %s could not be started again: %v", s.name, err)
		sleep(ctx, time.Second)
	}
}

func (s *sidecar) restartHandler(ctx context.Context) {
	if err := s.c.handler.start(ctx); err != nil && ctx.Err() == nil {
		s.c.rec.problem("attached handler could not be started again: %v", err)
	}
}

func (s *sidecar) apply(ctx context.Context, st Step) {
	rec := s.c.rec
	in := s.current()
	if in.p.Exited() {
		rec.logf("skipped %s on %s: it is not running", st.Kind, s.name)
		return
	}
	switch st.Kind {
	case faultSidecarKill:
		s.kill("")
		sleep(ctx, st.Dur)
		s.restart(ctx)
	case faultSidecarTerm:
		s.terminate(30*time.Second, true)
		sleep(ctx, st.Dur)
		s.restart(ctx)
	case faultReserveKill:
		s.kill(s.reserveFull(ctx, 5*time.Second))
		sleep(ctx, st.Dur)
		s.restart(ctx)
	case faultReserveDrain:
		s.c.rec.logf("SIGTERM sidecar %s: %s", s.name, s.reserveFull(ctx, 5*time.Second))
		s.terminate(30*time.Second, true)
		sleep(ctx, st.Dur)
		s.restart(ctx)
	case faultSidecarStop:
		at := time.Now()
		if err := in.p.Signal(syscall.SIGSTOP); err != nil {
			rec.logf("skipped %s on %s: %v", st.Kind, s.name, err)
			return
		}
		rec.logf("SIGSTOP sidecar %s pid %d for %s", s.name, in.PID, st.Dur.Round(time.Millisecond))
		// Not cut short by the end of the run: the stop is healed in full.
		time.Sleep(st.Dur)
		_ = syscall.Kill(in.PID, syscall.SIGCONT)
		rec.fault(Fault{At: at, Kind: faultSidecarStop, Target: s.name, PID: in.PID, Dur: time.Since(at)})
	case faultHandlerKill:
		pids := s.handlerPIDs()
		if len(pids) == 0 {
			rec.logf("skipped %s on %s: no handler process", st.Kind, s.name)
			return
		}
		pid := pids[st.Pick%len(pids)]
		detail := fmt.Sprintf("handler %d of %d", st.Pick%len(pids)+1, len(pids))
		if s.name == "attach" {
			detail = "the attached handler; started again after " + st.Dur.Round(time.Millisecond).String()
		}
		rec.fault(Fault{At: time.Now(), Kind: faultHandlerKill, Target: s.name, PID: pid, Detail: detail})
		if s.name != "attach" {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			return
		}
		// The pod's worker container killed: its process group, then the
		// container restarts.
		h := s.c.handler.current()
		_ = syscall.Kill(-h.PID, syscall.SIGKILL)
		h.Wait(10 * time.Second)
		sleep(ctx, st.Dur)
		s.restartHandler(ctx)
	}
}

func (c *cluster) applyInfra(ctx context.Context, st Step) {
	rec := c.rec
	switch st.Kind {
	case faultCPUHog:
		c.hogCPU(ctx, st)
	case faultCancel:
		c.cancelJob(ctx, st)
	case faultDBReadOnly:
		c.readOnlyWindow(ctx, st)
	case faultPGRestart:
		at := time.Now()
		rec.logf("restarting postgres (%s, down %s)", st.Mode, st.Dur.Round(time.Millisecond))
		_, err := c.script(context.WithoutCancel(ctx), "pg.sh", "restart", c.pgDir, st.Mode, fmt.Sprintf("%.3f", st.Dur.Seconds()))
		rec.fault(Fault{At: at, Kind: faultPGRestart, Target: "postgres", Dur: time.Since(at), Detail: st.Mode})
		if err != nil {
			rec.problem("postgres restart failed: %v", err)
		}
	case faultPgBouncerKill:
		pid := c.pgbouncerPID()
		if pid == 0 {
			rec.logf("skipped %s: no pgbouncer pid", st.Kind)
			return
		}
		at := time.Now()
		_ = syscall.Kill(pid, syscall.SIGKILL)
		sleep(ctx, st.Dur)
		_, err := c.script(context.WithoutCancel(ctx), "pgbouncer.sh", "restart", c.pgbDir)
		// Dur is the whole time PgBouncer was away, its restart included.
		rec.fault(Fault{At: at, Kind: faultPgBouncerKill, Target: "pgbouncer", PID: pid, Dur: time.Since(at), Detail: "started again after " + st.Dur.Round(time.Millisecond).String()})
		if err != nil {
			rec.problem("pgbouncer restart failed: %v", err)
		}
	}
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
