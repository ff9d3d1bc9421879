package supervisor

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/internal/config"
	"github.com/soniq-dev/soniq-sidecar/internal/memory"
)

// testMetrics are the supervisor's instruments on an SDK meter whose
// readings the test collects by hand.
func testMetrics(t *testing.T) (*Metrics, *sdkmetric.ManualReader) {
	t.Helper()
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	m, err := NewMetrics(mp.Meter("test"))
	require.NoError(t, err)
	return m, r
}

// collected returns the instrument called name from one collection.
func collected(t *testing.T, r *sdkmetric.ManualReader, name string) (metricdata.Aggregation, bool) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, r.Collect(context.Background(), &rm))
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				return m.Data, true
			}
		}
	}
	return nil, false
}

// counterValue is the sum of a counter's data points (0 when never added to).
func counterValue(t *testing.T, r *sdkmetric.ManualReader, name string) int64 {
	t.Helper()
	d, ok := collected(t, r, name)
	if !ok {
		return 0
	}
	sum, ok := d.(metricdata.Sum[int64])
	require.True(t, ok, "%s is a %T, not an int64 sum", name, d)
	var v int64
	for _, p := range sum.DataPoints {
		v += p.Value
	}
	return v
}

// The pickup delay is measured on the rows' own timestamps: from the later
// of created_at and scheduled_at to the claim's updated_at.
func TestPickupDelayFromTheRowsTimestamps(t *testing.T) {
	base := time.Date(2026, 1, 2, 10, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { v := base.Add(d); return &v }
	tests := []struct {
		name      string
		created   time.Time
		scheduled *time.Time
		claimed   time.Time
		want      float64
	}{
		{"enqueued for now", base, nil, base.Add(2 * time.Second), 2},
		{"scheduled for later: counted from scheduled_at", base.Add(-time.Hour), at(0), base.Add(500 * time.Millisecond), 0.5},
		{"scheduled before it was created: counted from created_at", base, at(-time.Minute), base.Add(3 * time.Second), 3},
		{"a retry's backoff ends after the claim's clock reading: never negative", base, at(time.Second), base, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, r := testMetrics(t)
			m.jobsClaimed([]backends.Job{{ID: "j", Name: "emails.send", Queue: "mail", CreatedAt: tc.created, ScheduledAt: tc.scheduled, UpdatedAt: tc.claimed}})
			d, ok := collected(t, r, "soniq_job_pickup_delay")
			require.True(t, ok, "soniq_job_pickup_delay recorded")
			h, ok := d.(metricdata.Histogram[float64])
			require.True(t, ok, "a float64 histogram, got %T", d)
			require.Len(t, h.DataPoints, 1)
			p := h.DataPoints[0]
			assert.Equal(t, uint64(1), p.Count)
			assert.InDelta(t, tc.want, p.Sum, 1e-9)
			q, _ := p.Attributes.Value(attribute.Key("queue"))
			n, _ := p.Attributes.Value(attribute.Key("job_name"))
			assert.Equal(t, "mail", q.AsString())
			assert.Equal(t, "emails.send", n.AsString())
			assert.Equal(t, int64(1), counterValue(t, r, "soniq_jobs_claimed"), "the claim is counted too")
		})
	}
}

// The maintenance pass counts the silent workers it recovers and the jobs it
// puts back to queued, once each.
func TestMaintenanceCountsRecoveredStaleWorkers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		mem := memory.New()
		stale := backends.NewID()
		require.NoError(t, mem.RegisterWorker(ctx, backends.Worker{ID: stale, Hostname: "gone", PID: 7, Status: "active", Concurrency: 1}))
		for range 2 {
			_, err := mem.Enqueue(ctx, backends.EnqueueParams{Name: "examples.add"})
			require.NoError(t, err)
		}
		claimed, err := mem.Claim(ctx, backends.ClaimParams{WorkerID: stale, Names: []string{"examples.add"}, Limit: 2})
		require.NoError(t, err)
		require.Len(t, claimed, 2)
		require.NoError(t, mem.BackdateHeartbeat(ctx, stale, 10*time.Minute))

		m, r := testMetrics(t)
		settings := fakeSettings(30*time.Second, time.Minute)
		settings.HeartbeatTimeout = time.Minute
		sup, err := New(Config{Manifest: examplesManifest(t), Settings: settings, Backend: mem, Metrics: m})
		require.NoError(t, err)
		for _, name := range []string{"soniq_stale_workers_recovered", "soniq_stale_jobs_requeued"} {
			_, ok := collected(t, r, name)
			assert.True(t, ok, "%s is exported at 0 before any recovery", name)
			assert.Zero(t, counterValue(t, r, name))
		}

		maint := sup.newMaintainer()
		maint.Start(ctx) // a pass at once
		t.Cleanup(maint.Stop)
		synctest.Wait()
		assert.Equal(t, int64(1), counterValue(t, r, "soniq_stale_workers_recovered"))
		assert.Equal(t, int64(2), counterValue(t, r, "soniq_stale_jobs_requeued"))
		st, err := mem.Stats(ctx)
		require.NoError(t, err)
		assert.Equal(t, int64(2), st.Queued, "the rows are queued again")

		time.Sleep(settings.CleanupInterval) // the next pass: nothing left to recover
		synctest.Wait()
		assert.Equal(t, int64(1), counterValue(t, r, "soniq_stale_workers_recovered"))
		assert.Equal(t, int64(2), counterValue(t, r, "soniq_stale_jobs_requeued"))
	})
}

