package main

import (
	"slices"
	"strings"
	"time"
)

// A cut is a span in which one sidecar could write nothing to its
// database: it was stopped, its connections were black-holed, its path to
// Postgres was down, or the server was read-only. Cuts that overlap or
// touch (a resume too short for a heartbeat to land) are one cut: a stop
// of 4.6 s followed at once by a read-only window of 3.7 s keeps the
// heartbeat from landing for 8.3 s, as one stop of 8.3 s would, and
// another sidecar may recover the rows (seed 101).
type cut struct {
	from, to time.Time
	// startBy is the latest start of an execution the cut may explain. A
	// job may start during a stop, a partition or a read-only window (its
	// row was claimed before, its frame sent before the stop), but one
	// that starts during an outage of its path was claimed through a
	// pooler that answered before the heartbeat did: a claim under a stale
	// worker row, which the cut does not explain.
	startBy time.Time
	kinds   []string
}

// stopResumeMax is the longest gap between two cuts of one sidecar that
// still makes them one: too short for a heartbeat to reach the database
// (the nemesis may SIGSTOP a sidecar again a millisecond after its
// SIGCONT).
const stopResumeMax = 100 * time.Millisecond

func (k cut) span() time.Duration { return k.to.Sub(k.from) }

// reason names the cut in the report: the kind when it is one, "cut" when
// several joined.
func (k cut) reason() string {
	if len(k.kinds) == 1 {
		return k.kinds[0]
	}
	return "cut"
}

func (k cut) String() string {
	return k.from.Format("15:04:05.000") + " for " + k.span().Round(time.Millisecond).String() + " (" + strings.Join(k.kinds, "+") + ")"
}

// cutsOf returns the cuts of the sidecar with pid, in time order.
func (c *checker) cutsOf(pid int) []cut {
	if ks, ok := c.cuts[pid]; ok {
		return ks
	}
	var parts []cut
	add := func(from time.Time, d time.Duration, startBy time.Time, kind string) {
		parts = append(parts, cut{from: from, to: from.Add(d), startBy: startBy, kinds: []string{kind}})
	}
	for _, f := range c.h.Faults {
		switch {
		case f.Kind == faultSidecarStop && f.PID == pid:
			add(f.At, f.Dur, f.At.Add(f.Dur), "stop")
		case f.Kind == faultNetPartition && f.PID == pid:
			add(f.At, f.Dur, f.At.Add(f.Dur), "partition")
		case f.Kind == faultDBReadOnly:
			add(f.At, f.Dur, f.At.Add(f.Dur), "read-only")
		}
	}
	if in := c.incs[pid]; in != nil {
		for _, o := range c.h.Outages {
			if o.Path == in.DBPath {
				add(o.From, o.To.Sub(o.From), o.From, "outage")
			}
		}
	}
	slices.SortFunc(parts, func(a, b cut) int { return a.from.Compare(b.from) })
	var ks []cut
	for _, p := range parts {
		if n := len(ks); n > 0 && !p.from.After(ks[n-1].to.Add(stopResumeMax)) {
			last := &ks[n-1]
			if p.to.After(last.to) {
				last.to = p.to
			}
			if p.startBy.After(last.startBy) {
				last.startBy = p.startBy
			}
			if !slices.Contains(last.kinds, p.kinds[0]) {
				last.kinds = append(last.kinds, p.kinds[0])
			}
			continue
		}
		ks = append(ks, p)
	}
	c.cuts[pid] = ks
	return ks
}

// recoverableCut is the first cut of e's sidecar long enough for another
// sidecar to recover its rows, that began before e's result could have
// been written (writeEnd; zero when e never ended) and that e started
// before, or nil.
func (c *checker) recoverableCut(e Execution, writeEnd time.Time) *cut {
	for _, k := range c.cutsOf(e.SidecarPID) {
		if k.span() >= c.r.recoverableStop() && !e.Start.After(k.startBy.Add(c.r.Slack)) &&
			(writeEnd.IsZero() || !k.from.After(writeEnd)) {
			return &k
		}
	}
	return nil
}
