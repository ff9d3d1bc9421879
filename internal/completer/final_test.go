package completer

// The shutdown's last NACKs (NackFinal) on the fake clock: they wait for
// Finish to go out with the stop mark in one call, and only so long.

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// finalCall is one call the writer made, with its instant.
type finalCall struct {
	method string
	rows   int
	at     time.Time
}

// stopMarkBackend records the writer's calls; NackAndStop makes it a
// backends.NackStopper. Every row is applied and the row is marked.
type stopMarkBackend struct {
	backends.Backend
	mu    sync.Mutex
	calls []finalCall
}

func (b *stopMarkBackend) record(method string, rows int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls = append(b.calls, finalCall{method: method, rows: rows, at: time.Now()})
}

func (b *stopMarkBackend) recorded() []finalCall {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]finalCall(nil), b.calls...)
}

func jobIDs(held []backends.Job) []string {
	out := make([]string, len(held))
	for i, j := range held {
		out[i] = j.ID
	}
	return out
}

func (b *stopMarkBackend) Nack(_ context.Context, _ string, held []backends.Job) ([]string, error) {
	b.record("Nack", len(held))
	return jobIDs(held), nil
}

func (b *stopMarkBackend) NackAndStop(_ context.Context, _ string, held []backends.Job) ([]string, bool, error) {
	b.record("NackAndStop", len(held))
	return jobIDs(held), true, nil
}

// nackOnly hides NackAndStop: a backend that cannot write the two together.
type nackOnly struct{ *stopMarkBackend }

func (n nackOnly) NackAndStop() {}

func heldJobs(n int) []backends.Job {
	out := make([]backends.Job, n)
	for i := range out {
		out[i] = backends.Job{ID: backends.NewID(), Attempts: 1}
	}
	return out
}

func TestTheLastNacksGoWithTheStopMark(t *testing.T) {
	const hold = 500 * time.Millisecond
	tests := []struct {
		name       string
		cannot     bool          // the backend has no NackAndStop
		finishIn   time.Duration // when Finish comes after NackFinal
		wantCalls  []string
		wantMarked bool
	}{
		{name: "Finish within the hold: one call", finishIn: 30 * time.Millisecond,
			wantCalls: []string{"NackAndStop"}, wantMarked: true},
		{name: "Finish past the hold: the NACKs went alone", finishIn: 2 * hold,
			wantCalls: []string{"Nack"}},
		{name: "a backend that cannot: the NACKs at once", cannot: true, finishIn: 30 * time.Millisecond,
			wantCalls: []string{"Nack"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				sb := &stopMarkBackend{}
				var b backends.Backend = sb
				if tc.cannot {
					b = nackOnly{sb}
				}
				w := New(Config{Backend: b, WorkerID: backends.NewID()})
				w.Start()
				start := time.Now()
				w.NackFinal(heldJobs(6), hold)
				time.Sleep(tc.finishIn)
				marked := w.Finish()
				calls := sb.recorded()
				got := make([]string, len(calls))
				for i, c := range calls {
					got[i] = c.method
					assert.Equal(t, 6, c.rows, "every NACK in one call")
				}
				assert.Equal(t, tc.wantCalls, got)
				assert.Equal(t, tc.wantMarked, marked)
				require.NotEmpty(t, calls)
				switch {
				case tc.cannot:
					assert.Equal(t, start, calls[0].at, "nothing to wait for")
				case tc.finishIn > hold:
					assert.Equal(t, start.Add(hold), calls[0].at, "held no longer than the hold")
				default:
					assert.Equal(t, start.Add(tc.finishIn), calls[0].at, "written as Finish came")
				}
			})
		})
	}
}

// The hold never reaches the shutdown's write deadline: the write it
// waited for would then be cut.
func TestTheLastNacksWaitLessThanTheWriteDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sb := &stopMarkBackend{}
		w := New(Config{Backend: sb, WorkerID: backends.NewID()})
		w.Start()
		start := time.Now()
		w.Deadline(start.Add(200*time.Millisecond), 200*time.Millisecond)
		w.NackFinal(heldJobs(2), time.Second)
		time.Sleep(time.Second)
		assert.False(t, w.Finish())
		calls := sb.recorded()
		require.Len(t, calls, 1)
		assert.Equal(t, "Nack", calls[0].method)
		assert.Equal(t, start.Add(100*time.Millisecond), calls[0].at)
	})
}