func TestLastShutdownNack(t *testing.T) {
	m, _ := testMetrics(t)
	assert.True(t, m.LastShutdownNack().IsZero(), "no NACK yet")
	before := time.Now()
	m.shutdownNack("default", "emails.send", "shutdown_timeout")
	assert.False(t, m.LastShutdownNack().Before(before), "the NACK's time is kept")
	var none *Metrics
	assert.True(t, none.LastShutdownNack().IsZero())
}

// soniq_handler_jobs_in_progress counts a handler's running jobs, whatever
// their names, next to soniq_jobs_in_progress per job name.
func TestHandlerJobsInProgress(t *testing.T) {
	m, r := testMetrics(t)
	billing := &pool{h: &config.Handler{Name: "billing"}}
	mail := &pool{h: &config.Handler{Name: "mail"}}
	tasks := []*task{
		{job: &backends.Job{Queue: "default", Name: "billing.charge"}, pool: billing, startedAt: time.Now()},
		{job: &backends.Job{Queue: "default", Name: "billing.receipt"}, pool: billing, startedAt: time.Now()},
		{job: &backends.Job{Queue: "mail", Name: "mail.send"}, pool: mail, startedAt: time.Now()},
	}
	for _, tk := range tasks {
		m.jobStarted(tk)
	}
	m.jobEnded(tasks[0], "done")
	d, ok := collected(t, r, "soniq_handler_jobs_in_progress")
	require.True(t, ok)
	sum, ok := d.(metricdata.Sum[int64])
	require.True(t, ok, "%T", d)
	got := map[string]int64{}
	for _, p := range sum.DataPoints {
		h, _ := p.Attributes.Value(attribute.Key("handler"))
		got[h.AsString()] = p.Value
	}
	assert.Equal(t, map[string]int64{"billing": 1, "mail": 1}, got)
	assert.Equal(t, int64(1), counterValue(t, r, "soniq_jobs_completed"))
}

// The records made for every job (its pickup delay when claimed, its run
// time when it ends, its wait in the reserve, the size of its claim)
// allocate nothing once their labels have been used: at full load they run
// tens of thousands of times a second, and their allocations were a fifth
// of the sidecar's.
func TestPerJobRecordsDoNotAllocate(t *testing.T) {
	m, _ := testMetrics(t)
	pl := &pool{h: &config.Handler{Name: "billing"}}
	now := time.Now()
	tk := &task{job: &backends.Job{Queue: "default", Name: "billing.charge"}, pool: pl, startedAt: now}
	claimed := []backends.Job{{Queue: "default", Name: "billing.charge", CreatedAt: now.Add(-time.Millisecond), UpdatedAt: now}}
	for _, tt := range []struct {
		name   string
		record func()
	}{
		{"pickup delay", func() { m.jobsClaimed(claimed) }},
		{"run time", func() { m.jobStarted(tk); m.jobEnded(tk, "done") }},
		{"reserve wait", func() { m.reserveWaited("billing", time.Millisecond) }},
		{"reserve size", func() { m.reserveSize("billing", 10, 20) }},
		{"claim rows", func() { m.claimRows("billing", 10) }},
	} {
		tt.record() // the first use builds the labels
		assert.Zero(t, testing.AllocsPerRun(200, tt.record), tt.name)
	}
}
