package main

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// The checker: every rule over the whole history of a run. It is a pure
// function of the History, so its rules are tested on made-up histories
// (check_test.go).

// Rules are the checker's parameters, from the run's settings.
type Rules struct {
	HeartbeatInterval time.Duration
	HeartbeatTimeout  time.Duration
	// WriteWindow: how long after an execution ended its result may still be
	// unwritten in its sidecar (the writer's batching, a database restart),
	// so that killing the sidecar then loses it.
	WriteWindow time.Duration
	// Slack: noise between the handlers' clock readings and the driver's.
	Slack time.Duration
	// JobBound: the longest a job may take from its enqueue to its end.
	JobBound time.Duration
	// RSS: samples of the first RSSWarmup of a sidecar process are left out;
	// a process sampled over at least RSSMinSpan after that must not grow
	// from its first quarter to its last by more than RSSGrowthPct percent
	// and RSSGrowthKB together; no sample may exceed RSSMaxKB.
	RSSWarmup    time.Duration
	RSSMinSpan   time.Duration
	RSSGrowthPct int
	RSSGrowthKB  int
	RSSMaxKB     int
	// LimitCaps: the concurrency cap of each limited scope, per key.
	LimitCaps map[string]int
}

// Violation rules.
const (
	ruleLost            = "lost"             // enqueued, and no row at the end
	ruleUnfinished      = "unfinished"       // still queued or processing after the drain
	ruleWrongEnd        = "wrong-end"        // a good job dead-lettered, a failing one done
	ruleDoneUnexecuted  = "done-unexecuted"  // done, and no execution ended ok
	ruleSlow            = "slow"             // took longer than JobBound
	ruleDuplicate       = "duplicate"        // ran again with nothing to explain it
	ruleInterrupted     = "interrupted"      // an execution that never ended, with no SIGKILL to explain it
	ruleSyncInterrupted = "sync-interrupted" // a non-cancellable execution cancelled, or ended by anything but SIGKILL
	rulePanic           = "panic"            // a panic, a fatal error or a line reporting a sidecar bug in a sidecar's log
	ruleNackNoShutdown  = "nack-no-shutdown" // a sidecar NACKed without having been asked to stop
	ruleSidecar         = "sidecar"          // a sidecar misbehaved at start or stop (Problems)
	ruleRSS             = "rss"              // a sidecar's memory grew or exceeded the ceiling
	ruleOrphaned        = "orphaned"         // a row left processing under a live worker, which its self-audit gave back
	ruleChargedUnrun    = "charged-unrun"    // dead-lettered with more attempts charged than runs and crashes explain
	ruleLimit           = "limit"            // more rows of a scope and key processing than its concurrency cap
)

// Violation is one broken rule.
type Violation struct {
	Rule  string
	JobID string // "" for rules about a process
	Text  string
}

// Report is the checker's verdict.
type Report struct {
	Jobs, Executions int
	Faults           map[string]int // by kind
	Reruns           map[string]int // re-executions by what explains them
	Interrupted      int            // executions that never ended (all explained by a SIGKILL, or violations)
	DeadLettered     int
	MaxLatency       time.Duration
	MaxRSSKB         int
	RSSJudged        int // sidecar processes sampled long enough for the growth rule
	LimitSamples     int // counts of a limited scope's processing rows by key
	MaxLimited       int // the most rows of one scope and key processing in a sample
	Violations       []Violation
}

type checker struct {
	h       *History
	r       Rules
	incs    map[int]*Incarnation // by pid
	cuts    map[int][]cut        // by sidecar pid, filled by cutsOf
	outs    map[int][]cut        // by sidecar pid, filled by outsOf
	rep     *Report
	execs   map[string][]Execution // by job, in start order
	cancels map[string][]Cancel    // the cancel fault's commands, by job
}

