package backendtest

import (
	"encoding/json"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// The Backend interface has no worker read, so worker rows are observed
// through RecoverStaleWorkers, which acts only on active, silent workers.
func workerCases() []testCase {
	return []testCase{
		{"workers/stale recovery requeues only the silent worker's rows", func(s *suite) {
			stale, live := s.worker(), s.worker()
			j1 := s.enqueueNamed("stale.a")
			j2 := s.enqueueNamed("stale.b")
			j3 := s.enqueueNamed("live.a")
			queued := s.enqueueNamed("idle")
			s.claimOne(stale, "stale.a")
			s.claimOne(stale, "stale.b")
			s.claimOne(live, "live.a")
			s.complete(stale, backends.Completion{JobID: j2.ID, Outcome: backends.OutcomeRetry, Error: "e"})
			s.claimOne(stale, "stale.b") // attempts 2
			liveBefore := snapshot(s.get(j3.ID))
			queuedBefore := snapshot(s.get(queued.ID))
			require.NoError(s.t, s.h.BackdateHeartbeat(s.ctx, stale, 10*time.Minute))

			workers, jobs, err := s.b.RecoverStaleWorkers(s.ctx, 5*time.Minute)
			require.NoError(s.t, err)
			assert.Equal(s.t, 1, workers)
			assert.Equal(s.t, 2, jobs)
			for id, attempts := range map[string]int{j1.ID: 1, j2.ID: 2} {
				got := s.get(id)
				assert.Equal(s.t, backends.StatusQueued, got.Status)
				assert.Nil(s.t, got.WorkerID)
				assert.Equal(s.t, attempts, got.Attempts, "attempts preserved")
			}
			require.NotNil(s.t, s.get(j2.ID).LastError)
			assert.Equal(s.t, liveBefore, snapshot(s.get(j3.ID)), "live worker's row untouched")
			assert.Equal(s.t, queuedBefore, snapshot(s.get(queued.ID)))

			workers, jobs, err = s.b.RecoverStaleWorkers(s.ctx, 5*time.Minute)
			require.NoError(s.t, err)
			assert.Equal(s.t, [2]int{0, 0}, [2]int{workers, jobs}, "the stale worker is stopped now")

			// The live worker was left active: aged, it is recovered too.
			require.NoError(s.t, s.h.BackdateHeartbeat(s.ctx, live, 10*time.Minute))
			workers, jobs, err = s.b.RecoverStaleWorkers(s.ctx, 5*time.Minute)
			require.NoError(s.t, err)
			assert.Equal(s.t, [2]int{1, 1}, [2]int{workers, jobs})
		}},
		{"workers/heartbeat advances last_heartbeat", func(s *suite) {
			w := s.worker()
			require.NoError(s.t, s.h.BackdateHeartbeat(s.ctx, w, 10*time.Minute))
			require.NoError(s.t, s.b.Heartbeat(s.ctx, w))
			workers, _, err := s.b.RecoverStaleWorkers(s.ctx, 5*time.Minute)
			require.NoError(s.t, err)
			assert.Equal(s.t, 0, workers, "fresh heartbeat is not stale")
		}},
		{"workers/only active workers are recovered", func(s *suite) {
			for _, tc := range []struct {
				status string
				want   int
			}{
				{backends.WorkerStopped, 0},
				{backends.WorkerStopping, 0},
				{backends.WorkerActive, 1},
			} {
				w := s.worker()
				require.NoError(s.t, s.b.SetWorkerStatus(s.ctx, w, tc.status), "set %s", tc.status)
				require.NoError(s.t, s.h.BackdateHeartbeat(s.ctx, w, 10*time.Minute))
				workers, _, err := s.b.RecoverStaleWorkers(s.ctx, 5*time.Minute)
				require.NoError(s.t, err)
				assert.Equal(s.t, tc.want, workers, "status %s", tc.status)
			}
		}},
		{"workers/register upserts on (hostname, pid) taking the new id", func(s *suite) {
			first := backends.Worker{ID: newUUID(s.t), Hostname: "h1", PID: 42, Queues: []string{"a"},
				Concurrency: 1, Version: "1", Metadata: json.RawMessage(`{}`)}
			require.NoError(s.t, s.b.RegisterWorker(s.ctx, first))
			second := first
			second.ID = newUUID(s.t)
			second.Queues = []string{"a", "b"}
			require.NoError(s.t, s.b.RegisterWorker(s.ctx, second))
			// Same id again is an upsert too (a restart that kept its id).
			require.NoError(s.t, s.b.RegisterWorker(s.ctx, second))

			// The new id is a real worker row: it can claim and heartbeat.
			j := s.enqueueNamed("upsert")
			s.claimOne(second.ID, "upsert")
			require.NoError(s.t, s.b.Heartbeat(s.ctx, second.ID))
			require.NoError(s.t, s.h.BackdateHeartbeat(s.ctx, second.ID, 10*time.Minute))
			workers, jobs, err := s.b.RecoverStaleWorkers(s.ctx, 5*time.Minute)
			require.NoError(s.t, err)
			assert.Equal(s.t, 1, workers, "one row for (h1, 42)")
			assert.Equal(s.t, 1, jobs)
			assert.Equal(s.t, backends.StatusQueued, s.get(j.ID).Status)

			// Registering again makes a stopped worker active.
			require.NoError(s.t, s.b.RegisterWorker(s.ctx, second))
			require.NoError(s.t, s.h.BackdateHeartbeat(s.ctx, second.ID, 10*time.Minute))
			workers, _, err = s.b.RecoverStaleWorkers(s.ctx, 5*time.Minute)
			require.NoError(s.t, err)
			assert.Equal(s.t, 1, workers)
		}},
		{"workers/register tasks is idempotent", func(s *suite) {
			w := s.worker()
			require.NoError(s.t, s.b.RegisterTasks(s.ctx, w, []string{"a", "b"}))
			require.NoError(s.t, s.b.RegisterTasks(s.ctx, w, []string{"a", "b", "c"}))
			require.NoError(s.t, s.b.RegisterTasks(s.ctx, w, nil))
			other := s.worker()
			require.NoError(s.t, s.b.RegisterTasks(s.ctx, other, []string{"a"}))
		}},
		{"maintenance/expired done rows are deleted, others kept", func(s *suite) {
			w := s.worker()
			var done []string
			for range 3 {
				j := s.enqueueNamed("expiring")
				s.claimOne(w, "expiring")
				s.complete(w, backends.Completion{JobID: j.ID, Outcome: backends.OutcomeDone, ResultTTL: time.Hour})
				done = append(done, j.ID)
			}
			queued := s.enqueueNamed("staying")
			require.NoError(s.t, s.h.BackdateExpiry(s.ctx, done[0], 2*time.Hour))

			n, err := s.b.DeleteExpired(s.ctx)
			require.NoError(s.t, err)
			assert.Equal(s.t, 1, n)
			s.requireGone(done[0])
			assert.Equal(s.t, backends.StatusDone, s.get(done[1]).Status)
			assert.Equal(s.t, backends.StatusDone, s.get(done[2]).Status)
			assert.Equal(s.t, backends.StatusQueued, s.get(queued.ID).Status)

			n, err = s.b.DeleteExpired(s.ctx)
			require.NoError(s.t, err)
			assert.Equal(s.t, 0, n)
		}},
	}
}
