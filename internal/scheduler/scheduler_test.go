package scheduler

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/internal/memory"
	"github.com/soniq-dev/soniq-sidecar/internal/schedule"
)

// jobsNamed is how often a schedule fired (its run count).
func jobsNamed(t *testing.T, b *memory.Backend, name string) int {
	t.Helper()
	list, err := b.ListSchedules(t.Context())
	require.NoError(t, err)
	for _, s := range list {
		if s.Name == name {
			return s.RunCount
		}
	}
	return -1
}

func declare(t *testing.T, b backends.Schedules, name string, spec schedule.Spec, next time.Time) backends.Schedule {
	t.Helper()
	s, _, err := b.UpsertSchedule(t.Context(), backends.ScheduleParams{Name: name, Type: spec.Type, Value: spec.Value, NextRun: next})
	require.NoError(t, err)
	return s
}

func TestIntervalScheduleFiresEveryInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		every5, _ := schedule.Every(5 * time.Second)
		declare(t, b, "every5", every5, every5.Next(time.Now()))
		s := New(Config{Backend: b, ProducerID: "me"})
		s.Start(t.Context())
		time.Sleep(30*time.Second + 500*time.Millisecond)
		s.Stop()
		// Due at 5, 10, ..., 30 s; each fired at the first tick at or after it.
		assert.Equal(t, 6, jobsNamed(t, b, "every5"))
	})
}

func TestMissedRunsFireOnceOnCatchUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		minute, _ := schedule.Every(time.Minute)
		hourly, _ := schedule.Cron("0 * * * *")
		// Every scheduler was down for three hours: 180 interval runs and
		// three hourly runs were missed.
		declare(t, b, "minutely", minute, time.Now().Add(-3*time.Hour))
		declare(t, b, "hourly", hourly, time.Now().Add(-3*time.Hour))
		var logs bytes.Buffer
		s := New(Config{Backend: b, Log: slog.New(slog.NewTextHandler(&logs, nil))})
		start := time.Now()
		s.Tick(t.Context())
		assert.Equal(t, 1, jobsNamed(t, b, "minutely"), "one catch-up firing, not one per missed run")
		assert.Equal(t, 1, jobsNamed(t, b, "hourly"))
		list, err := b.ListSchedules(t.Context())
		require.NoError(t, err)
		for _, sc := range list {
			spec, err := schedule.Parse(sc.Type, sc.Value)
			require.NoError(t, err)
			assert.Equal(t, spec.Next(start), sc.NextRun.UTC(), "%s: the next run counts from the catch-up", sc.Name)
		}
		// Nothing more until then.
		for range 30 {
			time.Sleep(time.Second)
			s.Tick(t.Context())
		}
		assert.Equal(t, 1, jobsNamed(t, b, "minutely"))
		time.Sleep(31 * time.Second)
		s.Tick(t.Context())
		assert.Equal(t, 2, jobsNamed(t, b, "minutely"))
		assert.Contains(t, logs.String(), "late=3h0m0s")
	})
}

func TestPausedSchedulesDoNotFireAndResumeCatchesUpOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		sec, _ := schedule.Every(time.Second)
		declare(t, b, "s", sec, time.Now())
		require.NoError(t, b.SetScheduleStatus(t.Context(), "s", backends.SchedulePaused))
		s := New(Config{Backend: b})
		s.Start(t.Context())
		time.Sleep(10*time.Second + 500*time.Millisecond) // between ticks
		assert.Equal(t, 0, jobsNamed(t, b, "s"))
		require.NoError(t, b.SetScheduleStatus(t.Context(), "s", backends.ScheduleActive))
		time.Sleep(time.Second)
		s.Stop()
		assert.Equal(t, 1, jobsNamed(t, b, "s"), "resumed: one catch-up run, not ten")
	})
}

func TestTwoSchedulersOnOneStoreFireEachRunOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		sec, _ := schedule.Every(time.Second)
		declare(t, b, "s", sec, time.Now())
		a, c := New(Config{Backend: b}), New(Config{Backend: b})
		a.Start(t.Context())
		c.Start(t.Context())
		time.Sleep(20*time.Second + 500*time.Millisecond)
		a.Stop()
		c.Stop()
		st, err := b.Stats(t.Context())
		require.NoError(t, err)
		assert.Equal(t, int64(21), st.Queued, "due at 0, 1, ..., 20 s: each once")
		assert.Equal(t, 21, jobsNamed(t, b, "s"))
	})
}