// Check applies every rule to the history.
func Check(h *History, r Rules) *Report {
	c := &checker{h: h, r: r, incs: map[int]*Incarnation{}, cuts: map[int][]cut{}, outs: map[int][]cut{}, execs: map[string][]Execution{},
		rep: &Report{Jobs: len(h.Jobs), Executions: len(h.Executions), Faults: map[string]int{}, Reruns: map[string]int{}}}
	for i := range h.Incarnations {
		c.incs[h.Incarnations[i].PID] = &h.Incarnations[i]
	}
	for _, e := range h.Executions {
		c.execs[e.JobID] = append(c.execs[e.JobID], e)
	}
	c.cancels = map[string][]Cancel{}
	for _, x := range h.Cancels {
		c.cancels[x.JobID] = append(c.cancels[x.JobID], x)
	}
	// In claim order: every claim of a row adds one to its attempts, so a
	// job's executions are ordered by attempt (the runs of one claim, a
	// suspect's isolated re-run, by start). Start order alone would put a
	// stale execution (claimed before its sidecar froze, its frame
	// delivered after the resume) after the run that replaced it.
	for _, es := range c.execs {
		sort.SliceStable(es, func(i, j int) bool {
			if es[i].Attempt != es[j].Attempt {
				return es[i].Attempt < es[j].Attempt
			}
			return es[i].Start.Before(es[j].Start)
		})
	}
	for _, f := range h.Faults {
		c.rep.Faults[f.Kind]++
	}
	for _, j := range h.Jobs {
		c.job(j)
	}
	c.executionsOfUnknownJobs()
	c.processes()
	c.rss()
	c.limits()
	return c.rep
}

func (c *checker) violate(rule, jobID, format string, args ...any) {
	c.rep.Violations = append(c.rep.Violations, Violation{Rule: rule, JobID: jobID, Text: fmt.Sprintf(format, args...)})
}

func (c *checker) job(j Job) {
	es := c.execs[j.ID]
	switch j.Status {
	case "missing":
		c.violate(ruleLost, j.ID, "%s enqueued at %s: no row in soniq_jobs nor in soniq_dead_letter_jobs", j.Name, clock(j.Enqueued))
	case "queued", "processing":
		c.violate(ruleUnfinished, j.ID, "%s still %s after the drain (attempts %d/%d)", j.Name, j.Status, j.Attempts, j.MaxAttempts)
	case "done":
		if designedToFail(j.Name) {
			c.violate(ruleWrongEnd, j.ID, "%s always fails, yet its row is done", j.Name)
		}
		ok := false
		for _, e := range es {
			ok = ok || e.Outcome == "ok"
		}
		if !ok {
			c.violate(ruleDoneUnexecuted, j.ID, "%s is done, but none of its %d executions ended ok", j.Name, len(es))
		}
	case "dead_letter":
		c.rep.DeadLettered++
		if !designedToFail(j.Name) {
			c.violate(ruleWrongEnd, j.ID, "%s dead-lettered (%s, attempts %d/%d): %s", j.Name, j.Reason, j.Attempts, j.MaxAttempts, firstLine(j.LastError))
		} else if j.Reason != "max_retries_exceeded" {
			c.violate(ruleWrongEnd, j.ID, "%s dead-lettered with reason %s, want max_retries_exceeded: %s", j.Name, j.Reason, firstLine(j.LastError))
		} else if unrun, crashes := min(j.Attempts, j.MaxAttempts)-len(es), c.chargingFaults(j); unrun > crashes {
			// An attempt is charged at claim. A row that never ran keeps
			// the charge only when its sidecar died or stopped holding it
			// (recovery requeues with attempts kept) or NACKed it at a
			// shutdown: a claim ahead that is given back is refunded, and a
			// row on its last attempt is never claimed ahead. A charge past
			// max_attempts is the claim that found the attempts spent and
			// dead-lettered the row unrun, as Soniq's worker does: it
			// charges nothing a run could have used (seed 103).
			c.violate(ruleChargedUnrun, j.ID, "%s dead-lettered at attempts %d/%d after %d runs: %d attempts charged without a run, and only %d sidecar kills, shutdowns or cuts from the database long enough for recovery during its life to explain them",
				j.Name, j.Attempts, j.MaxAttempts, len(es), unrun, crashes)
		}
	case "cancelled": // cancelRule
	default:
		c.violate(ruleWrongEnd, j.ID, "%s ended %s", j.Name, j.Status)
	}
	c.cancelRule(j, es)
	if !j.Finished.IsZero() && !j.Enqueued.IsZero() {
		took := j.Finished.Sub(j.Enqueued)
		c.rep.MaxLatency = max(c.rep.MaxLatency, took)
		if took > c.r.JobBound {
			c.violate(ruleSlow, j.ID, "%s took %s from enqueue to %s (bound %s)", j.Name, took.Round(time.Millisecond), j.Status, c.r.JobBound)
		}
	}
	for k, e := range es {
		c.execution(j, e)
		if k == 0 {
			continue
		}
		prev := es[k-1]
		if why := c.explain(prev); why != "" {
			c.rep.Reruns[why]++
			continue
		}
		c.violate(ruleDuplicate, j.ID, "%s ran again: execution %d %s follows execution %d %s, which nothing explains (no failure, cancel, NACK, kill of its process or sidecar, nor a cut from the database long enough for recovery: a stop, partition, outage or read-only window, alone or back to back)",
			j.Name, k+1, e.describe(), k, prev.describe())
	}
}

