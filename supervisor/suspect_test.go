package supervisor

// The crash rule on the fake clock (see suspect.go): a job alone in a
// process that dies is charged for the crash; jobs that shared it are
// suspects and re-run alone first. The fake handlers record what each
// process held whenever a job arrived and when it crashed, so isolation is
// checked exactly, not inferred from timing.

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/internal/logtest"
	"github.com/soniq-dev/soniq-sidecar/protocol"
)

func (w *fakeWorld) enqueueMax(name string, seconds float64, maxAttempts int) string {
	j, err := w.mem.Enqueue(context.Background(), backends.EnqueueParams{Name: name,
		Args: json.RawMessage(`{"seconds":` + jsonNumber(seconds) + `}`), MaxAttempts: &maxAttempts})
	require.NoError(w.t, err)
	return j.ID
}

// launch starts the supervisor without waiting for anything.
func (w *fakeWorld) launch() {
	go func() {
		err := w.sup.Run(context.Background())
		w.stopped = time.Now()
		w.runErr <- err
	}()
	w.start = time.Now()
}

// stopIfRunning ends a supervisor that a failed test left running, so that
// the bubble's goroutines end (*ended is set once Run's error was read).
func (w *fakeWorld) stopIfRunning(ended *bool) {
	if !*ended {
		w.sup.Shutdown()
		<-w.runErr
	}
}

// deadLetter returns a job's dead-letter row, if it has one.
func (w *fakeWorld) deadLetter(id string) (backends.DeadLetterJob, bool) {
	rows, err := w.mem.ListDeadLetter(context.Background(), 0)
	require.NoError(w.t, err)
	for _, r := range rows {
		if r.ID == id {
			return r, true
		}
	}
	return backends.DeadLetterJob{}, false
}

// settled reports whether every job is done or dead-lettered.
func (w *fakeWorld) settled(ids []string) bool {
	for _, id := range ids {
		if _, dead := w.deadLetter(id); dead {
			continue
		}
		if j, err := w.mem.Get(context.Background(), id); err != nil || j.Status != backends.StatusDone {
			return false
		}
	}
	return true
}

// waitFor advances the fake clock until cond holds, up to limit.
func (w *fakeWorld) waitFor(limit time.Duration, what string, cond func() bool) {
	w.t.Helper()
	for end := time.Now().Add(limit); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		synctest.Wait()
		if cond() {
			return
		}
	}
	w.t.Fatalf("not within %s of fake time: %s", limit, what)
}

func (w *fakeWorld) snapshot() ([]fakeRun, []fakeCrash) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.runs), slices.Clone(w.crashes)
}

func (w *fakeWorld) logsWith(msg string) []logtest.Record {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []logtest.Record
	for _, r := range w.logs {
		if r.Msg == msg {
			out = append(out, r)
		}
	}
	return out
}

// alone reports whether runs[i] had its process to itself: nothing held
// when it arrived, nothing sent there while it was held.
func alone(runs []fakeRun, i int) bool {
	if len(runs[i].alongside) > 0 {
		return false
	}
	for _, r := range runs[i+1:] {
		if r.proc == runs[i].proc && slices.Contains(r.alongside, runs[i].id) {
			return false
		}
	}
	return true
}

const (
	msgSuspects  = "handler process died holding several jobs: they are suspects, each re-runs alone before a crash counts against it"
	msgConvicted = "suspect convicted: it crashed its process running alone; the crash counts against it"
	msgCleared   = "suspect cleared: it ran alone without crashing its process"
)

