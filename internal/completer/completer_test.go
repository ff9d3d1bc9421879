package completer

import (
	"context"
	"errors"
	"log/slog"
	"slices"
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
	w.Complete(backends.Completion{JobID: j.ID, Outcome: backends.OutcomeDone, ResultTTL: time.Minute})
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

func (r *recordingBackend) Nack(_ context.Context, _ string, ids []string) ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.down {
		return nil, errors.New("connection refused")
	}
	r.nacks = append(r.nacks, slices.Clone(ids))
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
				w.Nack(backends.NewID())
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
// passed, and every completion and NACK it could not write is logged by
// job id (stale-worker recovery requeues those rows).
func TestStopGivesUpAfterWriteTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rb := &recordingBackend{down: true}
		var mu sync.Mutex
		var logs []logtest.Record
		w := New(Config{Backend: rb, WorkerID: backends.NewID(), Log: slog.New(logtest.Handler{Mu: &mu, Records: &logs})})
		w.Start()
		done, nacked := backends.NewID(), backends.NewID()
		w.Complete(backends.Completion{JobID: done, Outcome: backends.OutcomeDone})
		w.Nack(nacked)
		start := time.Now()
		w.Stop()
		took := time.Since(start)
		assert.GreaterOrEqual(t, took, writeTimeout)
		assert.Less(t, took, writeTimeout+10*time.Second, "gives up at the first retry past writeTimeout")
		assert.Zero(t, w.Pending())
		assert.Zero(t, w.Written())
		mu.Lock()
		defer mu.Unlock()
		lost := map[string]string{} // message → job id
		var gaveUp []logtest.Record
		for _, r := range logs {
			if id, ok := r.Attrs["job_id"].(string); ok {
				lost[r.Msg] = id
			}
			if r.Msg == "giving up on result writes at shutdown" {
				gaveUp = append(gaveUp, r)
			}
		}
		assert.Equal(t, map[string]string{
			"result not written; stale-worker recovery will requeue the job":        done,
			"shutdown NACK not written; stale-worker recovery will requeue the job": nacked,
		}, lost)
		require.Len(t, gaveUp, 1)
		assert.EqualValues(t, 2, gaveUp[0].Attrs["lost"])
	})
}
