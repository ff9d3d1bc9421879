package maintenance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/internal/logtest"
	"github.com/soniq-dev/soniq-sidecar/internal/memory"
)

// fakeBackend answers the calls the services make with what a test set,
// and counts them; any other call panics (the embedded nil Backend).
type fakeBackend struct {
	backends.Backend
	mu         sync.Mutex
	beatErr    error
	beats      []time.Time
	leader     bool
	leaderErr  error
	released   int
	releasedBy []time.Time // each release's deadline; zero for none
	recoverErr error
	recovered  [2]int // workers, jobs a recovery reports
	recoveries int
	expiredErr error
	expired    int
	deletions  int
	statsErr   error
	stats      []time.Time
	// What the claim log's pruning reads and is asked.
	overrides []backends.LimitOverride
	live      []backends.Worker
	readErr   error
	pruned    int
	pruneErr  error
	prunes    []backends.ClaimLogPrune
}

func (f *fakeBackend) LimitOverrides(context.Context) ([]backends.LimitOverride, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.overrides, f.readErr
}

func (f *fakeBackend) LiveWorkers(context.Context, time.Duration) ([]backends.Worker, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.live, nil
}

func (f *fakeBackend) PruneLimitClaims(_ context.Context, p backends.ClaimLogPrune) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.prunes = append(f.prunes, p)
	return f.pruned, f.pruneErr
}

func (f *fakeBackend) Heartbeat(ctx context.Context, _ string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.beats = append(f.beats, time.Now())
	return f.beatErr
}

func (f *fakeBackend) TryLeader(context.Context) (func(context.Context), bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.leaderErr != nil || !f.leader {
		return nil, false, f.leaderErr
	}
	return func(ctx context.Context) {
		d, _ := ctx.Deadline()
		f.mu.Lock()
		f.released++
		f.releasedBy = append(f.releasedBy, d)
		f.mu.Unlock()
	}, true, nil
}

func (f *fakeBackend) RecoverStaleWorkers(context.Context, time.Duration, string) (int, int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.recoveries++
	if f.recoverErr != nil {
		return 0, 0, f.recoverErr
	}
	return f.recovered[0], f.recovered[1], nil
}

func (f *fakeBackend) DeleteExpired(context.Context) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deletions++
	return f.expired, f.expiredErr
}

func (f *fakeBackend) Stats(context.Context) (backends.Stats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stats = append(f.stats, time.Now())
	return backends.Stats{Queued: int64(len(f.stats))}, f.statsErr
}

// recorder captures log lines.
type recorder struct {
	mu      sync.Mutex
	records []logtest.Record
}

func (r *recorder) logger() *slog.Logger {
	return slog.New(logtest.Handler{Mu: &r.mu, Records: &r.records})
}

func (r *recorder) messages() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, rec := range r.records {
		out = append(out, rec.Msg)
	}
	return out
}

// A heartbeat that finds the row gone or no longer active reports it as
// lost; any other failure is logged, and the beats go on.
func TestHeartbeatOutcomes(t *testing.T) {
	tests := []struct {
		name     string
		err      error
		wantLost bool
		wantWarn bool
	}{
		{"beat written", nil, false, false},
		{"row gone", backends.ErrNotFound, true, false},
		{"row stopped", backends.ErrWorkerNotActive, true, false},
		{"row gone, wrapped", fmt.Errorf("heartbeat of worker w: %w", backends.ErrNotFound), true, false},
		{"database unreachable", errors.New("connection refused"), false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := &fakeBackend{beatErr: tt.err}
				var logs recorder
				var lost []error
				h := NewHeartbeat(HeartbeatConfig{Backend: f, WorkerID: "w", Interval: time.Second, Log: logs.logger(),
					Lost: func(err error) { lost = append(lost, err) }})
				h.Start(t.Context())
				time.Sleep(2*time.Second + time.Millisecond)
				synctest.Wait()
				h.Stop()
				assert.Len(t, f.beats, 2, "one beat per interval, none at start")
				if tt.wantLost {
					assert.Len(t, lost, 2)
					assert.ErrorIs(t, lost[0], tt.err)
				} else {
					assert.Empty(t, lost)
				}
				if tt.wantWarn {
					assert.Equal(t, []string{"heartbeat failed", "heartbeat failed"}, logs.messages())
				} else {
					assert.Empty(t, logs.messages())
				}
			})
		})
	}
}

