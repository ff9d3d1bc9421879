package completer

import (
	"sync"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

func done(id string) backends.Completion {
	return backends.Completion{JobID: id, Outcome: backends.OutcomeDone}
}

func ids(cs []backends.Completion) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.JobID
	}
	return out
}

// A claim borrows the completions no write has taken; the rows of a write
// in flight are never lent, so no row is written twice.
func TestLendTakesOnlyWhatNoWriteHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &gatedBackend{gate: make(chan struct{})}
		var mu sync.Mutex
		var settled []string
		w := New(Config{Backend: g, WorkerID: backends.NewID(), Settled: func(ids []string) {
			mu.Lock()
			settled = append(settled, ids...)
			mu.Unlock()
		}})
		w.Start()
		w.Complete(done("a"))
		synctest.Wait() // the write of a is held in the backend
		require.Equal(t, 1, g.count())
		w.Complete(done("b"))
		w.Complete(done("c"))
		lent := w.Lend(10)
		assert.Equal(t, []string{"b", "c"}, ids(lent), "a is being written")
		assert.True(t, w.Holds("b"), "a lent completion is still held: its row is still processing")
		assert.Equal(t, 3, w.Pending())
		before := w.Written()
		w.Lent(lent, []string{"b", "c"}, true)
		assert.Equal(t, before+1, w.Written(), "a loan written counts as a batch written")
		assert.False(t, w.Holds("b"))
		close(g.gate)
		w.Stop()
		assert.Equal(t, 1, g.count(), "the writer wrote a alone; b and c went with the claim")
		assert.ElementsMatch(t, []string{"a", "b", "c"}, settled)
	})
}

// A loan whose claim failed goes back to the writer, which writes it.
func TestALoanNotWrittenGoesBackToTheWriter(t *testing.T) {
	rb := &recordingBackend{}
	w := New(Config{Backend: rb, WorkerID: backends.NewID()})
	w.Complete(done("a"))
	w.Complete(done("b"))
	lent := w.Lend(1)
	require.Equal(t, []string{"a"}, ids(lent))
	assert.Equal(t, 2, w.Pending())
	w.Lent(lent, nil, false)
	assert.True(t, w.Holds("a"))
	w.Start()
	w.Stop()
	var written []string
	for _, b := range rb.completions {
		written = append(written, b...)
	}
	assert.ElementsMatch(t, []string{"a", "b"}, written)
}

// Once shutdown has begun nothing is lent, and Stop waits for a loan made
// before it to come back.
func TestLendAndShutdown(t *testing.T) {
	t.Run("nothing is lent once hurried", func(t *testing.T) {
		w := New(Config{Backend: &recordingBackend{}, WorkerID: backends.NewID()})
		w.Complete(done("a"))
		w.Hurry()
		assert.Empty(t, w.Lend(10))
	})
	t.Run("Stop waits for a loan", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			rb := &recordingBackend{}
			w := New(Config{Backend: rb, WorkerID: backends.NewID()})
			w.Complete(done("a"))
			lent := w.Lend(10)
			require.Len(t, lent, 1)
			w.Start()
			stopped := make(chan struct{})
			go func() { w.Stop(); close(stopped) }()
			synctest.Wait()
			select {
			case <-stopped:
				t.Fatal("Stop returned while a loan was out: a failed claim's completions would be lost")
			default:
			}
			w.Lent(lent, nil, false)
			<-stopped
			require.Len(t, rb.completions, 1)
			assert.Equal(t, []string{"a"}, rb.completions[0], "the loan came back and was written")
		})
	})
}

// Two attempts of one row may be lent to two claims at once (the retried
// copy of attempt 1's write, taken back after its reply was lost, and
// attempt 2's own result): the end of one loan leaves the other held.
func TestTwoAttemptsOfOneRowLentApart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &gatedBackend{gate: make(chan struct{})}
		w := New(Config{Backend: g, WorkerID: backends.NewID()})
		close(g.gate)
		first := backends.Completion{JobID: "j", Attempts: 1, Outcome: backends.OutcomeRetry}
		second := backends.Completion{JobID: "j", Attempts: 2, Outcome: backends.OutcomeDone}
		w.Complete(first)
		a := w.Lend(10)
		w.Complete(second)
		b := w.Lend(10)
		require.Equal(t, []backends.Completion{first}, a)
		require.Equal(t, []backends.Completion{second}, b)
		w.Lent(a, nil, true)
		assert.Equal(t, 1, w.Pending(), "attempt 2's loan is still out")
		assert.True(t, w.Holds("j"))
		w.Lent(b, []string{"j"}, true)
		assert.Zero(t, w.Pending())
		w.Start()
		w.Stop()
	})
}
