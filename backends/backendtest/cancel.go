package backendtest

import (
	"context"
	"encoding/json"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

func (s *suite) requestCancel(id string) backends.CancelResult {
	s.t.Helper()
	res, err := s.b.RequestCancel(s.ctx, id)
	require.NoError(s.t, err, "request cancel of %s", id)
	return res
}

func (s *suite) pendingCancels(workerID string) []string {
	s.t.Helper()
	ids, err := s.b.PendingCancels(s.ctx, workerID)
	require.NoError(s.t, err, "pending cancels of worker %s", workerID)
	return ids
}

func (s *suite) cancelRequest(id string) backends.CancelRequest {
	s.t.Helper()
	r, err := s.b.GetCancelRequest(s.ctx, id)
	require.NoError(s.t, err, "get the cancel request of %s", id)
	return r
}

// runningWithRequest claims a job named name for a new worker and requests
// its cancel.
func (s *suite) runningWithRequest(name string) (workerID string, j backends.Job) {
	s.t.Helper()
	w := s.worker()
	s.enqueueNamed(name)
	j = s.claimOne(w, name)
	res := s.requestCancel(j.ID)
	require.Equal(s.t, backends.CancelRequested, res.Outcome)
	return w, j
}

func cancelCases() []testCase {
	return []testCase{
		{"cancel/a queued job is cancelled at once, as Soniq's cancel_job", func(s *suite) {
			w := s.worker()
			j := s.enqueueNamed("cancel.queued")
			res := s.requestCancel(j.ID)
			assert.Equal(s.t, backends.CancelledQueued, res.Outcome)
			assert.Equal(s.t, backends.StatusCancelled, res.Job.Status)
			assert.Equal(s.t, j.ID, res.Job.ID)
			got := s.get(j.ID)
			assert.Equal(s.t, backends.StatusCancelled, got.Status)
			assert.Equal(s.t, 0, got.Attempts)
			assert.Empty(s.t, s.claim(backends.ClaimParams{WorkerID: w, Limit: 10}), "a cancelled job is never claimed")
			_, err := s.b.GetCancelRequest(s.ctx, j.ID)
			assert.ErrorIs(s.t, err, backends.ErrNotFound, "a queued job needs no request")
		}},
		{"cancel/a running job gets a pending request naming its worker, and stays processing", func(s *suite) {
			w, j := s.runningWithRequest("cancel.running")
			other := s.worker()
			got := s.get(j.ID)
			assert.Equal(s.t, backends.StatusProcessing, got.Status, "only the holder ends it")
			assert.Equal(s.t, 1, got.Attempts)
			r := s.cancelRequest(j.ID)
			assert.Equal(s.t, j.ID, r.JobID)
			assert.Equal(s.t, backends.CancelPending, r.Status)
			require.NotNil(s.t, r.WorkerID)
			assert.Equal(s.t, w, *r.WorkerID)
			assert.WithinDuration(s.t, time.Now(), r.RequestedAt, tolerance)
			assert.Nil(s.t, r.ResolvedAt)
			assert.Nil(s.t, r.Handler)
			assert.Equal(s.t, []string{j.ID}, s.pendingCancels(w))
			assert.Empty(s.t, s.pendingCancels(other), "another worker holds nothing of it")
		}},
		{"cancel/a request wakes subscribers with the job's id", func(s *suite) {
			w := s.worker()
			s.enqueueNamed("cancel.wake")
			j := s.claimOne(w, "cancel.wake")
			ctx, cancel := context.WithCancel(s.ctx)
			defer cancel()
			ch, err := s.b.Subscribe(ctx)
			require.NoError(s.t, err)
			s.requestCancel(j.ID)
			deadline := time.After(5 * time.Second)
			for {
				select {
				case got, ok := <-ch:
					require.True(s.t, ok, "channel closed before delivery")
					if got.CancelJobID == j.ID {
						assert.Empty(s.t, got.Queue)
						return
					}
				case <-deadline:
					require.FailNow(s.t, "no cancel wake-up within 5s")
				}
			}
		}},
		{"cancel/a finished job is left alone", func(s *suite) {
			w := s.worker()
			done := s.enqueueNamed("cancel.done")
			s.claimOne(w, "cancel.done")
			s.complete(w, backends.Completion{JobID: done.ID, Outcome: backends.OutcomeDone, ResultTTL: time.Hour, Result: json.RawMessage(`7`)})
			before := snapshot(s.get(done.ID))
			res := s.requestCancel(done.ID)
			assert.Equal(s.t, backends.CancelFinished, res.Outcome)
			assert.Equal(s.t, backends.StatusDone, res.Job.Status)
			assert.Equal(s.t, before, snapshot(s.get(done.ID)))

			cancelled := s.enqueueNamed("cancel.twice")
			s.requestCancel(cancelled.ID)
			before = snapshot(s.get(cancelled.ID))
			res = s.requestCancel(cancelled.ID)
			assert.Equal(s.t, backends.CancelFinished, res.Outcome)
			assert.Equal(s.t, backends.StatusCancelled, res.Job.Status)
			assert.Equal(s.t, before, snapshot(s.get(cancelled.ID)))
		}},
		{"cancel/an unknown job is not found", func(s *suite) {
			for _, id := range []string{newUUID(s.t), "not-a-uuid"} {
				_, err := s.b.RequestCancel(s.ctx, id)
				assert.ErrorIs(s.t, err, backends.ErrNotFound, "id %q", id)
			}
			dl := s.deadLetterJob("cancel.dead")
			_, err := s.b.RequestCancel(s.ctx, dl.ID)
			assert.ErrorIs(s.t, err, backends.ErrNotFound, "a dead-lettered job has left soniq_jobs")
			_, err = s.b.GetCancelRequest(s.ctx, newUUID(s.t))
			assert.ErrorIs(s.t, err, backends.ErrNotFound)
		}},
		{"cancel/the holder's cancelled write keeps attempts and acknowledges the request", func(s *suite) {
			w, j := s.runningWithRequest("cancel.ack")
			applied := s.complete(w, backends.Completion{JobID: j.ID, Outcome: backends.OutcomeCancelled})
			assert.Equal(s.t, []string{j.ID}, applied)
			got := s.get(j.ID)
			assert.Equal(s.t, backends.StatusCancelled, got.Status)
			assert.Equal(s.t, 1, got.Attempts, "attempts unchanged")
			assert.Nil(s.t, got.LastError)
			assert.Nil(s.t, got.Result)
			assert.Nil(s.t, got.ScheduledAt, "never retried")
			assert.WithinDuration(s.t, time.Now(), got.UpdatedAt, tolerance)
			r := s.cancelRequest(j.ID)
			assert.Equal(s.t, backends.CancelAcknowledged, r.Status)
			approxNow(s.t, 0, r.ResolvedAt, "resolved_at")
			assert.Empty(s.t, s.pendingCancels(w))
			assert.Empty(s.t, s.claim(backends.ClaimParams{WorkerID: w, Limit: 10}), "never runs again")
			assert.Empty(s.t, s.complete(w, backends.Completion{JobID: j.ID, Outcome: backends.OutcomeDone, ResultTTL: time.Hour}),
				"a late result never ends it done")
			assert.Equal(s.t, backends.StatusCancelled, s.get(j.ID).Status)
		}},
		{"cancel/the cancelled write is guarded by status and worker", func(s *suite) {
			w, j := s.runningWithRequest("cancel.guard")
			other := s.worker()
			assert.Empty(s.t, s.complete(other, backends.Completion{JobID: j.ID, Outcome: backends.OutcomeCancelled}))
			assert.Equal(s.t, backends.StatusProcessing, s.get(j.ID).Status)
			assert.Equal(s.t, backends.CancelPending, s.cancelRequest(j.ID).Status, "nothing acknowledged")
			assert.Equal(s.t, []string{j.ID}, s.pendingCancels(w))

			// A pending job (claimed, never run) has no request: the write alone.
			s.enqueueNamed("cancel.norequest")
			k := s.claimOne(w, "cancel.norequest")
			assert.Equal(s.t, []string{k.ID}, s.complete(w, backends.Completion{JobID: k.ID, Outcome: backends.OutcomeCancelled}))
			assert.Equal(s.t, backends.StatusCancelled, s.get(k.ID).Status)
		}},
		{"cancel/a holder refuses with its handler and why; the job runs on", func(s *suite) {
			w, j := s.runningWithRequest("cancel.sync")
			other := s.worker()
			ok, err := s.b.RefuseCancel(s.ctx, other, j.ID, "h", "not yours")
			require.NoError(s.t, err)
			assert.False(s.t, ok, "only the holder answers")
			ok, err = s.b.RefuseCancel(s.ctx, w, j.ID, "pdf", "a sync job cannot be interrupted")
			require.NoError(s.t, err)
			assert.True(s.t, ok)
			r := s.cancelRequest(j.ID)
			assert.Equal(s.t, backends.CancelRefused, r.Status)
			require.NotNil(s.t, r.Handler)
			require.NotNil(s.t, r.Detail)
			assert.Equal(s.t, "pdf", *r.Handler)
			assert.Equal(s.t, "a sync job cannot be interrupted", *r.Detail)
			approxNow(s.t, 0, r.ResolvedAt, "resolved_at")
			assert.Empty(s.t, s.pendingCancels(w))
			assert.Equal(s.t, backends.StatusProcessing, s.get(j.ID).Status)
			ok, err = s.b.RefuseCancel(s.ctx, w, j.ID, "pdf", "again")
			require.NoError(s.t, err)
			assert.False(s.t, ok, "answered already")

			// Asked again: pending again, the answer cleared.
			assert.Equal(s.t, backends.CancelRequested, s.requestCancel(j.ID).Outcome)
			r = s.cancelRequest(j.ID)
			assert.Equal(s.t, backends.CancelPending, r.Status)
			assert.Nil(s.t, r.Handler)
			assert.Nil(s.t, r.Detail)
			assert.Nil(s.t, r.ResolvedAt)
			assert.Equal(s.t, []string{j.ID}, s.pendingCancels(w))
		}},
		{"cancel/a request follows the job to its next holder", func(s *suite) {
			w1, j := s.runningWithRequest("cancel.moved")
			nacked, err := s.nack(w1, j.ID)
			require.NoError(s.t, err)
			require.Equal(s.t, []string{j.ID}, nacked)
			assert.Empty(s.t, s.pendingCancels(w1), "no longer held")
			w2 := s.worker()
			s.claimOne(w2, "cancel.moved")
			assert.Equal(s.t, []string{j.ID}, s.pendingCancels(w2), "the request is for the job")
			assert.Empty(s.t, s.pendingCancels(w1))
			assert.Equal(s.t, []string{j.ID}, s.complete(w2, backends.Completion{JobID: j.ID, Outcome: backends.OutcomeCancelled}))
			assert.Equal(s.t, backends.CancelAcknowledged, s.cancelRequest(j.ID).Status)
		}},
		{"cancel/delete expired removes settled requests after their time, and keeps the rest", func(s *suite) {
			w, acked := s.runningWithRequest("cancel.ttl.acked")
			s.complete(w, backends.Completion{JobID: acked.ID, Outcome: backends.OutcomeCancelled})
			w2, fresh := s.runningWithRequest("cancel.ttl.fresh")
			s.complete(w2, backends.Completion{JobID: fresh.ID, Outcome: backends.OutcomeCancelled})
			_, running := s.runningWithRequest("cancel.ttl.running")
			w3, finished := s.runningWithRequest("cancel.ttl.finished")
			s.complete(w3, backends.Completion{JobID: finished.ID, Outcome: backends.OutcomeDone, ResultTTL: time.Hour})
			for _, id := range []string{acked.ID, running.ID, finished.ID} {
				require.NoError(s.t, s.h.BackdateCancelRequest(s.ctx, id, backends.CancelRequestTTL+time.Minute))
			}
			n, err := s.b.DeleteExpired(s.ctx)
			require.NoError(s.t, err)
			assert.Equal(s.t, 0, n, "no done row expired; requests are not counted")
			for _, id := range []string{acked.ID, finished.ID} {
				_, err := s.b.GetCancelRequest(s.ctx, id)
				assert.ErrorIs(s.t, err, backends.ErrNotFound, "settled long ago: %s", id)
			}
			assert.Equal(s.t, backends.CancelAcknowledged, s.cancelRequest(fresh.ID).Status, "settled recently: kept")
			assert.Equal(s.t, backends.CancelPending, s.cancelRequest(running.ID).Status, "its job still runs: kept")
		}},
	}
}
