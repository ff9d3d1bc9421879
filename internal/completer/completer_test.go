package completer

import (
	"context"
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
	"github.com/soniq-dev/soniq-sidecar/internal/logtest"
	"github.com/soniq-dev/soniq-sidecar/internal/memory"
)

// flakyBackend fails Complete a given number of times, standing in for a
// database that goes away and comes back (a fault that is hard to produce
// for real inside a unit test; the integration suite uses real Postgres).
type flakyBackend struct {
	backends.Backend
	failures atomic.Int32
	calls    atomic.Int32
}

func (f *flakyBackend) Complete(ctx context.Context, worker string, cs []backends.Completion) ([]string, error) {
	f.calls.Add(1)
	if f.failures.Add(-1) >= 0 {
		return nil, errors.New("connection refused")
	}
	return f.Backend.Complete(ctx, worker, cs)
}

func TestRetriesUntilTheDatabaseAccepts(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	worker := backends.NewID()
	require.NoError(t, mem.RegisterWorker(ctx, backends.Worker{ID: worker, Hostname: "h", PID: 1}))
	j, err := mem.Enqueue(ctx, backends.EnqueueParams{Name: "x"})
	require.NoError(t, err)
	_, err = mem.Claim(ctx, backends.ClaimParams{WorkerID: worker, Limit: 1})
	require.NoError(t, err)

	fb := &flakyBackend{Backend: mem}
	fb.failures.Store(3)
	w := New(Config{Backend: fb, WorkerID: worker})
	w.Start()
	w.Complete(backends.Completion{JobID: j.ID, Attempts: 1, Outcome: backends.OutcomeDone, ResultTTL: time.Minute})
	w.Stop()
	assert.EqualValues(t, 4, fb.calls.Load(), "three failures, then the write")
	got, err := mem.Get(ctx, j.ID)
	require.NoError(t, err)
	assert.Equal(t, backends.StatusDone, got.Status, "no result is lost to a passing outage")
}

// recordingBackend applies every write and records the batches, or fails
// every write when down is set.
type recordingBackend struct {
	backends.Backend
	mu          sync.Mutex
	completions [][]string
	nacks       [][]string
	down        bool
}

func (r *recordingBackend) Complete(_ context.Context, _ string, cs []backends.Completion) ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.down {
		return nil, errors.New("connection refused")
	}
	ids := make([]string, len(cs))
	for i, c := range cs {
		ids[i] = c.JobID
	}
	r.completions = append(r.completions, ids)
	return ids, nil
}

func (r *recordingBackend) Nack(_ context.Context, _ string, held []backends.Job) ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.down {
		return nil, errors.New("connection refused")
	}
	ids := make([]string, len(held))
	for i, j := range held {
		ids[i] = j.ID
	}
	r.nacks = append(r.nacks, ids)
	return ids, nil
}

func sizes(batches [][]string) []int {
	var n []int
	for _, b := range batches {
		n = append(n, len(b))
	}
	return n
}

// What was queued before Start goes out in batches of at most maxBatch
// rows, completions before NACKs, and Stop returns once it is written.
func TestBatchesAreBoundedAndStopDrains(t *testing.T) {
	cases := []struct {
		name                       string
		completions, nacks         int
		wantCompletions, wantNacks []int
	}{
		{"nothing", 0, 0, nil, nil},
		{"one of each", 1, 1, []int{1}, []int{1}},
		{"a full batch", maxBatch, 0, []int{maxBatch}, nil},
		{"more than a batch", 2*maxBatch + 7, maxBatch + 1, []int{maxBatch, maxBatch, 7}, []int{maxBatch, 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rb := &recordingBackend{}
			var afterWrite atomic.Int32
			w := New(Config{Backend: rb, WorkerID: backends.NewID(), AfterWrite: func() { afterWrite.Add(1) }})
			for range tc.completions {
				w.Complete(backends.Completion{JobID: backends.NewID(), Outcome: backends.OutcomeDone})
			}
			for range tc.nacks {
				w.Nack(backends.Job{ID: backends.NewID(), Attempts: 1})
			}
			assert.Equal(t, tc.completions+tc.nacks, w.Pending())
			w.Start()
			w.Stop()
			assert.Equal(t, tc.wantCompletions, sizes(rb.completions))
			assert.Equal(t, tc.wantNacks, sizes(rb.nacks))
			assert.Zero(t, w.Pending())
			batches := len(tc.wantCompletions) + len(tc.wantNacks)
			assert.EqualValues(t, batches, w.Written())
			assert.EqualValues(t, batches, afterWrite.Load(), "AfterWrite once per batch")
		})
	}
}

// Settled gets every batch's ids; Requeued is called for a batch that put
// a row back to queued for now (a retry or snooze without delay), once.
func TestSettledAndRequeued(t *testing.T) {
	cases := []struct {
		name         string
		outcomes     []backends.Completion
		wantRequeued int32
	}{
		{"done", []backends.Completion{{Outcome: backends.OutcomeDone}}, 0},
		{"dead letter", []backends.Completion{{Outcome: backends.OutcomeDeadLetter}}, 0},
		{"retry later", []backends.Completion{{Outcome: backends.OutcomeRetry, Delay: time.Second}}, 0},
		{"retry now", []backends.Completion{{Outcome: backends.OutcomeRetry}}, 1},
		{"snooze now", []backends.Completion{{Outcome: backends.OutcomeSnooze}}, 1},
		{"two due in one batch", []backends.Completion{{Outcome: backends.OutcomeRetry}, {Outcome: backends.OutcomeSnooze}}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rb := &recordingBackend{}
			var requeued atomic.Int32
			var mu sync.Mutex
			var settled []string
			w := New(Config{Backend: rb, WorkerID: backends.NewID(),
				Requeued: func() { requeued.Add(1) },
				Settled: func(ids []string) {
					mu.Lock()
					settled = append(settled, ids...)
					mu.Unlock()
				}})
			var want []string
			for _, c := range tc.outcomes {
				c.JobID = backends.NewID()
				want = append(want, c.JobID)
				w.Complete(c)
			}
			w.Start()
			w.Stop()
			assert.Equal(t, tc.wantRequeued, requeued.Load())
			assert.Equal(t, want, settled)
		})
	}
}

