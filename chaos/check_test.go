package main

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// The checker's rules on made-up histories: each case is one situation a
// run can produce, and the violations the checker must (or must not) find.

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func at(sec float64) time.Time { return t0.Add(time.Duration(sec * float64(time.Second))) }

func testRules() Rules {
	return Rules{HeartbeatInterval: time.Second, HeartbeatTimeout: 8 * time.Second, WriteWindow: 5 * time.Second,
		Slack: time.Second, JobBound: 60 * time.Second, RSSWarmup: 20 * time.Second, RSSMinSpan: 60 * time.Second,
		RSSGrowthPct: 25, RSSGrowthKB: 8 << 10, RSSMaxKB: 256 << 10}
}

// Sidecar processes of the made-up histories: py (pid 100, its handlers
// 101 and 102), attach (pid 200, its handler 300 runs on its own, parent 1).
func incs() []Incarnation {
	return []Incarnation{
		{Sidecar: "py", PID: 100, Start: at(0), End: at(1000), DBPath: "direct"},
		{Sidecar: "attach", PID: 200, Start: at(0), End: at(1000), DBPath: "direct"},
	}
}

func done(id, name string, enq, fin float64) Job {
	return Job{ID: id, Name: name, Status: "done", Attempts: 1, MaxAttempts: 10, Enqueued: at(enq), Finished: at(fin)}
}

func dead(id, name string, enq, fin float64) Job {
	return Job{ID: id, Name: name, Status: "dead_letter", Reason: "max_retries_exceeded", Attempts: 3, MaxAttempts: 3, Enqueued: at(enq), Finished: at(fin)}
}

// ex is an execution on py's handler 101 (or the attached handler when pid
// is 300); end < 0 means it never ended.
func ex(id string, pid int, start, end float64, outcome string) Execution {
	e := Execution{Token: id + "-" + outcome + "-" + time.Duration(start*1e9).String(), JobID: id, Attempt: 1, Sidecar: "py", PID: pid, PPID: 100, Start: at(start), Outcome: outcome}
	if pid == 300 {
		e.Sidecar, e.PPID = "attach", 1
	}
	if end >= 0 {
		e.End = at(end)
	}
	return e
}