func TestSuspectsRerunAlone(t *testing.T) {
	type job struct {
		name    string
		seconds float64
	}
	cases := []struct {
		name                   string
		processes, concurrency int
		innocents              []job
		poisonMax              int  // the crash job's max_attempts
		crashesWithNeighbours  int  // -1: not fixed (several processes)
		othersFlow             bool // jobs ran in another process while a suspect ran alone
	}{
		{name: "culprit alone is charged", processes: 1, concurrency: 8, poisonMax: 2},
		{name: "poison among 7 innocents, concurrency 8", processes: 1, concurrency: 8, poisonMax: 3,
			innocents:             slices.Concat(slices.Repeat([]job{{"async.sleep", 3}}, 4), slices.Repeat([]job{{"sync.sleep", 3}}, 3)),
			crashesWithNeighbours: 1},
		{name: "isolated run crashes on the last attempt", processes: 1, concurrency: 4, poisonMax: 1,
			innocents: slices.Repeat([]job{{"async.sleep", 3}}, 3), crashesWithNeighbours: 1},
		{name: "processes 2", processes: 2, concurrency: 2, poisonMax: 3,
			innocents: slices.Repeat([]job{{"async.sleep", 2}}, 11), crashesWithNeighbours: -1, othersFlow: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newFakePool(t, fakeSettings(30*time.Second, time.Minute), tc.processes, tc.concurrency, min(4, tc.concurrency), nil)
				var innocents []string
				for _, j := range tc.innocents[:len(tc.innocents)/2] {
					innocents = append(innocents, w.enqueueMax(j.name, j.seconds, 3))
				}
				poison := w.enqueueMax("crash", 1, tc.poisonMax)
				for _, j := range tc.innocents[len(tc.innocents)/2:] {
					innocents = append(innocents, w.enqueueMax(j.name, j.seconds, 3))
				}
				ended := false
				defer w.stopIfRunning(&ended)
				w.launch()
				w.waitFor(10*time.Minute, "every job done or dead-lettered", func() bool {
					return w.settled(append([]string{poison}, innocents...))
				})

				done1, dead := 0, 0
				for _, id := range innocents {
					if _, ok := w.deadLetter(id); ok {
						dead++
					} else if j := w.job(id); j.Status == backends.StatusDone && j.Attempts == 1 {
						done1++
					}
				}
				t.Logf("innocents done on attempt 1: %d/%d, dead-lettered: %d", done1, len(innocents), dead)
				assert.Equal(t, len(innocents), done1, "every innocent job done on its first attempt")
				assert.Zero(t, dead, "no innocent job dead-lettered")
				dl, ok := w.deadLetter(poison)
				require.True(t, ok, "the poison job is dead-lettered")
				assert.Equal(t, backends.ReasonMaxRetriesExceeded, dl.Reason)
				assert.Equal(t, tc.poisonMax, dl.Attempts)
				require.NotNil(t, dl.LastError)
				assert.Contains(t, *dl.LastError, "exited with status 7")

				runs, crashes := w.snapshot()
				counted, shared := 0, 0
				for _, c := range crashes {
					require.Contains(t, c.held, poison, "only the poison job crashes a process")
					if len(c.held) == 1 {
						counted++
					} else {
						shared++
					}
				}
				assert.Equal(t, tc.poisonMax, counted, "every counted crash happened with the poison alone in its process")
				if tc.crashesWithNeighbours >= 0 {
					assert.Equal(t, tc.crashesWithNeighbours, shared)
				}
				// A run that repeats an attempt is a suspect's re-run: alone.
				seen := map[string]bool{}
				reruns := 0
				for i, r := range runs {
					key := fmt.Sprint(r.id, "/", r.attempt)
					if seen[key] {
						reruns++
						assert.True(t, alone(runs, i), "re-run %d of %s (attempt %d) had process %d to itself: alongside %v", i, r.id, r.attempt, r.proc, r.alongside)
					}
					seen[key] = true
				}
				held := 0
				for _, c := range crashes {
					if len(c.held) > 1 {
						held += len(c.held)
					}
				}
				assert.Equal(t, held, reruns, "every job held by a shared crash re-ran exactly once")

				warns, convicted, cleared := w.logsWith(msgSuspects), w.logsWith(msgConvicted), w.logsWith(msgCleared)
				assert.Len(t, warns, shared, "one warning per crash with neighbours")
				suspects := 0
				for _, r := range warns {
					suspects += int(r.Attrs["suspects"].(int64))
				}
				assert.Equal(t, held, suspects)
				assert.Len(t, convicted, shared, "the poison is convicted once per crash it shared")
				assert.Len(t, cleared, suspects-shared, "every innocent suspect is cleared")
				for _, r := range convicted {
					assert.Equal(t, poison, r.Attrs["job_id"])
				}

				if tc.othersFlow {
					flowed := false
					for i, r := range runs {
						if !isRerun(runs, i) {
							continue
						}
						for _, o := range runs[i+1:] {
							if o.proc != r.proc && o.at.Before(r.end) {
								flowed = true
							}
						}
					}
					assert.True(t, flowed, "a job started in another process while a suspect ran alone")
				}
				w.sup.Shutdown()
				ended = true
				require.NoError(t, <-w.runErr)
			})
		})
	}
}