// With the database gone at shutdown, Stop returns once writeTimeout has
// passed, and every completion and NACK it could not write is named in one
// ERROR line (stale-worker recovery requeues those rows).
func TestStopGivesUpAfterWriteTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rb := &recordingBackend{down: true}
		var mu sync.Mutex
		var logs []logtest.Record
		w := New(Config{Backend: rb, WorkerID: backends.NewID(), Log: slog.New(logtest.Handler{Mu: &mu, Records: &logs})})
		w.Start()
		done, nacked := backends.NewID(), backends.NewID()
		w.Complete(backends.Completion{JobID: done, Outcome: backends.OutcomeDone})
		w.Nack(backends.Job{ID: nacked, Attempts: 1})
		start := time.Now()
		w.Stop()
		took := time.Since(start)
		assert.GreaterOrEqual(t, took, writeTimeout)
		assert.Less(t, took, writeTimeout+10*time.Second, "gives up at the first retry past writeTimeout")
		assert.Zero(t, w.Pending())
		assert.Zero(t, w.Written())
		mu.Lock()
		defer mu.Unlock()
		var gaveUp []logtest.Record
		for _, r := range logs {
			if r.Msg == "giving up on result writes at shutdown: these rows stay processing, and stale-worker recovery or a takeover requeues them with attempts preserved" {
				gaveUp = append(gaveUp, r)
			}
		}
		require.Len(t, gaveUp, 1, "one ERROR line names every row not written")
		assert.Equal(t, []string{done + ":done"}, gaveUp[0].Attrs["results"])
		assert.Equal(t, []string{nacked}, gaveUp[0].Attrs["nacks"])
		assert.EqualValues(t, 2, gaveUp[0].Attrs["lost"])
	})
}

// wedgedBackend is a database that accepts a write and never answers it,
// as one behind a network partition does: each write returns only when
// its context ends. (The real partition is produced in the integration
// tests; this one keeps the writer's own bound on a fake clock.)
type wedgedBackend struct {
	backends.Backend
	calls atomic.Int32
}

func (b *wedgedBackend) Complete(ctx context.Context, _ string, _ []backends.Completion) ([]string, error) {
	b.calls.Add(1)
	<-ctx.Done()
	return nil, ctx.Err()
}

func (b *wedgedBackend) Nack(ctx context.Context, _ string, _ []backends.Job) ([]string, error) {
	b.calls.Add(1)
	<-ctx.Done()
	return nil, ctx.Err()
}

// The shutdown's deadline cuts a write already in flight, and the writer
// stops retrying there: Stop returns at the deadline, not writeTimeout
// after it. A write begun past the deadline (a sync job's late result) is
// tried once, bounded by the time after it.
func TestDeadlineCutsTheWriteInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &wedgedBackend{}
		var mu sync.Mutex
		var logs []logtest.Record
		w := New(Config{Backend: b, WorkerID: backends.NewID(), Log: slog.New(logtest.Handler{Mu: &mu, Records: &logs})})
		w.Start()
		w.Nack(backends.Job{ID: backends.NewID(), Attempts: 1})
		synctest.Wait() // the NACK's write is in flight, and hangs
		require.EqualValues(t, 1, b.calls.Load())
		start := time.Now()
		w.Deadline(start.Add(5*time.Second), 2*time.Second)
		time.Sleep(5 * time.Second)
		synctest.Wait()
		assert.Zero(t, w.Pending(), "given up at the deadline")
		assert.EqualValues(t, 1, b.calls.Load(), "not retried past the deadline")

		late := time.Now()
		w.Complete(backends.Completion{JobID: backends.NewID(), Outcome: backends.OutcomeDone})
		w.Stop()
		assert.Equal(t, 2*time.Second, time.Since(late), "a write begun past the deadline is tried once, bounded by the time after it")
		assert.EqualValues(t, 2, b.calls.Load())
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, r := range logs {
			if strings.HasPrefix(r.Msg, "giving up on result writes at shutdown") {
				n++
			}
		}
		assert.Equal(t, 2, n)
	})
}

// returnRecorder records the rows given back unstarted.
type returnRecorder struct {
	recordingBackend
	returned [][]string
}

func (r *returnRecorder) ReturnJobs(_ context.Context, _ string, held []backends.Job) ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := make([]string, len(held))
	for i, j := range held {
		ids[i] = j.ID
	}
	r.returned = append(r.returned, ids)
	return ids, nil
}

// Rows given back unstarted go in one ReturnJobs batch, and the writer
// holds them until then (the self-audit must not take them for orphans).
func TestReturnsAreBatchedAndHeldUntilWritten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rb := &returnRecorder{}
		w := New(Config{Backend: rb, WorkerID: backends.NewID()})
		a, b := backends.Job{ID: backends.NewID(), Attempts: 1}, backends.Job{ID: backends.NewID(), Attempts: 2}
		w.Return(a)
		w.Return(b)
		assert.True(t, w.Holds(a.ID))
		assert.Equal(t, 2, w.Pending())
		w.Start()
		w.Stop()
		assert.Equal(t, [][]string{{a.ID, b.ID}}, rb.returned)
		assert.False(t, w.Holds(a.ID))
		assert.Zero(t, w.Pending())
	})
}