// execution: an execution that never ended must have been SIGKILLed; a
// non-cancellable one is never cancelled.
func (c *checker) execution(j Job, e Execution) {
	if nonCancellable(j.Name) && e.Outcome == "cancelled" {
		c.violate(ruleSyncInterrupted, j.ID, "%s is not cancellable, yet execution %s was cancelled", j.Name, e.describe())
	}
	if e.Outcome != "" {
		return
	}
	c.rep.Interrupted++
	if c.killed(e) != "" {
		return
	}
	rule := ruleInterrupted
	if nonCancellable(j.Name) {
		rule = ruleSyncInterrupted
	}
	c.violate(rule, j.ID, "%s: execution %s never ended, and no SIGKILL of its process (or of the sidecar that spawned it) explains it", j.Name, e.describe())
}

// killed names the SIGKILL that ended e (its handler process, or the sidecar
// that spawned it: the parent-death signal kills its handlers), or "".
func (c *checker) killed(e Execution) string {
	for _, f := range c.h.Faults {
		if f.At.Before(e.Start.Add(-c.r.Slack)) || (!e.End.IsZero() && f.At.After(e.End.Add(c.r.Slack))) {
			continue
		}
		switch {
		case f.Kind == faultHandlerKill && f.PID == e.PID:
			return faultHandlerKill
		case f.Kind == faultSidecarKill && f.PID == e.SidecarPID && e.PPID == e.SidecarPID:
			return faultSidecarKill
		}
	}
	return ""
}

// chargingFaults counts the faults during j's life that may charge one of
// its attempts without a run: a sidecar SIGKILLed or SIGTERMed (a NACK of a
// claimed row keeps its attempt), and a sidecar out of the database long
// enough for recovery (outsOf: stops, partitions, outages of its path,
// restarts, read-only windows, alone or back to back). Which sidecar held
// the row unrun is not known, so every sidecar's outs count; outs that
// overlap (a read-only window that cut several sidecars) count once.
func (c *checker) chargingFaults(j Job) int {
	from, to := j.Enqueued.Add(-c.r.Slack), j.Finished.Add(c.r.Slack)
	n := 0
	for _, f := range c.h.Faults {
		if f.At.Before(from) || f.At.After(to) {
			continue
		}
		if f.Kind == faultSidecarKill || f.Kind == faultSidecarTerm {
			n++
		}
	}
	var outs []cut
	for _, in := range c.h.Incarnations {
		for _, k := range c.outsOf(in.PID) {
			if !k.to.Before(from) && !k.from.After(to) {
				outs = append(outs, k)
			}
		}
	}
	slices.SortFunc(outs, func(a, b cut) int { return a.from.Compare(b.from) })
	var end time.Time
	for _, k := range outs {
		if k.from.After(end) {
			n++
		}
		if k.to.After(end) {
			end = k.to
		}
	}
	return n
}