// isRerun reports whether runs[i] repeats an earlier run's attempt.
func isRerun(runs []fakeRun, i int) bool {
	return slices.ContainsFunc(runs[:i], func(r fakeRun) bool { return r.id == runs[i].id && r.attempt == runs[i].attempt })
}

// Shutdown while suspects wait or run alone: DRAINING still runs them; at
// FORCE_TIMEOUT_PATH the waiting ones are NACKed (claimed, not handed to a
// process), the one running alone follows its job's branch.
func TestSuspectsAtShutdown(t *testing.T) {
	cases := []struct {
		name                    string
		innocent                string
		seconds                 float64
		shutdownTimeout         time.Duration
		wantForce               bool
		wantIsolatedDone        bool
		wantIsolatedCancelled   bool
		wantWaitForThreadOffset time.Duration // from the shutdown request; 0: not entered
	}{
		{name: "draining runs every suspect alone", innocent: "async.sleep", seconds: 5, shutdownTimeout: time.Minute,
			wantIsolatedDone: true},
		{name: "forced: waiting suspects nacked, the async one running alone cancelled and nacked", innocent: "async.sleep", seconds: 100,
			shutdownTimeout: 10 * time.Second, wantForce: true, wantIsolatedCancelled: true},
		{name: "forced: waiting suspects nacked, the sync one running alone keeps running", innocent: "sync.sleep", seconds: 100,
			shutdownTimeout: 10 * time.Second, wantForce: true, wantIsolatedDone: true, wantWaitForThreadOffset: 70 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newFakeWorld(t, fakeSettings(tc.shutdownTimeout, time.Minute), 4, 4, nil)
				innocents := []string{w.enqueue(tc.innocent, tc.seconds), w.enqueue(tc.innocent, tc.seconds), w.enqueue(tc.innocent, tc.seconds)}
				ended := false
				defer w.stopIfRunning(&ended)
				w.run(3)
				// The poison starts 1 s after the innocents, so they come
				// first in the suspects' order (by start).
				time.Sleep(time.Second)
				poison := w.enqueueMax("crash", 1, 3)
				w.waitFor(time.Minute, "the crash made suspects", func() bool { return len(w.logsWith(msgSuspects)) == 1 })
				w.waitFor(time.Minute, "a suspect runs alone", func() bool { return len(w.logsWith("suspect re-running alone in a process")) == 1 })
				w.start = time.Now()
				w.sup.Shutdown()
				ended = true
				took := w.wait()

				runs, crashes := w.snapshot()
				require.NotEmpty(t, crashes)
				assert.ElementsMatch(t, append([]string{poison}, innocents...), crashes[0].held, "the poison crashed its process among the innocents")
				var isolated fakeRun // the replacement's first job: the first suspect, running alone
				for _, r := range runs {
					if r.proc == 2 {
						isolated = r
						break
					}
				}
				first := isolated.id
				require.Contains(t, innocents, first, "innocents come first among the suspects")
				tr := w.transitions()
				if !tc.wantForce {
					assert.NotContains(t, tr, "FORCE_TIMEOUT_PATH")
					for _, id := range innocents {
						j := w.job(id)
						assert.Equal(t, backends.StatusDone, j.Status)
						assert.Equal(t, 1, j.Attempts)
					}
					// The poison ran alone last and was convicted: retried
					// per policy, not claimed again while draining.
					j := w.job(poison)
					assert.Equal(t, backends.StatusQueued, j.Status)
					assert.Equal(t, 1, j.Attempts)
					require.NotNil(t, j.LastError)
					assert.Contains(t, *j.LastError, "exited with status 7")
					require.Len(t, crashes, 2)
					assert.Equal(t, []string{poison}, crashes[1].held, "the second crash: the poison alone")
					assert.Len(t, w.logsWith(msgConvicted), 1)
					assert.Len(t, w.logsWith(msgCleared), 3)
					assert.Equal(t, 3*time.Duration(tc.seconds*float64(time.Second))+time.Second, w.stopped.Sub(isolated.at),
						"the four suspects ran one after another, each alone, then STOPPED")
					for i := range runs {
						if isRerun(runs, i) {
							assert.True(t, alone(runs, i), "suspect %s re-ran alone", runs[i].id)
						}
					}
					return
				}
				assert.Len(t, crashes, 1, "the poison never ran again")
				assert.Equal(t, tc.shutdownTimeout, tr["FORCE_TIMEOUT_PATH"])
				sent := map[string]int{}
				for _, r := range runs {
					sent[r.id]++
				}
				for _, id := range append([]string{poison}, innocents...) {
					if id == first {
						continue
					}
					j := w.job(id)
					assert.Equal(t, backends.StatusQueued, j.Status, "waiting suspect %s NACKed", id)
					assert.Equal(t, 1, j.Attempts, "attempts preserved")
					assert.Nil(t, j.LastError, "never charged")
					assert.Equal(t, 1, sent[id], "never re-sent after the crash")
				}
				j := w.job(first)
				assert.Equal(t, 2, sent[first], "the suspect running alone was re-sent once")
				if tc.wantIsolatedCancelled {
					assert.Equal(t, []protocol.CancelReason{protocol.ReasonShutdownTimeout}, w.cancels(first))
					assert.Equal(t, backends.StatusQueued, j.Status)
					assert.Equal(t, 1, j.Attempts)
					assert.Equal(t, tc.shutdownTimeout, took, "async only: STOPPED at FORCE_TIMEOUT_PATH")
				}
				if tc.wantIsolatedDone {
					assert.Empty(t, w.cancels(first), "a sync job is never cancelled")
					assert.Equal(t, backends.StatusDone, j.Status)
					assert.Equal(t, 1, j.Attempts)
					assert.Equal(t, time.Duration(tc.seconds*float64(time.Second)), w.stopped.Sub(isolated.at), "STOPPED when the sync suspect returns")
				}
				if tc.wantWaitForThreadOffset > 0 {
					assert.Equal(t, tc.wantWaitForThreadOffset, tr["WAIT_FOR_THREAD"], "flat grace from FORCE_TIMEOUT_PATH")
				}
			})
		})
	}
}

