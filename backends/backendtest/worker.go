package backendtest

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// The Backend interface has no worker read, so worker rows are observed
// through RecoverStaleWorkers and Heartbeat's errors.
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

			workers, jobs, err := s.b.RecoverStaleWorkers(s.ctx, 5*time.Minute, "")
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

			workers, jobs, err = s.b.RecoverStaleWorkers(s.ctx, 5*time.Minute, "")
			require.NoError(s.t, err)
			assert.Equal(s.t, [2]int{0, 0}, [2]int{workers, jobs}, "the stale worker is stopped now")

			// The live worker was left active: aged, it is recovered too.
			require.NoError(s.t, s.h.BackdateHeartbeat(s.ctx, live, 10*time.Minute))
			workers, jobs, err = s.b.RecoverStaleWorkers(s.ctx, 5*time.Minute, "")
			require.NoError(s.t, err)
			assert.Equal(s.t, [2]int{1, 1}, [2]int{workers, jobs})
		}},
		{"workers/heartbeat advances last_heartbeat", func(s *suite) {
			w := s.worker()
			require.NoError(s.t, s.h.BackdateHeartbeat(s.ctx, w, 10*time.Minute))
			require.NoError(s.t, s.b.Heartbeat(s.ctx, w))
			workers, _, err := s.b.RecoverStaleWorkers(s.ctx, 5*time.Minute, "")
			require.NoError(s.t, err)
			assert.Equal(s.t, 0, workers, "fresh heartbeat is not stale")
		}},
		{"workers/silent workers are recovered whatever their status", func(s *suite) {
			// A worker marked stopped by a recovery it survived (a frozen VM)
			// or left stopping by a crash mid-shutdown can still hold rows.
			for _, status := range []string{backends.WorkerActive, backends.WorkerStopping, backends.WorkerStopped} {
				w := s.worker()
				j := s.enqueueNamed("held." + status)
				s.claimOne(w, "held."+status)
				require.NoError(s.t, s.b.SetWorkerStatus(s.ctx, w, status), "set %s", status)
				require.NoError(s.t, s.h.BackdateHeartbeat(s.ctx, w, 10*time.Minute))
				workers, jobs, err := s.b.RecoverStaleWorkers(s.ctx, 5*time.Minute, "")
				require.NoError(s.t, err)
				assert.Equal(s.t, [2]int{1, 1}, [2]int{workers, jobs}, "status %s", status)
				got := s.get(j.ID)
				assert.Equal(s.t, backends.StatusQueued, got.Status, "status %s", status)
				assert.Nil(s.t, got.WorkerID)
				assert.Equal(s.t, 1, got.Attempts, "attempts preserved")
				assert.ErrorIs(s.t, s.b.Heartbeat(s.ctx, w), backends.ErrWorkerNotActive, "the silent worker is stopped now (status %s)", status)
			}
			// Silent, stopping, no rows: stopped. Silent, stopped, no rows:
			// nothing to do, so nothing is counted.
			stopping, stopped := s.worker(), s.worker()
			require.NoError(s.t, s.b.SetWorkerStatus(s.ctx, stopping, backends.WorkerStopping))
			require.NoError(s.t, s.b.SetWorkerStatus(s.ctx, stopped, backends.WorkerStopped))
			for _, w := range []string{stopping, stopped} {
				require.NoError(s.t, s.h.BackdateHeartbeat(s.ctx, w, 10*time.Minute))
			}
			workers, jobs, err := s.b.RecoverStaleWorkers(s.ctx, 5*time.Minute, "")
			require.NoError(s.t, err)
			assert.Equal(s.t, [2]int{1, 0}, [2]int{workers, jobs})
			workers, jobs, err = s.b.RecoverStaleWorkers(s.ctx, 5*time.Minute, "")
			require.NoError(s.t, err)
			assert.Equal(s.t, [2]int{0, 0}, [2]int{workers, jobs}, "idempotent")
		}},
		{"workers/a claim proves its worker alive", func(s *suite) {
			// Claiming refreshes the heartbeat in the claim's transaction,
			// so rows a worker has just claimed are never recovered from
			// under it, even when its heartbeat loop has fallen behind.
			w := s.worker()
			s.enqueueNamed("alive")
			require.NoError(s.t, s.h.BackdateHeartbeat(s.ctx, w, 10*time.Minute))
			j := s.claimOne(w, "alive")
			workers, jobs, err := s.b.RecoverStaleWorkers(s.ctx, 5*time.Minute, "")
			require.NoError(s.t, err)
			assert.Equal(s.t, [2]int{0, 0}, [2]int{workers, jobs}, "a worker that just claimed is not stale")
			assert.Equal(s.t, backends.StatusProcessing, s.get(j.ID).Status)

			// An empty claim (the idle poll) is proof of life too.
			require.NoError(s.t, s.h.BackdateHeartbeat(s.ctx, w, 10*time.Minute))
			assert.Empty(s.t, s.claim(backends.ClaimParams{WorkerID: w, Names: []string{"nothing.queued"}, Limit: 4}))
			workers, jobs, err = s.b.RecoverStaleWorkers(s.ctx, 5*time.Minute, "")
			require.NoError(s.t, err)
			assert.Equal(s.t, [2]int{0, 0}, [2]int{workers, jobs})
		}},
		{"workers/a worker whose row was recovered or is gone claims nothing", func(s *suite) {
			// After an outage longer than heartbeat_timeout the row is
			// stopped and its jobs requeued; claiming under it would let
			// the next recovery requeue the new rows while they run.
			w := s.worker()
			j := s.enqueueNamed("after.outage")
			require.NoError(s.t, s.h.BackdateHeartbeat(s.ctx, w, 10*time.Minute))
			workers, _, err := s.b.RecoverStaleWorkers(s.ctx, 5*time.Minute, "")
			require.NoError(s.t, err)
			require.Equal(s.t, 1, workers)
			for _, p := range []backends.ClaimParams{
				{WorkerID: w, Names: []string{"after.outage"}, Limit: 1},
				{WorkerID: w, Limit: 10},
			} {
				got, err := s.b.Claim(s.ctx, p)
				assert.ErrorIs(s.t, err, backends.ErrWorkerNotActive, "claim %+v", p)
				assert.Empty(s.t, got)
			}
			after := s.get(j.ID)
			assert.Equal(s.t, backends.StatusQueued, after.Status, "nothing claimed")
			assert.Equal(s.t, 0, after.Attempts)
			// The failed claim did not make the row look alive.
			require.NoError(s.t, s.b.SetWorkerStatus(s.ctx, w, backends.WorkerStopping))
			require.NoError(s.t, s.h.BackdateHeartbeat(s.ctx, w, 10*time.Minute))
			_, err = s.b.Claim(s.ctx, backends.ClaimParams{WorkerID: w, Limit: 1})
			assert.ErrorIs(s.t, err, backends.ErrWorkerNotActive, "a stopping row claims nothing either")
			workers, _, err = s.b.RecoverStaleWorkers(s.ctx, 5*time.Minute, "")
			require.NoError(s.t, err)
			assert.Equal(s.t, 1, workers, "a refused claim does not refresh the heartbeat")

			_, err = s.b.Claim(s.ctx, backends.ClaimParams{WorkerID: newUUID(s.t), Limit: 1})
			assert.ErrorIs(s.t, err, backends.ErrNotFound, "a worker with no row claims nothing")
			assert.Equal(s.t, backends.StatusQueued, s.get(j.ID).Status)

			// Registering again is the way back.
			s.registerAgain(w)
			assert.Equal(s.t, j.ID, s.claimOne(w, "after.outage").ID)
		}},
		{"workers/recovery never takes the caller's own row", func(s *suite) {
			self, other := s.worker(), s.worker()
			mine := s.enqueueNamed("self.job")
			theirs := s.enqueueNamed("other.job")
			s.claimOne(self, "self.job")
			s.claimOne(other, "other.job")
			for _, w := range []string{self, other} {
				require.NoError(s.t, s.h.BackdateHeartbeat(s.ctx, w, 10*time.Minute))
			}
			workers, jobs, err := s.b.RecoverStaleWorkers(s.ctx, 5*time.Minute, self)
			require.NoError(s.t, err)
			assert.Equal(s.t, [2]int{1, 1}, [2]int{workers, jobs}, "only the other worker is recovered")
			assert.Equal(s.t, backends.StatusProcessing, s.get(mine.ID).Status)
			assert.Equal(s.t, backends.StatusQueued, s.get(theirs.ID).Status)
			require.NoError(s.t, s.b.Heartbeat(s.ctx, self), "the caller's row is still active")
		}},
		{"workers/heartbeat reports a row that is gone or no longer active", func(s *suite) {
			assert.ErrorIs(s.t, s.b.Heartbeat(s.ctx, newUUID(s.t)), backends.ErrNotFound)
			id := newUUID(s.t)
			w := backends.Worker{ID: id, Hostname: "contract-host", PID: 1, Concurrency: 1}
			require.NoError(s.t, s.b.RegisterWorker(s.ctx, w))
			require.NoError(s.t, s.b.Heartbeat(s.ctx, id))
			require.NoError(s.t, s.b.SetWorkerStatus(s.ctx, id, backends.WorkerStopped))
			assert.ErrorIs(s.t, s.b.Heartbeat(s.ctx, id), backends.ErrWorkerNotActive)
			// Registering the same id again makes it active: the way back.
			require.NoError(s.t, s.b.RegisterWorker(s.ctx, w))
			require.NoError(s.t, s.b.Heartbeat(s.ctx, id))
		}},
		{"workers/register never takes another id's hostname and pid", func(s *suite) {
			// Soniq's register_worker replaces whatever row holds (hostname,
			// pid); a sidecar never does, whoever registered it: a Soniq
			// worker, another instance, or an earlier run of its own
			// instance (TakeOver is the only way to replace that one).
			soniq := newUUID(s.t)
			require.NoError(s.t, s.b.RegisterWorker(s.ctx, backends.Worker{ID: soniq, Hostname: "pod", PID: 1,
				Concurrency: 1, Metadata: json.RawMessage(`{"queues":["a"]}`)}))
			foreign := s.enqueueNamed("foreign")
			s.claimOne(soniq, "foreign")
			before := snapshot(s.get(foreign.ID))
			first := newUUID(s.t)
			require.NoError(s.t, s.b.RegisterWorker(s.ctx, s.identityWorker(first, "a", "pod", 1, "sidecar@pod")))
			held := s.enqueueNamed("held")
			s.claimOne(first, "held")
			heldBefore := snapshot(s.get(held.ID))
			for _, w := range []backends.Worker{
				{ID: newUUID(s.t), Hostname: "pod", PID: 1, Concurrency: 1, Metadata: identityMeta(s.t, "b", "pod")},
				{ID: newUUID(s.t), Hostname: "pod", PID: 1, Concurrency: 1},
				s.identityWorker(newUUID(s.t), "a", "pod", 1, "sidecar@pod"),
			} {
				assert.ErrorIs(s.t, s.b.RegisterWorker(s.ctx, w), backends.ErrIdentityTaken, "worker %s on %s pid %d", w.ID, w.Hostname, w.PID)
			}
			assert.Equal(s.t, before, snapshot(s.get(foreign.ID)), "another program's job is never released")
			assert.Equal(s.t, heldBefore, snapshot(s.get(held.ID)), "an earlier run's job is not released by registering")
			require.NoError(s.t, s.b.Heartbeat(s.ctx, soniq), "another program's row is never re-keyed")
			require.NoError(s.t, s.b.Heartbeat(s.ctx, first), "an earlier run's row is never re-keyed")
			// The same id again is an upsert: a restart that kept its id.
			require.NoError(s.t, s.b.RegisterWorker(s.ctx, s.identityWorker(first, "a", "pod", 1, "sidecar@pod")))
			// Another pid on the same hostname is another row.
			require.NoError(s.t, s.b.RegisterWorker(s.ctx, s.identityWorker(newUUID(s.t), "a", "pod", 2, "sidecar@pod")))
		}},
		{"workers/same identity lists the rows of one program instance on one host, whatever their pid", func(s *suite) {
			me := s.identityWorker(newUUID(s.t), "a", "pod", 7, "a@pod")
			earlier := s.identityWorker(newUUID(s.t), "a", "pod", 1, "a@pod")
			stopped := s.identityWorker(newUUID(s.t), "a", "pod", 2, "a@pod#1234")
			require.NoError(s.t, s.b.RegisterWorker(s.ctx, earlier))
			require.NoError(s.t, s.b.RegisterWorker(s.ctx, stopped))
			require.NoError(s.t, s.b.SetWorkerStatus(s.ctx, stopped.ID, backends.WorkerStopped))
			require.NoError(s.t, s.h.BackdateHeartbeat(s.ctx, earlier.ID, 10*time.Minute))
			for _, other := range []backends.Worker{
				s.identityWorker(newUUID(s.t), "b", "pod", 3, "b@pod"),        // another instance
				s.identityWorker(newUUID(s.t), "a", "other", 4, "a@other"),    // another host
				{ID: newUUID(s.t), Hostname: "a@pod", PID: 5, Concurrency: 1}, // Soniq's (no metadata)
				{ID: newUUID(s.t), Hostname: "a@pod", PID: 6, Concurrency: 1, Metadata: json.RawMessage(`{"kind":"other","instance":"a","hostname":"pod"}`)},
			} {
				require.NoError(s.t, s.b.RegisterWorker(s.ctx, other))
			}
			require.NoError(s.t, s.b.RegisterWorker(s.ctx, me))
			got, err := s.b.SameIdentity(s.ctx, me)
			require.NoError(s.t, err)
			byID := map[string]backends.Worker{}
			for _, w := range got {
				byID[w.ID] = w
			}
			require.Len(s.t, byID, 2, "the earlier rows of instance a on pod, and nothing else: %+v", got)
			e, st := byID[earlier.ID], byID[stopped.ID]
			assert.Equal(s.t, [3]any{"a@pod", 1, backends.WorkerActive}, [3]any{e.Hostname, e.PID, e.Status})
			assert.InDelta(s.t, (10 * time.Minute).Seconds(), e.HeartbeatAge.Seconds(), tolerance.Seconds(), "its heartbeat age, by the database's clock")
			assert.Equal(s.t, backends.WorkerStopped, st.Status, "a stopped row is listed too")
			assert.Less(s.t, st.HeartbeatAge, tolerance)
			assert.Equal(s.t, backends.Identity{Kind: "soniq-sidecar", Instance: "a", Host: "pod"}, mustIdentity(s.t, e.Metadata))
			none, err := s.b.SameIdentity(s.ctx, backends.Worker{ID: newUUID(s.t), Hostname: "x", PID: 1})
			require.NoError(s.t, err)
			assert.Empty(s.t, none, "a worker with no identity has no predecessors")
		}},
		{"workers/take over gives a dead worker's processing rows to its successor", func(s *suite) {
			// A container restart: the same (hostname, pid), a new id.
			dead := s.identityWorker(newUUID(s.t), "a", "pod", 1, "a@pod")
			require.NoError(s.t, s.b.RegisterWorker(s.ctx, dead))
			running := s.enqueueNamed("running")
			s.claimOne(dead.ID, "running")
			s.complete(dead.ID, backends.Completion{JobID: running.ID, Outcome: backends.OutcomeRetry, Error: "first"})
			s.claimOne(dead.ID, "running") // attempt 2
			other := s.enqueueNamed("other")
			s.claimOne(dead.ID, "other")
			done := s.enqueueNamed("done")
			s.claimOne(dead.ID, "done")
			s.complete(dead.ID, backends.Completion{JobID: done.ID, Outcome: backends.OutcomeDone, ResultTTL: time.Hour})
			neighbour := s.worker()
			theirs := s.enqueueNamed("theirs")
			s.claimOne(neighbour, "theirs")
			theirsBefore := snapshot(s.get(theirs.ID))
			beforeRunning := s.get(running.ID)

			rows, err := s.b.SameIdentity(s.ctx, s.identityWorker(newUUID(s.t), "a", "pod", 1, "a@pod"))
			require.NoError(s.t, err)
			require.Len(s.t, rows, 1)
			next := s.identityWorker(newUUID(s.t), "a", "pod", 1, "a@pod")
			jobs, err := s.b.TakeOver(s.ctx, next, rows)
			require.NoError(s.t, err)
			ids := []string{}
			for _, j := range jobs {
				ids = append(ids, j.ID)
				require.NotNil(s.t, j.WorkerID)
				assert.Equal(s.t, next.ID, *j.WorkerID)
			}
			assert.ElementsMatch(s.t, []string{running.ID, other.ID}, ids, "exactly the processing rows")
			got := s.get(running.ID)
			assert.Equal(s.t, backends.StatusProcessing, got.Status, "still processing: the execution may still run")
			assert.Equal(s.t, 2, got.Attempts, "attempts unchanged")
			assert.Equal(s.t, beforeRunning.LastError, got.LastError)
			require.NotNil(s.t, got.WorkerID)
			assert.Equal(s.t, next.ID, *got.WorkerID)
			assert.Nil(s.t, s.get(done.ID).WorkerID, "a finished row is detached")
			assert.Equal(s.t, backends.StatusDone, s.get(done.ID).Status)
			assert.Equal(s.t, theirsBefore, snapshot(s.get(theirs.ID)), "another worker's row untouched")
			assert.ErrorIs(s.t, s.b.Heartbeat(s.ctx, dead.ID), backends.ErrNotFound, "the dead row is gone")
			require.NoError(s.t, s.b.Heartbeat(s.ctx, next.ID), "the successor is registered and active")
			left, err := s.b.SameIdentity(s.ctx, next)
			require.NoError(s.t, err)
			assert.Empty(s.t, left)

			// The rows are the successor's: its guarded writes land, and it
			// can give one back with a NACK (attempts preserved).
			s.complete(next.ID, backends.Completion{JobID: running.ID, Outcome: backends.OutcomeDone, ResultTTL: time.Hour})
			assert.Equal(s.t, backends.StatusDone, s.get(running.ID).Status)
			nacked, err := s.nack(next.ID, other.ID)
			require.NoError(s.t, err)
			assert.Equal(s.t, []string{other.ID}, nacked)
			assert.Equal(s.t, 1, s.get(other.ID).Attempts)

			// Another pid (systemd, Compose): the same, and a recovered
			// (stopped) row is taken over as well; a row gone meanwhile is
			// skipped.
			a := s.identityWorker(newUUID(s.t), "b", "vm", 4100, "b@vm")
			require.NoError(s.t, s.b.RegisterWorker(s.ctx, a))
			held := s.enqueueNamed("held.b")
			s.claimOne(a.ID, "held.b")
			require.NoError(s.t, s.h.BackdateHeartbeat(s.ctx, a.ID, 10*time.Minute))
			_, _, err = s.b.RecoverStaleWorkers(s.ctx, 5*time.Minute, "")
			require.NoError(s.t, err)
			s.claimOne(neighbour, "held.b") // the recovered row ran elsewhere meanwhile
			b := s.identityWorker(newUUID(s.t), "b", "vm", 4200, "b@vm")
			rows, err = s.b.SameIdentity(s.ctx, b)
			require.NoError(s.t, err)
			require.Len(s.t, rows, 1)
			assert.Equal(s.t, backends.WorkerStopped, rows[0].Status)
			jobs, err = s.b.TakeOver(s.ctx, b, append(rows, backends.Worker{ID: newUUID(s.t), Status: backends.WorkerActive}))
			require.NoError(s.t, err)
			assert.Empty(s.t, jobs, "a row another worker holds now is not taken")
			assert.Equal(s.t, neighbour, *s.get(held.ID).WorkerID)
			require.NoError(s.t, s.b.Heartbeat(s.ctx, b.ID))
		}},
		{"workers/take over refuses a worker that is alive", func(s *suite) {
			live := s.identityWorker(newUUID(s.t), "a", "pod", 1, "a@pod")
			require.NoError(s.t, s.b.RegisterWorker(s.ctx, live))
			j := s.enqueueNamed("running")
			s.claimOne(live.ID, "running")
			require.NoError(s.t, s.h.BackdateHeartbeat(s.ctx, live.ID, time.Minute))
			next := s.identityWorker(newUUID(s.t), "a", "pod", 1, "a@pod")
			rows, err := s.b.SameIdentity(s.ctx, next)
			require.NoError(s.t, err)
			require.Len(s.t, rows, 1)
			before := snapshot(s.get(j.ID))
			// It beats after it was observed: it is alive.
			require.NoError(s.t, s.b.Heartbeat(s.ctx, live.ID))
			_, err = s.b.TakeOver(s.ctx, next, rows)
			require.ErrorIs(s.t, err, backends.ErrWorkerAlive)
			assert.Equal(s.t, before, snapshot(s.get(j.ID)), "its row untouched")
			require.NoError(s.t, s.b.Heartbeat(s.ctx, live.ID), "its worker row untouched")
			assert.ErrorIs(s.t, s.b.Heartbeat(s.ctx, next.ID), backends.ErrNotFound, "nothing registered")
			// A live row that holds the successor's (hostname, pid) and was
			// not offered for takeover: refused, nothing changed.
			_, err = s.b.TakeOver(s.ctx, next, nil)
			require.ErrorIs(s.t, err, backends.ErrIdentityTaken)
			assert.Equal(s.t, before, snapshot(s.get(j.ID)))
		}},
		{"workers/adopt orphans takes back only processing rows with no worker", func(s *suite) {
			w, other := s.worker(), s.worker()
			orphan1 := s.enqueueNamed("orphan")
			orphan2 := s.enqueueNamed("orphan")
			s.claimOne(w, "orphan")
			s.claimOne(w, "orphan")
			mine := s.enqueueNamed("mine")
			s.claimOne(w, "mine")
			theirs := s.enqueueNamed("theirs")
			s.claimOne(other, "theirs")
			queued := s.enqueueNamed("queued")
			for _, id := range []string{orphan1.ID, orphan2.ID} {
				require.NoError(s.t, s.h.OrphanJob(s.ctx, id))
			}
			before := map[string]string{}
			for _, id := range []string{mine.ID, theirs.ID, queued.ID} {
				before[id] = snapshot(s.get(id))
			}
			adopted, err := s.b.AdoptOrphans(s.ctx, w, []string{orphan1.ID, mine.ID, theirs.ID, queued.ID, orphan2.ID, newUUID(s.t)})
			require.NoError(s.t, err)
			assert.ElementsMatch(s.t, []string{orphan1.ID, orphan2.ID}, adopted)
			for _, id := range []string{orphan1.ID, orphan2.ID} {
				got := s.get(id)
				require.NotNil(s.t, got.WorkerID)
				assert.Equal(s.t, w, *got.WorkerID)
				assert.Equal(s.t, backends.StatusProcessing, got.Status)
				assert.Equal(s.t, 1, got.Attempts)
			}
			for id, b := range before {
				assert.Equal(s.t, b, snapshot(s.get(id)), "job %s untouched", id)
			}
			// The adopted row is the worker's again: its guarded write lands.
			s.complete(w, backends.Completion{JobID: orphan1.ID, Outcome: backends.OutcomeDone, ResultTTL: time.Hour})
			assert.Equal(s.t, backends.StatusDone, s.get(orphan1.ID).Status)
		}},
		{"workers/live workers are the active ones heard from recently", func(s *suite) {
			fresh := backends.Worker{ID: newUUID(s.t), Hostname: "soniq-host", PID: 7, Queues: []string{"a", "b"}, Concurrency: 3,
				Metadata: json.RawMessage(`{"kind":"soniq-sidecar","instance":"x"}`)}
			require.NoError(s.t, s.b.RegisterWorker(s.ctx, fresh))
			all := backends.Worker{ID: newUUID(s.t), Hostname: "soniq-host", PID: 8}
			require.NoError(s.t, s.b.RegisterWorker(s.ctx, all))
			silent, stopped := s.worker(), s.worker()
			require.NoError(s.t, s.h.BackdateHeartbeat(s.ctx, silent, 10*time.Minute))
			require.NoError(s.t, s.b.SetWorkerStatus(s.ctx, stopped, backends.WorkerStopped))

			live, err := s.b.LiveWorkers(s.ctx, 5*time.Minute)
			require.NoError(s.t, err)
			byID := map[string]backends.Worker{}
			for _, w := range live {
				byID[w.ID] = w
			}
			require.Contains(s.t, byID, fresh.ID)
			require.Contains(s.t, byID, all.ID)
			assert.NotContains(s.t, byID, silent, "a silent worker is not live")
			assert.NotContains(s.t, byID, stopped, "a stopped worker is not live")
			got := byID[fresh.ID]
			assert.Equal(s.t, [4]any{"soniq-host", 7, []string{"a", "b"}, 3}, [4]any{got.Hostname, got.PID, got.Queues, got.Concurrency})
			assert.Equal(s.t, backends.WorkerActive, got.Status)
			assert.JSONEq(s.t, `{"kind":"soniq-sidecar","instance":"x"}`, string(got.Metadata))
			assert.WithinDuration(s.t, time.Now(), got.LastHeartbeat, time.Minute)
			assert.Empty(s.t, byID[all.ID].Queues, "no queues: every queue")
		}},
		{"workers/register tasks upserts one row per (task_name, worker_id)", func(s *suite) {
			w, other := s.worker(), s.worker()
			require.NoError(s.t, s.b.RegisterTasks(s.ctx, w, []string{"a", "b"}))
			first := s.tasks()
			require.Equal(s.t, [][2]string{{"a", w}, {"b", w}}, taskPairs(first))

			// Again, with a new name and a name twice in one call.
			require.NoError(s.t, s.b.RegisterTasks(s.ctx, w, []string{"b", "c", "c"}))
			second := s.tasks()
			require.Equal(s.t, [][2]string{{"a", w}, {"b", w}, {"c", w}}, taskPairs(second))
			assert.True(s.t, second[1].LastSeenAt.After(first[1].LastSeenAt),
				"registering b again advances its last_seen_at (%s → %s)", first[1].LastSeenAt, second[1].LastSeenAt)
			assert.Equal(s.t, first[0].LastSeenAt, second[0].LastSeenAt, "a was not registered again")
			assert.WithinDuration(s.t, time.Now(), second[2].LastSeenAt, tolerance)

			require.NoError(s.t, s.b.RegisterTasks(s.ctx, w, nil))
			assert.Equal(s.t, second, s.tasks(), "no names: no change")

			require.NoError(s.t, s.b.RegisterTasks(s.ctx, other, []string{"a"}))
			assert.Equal(s.t, sortedPairs([][2]string{{"a", other}, {"a", w}, {"b", w}, {"c", w}}), taskPairs(s.tasks()),
				"another worker's row for the same name is its own")
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

// tasks reads the task registry, ordered by (task_name, worker_id).
func (s *suite) tasks() []TaskRow {
	s.t.Helper()
	require.NotNil(s.t, s.h.TaskRegistry, "the harness has no TaskRegistry hook")
	rows, err := s.h.TaskRegistry(s.ctx)
	require.NoError(s.t, err, "read the task registry")
	slices.SortFunc(rows, func(a, b TaskRow) int {
		if c := strings.Compare(a.TaskName, b.TaskName); c != 0 {
			return c
		}
		return strings.Compare(a.WorkerID, b.WorkerID)
	})
	for i := range rows {
		rows[i].LastSeenAt = rows[i].LastSeenAt.UTC()
	}
	return rows
}

func taskPairs(rows []TaskRow) [][2]string {
	out := make([][2]string, 0, len(rows))
	for _, r := range rows {
		out = append(out, [2]string{r.TaskName, r.WorkerID})
	}
	return out
}

func sortedPairs(ps [][2]string) [][2]string {
	slices.SortFunc(ps, func(a, b [2]string) int {
		if c := strings.Compare(a[0], b[0]); c != 0 {
			return c
		}
		return strings.Compare(a[1], b[1])
	})
	return ps
}

// identityMeta is the metadata of a sidecar instance's worker row.
func identityMeta(t *testing.T, instance, host string) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(map[string]any{backends.MetaKind: "soniq-sidecar", backends.MetaInstance: instance,
		backends.MetaHost: host, backends.MetaHeartbeatInterval: 5})
	require.NoError(t, err)
	return b
}

// identityWorker is a sidecar instance's worker row (not registered).
func (s *suite) identityWorker(id, instance, host string, pid int, hostname string) backends.Worker {
	return backends.Worker{ID: id, Hostname: hostname, PID: pid, Queues: []string{"default"}, Concurrency: 2,
		Version: "contract", Metadata: identityMeta(s.t, instance, host)}
}

func mustIdentity(t *testing.T, meta json.RawMessage) backends.Identity {
	t.Helper()
	id, ok := backends.IdentityOf(meta)
	require.True(t, ok, "metadata %s names no identity", meta)
	return id
}
