package supervisor

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// lostReplyBackend commits its first claims and then reports them failed,
// as a claim does whose reply a broken connection lost after Postgres
// committed it. (The integration tests cut a real connection through a
// fault proxy; this keeps the loop's side on a fake clock.)
type lostReplyBackend struct {
	backends.Backend
	lose atomic.Int32 // claims still to lose
}

func (b *lostReplyBackend) Claim(ctx context.Context, p backends.ClaimParams) ([]backends.Job, error) {
	jobs, err := b.Backend.Claim(ctx, p)
	if err == nil && len(jobs) > 0 && b.lose.Add(-1) >= 0 {
		return nil, errors.New("read tcp 127.0.0.1:5432: connection reset by peer")
	}
	return jobs, err
}

// The rows a claim took whose reply was lost go back to the queue before
// the next claim, their attempt refunded, and run once: not left to the
// self-audit (off here), not charged twice.
func TestALostClaimReplyGivesItsRowsBackBeforeTheNextClaim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := fakeSettings(30*time.Second, time.Minute)
		s.AuditInterval = -1
		w := newFakeWorld(t, s, 2, 1, nil)
		lr := &lostReplyBackend{Backend: w.sup.cfg.Backend}
		lr.lose.Store(1)
		w.sup.cfg.Backend = lr
		a, b := w.enqueue("async.sleep", 0.1), w.enqueue("async.sleep", 0.1)
		start := time.Now()
		w.run(2)
		assert.Less(t, time.Since(start), s.PollInterval, "claimed again at once, not at the next poll")
		for range 100 {
			if w.job(a).Status == backends.StatusDone && w.job(b).Status == backends.StatusDone {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		for _, id := range []string{a, b} {
			assert.Equal(t, backends.StatusDone, w.job(id).Status)
			assert.Equal(t, 1, w.job(id).Attempts, "the lost claim's attempt was refunded")
		}
		w.mu.Lock()
		var warned []any
		for _, r := range w.logs {
			if r.Msg == "a claim's reply was lost after it took rows (the connection broke mid-statement); gave them back unstarted, their attempt refunded" {
				warned = append(warned, r.Attrs["job_ids"])
			}
		}
		w.mu.Unlock()
		require.Len(t, warned, 1)
		assert.ElementsMatch(t, []string{a, b}, warned[0])
		w.sup.Shutdown()
		w.wait()
	})
}
