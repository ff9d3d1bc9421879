package supervisor

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

// slowLinkBackend is a database a round trip away, for the shutdown's last
// writes: each NACK, stop mark, or both at once (it is a
// backends.NackStopper, as Postgres is) takes rtt on the fake clock. It
// records each call with the instant it was made.
type slowLinkBackend struct {
	backends.Backend
	rtt   time.Duration
	mu    sync.Mutex
	calls []slowCall
}

type slowCall struct {
	method string
	at     time.Time
}

func (b *slowLinkBackend) trip(method string) {
	b.mu.Lock()
	b.calls = append(b.calls, slowCall{method: method, at: time.Now()})
	b.mu.Unlock()
	time.Sleep(b.rtt)
}

func (b *slowLinkBackend) recorded() []slowCall {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]slowCall(nil), b.calls...)
}

func (b *slowLinkBackend) Nack(ctx context.Context, workerID string, held []backends.Job) ([]string, error) {
	b.trip("Nack")
	return b.Backend.Nack(ctx, workerID, held)
}

func (b *slowLinkBackend) SetWorkerStatus(ctx context.Context, workerID, status string) error {
	b.trip("SetWorkerStatus")
	return b.Backend.SetWorkerStatus(ctx, workerID, status)
}

func (b *slowLinkBackend) NackAndStop(ctx context.Context, workerID string, held []backends.Job) ([]string, bool, error) {
	b.trip("NackAndStop")
	nacked, err := b.Backend.Nack(ctx, workerID, held)
	if err != nil {
		return nil, false, err
	}
	return nacked, b.Backend.SetWorkerStatus(ctx, workerID, backends.WorkerStopped) == nil, nil
}

// Over a link a round trip away, the exit follows STOPPED by one round
// trip when every job was NACKed: the NACKs and the stop mark go in one
// call. One after the other they took two (and the exit came 2 s after
// STOPPED here). When a sync job outlives FORCE_TIMEOUT_PATH the NACKs
// are not held back: they are written at once, the stop mark when the
// sync job has returned.
func TestShutdownLastWritesOverASlowLink(t *testing.T) {
	const rtt = time.Second
	tests := []struct {
		name      string
		syncFor   float64 // a sync job's length in seconds; 0: none
		wantCalls []string
		wantExit  time.Duration // after STOPPED
	}{
		{name: "async only", wantCalls: []string{"NackAndStop"}, wantExit: rtt},
		{name: "a sync job outlives FORCE", syncFor: 35, wantCalls: []string{"Nack", "SetWorkerStatus"}, wantExit: rtt},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newFakeWorld(t, fakeSettings(30*time.Second, time.Minute), 8, 4, nil)
				slow := &slowLinkBackend{Backend: w.sup.cfg.Backend, rtt: rtt}
				w.sup.cfg.Backend = slow
				var ids []string
				for range 6 {
					ids = append(ids, w.enqueue("async.sleep", 1000))
				}
				running := 6
				if tc.syncFor > 0 {
					w.enqueue("sync.sleep", tc.syncFor)
					running++
				}
				w.run(running)
				w.sup.Shutdown()
				took := w.wait()
				tr := w.transitions()
				require.Contains(t, tr, "STOPPED")
				assert.Equal(t, tc.wantExit, took-tr["STOPPED"], "the exit after STOPPED")
				calls := slow.recorded()
				got := make([]string, len(calls))
				for i, c := range calls {
					got[i] = c.method
				}
				assert.Equal(t, tc.wantCalls, got)
				require.NotEmpty(t, calls)
				if tc.syncFor > 0 {
					assert.Equal(t, w.start.Add(30*time.Second), calls[0].at, "the NACKs written at FORCE_TIMEOUT_PATH")
				}
				for _, id := range ids {
					j := w.job(id)
					assert.Equal(t, backends.StatusQueued, j.Status, "%s NACKed", id)
					assert.Equal(t, 1, j.Attempts, "%s: attempts kept", id)
				}
				live, err := w.mem.LiveWorkers(context.Background(), time.Hour)
				require.NoError(t, err)
				assert.Empty(t, live, "the worker row is marked stopped")
			})
		})
	}
}
