package supervisor

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/config"
	"github.com/soniq-dev/soniq-sidecar/protocol"
)

func TestChildFate(t *testing.T) {
	i64 := func(n int64) *int64 { return &n }
	f64 := func(f float64) *float64 { return &f }
	child := func(mod func(e *protocol.Enqueue)) *protocol.Enqueue {
		e := &protocol.Enqueue{Parent: "p1", ID: "3f2b8c1e-9d4a-4e6b-a1c7-5e2f0b9d8a34", Name: "kid", Args: json.RawMessage(`{"a":1}`)}
		if mod != nil {
			mod(e)
		}
		return e
	}
	tests := []struct {
		name   string
		e      *protocol.Enqueue
		held   bool
		made   int
		want   protocol.EnqueueErrorCode
		whyHas string
	}{
		{"taken", child(nil), true, 0, "", ""},
		{"taken just below the cap", child(nil), true, 9, "", ""},
		{"a parent the process does not hold", child(nil), false, 0, protocol.EnqueueParent, "p1"},
		{"the cap reached", child(nil), true, 10, protocol.EnqueueCap, "max_children_per_job"},
		{"a priority beyond the column", child(func(e *protocol.Enqueue) { e.Priority = i64(math.MaxInt32 + 1) }), true, 0, protocol.EnqueueInvalid, "priority"},
		{"a negative priority within it", child(func(e *protocol.Enqueue) { e.Priority = i64(-5) }), true, 0, "", ""},
		{"max_attempts beyond the column", child(func(e *protocol.Enqueue) { e.MaxAttempts = i64(math.MaxInt32 + 1) }), true, 0, protocol.EnqueueInvalid, "max_attempts"},
		{"a delay past a hundred years", child(func(e *protocol.Enqueue) { e.Delay = f64(4e9) }), true, 0, protocol.EnqueueInvalid, "delay"},
		{"a NUL in the name", child(func(e *protocol.Enqueue) { e.Name = "a\x00b" }), true, 0, protocol.EnqueueInvalid, "NUL"},
		{"a NUL in the dedup key", child(func(e *protocol.Enqueue) { k := "k\x00"; e.DedupKey = &k }), true, 0, protocol.EnqueueInvalid, "NUL"},
		{"args too deep for a handler", child(func(e *protocol.Enqueue) {
			e.Args = json.RawMessage(`{"a":` + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + `}`)
		}), true, 0, protocol.EnqueueInvalid, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, why := childFate(tt.e, tt.held, tt.made, 10, protocol.DefaultMaxFrameBytes)
			assert.Equal(t, tt.want, code, why)
			assert.Contains(t, why, tt.whyHas)
			if tt.want == "" {
				assert.Empty(t, why)
			}
		})
	}
}

func TestChildrenOutcome(t *testing.T) {
	j := backends.Job{ID: "j1", Name: "parent", Attempts: 1, MaxAttempts: 3}
	retry := config.RetryPolicy{Delays: []time.Duration{time.Second}}
	kids := []backends.EnqueueParams{{ID: "c1", Name: "kid"}}
	done := outcome{status: "done", write: backends.Completion{JobID: "j1", Outcome: backends.OutcomeDone, ResultTTL: time.Minute}}
	zero := func() float64 { return 0 }

	got := childrenOutcome(done, j, retry, kids, "", zero)
	assert.Equal(t, backends.OutcomeDone, got.write.Outcome)
	assert.Equal(t, kids, got.write.Children, "a done carries its execution's children")

	got = childrenOutcome(done, j, retry, kids, "child job kid (c1) refused: cap", zero)
	assert.Equal(t, backends.OutcomeRetry, got.write.Outcome, "a refused child fails the parent through its retry policy")
	assert.Empty(t, got.write.Children)
	assert.Equal(t, "ChildJobRefused: child job kid (c1) refused: cap", got.write.Error)
	assert.Equal(t, lineRetry, got.line)

	last := j
	last.Attempts = 3
	got = childrenOutcome(done, last, retry, kids, "refused", zero)
	assert.Equal(t, backends.OutcomeDeadLetter, got.write.Outcome, "on its last attempt it is dead-lettered")

	for _, o := range []backends.Outcome{backends.OutcomeRetry, backends.OutcomeSnooze, backends.OutcomeDeadLetter, backends.OutcomeCancelled} {
		other := outcome{status: "x", write: backends.Completion{JobID: "j1", Outcome: o}}
		assert.Empty(t, childrenOutcome(other, j, retry, kids, "", zero).write.Children, "%s writes no child", o)
	}
}

func TestChildParams(t *testing.T) {
	q, p, m, d, k, u := "imgs", int64(-3), int64(7), 2.5, "k1", true
	e := &protocol.Enqueue{Parent: "p", ID: "c", Name: "kid", Args: json.RawMessage(`{}`), Queue: &q, Priority: &p,
		MaxAttempts: &m, Delay: &d, DedupKey: &k, Unique: &u}
	c := childParams(e, "host:1:soniq-sidecar:w")
	assert.Equal(t, "c", c.ID)
	assert.Equal(t, "imgs", c.Queue)
	assert.Equal(t, -3, *c.Priority)
	assert.Equal(t, 7, *c.MaxAttempts)
	assert.Equal(t, 2500*time.Millisecond, c.Delay)
	assert.Equal(t, "k1", c.DedupKey)
	assert.True(t, c.UniqueJob)
	assert.Equal(t, "host:1:soniq-sidecar:w", c.ProducerID)
	bare := childParams(&protocol.Enqueue{ID: "c", Name: "kid"}, "")
	assert.Nil(t, bare.Priority)
	assert.Nil(t, bare.MaxAttempts)
	assert.Zero(t, bare.Delay)
	assert.Empty(t, bare.Queue, "the backend's default queue")
}

func TestJobsEnqueuedBySource(t *testing.T) {
	m, r := testMetrics(t)
	d, ok := collected(t, r, "soniq_jobs_enqueued")
	require.True(t, ok, "exported at 0 from the start")
	assert.Len(t, d.(metricdata.Sum[int64]).DataPoints, 2, "child and schedule")
	m.jobsEnqueued("child", 3)
	m.jobsEnqueued("schedule", 1)
	m.jobsEnqueued("child", 0)
	d, _ = collected(t, r, "soniq_jobs_enqueued")
	got := map[string]int64{}
	for _, p := range d.(metricdata.Sum[int64]).DataPoints {
		v, _ := p.Attributes.Value("source")
		got[v.AsString()] = p.Value
	}
	assert.Equal(t, map[string]int64{"child": 3, "schedule": 1}, got)
	var none *Metrics
	none.jobsEnqueued("child", 1) // a nil Metrics records nothing
}
