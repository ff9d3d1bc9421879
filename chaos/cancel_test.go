package main

import (
	"reflect"
	"slices"
	"testing"
	"time"
)

// The cancel rule on made-up histories.
func TestCheckCancelRule(t *testing.T) {
	cancelled := func(id, name string, attempts int) Job {
		return Job{ID: id, Name: name, Status: "cancelled", Attempts: attempts, MaxAttempts: 10, Enqueued: at(0)}
	}
	running := func(id string, at0, done float64, code int, req string, resolved float64) Cancel {
		x := Cancel{JobID: id, Picked: "processing", At: at(at0), Done: at(done), Code: code, RequestStatus: req}
		if resolved > 0 {
			x.Resolved = at(resolved)
		}
		return x
	}
	queued := func(id string, at0, done float64) Cancel {
		return Cancel{JobID: id, Picked: "queued", At: at(at0), Done: at(done), Code: 0}
	}
	cases := []struct {
		name    string
		jobs    []Job
		execs   []Execution
		cancels []Cancel
		want    []string
	}{
		{name: "a running job cancelled: its execution ends cancelled, the row too",
			jobs:    []Job{cancelled("a", jobAsync, 1)},
			execs:   []Execution{ex("a", 101, 0.1, 2.1, "cancelled")},
			cancels: []Cancel{running("a", 2, 2.2, 0, "acknowledged", 2.05)}},
		{name: "a queued job cancelled never ran",
			jobs:    []Job{cancelled("a", jobSync, 0)},
			cancels: []Cancel{queued("a", 1, 1.1)}},
		{name: "the cancelled attempt's frame was in flight: it starts just after the acknowledgement",
			jobs:    []Job{cancelled("a", jobAsync, 1)},
			execs:   []Execution{ex("a", 101, 3.5, 3.6, "cancelled")},
			cancels: []Cancel{running("a", 2, 2.2, 0, "acknowledged", 2.05)}},
		{name: "a row cancelled that nobody cancelled",
			jobs: []Job{cancelled("a", jobAsync, 1)}, execs: []Execution{ex("a", 101, 0.1, 0.2, "cancelled")},
			want: []string{ruleCancelled}},
		{name: "acknowledged, yet the row ended done",
			jobs:    []Job{done("a", jobAsync, 0, 5)},
			execs:   []Execution{ex("a", 101, 0.1, 4, "ok")},
			cancels: []Cancel{running("a", 2, 2.2, 0, "acknowledged", 2.05)},
			want:    []string{ruleCancelled}},
		{name: "acknowledged, yet a new attempt ran",
			jobs: []Job{cancelled("a", jobAsync, 1)},
			execs: []Execution{ex("a", 101, 0.1, 2.1, "cancelled"), func() Execution {
				e := ex("a", 102, 6, 6.5, "ok")
				e.Attempt = 2
				return e
			}()},
			cancels: []Cancel{running("a", 2, 2.2, 0, "acknowledged", 2.05)},
			want:    []string{ruleCancelled}},
		{name: "cancelled while queued, yet it ran later",
			jobs:    []Job{cancelled("a", jobAsync, 1)},
			execs:   []Execution{ex("a", 101, 9, 9.5, "ok")},
			cancels: []Cancel{queued("a", 1, 1.1)},
			want:    []string{ruleCancelled}},
		{name: "a sync job's cancel refused: it runs on and ends done",
			jobs:    []Job{done("a", jobSync, 0, 5)},
			execs:   []Execution{ex("a", 101, 0.1, 4, "ok")},
			cancels: []Cancel{running("a", 2, 2.1, 1, "refused", 2.05)}},
		{name: "a cancel that came too late: the job finished first",
			jobs:    []Job{done("a", jobAsync, 0, 2)},
			execs:   []Execution{ex("a", 101, 0.1, 1.9, "ok")},
			cancels: []Cancel{running("a", 1.95, 2.1, 1, "pending", 0)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := &History{Jobs: tc.jobs, Executions: tc.execs, Cancels: tc.cancels, Incarnations: incs()}
			attribute(h.Executions, h.Incarnations)
			rep := Check(h, testRules())
			var got []string
			for _, v := range rep.Violations {
				got = append(got, v.Rule)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("violations %v, want %v:\n%v", got, tc.want, rep.Violations)
			}
		})
	}
}

// The cancels' schedule comes from the seed alone and leaves the other
// faults' schedule as it was.
func TestPlanCancels(t *testing.T) {
	a, b := PlanCancels(42, 240*time.Second, 4*time.Second), PlanCancels(42, 240*time.Second, 4*time.Second)
	if !reflect.DeepEqual(a, b) || len(a) < 240/4 || len(a) > 240/2 {
		t.Fatalf("%d cancels in 240 s, or not the same twice", len(a))
	}
	running := 0
	for _, s := range a {
		if s.Kind != faultCancel || s.Target != "cancel" {
			t.Fatalf("step %v", s)
		}
		running += s.Pick % 2
	}
	if running == 0 || running == len(a) {
		t.Fatalf("%d of %d cancels on running jobs: want both kinds", running, len(a))
	}
	if PlanCancels(42, 240*time.Second, 0) != nil {
		t.Fatal("gap 0 turns the cancels off")
	}
}