// A beat that lands after a silence longer than half of heartbeat_timeout
// (the database away, a failover) says so once; a shorter one says nothing.
func TestHeartbeatWarnsAfterALongSilence(t *testing.T) {
	for _, tt := range []struct {
		name   string
		failed int // beats that fail before they land again
		want   []string
	}{
		{"a silence of 3 s against a timeout of 8 s", 2, []string{"heartbeat failed", "heartbeat failed"}},
		{"a silence of 5 s against a timeout of 8 s", 4, []string{"heartbeat failed", "heartbeat failed", "heartbeat failed", "heartbeat failed",
			"no heartbeat landed for more than half of heartbeat_timeout: a silence longer than the timeout lets another worker recover this sidecar's jobs and run them again; set heartbeat_timeout (on every worker of the database) above the longest outage you expect"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := &fakeBackend{}
				var logs recorder
				h := NewHeartbeat(HeartbeatConfig{Backend: f, WorkerID: "w", Interval: time.Second, Timeout: 8 * time.Second, Log: logs.logger()})
				h.Start(t.Context())
				time.Sleep(time.Second + time.Millisecond) // one beat lands
				synctest.Wait()
				f.mu.Lock()
				f.beatErr = errors.New("connection refused")
				f.mu.Unlock()
				time.Sleep(time.Duration(tt.failed) * time.Second)
				synctest.Wait()
				f.mu.Lock()
				f.beatErr = nil
				f.mu.Unlock()
				time.Sleep(3 * time.Second) // the next beat lands, then two more
				synctest.Wait()
				h.Stop()
				assert.Equal(t, tt.want, logs.messages())
			})
		})
	}
}

// Stop ends the goroutine and returns once it has; a second Start or Stop
// does nothing, and Stop before Start returns at once.
func TestServiceStartStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeBackend{}
		h := NewHeartbeat(HeartbeatConfig{Backend: f, WorkerID: "w", Interval: time.Second})
		h.Stop()
		h.Start(t.Context())
		h.Start(t.Context())
		time.Sleep(time.Second + time.Millisecond)
		synctest.Wait()
		h.Stop()
		h.Stop()
		time.Sleep(10 * time.Second)
		assert.Len(t, f.beats, 1, "one goroutine, and none after Stop")
	})
}

func TestWorkerRowLost(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{backends.ErrNotFound, true},
		{backends.ErrWorkerNotActive, true},
		{fmt.Errorf("claiming: %w", backends.ErrWorkerNotActive), true},
		{context.DeadlineExceeded, false},
	} {
		assert.Equal(t, tt.want, WorkerRowLost(tt.err), "%v", tt.err)
	}
}

// A pass does its work only as the leader, and gives the leadership back;
// what it found is reported and logged.
func TestMaintainerPass(t *testing.T) {
	tests := []struct {
		name           string
		f              *fakeBackend
		wantRecovered  [][2]int
		wantRecoveries int
		wantLogs       []string
	}{
		{name: "not the leader", f: &fakeBackend{leader: false},
			wantLogs: []string{"maintenance: another worker leads; this pass skipped"}},
		{name: "leader election failed", f: &fakeBackend{leaderErr: errors.New("connection refused")},
			wantLogs: []string{"maintenance: leader election failed"}},
		{name: "nothing to do", f: &fakeBackend{leader: true}, wantRecoveries: 1,
			wantLogs: []string{"maintenance: leader", "maintenance: leadership released"}},
		{name: "stale workers and expired rows", f: &fakeBackend{leader: true, recovered: [2]int{2, 5}, expired: 3},
			wantRecovered: [][2]int{{2, 5}}, wantRecoveries: 1,
			wantLogs: []string{"maintenance: leader", "maintenance: recovered stale workers; their jobs are queued again",
				"maintenance: deleted expired results", "maintenance: leadership released"}},
		{name: "both fail", f: &fakeBackend{leader: true, recoverErr: errors.New("boom"), expiredErr: errors.New("boom")},
			wantRecoveries: 1,
			wantLogs: []string{"maintenance: leader", "maintenance: stale-worker recovery failed",
				"maintenance: deleting expired results failed", "maintenance: leadership released"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs recorder
			var recovered [][2]int
			m := NewMaintainer(MaintainerConfig{Backend: tt.f, WorkerID: "w", HeartbeatTimeout: time.Minute, Log: logs.logger(),
				Recovered: func(w, j int) { recovered = append(recovered, [2]int{w, j}) }})
			m.pass(t.Context())
			assert.Equal(t, tt.wantRecovered, recovered)
			assert.Equal(t, tt.wantRecoveries, tt.f.recoveries)
			assert.Equal(t, tt.wantRecoveries, tt.f.deletions, "expired rows are deleted in every pass as the leader")
			assert.Equal(t, tt.wantRecoveries, tt.f.released, "the leadership is given back")
			assert.Equal(t, tt.wantLogs, logs.messages())
		})
	}
}

