package maintenance

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

func auditRow(id string, attempts int) backends.Job {
	return backends.Job{ID: id, Name: "n", Queue: "default", Status: backends.StatusProcessing, Attempts: attempts}
}

func auditIDs(jobs []backends.Job) []string {
	out := []string{}
	for _, j := range jobs {
		out = append(out, j.ID)
	}
	return out
}

func TestTrackerObserve(t *testing.T) {
	const grace = 30 * time.Second
	t0 := time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC)
	type look struct {
		after time.Duration
		rows  []backends.Job
		known []string
		want  []string
	}
	tests := []struct {
		name  string
		looks []look
	}{
		{"a known row is never an orphan", []look{
			{0, []backends.Job{auditRow("a", 1)}, []string{"a"}, nil},
			{time.Minute, []backends.Job{auditRow("a", 1)}, []string{"a"}, nil},
		}},
		{"unknown twice a grace apart: an orphan", []look{
			{0, []backends.Job{auditRow("a", 1)}, nil, nil},
			{grace, []backends.Job{auditRow("a", 1)}, nil, []string{"a"}},
		}},
		{"unknown twice, less than a grace apart: not yet", []look{
			{0, []backends.Job{auditRow("a", 1)}, nil, nil},
			{grace - time.Millisecond, []backends.Job{auditRow("a", 1)}, nil, nil},
			{grace, []backends.Job{auditRow("a", 1)}, nil, []string{"a"}},
		}},
		{"known in between: suspicion starts again", []look{
			{0, []backends.Job{auditRow("a", 1)}, nil, nil},
			{grace, []backends.Job{auditRow("a", 1)}, []string{"a"}, nil},
			{2 * grace, []backends.Job{auditRow("a", 1)}, nil, nil},
			{3 * grace, []backends.Job{auditRow("a", 1)}, nil, []string{"a"}},
		}},
		{"claimed again (another attempt): suspicion starts again", []look{
			{0, []backends.Job{auditRow("a", 1)}, nil, nil},
			{grace, []backends.Job{auditRow("a", 2)}, nil, nil},
			{2 * grace, []backends.Job{auditRow("a", 2)}, nil, []string{"a"}},
		}},
		{"gone in between: forgotten", []look{
			{0, []backends.Job{auditRow("a", 1)}, nil, nil},
			{grace, nil, nil, nil},
			{2 * grace, []backends.Job{auditRow("a", 1)}, nil, nil},
		}},
		{"an orphan is reported once; seen again it starts over", []look{
			{0, []backends.Job{auditRow("a", 1), auditRow("b", 1)}, []string{"b"}, nil},
			{grace, []backends.Job{auditRow("a", 1), auditRow("b", 1)}, []string{"b"}, []string{"a"}},
			{2 * grace, []backends.Job{auditRow("a", 1)}, nil, nil},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var tr AuditTracker
			for i, l := range tt.looks {
				known := map[string]bool{}
				for _, id := range l.known {
					known[id] = true
				}
				got := tr.Observe(l.rows, t0.Add(l.after), grace, func(id string) bool { return known[id] })
				want := l.want
				if want == nil {
					want = []string{}
				}
				assert.Equal(t, want, auditIDs(got), "look %d", i)
			}
		})
	}
}

func TestTrackerReset(t *testing.T) {
	var tr AuditTracker
	t0 := time.Now()
	unknown := func(string) bool { return false }
	tr.Observe([]backends.Job{auditRow("a", 1)}, t0, time.Second, unknown)
	require.Equal(t, 1, tr.Suspects())
	tr.Reset()
	assert.Empty(t, tr.Observe([]backends.Job{auditRow("a", 1)}, t0.Add(time.Hour), time.Second, unknown))
}

type fakeAuditReader struct {
	mu    sync.Mutex
	calls int
	err   error
}

func (f *fakeAuditReader) ProcessingJobs(ctx context.Context, workerID string) ([]backends.Job, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	return []backends.Job{auditRow("a", f.calls)}, f.err
}

func TestAuditorReadsEveryInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &fakeAuditReader{}
		var mu sync.Mutex
		var readings []AuditReading
		a := NewAuditor(AuditConfig{Backend: r, WorkerID: "w", Interval: time.Minute,
			Report: func(rd AuditReading) { mu.Lock(); readings = append(readings, rd); mu.Unlock() }})
		a.Stop() // never started: nothing to do
		a.Start(t.Context())
		a.Start(t.Context()) // a second Start does nothing
		time.Sleep(time.Minute - time.Second)
		synctest.Wait()
		mu.Lock()
		assert.Empty(t, readings, "the first reading is a whole interval after the start")
		mu.Unlock()
		time.Sleep(2*time.Minute + 2*time.Second)
		synctest.Wait()
		a.Stop()
		a.Stop()
		mu.Lock()
		require.Len(t, readings, 3)
		assert.Equal(t, 3, readings[2].Rows[0].Attempts)
		mu.Unlock()

		r.mu.Lock()
		r.err = errors.New("connection refused")
		r.mu.Unlock()
		readings = nil
		b := NewAuditor(AuditConfig{Backend: r, WorkerID: "w", Interval: time.Minute,
			Report: func(rd AuditReading) { mu.Lock(); readings = append(readings, rd); mu.Unlock() }})
		b.Start(t.Context())
		time.Sleep(time.Minute + time.Second)
		synctest.Wait()
		b.Stop()
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, readings, 1)
		assert.ErrorContains(t, readings[0].Err, "self-audit: read the rows processing under worker w: connection refused")
	})
}
