package supervisor

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/protocol"
)

func TestUserCancelFate(t *testing.T) {
	tests := []struct {
		state taskState
		sync  bool
		want  cancelAction
	}{
		{taskPending, false, cancelUnstarted},
		{taskPending, true, cancelUnstarted},
		{taskRunning, false, cancelRunning},
		{taskRunning, true, refuseSync},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, userCancelFate(tc.state, tc.sync), "state %d sync %t", tc.state, tc.sync)
	}
	o := cancelledOutcome(backends.Job{ID: "j", Attempts: 2})
	assert.Equal(t, backends.Completion{JobID: "j", Outcome: backends.OutcomeCancelled}, o.write)
	assert.Equal(t, "cancelled", o.status)
	assert.Empty(t, o.line, "logged by the cancel itself, not as a failure")
}

// pollOnly is the memory backend without notifications, as Postgres behind
// a transaction-mode pooler without a listen URL.
type pollOnly struct{ backends.Backend }

func (pollOnly) Subscribe(context.Context) (<-chan backends.Wakeup, error) {
	return nil, backends.ErrNoWakeups
}

func (w *fakeWorld) requestCancel(id string) {
	w.t.Helper()
	res, err := w.mem.RequestCancel(context.Background(), id)
	require.NoError(w.t, err)
	require.Equal(w.t, backends.CancelRequested, res.Outcome)
}

func (w *fakeWorld) cancelRequest(id string) backends.CancelRequest {
	w.t.Helper()
	r, err := w.mem.GetCancelRequest(context.Background(), id)
	require.NoError(w.t, err)
	return r
}

func (w *fakeWorld) jobFrames(id string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, f := range w.frames {
		if j, ok := f.(*protocol.Job); ok && j.ID == id {
			n++
		}
	}
	return n
}

// A running async job: woken by the notification (the poll is an hour
// away), the sidecar sends cancel{user}, writes the row cancelled with its
// attempt, and discards the handler's answer.
func TestCancelRequestCancelsARunningAsyncJob(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := fakeSettings(30*time.Second, time.Minute)
		s.PollInterval = time.Hour
		w := newFakeWorld(t, s, 8, 4, nil)
		a, other := w.enqueue("async.sleep", 60), w.enqueue("async.sleep", 2)
		w.run(2)
		w.requestCancel(a)
		synctest.Wait()
		time.Sleep(50 * time.Millisecond) // the writer's linger
		synctest.Wait()
		assert.Equal(t, []protocol.CancelReason{protocol.ReasonUser}, w.cancels(a))
		j := w.job(a)
		assert.Equal(t, backends.StatusCancelled, j.Status)
		assert.Equal(t, 1, j.Attempts)
		assert.Equal(t, backends.CancelAcknowledged, w.cancelRequest(a).Status)
		assert.NotNil(t, w.findLog("late result discarded", map[string]any{"job_id": a, "abandoned_by": "user"}),
			"the handler's cancelled answer never touches the row")
		assert.NotNil(t, w.findLog("job cancelled", map[string]any{"job_id": a, "state": "running"}))
		assert.Empty(t, w.cancels(other), "the other job runs on")
		time.Sleep(3 * time.Second)
		synctest.Wait()
		assert.Equal(t, backends.StatusDone, w.job(other).Status)
		assert.Equal(t, backends.StatusCancelled, w.job(a).Status)
		assert.Equal(t, 1, w.jobFrames(a), "never run again")
		w.sup.Shutdown()
		w.wait()
	})
}

// Without notifications the request is found at the next poll.
func TestCancelRequestFoundByThePoll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := fakeSettings(30*time.Second, time.Minute)
		s.PollInterval = 2 * time.Second
		w := newFakeWorld(t, s, 8, 4, nil)
		w.sup.cfg.Backend = pollOnly{w.sup.cfg.Backend}
		a := w.enqueue("async.sleep", 60)
		w.run(1)
		w.requestCancel(a)
		synctest.Wait()
		assert.Empty(t, w.cancels(a), "no notification: nothing yet")
		time.Sleep(3 * time.Second) // one poll (jittered within ±20 %)
		synctest.Wait()
		assert.Equal(t, []protocol.CancelReason{protocol.ReasonUser}, w.cancels(a))
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		assert.Equal(t, backends.StatusCancelled, w.job(a).Status)
		w.sup.Shutdown()
		w.wait()
	})
}

// A running sync job is refused, naming its handler; it runs on to done.
func TestCancelRequestRefusedForASyncJob(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := fakeSettings(30*time.Second, time.Minute)
		s.PollInterval = time.Hour
		w := newFakeWorld(t, s, 8, 4, nil)
		y := w.enqueue("sync.sleep", 5)
		w.run(1)
		w.requestCancel(y)
		synctest.Wait()
		r := w.cancelRequest(y)
		assert.Equal(t, backends.CancelRefused, r.Status)
		require.NotNil(t, r.Handler)
		assert.Equal(t, "fake", *r.Handler)
		require.NotNil(t, r.Detail)
		assert.Contains(t, *r.Detail, "a sync job cannot be interrupted")
		assert.Empty(t, w.cancels(y), "nothing is sent to the handler")
		assert.Equal(t, backends.StatusProcessing, w.job(y).Status)
		time.Sleep(6 * time.Second)
		synctest.Wait()
		assert.Equal(t, backends.StatusDone, w.job(y).Status, "it ran on to its own result")
		w.sup.Shutdown()
		w.wait()
	})
}

// A job claimed but not handed to a process (a suspect waiting for its
// process to restart) is cancelled without running.
func TestCancelRequestCancelsAnUnstartedJob(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := fakeSettings(30*time.Second, time.Minute)
		s.PollInterval = time.Hour
		w := newFakeWorld(t, s, 8, 4, nil)
		w.enqueue("crash", 1)
		a := w.enqueue("async.sleep", 60)
		w.run(2)
		// The crash at 1 s takes the async job's process with it: both are
		// suspects, pending until the process restarts 100 ms later.
		time.Sleep(1050 * time.Millisecond)
		synctest.Wait()
		require.Len(t, w.crashes, 1)
		require.Equal(t, 1, w.jobFrames(a))
		w.requestCancel(a)
		synctest.Wait()
		time.Sleep(2 * time.Second)
		synctest.Wait()
		assert.Equal(t, backends.StatusCancelled, w.job(a).Status)
		assert.Equal(t, 1, w.jobFrames(a), "not sent again")
		assert.Empty(t, w.cancels(a), "nothing to tell a handler")
		assert.NotNil(t, w.findLog("job cancelled", map[string]any{"job_id": a, "state": "pending"}))
		w.sup.Shutdown()
		w.wait()
	})
}

// findLog is the first record whose message starts with msg and whose
// attributes include attrs; nil when there is none.
func (w *fakeWorld) findLog(msg string, attrs map[string]any) map[string]any {
	for _, a := range w.logged(msg) {
		ok := true
		for k, v := range attrs {
			ok = ok && a[k] == v
		}
		if ok {
			return a
		}
	}
	return nil
}