func TestFiredJobIsTheSchedules(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		ctx := t.Context()
		_, _, err := b.UpsertSchedule(ctx, backends.ScheduleParams{Name: "report", Type: schedule.TypeCron, Value: "* * * * *",
			NextRun: time.Now(), Args: json.RawMessage(`{"a":1}`), Queue: "reports", Priority: intp(4), MaxAttempts: intp(8)})
		require.NoError(t, err)
		New(Config{Backend: b, ProducerID: "host:1:soniq-sidecar:w"}).Tick(ctx)
		list, err := b.ListSchedules(ctx)
		require.NoError(t, err)
		require.NotNil(t, list[0].LastJobID)
		j, err := b.Get(ctx, *list[0].LastJobID)
		require.NoError(t, err)
		assert.Equal(t, "report", j.Name)
		assert.JSONEq(t, `{"a":1}`, string(j.Args))
		assert.Equal(t, "reports", j.Queue)
		assert.Equal(t, 4, j.Priority)
		assert.Equal(t, 8, j.MaxAttempts)
		assert.Equal(t, "host:1:soniq-sidecar:w", *j.ProducerID)
	})
}

func intp(v int) *int { return &v }

// unreadable is a store whose one due schedule has a value nobody can read.
type unreadable struct {
	*memory.Backend
	mu    sync.Mutex
	calls int
}

func (u *unreadable) DueSchedules(ctx context.Context, now time.Time) ([]backends.Schedule, error) {
	u.mu.Lock()
	u.calls++
	u.mu.Unlock()
	past := now.Add(-time.Minute)
	return []backends.Schedule{{ID: "id-1", Name: "broken", Type: "cron", Value: "every day", Status: "active", NextRun: &past}}, nil
}

func TestUnreadableScheduleIsReportedOnce(t *testing.T) {
	u := &unreadable{Backend: memory.New()}
	var logs bytes.Buffer
	s := New(Config{Backend: u, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	for range 5 {
		s.Tick(t.Context())
	}
	assert.Equal(t, 5, u.calls)
	assert.Equal(t, 1, strings.Count(logs.String(), "schedule cannot be read"), logs.String())
	assert.Contains(t, logs.String(), "job_name=broken")
}

// failingStore cannot read its schedules (a table not migrated yet).
type failingStore struct{ *memory.Backend }

func (failingStore) DueSchedules(context.Context, time.Time) ([]backends.Schedule, error) {
	return nil, errors.New(`relation "soniq_recurring_jobs" does not exist`)
}

func TestARepeatedFailureIsLoggedOnce(t *testing.T) {
	var logs bytes.Buffer
	s := New(Config{Backend: failingStore{memory.New()}, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	for range 10 {
		s.Tick(t.Context())
	}
	assert.Equal(t, 1, strings.Count(logs.String(), "reading due schedules failed"), logs.String())
}

// recorder is the in-memory store with a leadership a test switches, and
// a record of when each firing happened.
type recorder struct {
	*memory.Backend
	lead  atomic.Bool
	mu    sync.Mutex
	fired []time.Time
	// latencies is how long each look at the lock, read and firing
	// takes in turn (a database's round trips, in the bubble's time, which
	// never vary otherwise); none when empty.
	latencies []time.Duration
	calls     int
}

// roundTrip waits the next latency.
func (r *recorder) roundTrip() {
	r.mu.Lock()
	var d time.Duration
	if len(r.latencies) > 0 {
		d = r.latencies[r.calls%len(r.latencies)]
		r.calls++
	}
	r.mu.Unlock()
	time.Sleep(d)
}

func (r *recorder) DueSchedules(ctx context.Context, at time.Time) ([]backends.Schedule, error) {
	r.roundTrip()
	return r.Backend.DueSchedules(ctx, at)
}

func newRecorder() *recorder {
	r := &recorder{Backend: memory.New()}
	r.lead.Store(true)
	return r
}

func (r *recorder) FireSchedule(ctx context.Context, f backends.ScheduleFiring) (backends.Job, bool, error) {
	r.roundTrip()
	j, fired, err := r.Backend.FireSchedule(ctx, f)
	if fired {
		r.mu.Lock()
		r.fired = append(r.fired, f.FiredAt)
		r.mu.Unlock()
	}
	return j, fired, err
}

// firedAt is when each firing happened, as offsets from start.
func (r *recorder) firedAt(start time.Time) []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []time.Duration
	for _, f := range r.fired {
		out = append(out, f.Sub(start.UTC().Truncate(time.Microsecond)))
	}
	return out
}

func (r *recorder) ScheduleLeader() backends.ScheduleLeader { return switchedLeader{r} }

type switchedLeader struct{ r *recorder }

func (l switchedLeader) Hold(context.Context) (bool, func(), error) {
	l.r.roundTrip()
	return l.r.lead.Load(), func() {}, nil
}
func (switchedLeader) Close(context.Context) {}

func seconds(s ...float64) []time.Duration {
	out := make([]time.Duration, len(s))
	for i, v := range s {
		out[i] = time.Duration(v * float64(time.Second))
	}
	return out
}

func TestTimerFiresAtNextRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder()
		start := time.Now()
		every5, _ := schedule.Every(5 * time.Second)
		declare(t, r, "every5", every5, start.Add(1300*time.Millisecond))
		s := New(Config{Backend: r})
		s.Start(t.Context())
		time.Sleep(12 * time.Second)
		s.Stop()
		// At its due time, not at the first look after it, and the next
		// run counts from the due time: no drift.
		assert.Equal(t, seconds(1.3, 6.3, 11.3), r.firedAt(start))
	})
}