func TestCheckRules(t *testing.T) {
	cases := []struct {
		name   string
		jobs   []Job
		execs  []Execution
		faults []Fault
		edit   func(h *History)
		// beats replaces a sidecar's landed writes (by pid, seconds);
		// by default each sidecar beats every second outside its cuts and
		// once just after each cut (synthBeats).
		beats  map[int][]float64
		want   []string // the rules violated, in order
		reruns map[string]int
	}{
		{name: "one clean execution", jobs: []Job{done("a", jobAsync, 0, 1)},
			execs: []Execution{ex("a", 101, 0.1, 0.5, "ok")}},
		{name: "no row at the end", jobs: []Job{{ID: "a", Name: jobAsync, Status: "missing"}}, want: []string{ruleLost}},
		{name: "still processing after the drain", jobs: []Job{{ID: "a", Name: jobSync, Status: "processing"}}, want: []string{ruleUnfinished}},
		{name: "a good job dead-lettered", jobs: []Job{dead("a", jobAsync, 0, 1)},
			execs: []Execution{ex("a", 101, 0.1, 0.5, "fail")}, want: []string{ruleWrongEnd}},
		{name: "a failing job dead-lettered after its retries", jobs: []Job{dead("a", jobFailSync, 0, 2)},
			execs:  []Execution{ex("a", 101, 0.1, 0.2, "fail"), ex("a", 101, 0.3, 0.4, "fail"), ex("a", 102, 0.5, 0.6, "fail")},
			reruns: map[string]int{"retry": 2}},
		{name: "a failing job dead-lettered with an attempt charged and no run to explain it", jobs: []Job{dead("a", jobFailSync, 0, 2)},
			execs:  []Execution{ex("a", 101, 0.1, 0.2, "fail"), ex("a", 101, 0.3, 0.4, "fail")},
			reruns: map[string]int{"retry": 1}, want: []string{ruleChargedUnrun}},
		{name: "a failing job dead-lettered with an attempt its sidecar's kill charged", jobs: []Job{dead("a", jobFailSync, 0, 2)},
			execs:  []Execution{ex("a", 101, 0.1, 0.2, "fail"), ex("a", 101, 0.3, 0.4, "fail")},
			faults: []Fault{{At: at(0.5), Kind: faultSidecarKill, Target: "py", PID: 100}},
			reruns: map[string]int{"retry": 1}},
		{name: "attempts spent by two runs and a kill, then dead-lettered at the claim that found them spent (seed 103)",
			jobs:   []Job{func() Job { j := dead("a", jobFailSync, 0, 4); j.Attempts = 4; return j }()},
			execs:  []Execution{ex("a", 101, 0.1, 0.2, "fail"), ex("a", 101, 0.3, 0.4, "fail")},
			faults: []Fault{{At: at(0.5), Kind: faultSidecarKill, Target: "py", PID: 100}},
			reruns: map[string]int{"retry": 1}},
		{name: "dead-lettered at the claim past max_attempts with an attempt nothing explains",
			jobs:   []Job{func() Job { j := dead("a", jobFailSync, 0, 4); j.Attempts = 4; return j }()},
			execs:  []Execution{ex("a", 101, 0.1, 0.2, "fail")},
			faults: []Fault{{At: at(0.5), Kind: faultSidecarKill, Target: "py", PID: 100}},
			want:   []string{ruleChargedUnrun}},
		{name: "a failing job dead-lettered for another reason", jobs: []Job{func() Job { j := dead("a", jobFailSync, 0, 2); j.Reason = "invalid_arguments"; return j }()},
			execs: []Execution{ex("a", 101, 0.1, 0.2, "fail")}, want: []string{ruleWrongEnd}},
		{name: "a failing job done", jobs: []Job{done("a", jobFailAsync, 0, 1)},
			execs: []Execution{ex("a", 101, 0.1, 0.5, "ok")}, want: []string{ruleWrongEnd}},
		{name: "done without a successful execution", jobs: []Job{done("a", jobAsync, 0, 1)}, want: []string{ruleDoneUnexecuted}},
		{name: "ran twice with nothing to explain it", jobs: []Job{done("a", jobAsync, 0, 2)},
			execs: []Execution{ex("a", 101, 0.1, 0.5, "ok"), ex("a", 102, 1, 1.5, "ok")}, want: []string{ruleDuplicate}},
		{name: "a DB restart explains nothing", jobs: []Job{done("a", jobAsync, 0, 2)},
			execs:  []Execution{ex("a", 101, 0.1, 0.5, "ok"), ex("a", 102, 1, 1.5, "ok")},
			faults: []Fault{{At: at(0.3), Kind: faultPGRestart, Target: "postgres", Dur: 2 * time.Second}},
			want:   []string{ruleDuplicate}},
		{name: "rerun after its handler process was SIGKILLed", jobs: []Job{done("a", jobSync, 0, 12)},
			execs:  []Execution{ex("a", 101, 0.1, -1, ""), ex("a", 102, 0.4, 0.8, "ok")},
			faults: []Fault{{At: at(0.3), Kind: faultHandlerKill, Target: "py", PID: 101}},
			reruns: map[string]int{faultHandlerKill: 1}},
		{name: "another handler process killed explains nothing", jobs: []Job{done("a", jobSync, 0, 12)},
			execs:  []Execution{ex("a", 101, 0.1, -1, ""), ex("a", 102, 0.4, 0.8, "ok")},
			faults: []Fault{{At: at(0.3), Kind: faultHandlerKill, Target: "py", PID: 102}},
			want:   []string{ruleSyncInterrupted, ruleDuplicate}},
		{name: "a kill before the execution started explains nothing", jobs: []Job{done("a", jobAsync, 0, 12)},
			execs:  []Execution{ex("a", 101, 5, -1, ""), ex("a", 102, 9, 9.5, "ok")},
			faults: []Fault{{At: at(2), Kind: faultHandlerKill, Target: "py", PID: 101}},
			want:   []string{ruleInterrupted, ruleDuplicate}},
		{name: "rerun after its sidecar was SIGKILLed (the handler died with it)", jobs: []Job{done("a", jobSync, 0, 12)},
			execs:  []Execution{ex("a", 101, 0.1, -1, ""), ex("a", 102, 10, 10.5, "ok")},
			faults: []Fault{{At: at(0.3), Kind: faultSidecarKill, Target: "py", PID: 100}},
			reruns: map[string]int{faultSidecarKill: 1}},
		{name: "attached: the sidecar killed before the result was written", jobs: []Job{done("a", jobAsync, 0, 12)},
			execs:  []Execution{ex("a", 300, 0.1, 0.6, "ok"), ex("a", 300, 10, 10.5, "ok")},
			faults: []Fault{{At: at(0.3), Kind: faultSidecarKill, Target: "attach", PID: 200}},
			reruns: map[string]int{faultSidecarKill: 1}},
		{name: "attached: a sidecar kill long after the result explains nothing", jobs: []Job{done("a", jobAsync, 0, 12)},
			execs:  []Execution{ex("a", 300, 0.1, 0.6, "ok"), ex("a", 300, 10, 10.5, "ok")},
			faults: []Fault{{At: at(8), Kind: faultSidecarKill, Target: "attach", PID: 200}},
			want:   []string{ruleDuplicate}},
		{name: "attached: a SIGKILL of its sidecar does not end a sync job", jobs: []Job{done("a", jobSync, 0, 12)},
			execs:  []Execution{ex("a", 300, 0.1, -1, ""), ex("a", 300, 10, 10.5, "ok")},
			faults: []Fault{{At: at(0.3), Kind: faultSidecarKill, Target: "attach", PID: 200}},
			want:   []string{ruleSyncInterrupted}, reruns: map[string]int{faultSidecarKill: 1}},
		{name: "a stop long enough for recovery", jobs: []Job{done("a", jobAsync, 0, 12)},
			execs:  []Execution{ex("a", 101, 0.1, 0.6, "ok"), ex("a", 102, 9, 9.5, "ok")},
			faults: []Fault{{At: at(0.2), Kind: faultSidecarStop, Target: "py", PID: 100, Dur: 9 * time.Second}},
			reruns: map[string]int{"stop": 1}},
		{name: "a 7 s stop, its last heartbeat just before it: 7.3 s out, too short for recovery", jobs: []Job{done("a", jobAsync, 0, 12)},
			execs:  []Execution{ex("a", 101, 0.1, 0.6, "ok"), ex("a", 102, 9, 9.5, "ok")},
			faults: []Fault{{At: at(0.2), Kind: faultSidecarStop, Target: "py", PID: 100, Dur: 7 * time.Second}},
			want:   []string{ruleDuplicate}},
		{name: "a 7 s stop, its last heartbeat a second before it: 8.3 s out, long enough", jobs: []Job{done("a", jobAsync, 0, 12)},
			execs:  []Execution{ex("a", 101, 0.1, 0.6, "ok"), ex("a", 102, 9, 9.5, "ok")},
			faults: []Fault{{At: at(1.95), Kind: faultSidecarStop, Target: "py", PID: 100, Dur: 7 * time.Second}},
			beats:  map[int][]float64{100: {0, 1, 9.3, 10, 11, 12}},
			reruns: map[string]int{"stop": 1}},
		{name: "claimed before a long stop, delivered after it, once its replacement had run", jobs: []Job{done("a", jobSync, 0, 20)},
			execs:  []Execution{ex("a", 300, 11.1, 11.5, "ok"), func() Execution { e := ex("a", 101, 9, 9.4, "ok"); e.Attempt = 2; return e }()},
			faults: []Fault{{At: at(0.2), Kind: faultSidecarStop, Target: "attach", PID: 200, Dur: 10900 * time.Millisecond}},
			reruns: map[string]int{"stop": 1}},
		{name: "two stops with a resume too short for a heartbeat are one stop (seed 404)", jobs: []Job{done("a", jobSync, 0, 20)},
			execs: []Execution{ex("a", 300, 0.1, 0.6, "ok"), ex("a", 101, 9, 9.5, "ok")},
			faults: []Fault{{At: at(0.35), Kind: faultSidecarStop, Target: "attach", PID: 200, Dur: 5782 * time.Millisecond},
				{At: at(6.133), Kind: faultSidecarStop, Target: "attach", PID: 200, Dur: 7807 * time.Millisecond}},
			reruns: map[string]int{"stop": 1}},
		{name: "two short stops with a real resume between them explain nothing", jobs: []Job{done("a", jobAsync, 0, 20)},
			execs: []Execution{ex("a", 101, 0.1, 0.6, "ok"), ex("a", 102, 11, 11.5, "ok")},
			faults: []Fault{{At: at(0.2), Kind: faultSidecarStop, Target: "py", PID: 100, Dur: 5 * time.Second},
				{At: at(5.7), Kind: faultSidecarStop, Target: "py", PID: 100, Dur: 5 * time.Second}},
			want: []string{ruleDuplicate}},
		{name: "a stop too short for recovery explains nothing", jobs: []Job{done("a", jobAsync, 0, 12)},
			execs:  []Execution{ex("a", 101, 0.1, 0.6, "ok"), ex("a", 102, 9, 9.5, "ok")},
			faults: []Fault{{At: at(0.2), Kind: faultSidecarStop, Target: "py", PID: 100, Dur: 5 * time.Second}},
			want:   []string{ruleDuplicate}},
		{name: "an execution that started after the stop ended is not explained by it", jobs: []Job{done("a", jobAsync, 0, 30)},
			execs:  []Execution{ex("a", 101, 14, 14.5, "ok"), ex("a", 102, 25, 25.5, "ok")},
			faults: []Fault{{At: at(2), Kind: faultSidecarStop, Target: "py", PID: 100, Dur: 10 * time.Second}},
			want:   []string{ruleDuplicate}},
		{name: "its sidecar cut from the database long enough for recovery", jobs: []Job{done("a", jobAsync, 0, 20)},
			execs:  []Execution{ex("a", 101, 0.1, 0.6, "ok"), ex("a", 102, 9, 9.5, "ok")},
			edit:   func(h *History) { outageOf(h, "direct", 0.5, 9.5) },
			reruns: map[string]int{"outage": 1}},
		{name: "an outage too short for recovery explains nothing", jobs: []Job{done("a", jobAsync, 0, 20)},
			execs: []Execution{ex("a", 101, 0.1, 0.6, "ok"), ex("a", 102, 9, 9.5, "ok")},
			edit:  func(h *History) { outageOf(h, "direct", 0.5, 5.5) },
			want:  []string{ruleDuplicate}},
		{name: "an outage of another path explains nothing", jobs: []Job{done("a", jobAsync, 0, 20)},
			execs: []Execution{ex("a", 101, 0.1, 0.6, "ok"), ex("a", 102, 9, 9.5, "ok")},
			edit:  func(h *History) { outageOf(h, "pgbouncer", 0.5, 7.5) },
			want:  []string{ruleDuplicate}},
		{name: "claimed during an outage as probed: its claim landed, so the sidecar was not out long enough", jobs: []Job{done("a", jobAsync, 0, 20)},
			execs: []Execution{ex("a", 101, 6, 6.2, "ok"), ex("a", 102, 9, 9.5, "ok")},
			edit:  func(h *History) { outageOf(h, "direct", 0.5, 9.5) },
			beats: map[int][]float64{100: {0, 5.9, 9.6, 10.6}},
			want:  []string{ruleDuplicate}},
		{name: "a stop, then at once a read-only window: one cut long enough for recovery (seed 101)", jobs: []Job{done("a", jobAsync, 0, 20)},
			execs: []Execution{ex("a", 300, 0.1, 0.6, "ok"), ex("a", 101, 9, 9.5, "ok")},
			faults: []Fault{{At: at(0.5), Kind: faultSidecarStop, Target: "attach", PID: 200, Dur: 4579 * time.Millisecond},
				{At: at(4.9), Kind: faultDBReadOnly, Target: "postgres", Dur: 3669 * time.Millisecond}},
			reruns: map[string]int{"cut": 1}},
		{name: "a stop and a read-only window with a real resume between them explain nothing", jobs: []Job{done("a", jobAsync, 0, 20)},
			execs: []Execution{ex("a", 300, 0.1, 0.6, "ok"), ex("a", 101, 11, 11.5, "ok")},
			faults: []Fault{{At: at(0.5), Kind: faultSidecarStop, Target: "attach", PID: 200, Dur: 4 * time.Second},
				{At: at(5.5), Kind: faultDBReadOnly, Target: "postgres", Dur: 4 * time.Second}},
			want: []string{ruleDuplicate}},
		{name: "a partition long enough for recovery", jobs: []Job{done("a", jobAsync, 0, 20)},
			execs:  []Execution{ex("a", 101, 0.1, 0.6, "ok"), ex("a", 102, 9, 9.5, "ok")},
			faults: []Fault{{At: at(0.5), Kind: faultNetPartition, Target: "net-py", PID: 100, Dur: 9 * time.Second}},
			reruns: map[string]int{"partition": 1}},
		{name: "another sidecar's partition explains nothing", jobs: []Job{done("a", jobAsync, 0, 20)},
			execs:  []Execution{ex("a", 101, 0.1, 0.6, "ok"), ex("a", 102, 9, 9.5, "ok")},
			faults: []Fault{{At: at(0.5), Kind: faultNetPartition, Target: "net-attach", PID: 200, Dur: 9 * time.Second}},
			want:   []string{ruleDuplicate}},
		{name: "a failing job dead-lettered with an attempt a long partition charged", jobs: []Job{dead("a", jobFailSync, 0, 20)},
			execs:  []Execution{ex("a", 101, 0.1, 0.2, "fail"), ex("a", 101, 10, 10.1, "fail")},
			faults: []Fault{{At: at(0.5), Kind: faultNetPartition, Target: "net-py", PID: 100, Dur: 9 * time.Second}},
			reruns: map[string]int{"retry": 1}},
		{name: "a failing job dead-lettered with an attempt a short partition cannot explain", jobs: []Job{dead("a", jobFailSync, 0, 20)},
			execs:  []Execution{ex("a", 101, 0.1, 0.2, "fail"), ex("a", 101, 10, 10.1, "fail")},
			faults: []Fault{{At: at(0.5), Kind: faultNetPartition, Target: "net-py", PID: 100, Dur: 3 * time.Second}},
			reruns: map[string]int{"retry": 1}, want: []string{ruleChargedUnrun}},
		// The histories of the issue that made the checker exact: cuts of
		// different kinds back to back, no single one long enough, no
		// heartbeat landing between them.
		{name: "a read-only window, then at once a PgBouncer restart: out 8.5 s through PgBouncer", jobs: []Job{done("a", jobAsync, 0, 20)},
			execs: []Execution{ex("a", 300, 0.1, 0.6, "ok"), ex("a", 101, 12, 12.5, "ok")},
			faults: []Fault{{At: at(0.5), Kind: faultDBReadOnly, Target: "postgres", Dur: 4 * time.Second},
				{At: at(4.6), Kind: faultPgBouncerKill, Target: "pgbouncer", Dur: 3500 * time.Millisecond}},
			edit: func(h *History) {
				h.Incarnations[1].DBPath = "pgbouncer"
				outageOf(h, "pgbouncer", 4.9, 8.4)
			},
			reruns: map[string]int{"cut": 1}},
		{name: "the same faults do not explain a rerun of a sidecar that goes straight to Postgres", jobs: []Job{done("a", jobAsync, 0, 20)},
			execs: []Execution{ex("a", 101, 0.1, 0.6, "ok"), ex("a", 300, 12, 12.5, "ok")},
			faults: []Fault{{At: at(0.5), Kind: faultDBReadOnly, Target: "postgres", Dur: 4 * time.Second},
				{At: at(4.6), Kind: faultPgBouncerKill, Target: "pgbouncer", Dur: 3500 * time.Millisecond}},
			edit: func(h *History) {
				h.Incarnations[1].DBPath = "pgbouncer"
				outageOf(h, "pgbouncer", 4.9, 8.4)
			},
			want: []string{ruleDuplicate}},
		{name: "a 5.5 s read-only window, then two Postgres restarts, the first heartbeat a second after", jobs: []Job{done("a", jobAsync, 0, 20)},
			execs: []Execution{ex("a", 300, 0.1, 0.6, "ok"), ex("a", 101, 12, 12.5, "ok")},
			faults: []Fault{{At: at(0.5), Kind: faultDBReadOnly, Target: "postgres", Dur: 5500 * time.Millisecond},
				{At: at(6), Kind: faultPGRestart, Target: "postgres", Dur: 2 * time.Second},
				{At: at(8), Kind: faultPGRestart, Target: "postgres", Dur: 2400 * time.Millisecond}},
			edit:   func(h *History) { outageOf(h, "direct", 6.9, 10.9) },
			beats:  map[int][]float64{200: {0, 11.5, 12.5}},
			reruns: map[string]int{"cut": 1}},
		{name: "the same faults with a heartbeat landing between the window and the restarts explain nothing", jobs: []Job{done("a", jobAsync, 0, 20)},
			execs: []Execution{ex("a", 300, 0.1, 0.6, "ok"), ex("a", 101, 12, 12.5, "ok")},
			faults: []Fault{{At: at(0.5), Kind: faultDBReadOnly, Target: "postgres", Dur: 5500 * time.Millisecond},
				{At: at(7), Kind: faultPGRestart, Target: "postgres", Dur: 2 * time.Second},
				{At: at(9), Kind: faultPGRestart, Target: "postgres", Dur: 2400 * time.Millisecond}},
			beats: map[int][]float64{200: {0, 6.2, 11.5, 12.5}},
			want:  []string{ruleDuplicate}},
		{name: "a read-only window and an outage the probe noticed 0.9 s after it, no heartbeat between: one out", jobs: []Job{done("a", jobAsync, 0, 20)},
			execs:  []Execution{ex("a", 101, 0.1, 0.6, "ok"), ex("a", 102, 12, 12.5, "ok")},
			faults: []Fault{{At: at(0.5), Kind: faultDBReadOnly, Target: "postgres", Dur: 4500 * time.Millisecond}},
			edit:   func(h *History) { outageOf(h, "direct", 5.9, 9) },
			beats:  map[int][]float64{100: {0, 9.1, 10.1}},
			reruns: map[string]int{"cut": 1}},
		{name: "a heartbeat silent past heartbeat_timeout with a short cut in it: the faults do not explain the rest", jobs: []Job{done("a", jobAsync, 0, 20)},
			execs:  []Execution{ex("a", 101, 0.1, 0.6, "ok"), ex("a", 102, 12, 12.5, "ok")},
			faults: []Fault{{At: at(0.5), Kind: faultSidecarStop, Target: "py", PID: 100, Dur: 2 * time.Second}},
			beats:  map[int][]float64{100: {0, 10, 11}},
			want:   []string{ruleDuplicate}},
		{name: "stopped, then SIGKILLed as the stop ended, no write landing after the stop: out until its end", jobs: []Job{done("a", jobAsync, 0, 20)},
			execs: []Execution{ex("a", 101, 0.1, 0.6, "ok"), ex("a", 300, 10, 10.5, "ok")},
			faults: []Fault{{At: at(0.3), Kind: faultSidecarStop, Target: "py", PID: 100, Dur: 11 * time.Second},
				{At: at(11.3), Kind: faultSidecarKill, Target: "py", PID: 100}},
			edit:   func(h *History) { h.Incarnations[0].End = at(11.31) },
			beats:  map[int][]float64{100: {0}},
			reruns: map[string]int{"stop": 1}},
		{name: "a restart then a partition, then a shutdown that gives up its writes: out until its end", jobs: []Job{done("a", jobSync, 0, 20)},
			execs: []Execution{ex("a", 300, 0.1, 0.2, "ok"), ex("a", 101, 8.1, 8.2, "ok")},
			faults: []Fault{{At: at(0.05), Kind: faultPGRestart, Target: "postgres", Dur: 2100 * time.Millisecond},
				{At: at(2.05), Kind: faultNetPartition, Target: "net-attach", PID: 200, Dur: 9200 * time.Millisecond},
				{At: at(4.7), Kind: faultSidecarTerm, Target: "attach", PID: 200}},
			edit: func(h *History) {
				h.Incarnations[1].End, h.Incarnations[1].TermAt = at(9.8), at(4.7)
			},
			beats:  map[int][]float64{200: {0}, 100: {0, 2.2, 3, 4, 5, 6, 7, 8, 9}},
			reruns: map[string]int{"cut": 1}},
		{name: "a short cut, then a SIGKILL long after it with no write landing between: nothing explains the rest", jobs: []Job{done("a", jobAsync, 0, 20)},
			execs: []Execution{ex("a", 101, 0.1, 0.6, "ok"), ex("a", 300, 12, 12.5, "ok")},
			faults: []Fault{{At: at(0.3), Kind: faultNetPartition, Target: "net-py", PID: 100, Dur: time.Second},
				{At: at(9), Kind: faultSidecarKill, Target: "py", PID: 100}},
			edit:  func(h *History) { h.Incarnations[0].End = at(9.01) },
			beats: map[int][]float64{100: {0}},
			want:  []string{ruleDuplicate}},
		{name: "a long cut with no heartbeat record explains nothing", jobs: []Job{done("a", jobAsync, 0, 20)},
			execs:  []Execution{ex("a", 101, 0.1, 0.6, "ok"), ex("a", 102, 12, 12.5, "ok")},
			faults: []Fault{{At: at(0.5), Kind: faultSidecarStop, Target: "py", PID: 100, Dur: 10 * time.Second}},
			beats:  map[int][]float64{100: {}},
			want:   []string{ruleDuplicate}},
		{name: "cancelled at shutdown, then run again", jobs: []Job{done("a", jobAsync, 0, 2)},
			execs:  []Execution{ex("a", 101, 0.1, 0.3, "cancelled"), ex("a", 102, 1, 1.5, "ok")},
			reruns: map[string]int{"cancelled": 1}},
		{name: "NACKed at shutdown as it finished", jobs: []Job{done("a", jobAsync, 0, 2)},
			execs: []Execution{ex("a", 101, 0.1, 0.3, "ok"), ex("a", 102, 1, 1.5, "ok")},
			edit: func(h *History) {
				h.Incarnations[0].Nacks, h.Incarnations[0].TermAt = map[string]bool{"a": true}, at(0.05)
			},
			reruns: map[string]int{"nack": 1}},
		{name: "a NACK without a SIGTERM", jobs: []Job{done("a", jobAsync, 0, 2)},
			execs: []Execution{ex("a", 101, 0.1, 0.3, "ok"), ex("a", 102, 1, 1.5, "ok")},
			edit:  func(h *History) { h.Incarnations[0].Nacks = map[string]bool{"a": true} },
			want:  []string{ruleDuplicate, ruleNackNoShutdown}},
		{name: "a sync job cancelled", jobs: []Job{done("a", jobSync, 0, 2)},
			execs: []Execution{ex("a", 101, 0.1, 0.3, "cancelled"), ex("a", 102, 1, 1.5, "ok")},
			want:  []string{ruleSyncInterrupted}, reruns: map[string]int{"cancelled": 1}},
		{name: "an async execution that never ended, no kill", jobs: []Job{done("a", jobAsync, 0, 2)},
			execs: []Execution{ex("a", 101, 0.1, -1, ""), ex("a", 102, 1, 1.5, "ok")},
			want:  []string{ruleInterrupted, ruleDuplicate}},
		{name: "slower than the bound", jobs: []Job{done("a", jobAsync, 0, 61)},
			execs: []Execution{ex("a", 101, 60, 60.5, "ok")}, want: []string{ruleSlow}},
		{name: "an execution of a job nobody enqueued", execs: []Execution{ex("x", 101, 1, 1.5, "ok")}, want: []string{ruleLost}},
		{name: "a panic in a sidecar's log", edit: func(h *History) {
			h.Incarnations[1].Panics = []string{"panic: runtime error: index out of range"}
		}, want: []string{rulePanic}},
		{name: "a row the self-audit gave back", jobs: []Job{done("a", jobAsync, 0, 2)},
			execs: []Execution{ex("a", 101, 1, 1.5, "ok")},
			edit:  func(h *History) { h.Incarnations[0].Orphans = []string{"a"} },
			want:  []string{ruleOrphaned}},
		{name: "a problem the harness saw", edit: func(h *History) {
			h.Problems = []string{"sidecar py pid 100 exited with status 1 after SIGTERM"}
		}, want: []string{ruleSidecar}},
		{name: "flat memory", edit: func(h *History) { h.RSS = rssSeries(100, 120, 30000, 0) }},
		{name: "memory growing", edit: func(h *History) { h.RSS = rssSeries(100, 120, 30000, 400) }, want: []string{ruleRSS}},
		{name: "growth too short to judge", edit: func(h *History) { h.RSS = rssSeries(100, 50, 30000, 400) }},
		{name: "memory above the ceiling", edit: func(h *History) { h.RSS = rssSeries(100, 10, 300<<10, 0) }, want: []string{ruleRSS}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := &History{Jobs: tc.jobs, Executions: tc.execs, Faults: tc.faults, Incarnations: incs()}
			attribute(h.Executions, h.Incarnations)
			if tc.edit != nil {
				tc.edit(h)
			}
			h.Beats = synthBeats(h, testRules())
			for pid, secs := range tc.beats {
				h.Beats[pid] = nil
				for _, s := range secs {
					h.Beats[pid] = append(h.Beats[pid], at(s))
				}
			}
			rep := Check(h, testRules())
			var got []string
			for _, v := range rep.Violations {
				got = append(got, v.Rule)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("violations %v, want %v:\n%v", got, tc.want, rep.Violations)
			}
			if tc.reruns == nil {
				tc.reruns = map[string]int{}
			}
			if !reflect.DeepEqual(rep.Reruns, tc.reruns) {
				t.Fatalf("reruns %v, want %v", rep.Reruns, tc.reruns)
			}
			if s := rep.Summary(7, time.Minute); !strings.HasPrefix(s, "chaos: seed=7 seconds=60 ") || strings.Contains(s, "\n") {
				t.Fatalf("summary %q", s)
			}
		})
	}
}

