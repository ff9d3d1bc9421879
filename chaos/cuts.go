package main

import (
	"slices"
	"strings"
	"time"
)

// A cut is a span in which one sidecar could write nothing to its
// database, as the faults say: it was stopped, its connections were
// black-holed, the server was read-only or restarting, PgBouncer (its path)
// was restarting, or the harness's probe found its path down.
//
// Stale-worker recovery does not see cuts: it sees a worker whose
// last_heartbeat (set by every heartbeat and every claim that lands) is
// older than heartbeat_timeout. So a rerun is explained by the sidecar
// having been out of the database from its last write that landed to its
// first write after, longer than heartbeat_timeout, with cuts covering
// that span back to back. Cuts are back to back when no write landed
// between them, however far apart the faults' own records put them: a
// probe notices an outage up to a probe round late, a restart's end is not
// the sidecar's reconnect, and after a read-only window ends the next
// heartbeat is up to an interval away (a read-only window, then at once a
// PgBouncer restart or two Postgres restarts: 8 s out, no single cut long
// enough, no heartbeat landing between them).
type cut struct {
	from, to time.Time
	kinds    []string
}

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

// Cut kinds beside the fault kinds' own names.
const (
	cutStop      = "stop"
	cutPartition = "partition"
	cutReadOnly  = "read-only"
	cutPGRestart = "pg-restart"
	cutPgBouncer = "pgbouncer-restart"
	cutOutage    = "outage"
)

// cutsOf returns the cuts of the sidecar with pid, in time order, as the
// faults and the probe recorded them (overlapping ones not joined).
func (c *checker) cutsOf(pid int) []cut {
	if ks, ok := c.cuts[pid]; ok {
		return ks
	}
	in := c.incs[pid]
	var ks []cut
	add := func(from time.Time, d time.Duration, kind string) {
		ks = append(ks, cut{from: from, to: from.Add(d), kinds: []string{kind}})
	}
	for _, f := range c.h.Faults {
		switch {
		case f.Kind == faultSidecarStop && f.PID == pid:
			add(f.At, f.Dur, cutStop)
		case f.Kind == faultNetPartition && f.PID == pid:
			add(f.At, f.Dur, cutPartition)
		case f.Kind == faultDBReadOnly:
			add(f.At, f.Dur, cutReadOnly)
		case f.Kind == faultPGRestart:
			add(f.At, f.Dur, cutPGRestart)
		case f.Kind == faultPgBouncerKill && in != nil && in.DBPath == "pgbouncer":
			add(f.At, f.Dur, cutPgBouncer)
		}
	}
	if in != nil {
		for _, o := range c.h.Outages {
			if o.Path == in.DBPath {
				add(o.From, o.To.Sub(o.From), cutOutage)
			}
		}
	}
	slices.SortFunc(ks, func(a, b cut) int { return a.from.Compare(b.from) })
	c.cuts[pid] = ks
	return ks
}

// beatGap is the longest stretch without a cut that still lets no write
// land: a heartbeat due up to an interval later, the one in flight given up
// to an interval (its own timeout) first, and the clocks' slack.
func (r Rules) beatGap() time.Duration { return 2*r.HeartbeatInterval + r.Slack }

// outsOf returns the spans, between two writes of the sidecar with pid that
// landed (History.Beats), longer than heartbeat_timeout, or from its last
// write to the end of its process, that its cuts explain: covered by cuts back to back, no stretch of the span without a
// cut longer than beatGap. Another sidecar may have recovered the rows it
// held then; in no other span can it have.
func (c *checker) outsOf(pid int) []cut {
	if os, ok := c.outs[pid]; ok {
		return os
	}
	var outs []cut
	beats := c.h.Beats[pid]
	ks := c.cutsOf(pid)
	// The process's end closes its last span: it writes nothing after it,
	// so a span its cuts cover up to its end (stopped, then killed; cut
	// off, then shut down giving up its writes) is long enough whatever
	// its length.
	end := time.Time{}
	if in := c.incs[pid]; in != nil && len(beats) > 0 && in.End.After(beats[len(beats)-1]) {
		end = in.End
		beats = append(slices.Clip(beats), end)
	}
	for i := 1; i < len(beats); i++ {
		a, b := beats[i-1], beats[i]
		if b.Sub(a) <= c.r.HeartbeatTimeout && !b.Equal(end) {
			continue
		}
		cursor, ok := a, true
		var kinds []string
		for _, k := range ks {
			if !k.to.After(a) || !k.from.Before(b) {
				continue
			}
			if k.from.Sub(cursor) > c.r.beatGap() {
				ok = false
				break
			}
			if k.to.After(cursor) {
				cursor = k.to
			}
			if !slices.Contains(kinds, k.kinds[0]) {
				kinds = append(kinds, k.kinds[0])
			}
		}
		if ok && len(kinds) > 0 && b.Sub(cursor) <= c.r.beatGap() {
			outs = append(outs, cut{from: a, to: b, kinds: kinds})
		}
	}
	c.outs[pid] = outs
	return outs
}

// recoverableOut is the first out of e's sidecar that began before e's
// result could have been written (writeEnd; zero when e never ended) and
// ended after e started (the row was held then: its claim landed before
// the out), or nil.
func (c *checker) recoverableOut(e Execution, writeEnd time.Time) *cut {
	for _, k := range c.outsOf(e.SidecarPID) {
		if !e.Start.After(k.to) && (writeEnd.IsZero() || !k.from.After(writeEnd)) {
			return &k
		}
	}
	return nil
}