func TestOneSecondScheduleFiresEverySecondWithoutDrift(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder()
		// Each look at the lock, read and firing takes a few ms: a
		// firing is that much past its due time, and those milliseconds
		// must not add up.
		r.latencies = []time.Duration{3 * time.Millisecond, 7 * time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond, 4 * time.Millisecond}
		start := time.Now()
		sec, _ := schedule.Every(time.Second)
		declare(t, r, "a", sec, start.Add(10*time.Millisecond))
		declare(t, r, "b", sec, start.Add(990*time.Millisecond))
		s := New(Config{Backend: r})
		s.Start(t.Context())
		time.Sleep(27*time.Second + 500*time.Millisecond)
		s.Stop()
		// Every run at its due time: 28 of a (0.01 s to 27.01 s) and 27
		// of b (0.99 s to 26.99 s). Counted from the firings instead,
		// each run would start a few ms late, a look once a second would
		// miss it whenever the next look came sooner, and the schedules
		// fired about 18 times each.
		var want []time.Duration
		for k := range 28 {
			want = append(want, time.Duration(k)*time.Second+10*time.Millisecond)
			if k < 27 {
				want = append(want, time.Duration(k)*time.Second+990*time.Millisecond)
			}
		}
		assert.Equal(t, want, r.firedAt(start))
	})
}

func TestChangedScheduleReArmsTheTimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder()
		start := time.Now()
		minute, _ := schedule.Every(time.Minute)
		declare(t, r, "x", minute, start.Add(30*time.Second))
		s := New(Config{Backend: r})
		s.Start(t.Context())
		time.Sleep(500 * time.Millisecond)
		// Declared again elsewhere (a `schedule add` in another process)
		// with a new timing: seen at the next look, then fired on time.
		every10, _ := schedule.Every(10 * time.Second)
		declare(t, r, "x", every10, start.Add(2250*time.Millisecond))
		time.Sleep(13 * time.Second)
		s.Stop()
		assert.Equal(t, seconds(2.25, 12.25), r.firedAt(start))
	})
}

func TestLeadershipLossStopsTheTimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder()
		start := time.Now()
		sec, _ := schedule.Every(time.Second)
		declare(t, r, "s", sec, start.Add(500*time.Millisecond))
		s := New(Config{Backend: r})
		s.Start(t.Context())
		time.Sleep(3 * time.Second)
		r.lead.Store(false) // the timer is armed for 3.5 s
		time.Sleep(5 * time.Second)
		assert.Equal(t, seconds(0.5, 1.5, 2.5), r.firedAt(start), "nothing fired while another scheduler led")
		r.lead.Store(true)
		time.Sleep(3 * time.Second)
		s.Stop()
		// Led again at 8 s: the next look (by 9 s) catches up once, then
		// every second from there.
		got := r.firedAt(start)
		require.Len(t, got, 6, "%v", got)
		assert.LessOrEqual(t, got[3], 9*time.Second)
		assert.Equal(t, got[3]+time.Second, got[4])
	})
}

// releaseRecorder is the in-memory store with a leadership whose release
// records the deadline it was given.
type releaseRecorder struct {
	*memory.Backend
	mu       sync.Mutex
	released []time.Time // each Close's deadline; zero for none
}

func (r *releaseRecorder) ScheduleLeader() backends.ScheduleLeader { return recordedRelease{r} }

type recordedRelease struct{ r *releaseRecorder }

func (recordedRelease) Hold(context.Context) (bool, func(), error) { return true, func() {}, nil }
func (l recordedRelease) Close(ctx context.Context) {
	d, _ := ctx.Deadline()
	l.r.mu.Lock()
	l.r.released = append(l.r.released, d)
	l.r.mu.Unlock()
}

// A shutdown stops the scheduler by its write deadline: the leadership's
// release waits for the database until then at most (over a partition
// it waited its own 5 s past the deadline). Stop sets none.
func TestStopByBoundsTheLeadershipsRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &releaseRecorder{Backend: memory.New()}
		deadline := time.Now().Add(2 * time.Second)
		s := New(Config{Backend: r})
		s.Start(t.Context())
		time.Sleep(1500 * time.Millisecond)
		s.StopBy(deadline)

		plain := New(Config{Backend: r})
		plain.Start(t.Context())
		time.Sleep(1500 * time.Millisecond)
		plain.Stop()

		r.mu.Lock()
		defer r.mu.Unlock()
		require.Len(t, r.released, 2, "each scheduler gave its leadership up once")
		assert.True(t, r.released[0].Equal(deadline), "StopBy's deadline: %v", r.released[0])
		assert.True(t, r.released[1].IsZero(), "Stop: the leadership's own bound")
	})
}