// synthBeats is the heartbeat record of a well-behaved sidecar: a beat
// every interval from its start (up to a minute in), none inside its cuts,
// and one 100 ms after each cut ends.
func synthBeats(h *History, r Rules) map[int][]time.Time {
	c := &checker{h: h, r: r, incs: map[int]*Incarnation{}, cuts: map[int][]cut{}}
	for i := range h.Incarnations {
		c.incs[h.Incarnations[i].PID] = &h.Incarnations[i]
	}
	out := map[int][]time.Time{}
	for _, in := range h.Incarnations {
		ks := c.cutsOf(in.PID)
		cutAt := func(t time.Time) bool {
			return slices.ContainsFunc(ks, func(k cut) bool { return !t.Before(k.from) && t.Before(k.to) })
		}
		var bs []time.Time
		for t := in.Start; t.Before(in.End) && t.Before(at(60)); t = t.Add(r.HeartbeatInterval) {
			if !cutAt(t) {
				bs = append(bs, t)
			}
		}
		for _, k := range ks {
			if t := k.to.Add(100 * time.Millisecond); !cutAt(t) {
				bs = append(bs, t)
			}
		}
		slices.SortFunc(bs, func(a, b time.Time) int { return a.Compare(b) })
		out[in.PID] = bs
	}
	return out
}

