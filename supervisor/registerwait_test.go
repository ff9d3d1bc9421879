package supervisor

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// SameIdentity is the first statement of a registration. A test sets
// unreachableAtStart to have the database unreachable for that many
// registrations (a mock: the fault is a Postgres restart behind PgBouncer,
// whose login retry refuses every client for a while).
func (r beatRecorder) SameIdentity(ctx context.Context, id backends.Worker) ([]backends.Worker, error) {
	r.w.mu.Lock()
	if r.w.unreachableAtStart > 0 {
		r.w.unreachableAtStart--
		r.w.mu.Unlock()
		return nil, fmt.Errorf("list the worker rows: %w: server login has been failing, try again later", backends.ErrUnreachable)
	}
	r.w.mu.Unlock()
	return r.Backend.SameIdentity(ctx, id)
}

// A sidecar restarted while the database restarts too (chaos seed 77) waits
// for it, as `run` waits for one at start, instead of exiting 1.
func TestRegistrationWaitsForAnUnreachableDatabase(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t, fakeSettings(30*time.Second, time.Minute), 4, 4, nil)
		w.unreachableAtStart = 3
		w.enqueue("async.sleep", 1)
		began := time.Now()
		w.run(1)
		assert.Equal(t, 250*time.Millisecond+500*time.Millisecond+time.Second, time.Since(began).Round(250*time.Millisecond),
			"retried after 250 ms, 500 ms and 1 s")
		w.mu.Lock()
		retries := 0
		for _, r := range w.logs {
			if strings.HasPrefix(r.Msg, "registering the worker row: the database is unreachable; retrying") {
				retries++
			}
		}
		w.mu.Unlock()
		assert.Equal(t, 3, retries)
		w.sup.Shutdown()
		_ = w.wait()
	})
}

// A shutdown request while it waits ends Run at once, cleanly: nothing
// was claimed.
func TestShutdownWhileWaitingToRegister(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t, fakeSettings(30*time.Second, time.Minute), 4, 4, nil)
		w.unreachableAtStart = 1000
		done := make(chan error, 1)
		go func() { done <- w.sup.Run(context.Background()) }()
		time.Sleep(3 * time.Second)
		w.sup.Shutdown()
		require.NoError(t, <-done)
	})
}