// explain says why the execution after e may exist: e failed, was
// cancelled or NACKed, its process or sidecar was killed while it ran or
// before its result was written, or its sidecar was stopped or cut from the
// database long enough for another one to recover its rows. "" when
// nothing does.
func (c *checker) explain(e Execution) string {
	switch e.Outcome {
	case "fail":
		return "retry"
	case "cancelled":
		return "cancelled"
	}
	if in := c.incs[e.SidecarPID]; in != nil && in.Nacks[e.JobID] && !in.TermAt.IsZero() {
		return "nack"
	}
	if k := c.killed(e); k != "" {
		return k
	}
	writeEnd := time.Time{} // the latest its result may still have been unwritten
	if !e.End.IsZero() {
		writeEnd = e.End.Add(c.r.WriteWindow)
	}
	for _, f := range c.h.Faults {
		if f.PID != e.SidecarPID || (!writeEnd.IsZero() && f.At.After(writeEnd)) {
			continue
		}
		// An attached handler outlives its sidecar: the result has no
		// session to go to, the row is recovered and runs again.
		if f.Kind == faultSidecarKill && !f.At.Before(e.Start.Add(-c.r.Slack)) {
			return faultSidecarKill
		}
	}
	// Out of the database long enough for its heartbeat to go stale while
	// the job ran or its result waited (stopped, black-holed, its path
	// down, the server read-only or restarting, or several of these back
	// to back): another sidecar may have recovered the row.
	if k := c.recoverableOut(e, writeEnd); k != nil {
		return k.reason()
	}
	return ""
}

// executionsOfUnknownJobs: an execution of a job the producer never
// enqueued would be a corrupted history.
func (c *checker) executionsOfUnknownJobs() {
	known := map[string]bool{}
	for _, j := range c.h.Jobs {
		known[j.ID] = true
	}
	for id, es := range c.execs {
		if !known[id] {
			c.violate(ruleLost, id, "%d executions of a job the producer did not enqueue (first %s)", len(es), es[0].describe())
		}
	}
}

// processes: panics, NACKs without a shutdown, the harness's own findings.
func (c *checker) processes() {
	for _, in := range c.h.Incarnations {
		for _, p := range in.Panics {
			c.violate(rulePanic, "", "sidecar %s pid %d: %s (log %s)", in.Sidecar, in.PID, p, in.Log)
		}
		// The audit saved the job, but something left it there: a defect
		// to find, not a pass.
		for _, id := range in.Orphans {
			c.violate(ruleOrphaned, id, "sidecar %s pid %d held it processing without running it; its self-audit gave it back (log %s)", in.Sidecar, in.PID, in.Log)
		}
		if len(in.Nacks) > 0 && in.TermAt.IsZero() {
			ids := make([]string, 0, len(in.Nacks))
			for id := range in.Nacks {
				ids = append(ids, id)
			}
			sort.Strings(ids)
			c.violate(ruleNackNoShutdown, "", "sidecar %s pid %d NACKed %d jobs but was never asked to stop: %s", in.Sidecar, in.PID, len(ids), strings.Join(ids, " "))
		}
	}
	for _, p := range c.h.Problems {
		c.violate(ruleSidecar, "", "%s", p)
	}
}

