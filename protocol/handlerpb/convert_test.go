package handlerpb

import (
	"math"
	"strings"
	"testing"

	"github.com/soniq-dev/soniq-sidecar/protocol"
)

func ptr[T any](v T) *T { return &v }

func TestResultToProtocol(t *testing.T) {
	const limit = protocol.DefaultMaxFrameBytes
	ok := []struct {
		in   *Result
		want protocol.Status
	}{
		{&Result{Id: "a", Status: Result_DONE, ResultJson: ptr(`{"x": [1, 2]}`)}, protocol.StatusDone},
		{&Result{Id: "a", Status: Result_DONE}, protocol.StatusDone},
		{&Result{Id: "a", Status: Result_FAILED, Error: &ResultError{Type: "E", Message: "m"}}, protocol.StatusFailed},
		{&Result{Id: "a", Status: Result_SNOOZE, Seconds: 2.5, Reason: ptr("later")}, protocol.StatusSnooze},
		{&Result{Id: "a", Status: Result_CANCELLED}, protocol.StatusCancelled},
	}
	for _, c := range ok {
		r, err := c.in.ToProtocol("a", limit)
		if err != nil || r.Status != c.want {
			t.Errorf("%v: %+v %v", c.in, r, err)
		}
	}
	r, _ := ok[0].in.ToProtocol("a", limit)
	if string(r.Result) != `{"x":[1,2]}` {
		t.Errorf("result compacted as on stdio: %s", r.Result)
	}
	r, _ = ok[2].in.ToProtocol("a", limit)
	if !r.Error.Retryable {
		t.Error("absent retryable means true")
	}
	if r.Error.Reason != "" {
		t.Errorf("absent reason means none: %q", r.Error.Reason)
	}
	inv := &Result{Id: "a", Status: Result_FAILED, Error: &ResultError{Type: "E", Message: "m", Reason: ptr("invalid_arguments")}}
	if r, err := inv.ToProtocol("a", limit); err != nil || r.Error.Reason != protocol.ErrorReasonInvalidArguments {
		t.Errorf("reason invalid_arguments: %+v %v", r, err)
	}
	bad := map[string]*Result{
		"another job's id":     {Id: "b", Status: Result_DONE},
		"unspecified status":   {Id: "a"},
		"failed without error": {Id: "a", Status: Result_FAILED},
		"invalid JSON":         {Id: "a", Status: Result_DONE, ResultJson: ptr(`{"x":`)},
		"overflowing number":   {Id: "a", Status: Result_DONE, ResultJson: ptr(`1e400`)},
		"unpaired surrogate":   {Id: "a", Status: Result_DONE, ResultJson: ptr(`"\ud800"`)},
		"negative snooze":      {Id: "a", Status: Result_SNOOZE, Seconds: -1},
		"NaN snooze":           {Id: "a", Status: Result_SNOOZE, Seconds: math.NaN()},
		"unknown error reason": {Id: "a", Status: Result_FAILED, Error: &ResultError{Type: "E", Message: "m", Reason: ptr("bad_args")}},
		"empty error reason":   {Id: "a", Status: Result_FAILED, Error: &ResultError{Type: "E", Message: "m", Reason: ptr("")}},
		"over the frame limit": {Id: "a", Status: Result_DONE, ResultJson: ptr(`"` + strings.Repeat("x", 2000) + `"`)},
	}
	for name, in := range bad {
		lim := limit
		if name == "over the frame limit" {
			lim = 1000
		}
		if r, err := in.ToProtocol("a", lim); err == nil {
			t.Errorf("%s: accepted %+v", name, r)
		}
	}
}

func TestHelloToProtocol(t *testing.T) {
	h := &Hello{Protocol: 1, Sdk: "x/1", Pid: 10, Concurrency: 2, Jobs: []*HelloJob{{Name: "a", Cancellable: true}}}
	got, err := h.ToProtocol(protocol.DefaultMaxFrameBytes)
	if err != nil || got.PID != 10 || len(got.Jobs) != 1 || !got.Jobs[0].Cancellable || got.SyncConcurrency != 0 {
		t.Fatalf("%+v %v", got, err)
	}
	for name, in := range map[string]*Hello{
		"no jobs":        {Protocol: 1, Sdk: "x", Pid: 1, Concurrency: 1},
		"duplicate job":  {Protocol: 1, Sdk: "x", Pid: 1, Concurrency: 1, Jobs: []*HelloJob{{Name: "a"}, {Name: "a"}}},
		"no concurrency": {Protocol: 1, Sdk: "x", Pid: 1, Jobs: []*HelloJob{{Name: "a"}}},
		"no pid":         {Protocol: 1, Sdk: "x", Concurrency: 1, Jobs: []*HelloJob{{Name: "a"}}},
		"negative sync":  {Protocol: 1, Sdk: "x", Pid: 1, Concurrency: 1, SyncConcurrency: -1, Jobs: []*HelloJob{{Name: "a"}}},
	} {
		if got, err := in.ToProtocol(protocol.DefaultMaxFrameBytes); err == nil {
			t.Errorf("%s: accepted %+v", name, got)
		}
	}
}