// A follower that cannot lead says so at DEBUG on every pass, and once at
// WARN when it has not led for longer than a leader can keep leadership
// (backends.LeaderHoldLimit); leading again starts the count afresh.
func TestMaintainerFollowerWarnsOnceLeadershipIsUnavailableTooLong(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeBackend{leader: false}
		var logs recorder
		m := NewMaintainer(MaintainerConfig{Backend: f, WorkerID: "w", Interval: 10 * time.Second,
			HeartbeatTimeout: time.Minute, Log: logs.logger()})
		m.Start(t.Context())
		defer m.Stop()
		warns := func() int {
			logs.mu.Lock()
			defer logs.mu.Unlock()
			n := 0
			for _, r := range logs.records {
				if strings.HasPrefix(r.Msg, "maintenance: leadership held by another worker for longer") {
					n++
				}
			}
			return n
		}
		debugs := func() int {
			logs.mu.Lock()
			defer logs.mu.Unlock()
			n := 0
			for _, r := range logs.records {
				if r.Msg == "maintenance: another worker leads; this pass skipped" {
					n++
				}
			}
			return n
		}
		time.Sleep(backends.LeaderHoldLimit - time.Second)
		synctest.Wait()
		assert.Equal(t, 0, warns(), "not yet longer than a leader may hold it")
		assert.Equal(t, 5, debugs(), "every refused pass at DEBUG")
		time.Sleep(10 * time.Second)
		synctest.Wait()
		assert.Equal(t, 1, warns(), "past the bound")
		time.Sleep(time.Minute)
		synctest.Wait()
		assert.Equal(t, 1, warns(), "once, not every pass")

		f.mu.Lock()
		f.leader = true
		f.mu.Unlock()
		time.Sleep(10 * time.Second)
		f.mu.Lock()
		f.leader = false
		f.mu.Unlock()
		// The first refusal of the new spell is at the next pass; the
		// bound counts from there.
		time.Sleep(backends.LeaderHoldLimit + 20*time.Second)
		synctest.Wait()
		assert.Equal(t, 2, warns(), "a new spell without leadership warns again")
	})
}

// Against a real backend: a pass at start and then every Interval (the
// default when none is set) recovers a silent worker's jobs once.
func TestMaintainerRecoversStaleWorkers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		mem := memory.New()
		stale := backends.NewID()
		require.NoError(t, mem.RegisterWorker(ctx, backends.Worker{ID: stale, Hostname: "gone", PID: 7, Status: "active", Concurrency: 1}))
		for range 2 {
			_, err := mem.Enqueue(ctx, backends.EnqueueParams{Name: "x"})
			require.NoError(t, err)
		}
		claimed, err := mem.Claim(ctx, backends.ClaimParams{WorkerID: stale, Names: []string{"x"}, Limit: 2})
		require.NoError(t, err)
		require.Len(t, claimed, 2)
		require.NoError(t, mem.BackdateHeartbeat(ctx, stale, 10*time.Minute))

		var recovered [][2]int
		m := NewMaintainer(MaintainerConfig{Backend: mem, WorkerID: backends.NewID(), HeartbeatTimeout: time.Minute,
			Recovered: func(w, j int) { recovered = append(recovered, [2]int{w, j}) }})
		m.Start(ctx)
		t.Cleanup(m.Stop)
		synctest.Wait()
		assert.Equal(t, [][2]int{{1, 2}}, recovered, "the first pass runs at start")
		st, err := mem.Stats(ctx)
		require.NoError(t, err)
		assert.Equal(t, int64(2), st.Queued)

		time.Sleep(DefaultInterval)
		synctest.Wait()
		assert.Equal(t, [][2]int{{1, 2}}, recovered, "nothing left for the second pass")
	})
}

// The poller reads at start and every statsEvery; a failed read is not
// handed on.
func TestStatsPoller(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeBackend{}
		var got []int64
		p := NewStatsPoller(f, func(st backends.Stats) { got = append(got, st.Queued) })
		p.Start(t.Context())
		synctest.Wait()
		time.Sleep(statsEvery)
		synctest.Wait()
		f.mu.Lock()
		f.statsErr = errors.New("connection refused")
		f.mu.Unlock()
		time.Sleep(statsEvery)
		synctest.Wait()
		p.Stop()
		assert.Equal(t, []int64{1, 2}, got)
		assert.Len(t, f.stats, 3)
	})
}

