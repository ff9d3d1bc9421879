package supervisor

// checkOnce ends a `run --once`: nothing claimed is pending or running, no
// result is waiting to be written, and every pool's last claim asked for
// all its job names after the writer's last batch and found none due. A
// pool stuck in a crash loop cannot run anything: its jobs stay queued.
func (l *loop) checkOnce() {
	if !l.cfg.Once || l.shut.state != StateRunning || l.fatal != nil || l.rereg.active || l.claim.inFlight > 0 || l.claim.unknownInFlight || l.claim.reconcile {
		return
	}
	if len(l.live) > 0 || l.writer.Pending() > 0 {
		return
	}
	written := l.writer.Written()
	for _, pl := range l.pools {
		if len(pl.pending) > 0 {
			return
		}
		for _, p := range pl.procs {
			if p != nil && len(p.tasks) > 0 {
				return
			}
		}
		if pl.restart.crashLoop {
			continue
		}
		if !pl.claim.drained || pl.claim.drainedAt != written {
			return
		}
	}
	l.log.Info("run --once: nothing left that is due; stopping")
	l.enterDraining("run --once: nothing left that is due")
}