// outageOf adds an outage of path from from to to.
func outageOf(h *History, path string, from, to float64) {
	h.Outages = append(h.Outages, Outage{Path: path, From: at(from), To: at(to)})
}

// rssSeries is one sample a second for secs seconds, starting at kb and
// growing by perSec kB a second.
func rssSeries(pid, secs, kb, perSec int) []RSSSample {
	var out []RSSSample
	for i := range secs {
		out = append(out, RSSSample{Sidecar: "py", PID: pid, At: at(float64(i)), KB: kb + i*perSec})
	}
	return out
}

func TestAttributeAttachedExecutions(t *testing.T) {
	in := []Incarnation{
		{Sidecar: "attach", PID: 200, Start: at(0)},
		{Sidecar: "attach", PID: 210, Start: at(10)},
		{Sidecar: "py", PID: 100, Start: at(0)},
	}
	execs := []Execution{
		{Sidecar: "attach", PPID: 1, Start: at(5)},
		{Sidecar: "attach", PPID: 1, Start: at(12)},
		{Sidecar: "py", PPID: 100, Start: at(12)},
	}
	attribute(execs, in)
	for i, want := range []int{200, 210, 100} {
		if execs[i].SidecarPID != want {
			t.Errorf("execution %d attributed to %d, want %d", i, execs[i].SidecarPID, want)
		}
	}
}