// While suspects wait for a process of their own, the other processes keep
// claiming and running jobs at their capacity: a waiting suspect does not
// hold a slot of theirs.
func TestSuspectsLeaveOtherProcessesClaiming(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakePool(t, fakeSettings(30*time.Second, time.Minute), 2, 4, 4, nil)
		ended := false
		defer w.stopIfRunning(&ended)
		w.launch()
		w.waitFor(time.Minute, "both processes ready", func() bool { return len(w.logsWith("handler process ready")) == 2 })
		// One job at a time goes to the least-loaded process, the first on
		// a tie: the innocents and the poison share process 1, the long jobs
		// fill three slots of process 2.
		enqueue := func(name string, seconds float64) string {
			id := w.enqueueMax(name, seconds, 3)
			w.waitFor(time.Minute, "job "+id+" started", func() bool {
				runs, _ := w.snapshot()
				return slices.ContainsFunc(runs, func(r fakeRun) bool { return r.id == id })
			})
			time.Sleep(10 * time.Millisecond) // distinct start times: suspects re-run in this order
			return id
		}
		var innocents []string
		for range 3 {
			innocents = append(innocents, enqueue("async.sleep", 5))
			enqueue("async.sleep", 20)
		}
		poison := enqueue("crash", 1)
		runs, _ := w.snapshot()
		for _, r := range runs {
			want := 2
			if r.id == poison || slices.Contains(innocents, r.id) {
				want = 1
			}
			require.Equal(t, want, r.proc, "placement of %s", r.id)
		}
		w.waitFor(time.Minute, "the crash made suspects", func() bool { return len(w.logsWith(msgSuspects)) == 1 })
		var short []string
		for range 6 {
			short = append(short, w.enqueueMax("async.sleep", 1, 3))
		}
		w.waitFor(time.Minute, "the poison convicted", func() bool { return len(w.logsWith(msgConvicted)) == 1 })

		runs, _ = w.snapshot()
		var lastSuspect time.Time // when the last suspect started alone
		for i, r := range runs {
			if isRerun(runs, i) && r.at.After(lastSuspect) {
				lastSuspect = r.at
			}
		}
		for _, id := range short {
			i := slices.IndexFunc(runs, func(r fakeRun) bool { return r.id == id })
			require.GreaterOrEqual(t, i, 0, "short job %s ran", id)
			assert.Equal(t, 2, runs[i].proc, "short job %s ran in the other process", id)
			assert.True(t, !runs[i].end.IsZero() && runs[i].end.Before(lastSuspect),
				"short job %s ran (%v to %v) while suspects still waited (the last started alone at %v)", id, runs[i].at, runs[i].end, lastSuspect)
		}
		w.sup.Shutdown()
		ended = true
		require.NoError(t, <-w.runErr)
	})
}
