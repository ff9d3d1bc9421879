package integration

// A poison job: its handler kills its own process (exit status 7) while
// innocent jobs run next to it in the same process. The real binary, real
// Postgres rows, real Python and Node handler processes.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// fate is where a job ended: "done", "dead" (dead-lettered) or "" (not yet).
func (w *world) fate(id string) string {
	w.t.Helper()
	var status string
	err := w.db.QueryRow(context.Background(), `SELECT status FROM soniq_jobs WHERE id = $1::uuid`, id).Scan(&status)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		// Moved in one transaction: gone from soniq_jobs means dead-lettered.
		if _, ok := w.deadLetter(id); ok {
			return "dead"
		}
		return ""
	case err != nil:
		require.NoError(w.t, err, "reading job %s", id)
	case status == string(backends.StatusDone):
		return "done"
	}
	return ""
}

// ranAlone reports whether the run recorded at line i (a "start") had its
// process to itself: every other job started in that process before it had
// already ended there, and none started there until it ended (a run that
// crashed its process never ends).
func ranAlone(rec [][]string, i int) bool {
	id, pid := rec[i][1], rec[i][2]
	inFlight := map[string]bool{}
	for _, r := range rec[:i] {
		switch {
		case r[2] != pid:
		case r[0] == "start":
			inFlight[r[1]] = true
		case r[0] == "end":
			delete(inFlight, r[1])
		}
	}
	for _, r := range rec[i+1:] {
		switch {
		case r[2] != pid:
		case r[0] == "end" && r[1] == id:
			return len(inFlight) == 0
		case r[0] == "start":
			return false
		}
	}
	return len(inFlight) == 0
}

// The crash is charged to the poison job alone: every job in flight when a
// process died is a suspect and re-runs alone before a crash counts against
// it. Every innocent job ends done on its first attempt; the poison job is
// dead-lettered with its exit status and stderr, each counted crash
// happening while it ran alone.
func TestFaultsPoisonJobAmongInnocents(t *testing.T) {
	t.Parallel()
	forEachSDK(t, func(t *testing.T, s sdk) {
		w := newWorld(t, s, manifestOpts{processes: 1, concurrency: 8})
		var innocents []string
		for range 4 {
			innocents = append(innocents, w.enqueue("t.sleep_async", `{"seconds":0.3}`, 3))
		}
		poison := w.enqueue("t.crash", `{"seconds":0.1}`, 3)
		for range 10 {
			innocents = append(innocents, w.enqueue("t.sleep_async", `{"seconds":0.3}`, 3))
		}
		sc := w.startSidecar(nil)
		start := time.Now()
		all := append([]string{poison}, innocents...)
		whileRunning(t, 90*time.Second, "every job done or dead-lettered", func() bool {
			for _, id := range all {
				if w.fate(id) == "" {
					return false
				}
			}
			return true
		}, sc)
		took := time.Since(start)

		done1, dead := 0, 0
		for _, id := range innocents {
			switch w.fate(id) {
			case "done":
				if w.job(id).Attempts == 1 {
					done1++
				}
			case "dead":
				dead++
			}
		}
		t.Logf("%s/%s: innocents done on attempt 1: %d/%d, innocents dead-lettered: %d, poison: %s, settled in %.1fs",
			s.name, s.transport, done1, len(innocents), dead, w.fate(poison), took.Seconds())
		assert.Equal(t, len(innocents), done1, "every innocent job done on its first attempt")
		assert.Zero(t, dead, "no innocent job dead-lettered")

		dl, ok := w.deadLetter(poison)
		require.True(t, ok, "the poison job is dead-lettered")
		assert.Equal(t, backends.ReasonMaxRetriesExceeded, dl.Reason)
		assert.Equal(t, 3, dl.Attempts)
		require.NotNil(t, dl.LastError)
		assert.Contains(t, *dl.LastError, "exited with status 7")
		assert.Contains(t, *dl.LastError, "t.crash: poison job "+poison+" exiting with status 7", "its own stderr tail")
		t.Logf("%s/%s: poison last_error: %q", s.name, s.transport, *dl.LastError)

		// The run that counted for each attempt is the last one of that
		// attempt (a suspect re-runs with its attempt unchanged): it ran
		// alone in its process.
		rec := w.recorded()
		counted := map[string]int{} // attempt → line of its last start
		runs := 0
		for i, r := range rec {
			if r[0] == "start" && r[1] == poison {
				counted[r[3]] = i
				runs++
			}
		}
		require.Len(t, counted, 3, "three counted attempts: %v", counted)
		for attempt, i := range counted {
			assert.True(t, ranAlone(rec, i), "attempt %s of the poison job crashed its process while it ran alone", attempt)
		}

		// One warning per crash that held neighbours, naming the suspects;
		// one line per suspect cleared or convicted.
		warns := sc.logs("suspects")
		require.NotEmpty(t, warns, "a crash with neighbours was reported")
		suspected := 0
		for _, m := range warns {
			ids := fmt.Sprint(m["job_ids"])
			assert.Contains(t, ids, poison, "the poison job is among the suspects of every crash")
			assert.Equal(t, "WARN", m["level"])
			suspected += intAttr(m, "suspects")
		}
		convicted := sc.logs("suspect convicted")
		for _, m := range convicted {
			assert.Equal(t, poison, m["job_id"])
		}
		cleared := sc.logs("suspect cleared")
		for _, m := range cleared {
			assert.True(t, slices.Contains(innocents, fmt.Sprint(m["job_id"])), "only innocent jobs are cleared")
		}
		assert.Equal(t, suspected, len(convicted)+len(cleared), "every suspect was cleared or convicted")
		assert.Equal(t, len(warns), len(convicted), "every crash with neighbours ended with the poison convicted alone")
		t.Logf("%s/%s: %d crashes with neighbours, %d suspects, %d convicted, %d cleared, %d runs of the poison job",
			s.name, s.transport, len(warns), suspected, len(convicted), len(cleared), runs)
		sc.stop(t)
	})
}