func TestReadExecutions(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.log"), filepath.Join(dir, "b.log")
	write := func(path, text string) {
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(a, "start 1-1 job1 1 py 11 10 1000000 \nstart 1-2 job2 1 py 11 10 1500000 \nend 1-1 job1 1 py 11 10 2000000 ok\n")
	write(b, "start 2-1 job1 2 node 21 20 3000000 \nend 2-1 job1 2 node 21 20 3500000 fail\n")
	got, err := readExecutions([]string{a, b, filepath.Join(dir, "absent.log")})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("%d executions: %+v", len(got), got)
	}
	want := []struct {
		token, outcome string
		ended          bool
	}{{"1-1", "ok", true}, {"1-2", "", false}, {"2-1", "fail", true}}
	for i, w := range want {
		if got[i].Token != w.token || got[i].Outcome != w.outcome || got[i].End.IsZero() == w.ended {
			t.Errorf("execution %d: %+v, want %+v", i, got[i], w)
		}
	}
	if got[0].Start != time.UnixMicro(1000000) || got[2].Attempt != 2 || got[2].PPID != 20 {
		t.Errorf("fields: %+v", got)
	}
	for name, text := range map[string]string{
		"end without start": "end 9-9 job1 1 py 11 10 2000000 ok\n",
		"started twice":     "start 1-1 job1 1 py 11 10 1 \nstart 1-1 job1 1 py 11 10 2 \n",
		"short":             "start 1-1 job1\n",
		"bad number":        "start 1-1 job1 x py 11 10 1 \n",
	} {
		write(a, text)
		if _, err := readExecutions([]string{a}); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestPlanIsDrawnFromTheSeed(t *testing.T) {
	p := PlanParams{Length: 240 * time.Second, GapMin: 2 * time.Second, GapMax: 6 * time.Second,
		StopMin: time.Second, StopMax: 12 * time.Second, PGDownMax: 2 * time.Second, Kinds: faultKinds()}
	a, b, other := Plan(42, p), Plan(42, p), Plan(43, p)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("the same seed gave two schedules")
	}
	if reflect.DeepEqual(a, other) {
		t.Fatal("seed 42 and seed 43 gave the same schedule")
	}
	if len(a) < 240/6 || len(a) > 240/2 {
		t.Fatalf("%d faults in 240 s with gaps of 2 to 6 s", len(a))
	}
	kinds := map[string]int{}
	prev := time.Duration(0)
	for _, s := range a {
		kinds[s.Kind]++
		if gap := s.At - prev; gap < p.GapMin || gap >= p.GapMax || s.At >= p.Length {
			t.Fatalf("step %v: gap %s", s, gap)
		}
		prev = s.At
		switch s.Kind {
		case faultSidecarStop:
			if s.Dur < p.StopMin || s.Dur >= p.StopMax || !slices.Contains(sidecarNames(), s.Target) {
				t.Fatalf("step %v", s)
			}
		case faultPGRestart:
			if s.Target != "postgres" || (s.Mode != "fast" && s.Mode != "immediate") || s.Dur >= p.PGDownMax {
				t.Fatalf("step %v", s)
			}
		case faultPgBouncerKill:
			if s.Target != "pgbouncer" {
				t.Fatalf("step %v", s)
			}
		default:
			if !slices.Contains(sidecarNames(), s.Target) {
				t.Fatalf("step %v", s)
			}
		}
	}
	if len(kinds) != len(faultKinds()) {
		t.Fatalf("kinds drawn: %v", kinds)
	}
	only := p
	only.Kinds = []string{faultSidecarStop}
	for _, s := range Plan(42, only) {
		if s.Kind != faultSidecarStop {
			t.Fatalf("step %v with kinds %v", s, only.Kinds)
		}
	}
	if _, err := parseKinds("sidecar-kill,bogus"); err == nil {
		t.Fatal("an unknown kind was accepted")
	}
}