// rss: per sidecar process, the ceiling and the growth from its first
// quarter of samples (after the warm-up) to its last.
func (c *checker) rss() {
	byPID := map[int][]RSSSample{}
	var pids []int
	for _, s := range c.h.RSS {
		if _, ok := byPID[s.PID]; !ok {
			pids = append(pids, s.PID)
		}
		byPID[s.PID] = append(byPID[s.PID], s)
		c.rep.MaxRSSKB = max(c.rep.MaxRSSKB, s.KB)
	}
	for _, pid := range pids {
		ss := byPID[pid]
		for _, s := range ss {
			if s.KB > c.r.RSSMaxKB {
				c.violate(ruleRSS, "", "sidecar %s pid %d: VmRSS %d kB at %s, above the ceiling of %d kB", s.Sidecar, pid, s.KB, clock(s.At), c.r.RSSMaxKB)
				break
			}
		}
		var warm []RSSSample
		for _, s := range ss {
			if s.At.Sub(ss[0].At) >= c.r.RSSWarmup {
				warm = append(warm, s)
			}
		}
		if len(warm) < 8 || warm[len(warm)-1].At.Sub(warm[0].At) < c.r.RSSMinSpan {
			continue
		}
		c.rep.RSSJudged++
		q := len(warm) / 4
		first, last := medianKB(warm[:q]), medianKB(warm[len(warm)-q:])
		if limit := first + first*c.r.RSSGrowthPct/100 + c.r.RSSGrowthKB; last > limit {
			c.violate(ruleRSS, "", "sidecar %s pid %d: VmRSS grew from %d kB (median of its first quarter after warm-up) to %d kB (last quarter) over %s; bound %d kB",
				ss[0].Sidecar, pid, first, last, warm[len(warm)-1].At.Sub(warm[0].At).Round(time.Second), limit)
		}
	}
}

func medianKB(ss []RSSSample) int {
	v := make([]int, len(ss))
	for i, s := range ss {
		v[i] = s.KB
	}
	sort.Ints(v)
	return v[len(v)/2]
}

func (e Execution) describe() string {
	end := "never ended"
	if !e.End.IsZero() {
		end = fmt.Sprintf("ended %s at %s", e.Outcome, clock(e.End))
	}
	return fmt.Sprintf("[attempt %d on %s, handler pid %d, sidecar pid %d, started %s, %s]", e.Attempt, e.Sidecar, e.PID, e.SidecarPID, clock(e.Start), end)
}

func clock(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Format("15:04:05.000")
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// Summary is the one line a run prints: the seed, the length, the jobs and
// executions, the re-executions by what explains them, the faults by kind,
// the slowest job, the largest sidecar, the violations by rule.
func (rep *Report) Summary(seed int64, seconds time.Duration) string {
	var fs []string
	total := 0
	for _, k := range append(append(faultKinds(), faultCPUHog, faultCancel), netKinds()...) {
		fs = append(fs, fmt.Sprintf("%s=%d", k, rep.Faults[k]))
		total += rep.Faults[k]
	}
	verdict := "PASS"
	if len(rep.Violations) > 0 {
		verdict = "FAIL"
		byRule := map[string]int{}
		for _, v := range rep.Violations {
			byRule[v.Rule]++
		}
		var rs []string
		for r, n := range byRule {
			rs = append(rs, fmt.Sprintf("%s=%d", r, n))
		}
		sort.Strings(rs)
		verdict += " (" + strings.Join(rs, " ") + ")"
	}
	reruns := 0
	var why []string
	for _, k := range []string{"retry", "cancelled", "nack", faultHandlerKill, faultSidecarKill, cutStop, cutPartition, cutOutage, cutReadOnly, cutPGRestart, cutPgBouncer, "cut"} {
		reruns += rep.Reruns[k]
		why = append(why, fmt.Sprintf("%s=%d", k, rep.Reruns[k]))
	}
	return fmt.Sprintf("chaos: seed=%d seconds=%d jobs=%d executions=%d reruns=%d [%s] interrupted=%d dead_lettered=%d faults=%d [%s] max_latency=%s max_rss=%dkB rss_flat_checked=%d limit_samples=%d max_limited=%d violations=%d %s",
		seed, int(seconds.Seconds()), rep.Jobs, rep.Executions, reruns, strings.Join(why, " "), rep.Interrupted, rep.DeadLettered, total, strings.Join(fs, " "),
		rep.MaxLatency.Round(time.Millisecond), rep.MaxRSSKB, rep.RSSJudged, rep.LimitSamples, rep.MaxLimited, len(rep.Violations), verdict)
}