func TestFromJob(t *testing.T) {
	dl := int64(1700000000000)
	j := FromJob(&protocol.Job{ID: "a", Name: "n", Attempt: 2, MaxAttempts: 3, Queue: "q", Deadline: &dl})
	if j.GetArgsJson() != "{}" || j.GetDeadlineMs() != dl || j.Traceparent != nil || j.GetAttempt() != 2 {
		t.Fatalf("%+v", j)
	}
	if j.WorkerId != nil || j.ScheduledAtMs != nil || j.CreatedAtMs != nil {
		t.Fatalf("absent context fields must stay absent: %+v", j)
	}
	wid, sched, created := "w-1", int64(0), int64(-1)
	j = FromJob(&protocol.Job{ID: "a", Name: "n", Attempt: 1, MaxAttempts: 1, WorkerID: &wid, ScheduledAt: &sched, CreatedAt: &created})
	if j.WorkerId == nil || *j.WorkerId != wid || j.ScheduledAtMs == nil || *j.ScheduledAtMs != 0 || j.CreatedAtMs == nil || *j.CreatedAtMs != -1 {
		t.Fatalf("context fields: %+v", j)
	}
}

func TestEnqueueToProtocol(t *testing.T) {
	const limit = protocol.DefaultMaxFrameBytes
	const child = "3f2b8c1e-9d4a-4e6b-a1c7-5e2f0b9d8a34"
	in := &Enqueue{Parent: "j1", Id: child, Name: "images.resize", ArgsJson: `{"size": 64}`,
		Queue: ptr("images"), Priority: ptr(int64(-5)), DelaySeconds: ptr(2.5), Immediate: ptr(true)}
	e, err := in.ToProtocol(limit)
	if err != nil {
		t.Fatal(err)
	}
	if e.Parent != "j1" || e.ID != child || string(e.Args) != `{"size":64}` || *e.Queue != "images" ||
		*e.Priority != -5 || *e.Delay != 2.5 || !e.IsImmediate() || e.MaxAttempts != nil || e.Unique != nil {
		t.Errorf("converted: %+v", e)
	}
	bad := map[string]*Enqueue{
		"args not an object": {Parent: "j1", Id: child, Name: "n", ArgsJson: `[1]`},
		"args not JSON":      {Parent: "j1", Id: child, Name: "n", ArgsJson: `{"a":`},
		"id not a UUID":      {Parent: "j1", Id: "c1", Name: "n", ArgsJson: `{}`},
		"empty name":         {Parent: "j1", Id: child, ArgsJson: `{}`},
		"empty queue":        {Parent: "j1", Id: child, Name: "n", ArgsJson: `{}`, Queue: ptr("")},
		"negative delay":     {Parent: "j1", Id: child, Name: "n", ArgsJson: `{}`, DelaySeconds: ptr(-1.0)},
		"NaN delay":          {Parent: "j1", Id: child, Name: "n", ArgsJson: `{}`, DelaySeconds: ptr(math.NaN())},
		"max_attempts 0":     {Parent: "j1", Id: child, Name: "n", ArgsJson: `{}`, MaxAttempts: ptr(int64(0))},
		"over the limit":     {Parent: "j1", Id: child, Name: "n", ArgsJson: `{"s":"` + strings.Repeat("x", 200) + `"}`},
	}
	for name, c := range bad {
		l := limit
		if name == "over the limit" {
			l = 150
		}
		if _, err := c.ToProtocol(l); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestFromEnqueued(t *testing.T) {
	ok := FromEnqueued(&protocol.Enqueued{ID: "c", JobID: ptr("d")})
	if ok.GetId() != "c" || ok.GetJobId() != "d" || ok.ErrorCode != nil {
		t.Errorf("written: %+v", ok)
	}
	ref := FromEnqueued(&protocol.Enqueued{ID: "c", Error: &protocol.EnqueuedError{Code: protocol.EnqueueCap, Message: "m"}})
	if ref.JobId != nil || ref.GetErrorCode() != "cap" || ref.GetErrorMessage() != "m" {
		t.Errorf("refused: %+v", ref)
	}
}