// Each pass as the leader prunes the claim log past every rate window: a
// scope's horizon is the longest window the running sidecars declare for
// it or an override sets (of the scope or of a key), never under a day; a
// scope nobody names keeps its rows a day. A failure to read either
// prunes nothing.
func TestMaintainerPrunesTheClaimLogPastEveryRateWindow(t *testing.T) {
	live := []backends.Worker{
		{Metadata: []byte(`{"limits":{"a":{"rate_n":100,"rate_seconds":172800},"b":{"rate_n":10,"rate_seconds":60}}}`)},
		{Metadata: []byte(`{"limits":{"a":{"rate_n":100,"rate_seconds":86400},"d":{"concurrency":3}}}`)},
		{Metadata: []byte(`{}`)},
	}
	key := "acme"
	overrides := []backends.LimitOverride{
		{Scope: "c", RateN: 1, RatePer: 72 * time.Hour},
		{Scope: "b", Key: &key, RateN: 1, RatePer: 30 * time.Hour},
		{Scope: "b", NullKey: true, Concurrency: new(int)},
		{Scope: "e", RateN: 5, RatePer: time.Minute},
	}
	want := backends.ClaimLogPrune{
		Horizons: map[string]time.Duration{"a": 48 * time.Hour, "b": 30 * time.Hour, "c": 72 * time.Hour,
			"d": 24 * time.Hour, "e": 24 * time.Hour},
		Floor: 24 * time.Hour, Batch: claimLogBatch, Max: claimLogMax,
	}
	tests := []struct {
		name       string
		f          *fakeBackend
		wantPrunes []backends.ClaimLogPrune
		wantLog    string
	}{
		{name: "rows pruned", f: &fakeBackend{leader: true, live: live, overrides: overrides, pruned: 7},
			wantPrunes: []backends.ClaimLogPrune{want}, wantLog: "maintenance: pruned the limits' claim log of rows past every rate window"},
		{name: "nothing to prune", f: &fakeBackend{leader: true, live: live, overrides: overrides},
			wantPrunes: []backends.ClaimLogPrune{want}},
		{name: "pruning fails", f: &fakeBackend{leader: true, live: live, overrides: overrides, pruneErr: errors.New("boom")},
			wantPrunes: []backends.ClaimLogPrune{want}, wantLog: "maintenance: pruning the limits' claim log failed"},
		{name: "the overrides unread: nothing pruned", f: &fakeBackend{leader: true, live: live, readErr: errors.New("boom")},
			wantLog: "maintenance: pruning the limits' claim log failed"},
		{name: "no sidecar tables: nothing pruned, said at DEBUG", f: &fakeBackend{leader: true,
			readErr: fmt.Errorf("read the limits' overrides: %w", backends.ErrNoSchema)}, wantLog: "maintenance: no claim log to prune"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs recorder
			m := NewMaintainer(MaintainerConfig{Backend: tt.f, WorkerID: "w", HeartbeatTimeout: time.Minute, Log: logs.logger()})
			m.pass(t.Context())
			assert.Equal(t, tt.wantPrunes, tt.f.prunes)
			wantLogs := []string{"maintenance: leader", "maintenance: leadership released"}
			if tt.wantLog != "" {
				wantLogs = []string{"maintenance: leader", tt.wantLog, "maintenance: leadership released"}
			}
			assert.Equal(t, wantLogs, logs.messages())
		})
	}
}

// hungBackend's deletion waits for its context, as a statement does over
// a partition.
type hungBackend struct{ *fakeBackend }

func (h hungBackend) DeleteExpired(ctx context.Context) (int, error) {
	<-ctx.Done()
	return 0, ctx.Err()
}

// A shutdown stops the maintainer by its write deadline: a pass under way
// gives the leadership up within it. The leader's statements run on other
// sessions than its lock's, so the cut leaves the lock's session idle and
// its rollback waited its own 5 s past the deadline over a partition. Stop
// sets none (the backend's own bound).
func TestMaintainerStopByBoundsTheLeadershipsRelease(t *testing.T) {
	for _, tc := range []struct {
		name string
		by   bool
	}{{"StopBy", true}, {"Stop", false}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := &fakeBackend{leader: true}
				m := NewMaintainer(MaintainerConfig{Backend: hungBackend{f}, WorkerID: "w", HeartbeatTimeout: time.Minute})
				m.Start(t.Context())
				time.Sleep(time.Second) // the first pass hangs in its deletion
				deadline := time.Now().Add(2 * time.Second)
				if tc.by {
					m.StopBy(deadline)
				} else {
					m.Stop()
				}
				f.mu.Lock()
				defer f.mu.Unlock()
				require.Len(t, f.releasedBy, 1, "the pass gave the leadership up once")
				if tc.by {
					assert.True(t, f.releasedBy[0].Equal(deadline), "the release's deadline: %v", f.releasedBy[0])
				} else {
					assert.True(t, f.releasedBy[0].IsZero(), "no deadline: %v", f.releasedBy[0])
				}
			})
		})
	}
}
