package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/internal/schedule"
)

// start runs one command of the helper script in the background; wait
// returns once it has exited (failing the test if it failed).
func (e soniqEnv) start(t *testing.T, command, url string, args any) (wait func()) {
	t.Helper()
	raw, err := json.Marshal(args)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	cmd := exec.CommandContext(ctx, e.python, filepath.Join("testdata", "soniq_interop.py"), command, url, string(raw))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var once sync.Once
	wait = func() {
		once.Do(func() {
			err := <-done
			cancel()
			require.NoError(t, err, "soniq %s: %s", command, stderr.String())
		})
	}
	t.Cleanup(func() {
		cancel()
		once.Do(func() { <-done })
	})
	return wait
}

// soniqSchedule is a schedule as Soniq's scheduler.list() returns it.
type soniqSchedule struct {
	ID            string         `json:"id"`
	Name          string         `json:"name"`
	ScheduleType  string         `json:"schedule_type"`
	ScheduleValue string         `json:"schedule_value"`
	Priority      int            `json:"priority"`
	Queue         string         `json:"queue"`
	MaxAttempts   int            `json:"max_attempts"`
	Args          map[string]any `json:"args"`
	Status        string         `json:"status"`
	NextRun       string         `json:"next_run"`
	RunCount      int            `json:"run_count"`
}

// soniqTime reads a datetime Soniq's helper printed with str().
func soniqTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse("2006-01-02 15:04:05.999999-07:00", s)
	require.NoError(t, err, "datetime %q", s)
	return v
}

// logFirings makes the database record every move of a schedule's
// next_run (a firing's compare-and-swap, by whichever scheduler), with a
// trigger of the test's own.
func logFirings(t *testing.T, w *world) {
	t.Helper()
	_, err := w.db.Exec(context.Background(), `
CREATE TABLE test_firings (seq bigserial PRIMARY KEY, job_name text, due timestamptz, next timestamptz);
CREATE FUNCTION test_log_firing() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF OLD.next_run IS DISTINCT FROM NEW.next_run THEN
    INSERT INTO test_firings (job_name, due, next) VALUES (NEW.job_name, OLD.next_run, NEW.next_run);
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER test_log_firing AFTER UPDATE ON soniq_recurring_jobs FOR EACH ROW EXECUTE FUNCTION test_log_firing();`)
	require.NoError(t, err)
}

// firings checks that each due run of a schedule fired exactly once, and
// returns how many fired: the next_run moves form one chain (each firing
// took the due run the one before left, so no due run was taken twice or
// skipped), and the schedule has exactly one job per move (no firing
// without its job, no job without its firing).
func firings(t *testing.T, w *world, name string) int {
	t.Helper()
	rows, err := w.db.Query(context.Background(), `SELECT due, next FROM test_firings WHERE job_name = $1 ORDER BY seq`, name)
	require.NoError(t, err)
	var moves [][2]time.Time
	for rows.Next() {
		var due, next time.Time
		require.NoError(t, rows.Scan(&due, &next))
		moves = append(moves, [2]time.Time{due, next})
	}
	require.NoError(t, rows.Err())
	seen := map[int64]bool{}
	for i, m := range moves {
		assert.False(t, seen[m[0].UnixMicro()], "%s: the run due at %s fired twice", name, m[0])
		seen[m[0].UnixMicro()] = true
		if i > 0 {
			assert.True(t, m[0].Equal(moves[i-1][1]), "%s: firing %d took the run due at %s, but the one before left %s", name, i, m[0], moves[i-1][1])
		}
		assert.True(t, m[1].After(m[0]), "%s: firing %d moved next_run back", name, i)
	}
	var jobs int
	require.NoError(t, w.db.QueryRow(context.Background(), `SELECT count(*) FROM soniq_jobs WHERE job_name = $1`, name).Scan(&jobs))
	assert.Equal(t, len(moves), jobs, "%s: one job per firing", name)
	return len(moves)
}

// declare adds a schedule due now, as `schedule add` would.
func declare(t *testing.T, w *world, name, typ, value string) {
	t.Helper()
	_, _, err := w.backend.UpsertSchedule(context.Background(), backends.ScheduleParams{Name: name, Type: typ, Value: value, NextRun: time.Now()})
	require.NoError(t, err)
}

func (w *world) scheduleRow(t *testing.T, name string) backends.Schedule {
	t.Helper()
	list, err := w.backend.ListSchedules(context.Background())
	require.NoError(t, err)
	for _, s := range list {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no schedule %q", name)
	return backends.Schedule{}
}

// The sidecar's schedules are Soniq 0.1.0's, both ways, through Soniq's
// own scheduler API.
func TestSoniqSchedulerInterop(t *testing.T) {
	t.Parallel()
	py := soniqPython(t)

	t.Run("a schedule Soniq adds for a Node-only job is fired by the sidecar", func(t *testing.T) {
		t.Parallel()
		w := newWorld(t, nodeStdio, manifestOpts{})
		// t.record is served by the Node handler only: Soniq's app does not know it.
		var added soniqSchedule
		py.run(t, "scheduler_add", w.dbURL, map[string]any{"name": "t.record", "every": 1, "queue": "from-soniq",
			"priority": 3, "max_attempts": 6, "args": map[string]any{"by": "soniq"}}, &added)
		assert.Equal(t, "interval", added.ScheduleType)
		sc := w.startSidecar(nil)
		worker := sc.workerID(t)
		eventually(t, 30*time.Second, "two runs of Soniq's schedule in the Node handler", func() bool { return w.runsRecorded() >= 2 })
		row := w.scheduleRow(t, "t.record")
		assert.Equal(t, added.ID, row.ID)
		assert.GreaterOrEqual(t, row.RunCount, 2)
		require.NotNil(t, row.LastJobID)
		j := w.job(*row.LastJobID)
		assert.Equal(t, "from-soniq", j.Queue)
		assert.Equal(t, 3, j.Priority)
		assert.Equal(t, 6, j.MaxAttempts, "max_attempts from the schedule")
		assert.JSONEq(t, `{"by":"soniq"}`, string(j.Args))
		require.NotNil(t, j.ProducerID)
		assert.Contains(t, *j.ProducerID, "soniq-sidecar:"+worker)
		sc.signal(syscall.SIGTERM)
		sc.wait(30 * time.Second)
	})

	t.Run("a schedule the sidecar adds is listed by Soniq's scheduler", func(t *testing.T) {
		t.Parallel()
		w := newWorld(t, nodeStdio, manifestOpts{})
		code, _, errOut := w.cli(t, "schedule", "add", "interop.listed", "--cron", "*/5 * * * *", "--queue", "reports",
			"--priority", "9", "--max-attempts", "2", "--args", `{"k":"v"}`)
		require.Equal(t, 0, code, errOut)
		code, _, errOut = w.cli(t, "schedule", "add", "interop.every", "--every", "90s")
		require.Equal(t, 0, code, errOut)
		code, _, errOut = w.cli(t, "schedule", "pause", "interop.every")
		require.Equal(t, 0, code, errOut)
		mine := w.schedules(t)

		var listed []soniqSchedule
		py.run(t, "scheduler_list", w.dbURL, nil, &listed)
		require.Len(t, listed, 2)
		byName := map[string]soniqSchedule{}
		for _, s := range listed {
			byName[s.Name] = s
		}
		c := byName["interop.listed"]
		assert.Equal(t, mine["interop.listed"].ID, c.ID)
		assert.Equal(t, "cron", c.ScheduleType)
		assert.Equal(t, "*/5 * * * *", c.ScheduleValue)
		assert.Equal(t, "reports", c.Queue)
		assert.Equal(t, 9, c.Priority)
		assert.Equal(t, 2, c.MaxAttempts)
		assert.Equal(t, map[string]any{"k": "v"}, c.Args)
		assert.Equal(t, "active", c.Status)
		assert.True(t, mine["interop.listed"].NextRun.Equal(soniqTime(t, c.NextRun)), "next_run %s vs %s", mine["interop.listed"].NextRun, c.NextRun)
		e := byName["interop.every"]
		assert.Equal(t, "interval", e.ScheduleType)
		assert.Equal(t, "90", e.ScheduleValue)
		assert.Equal(t, "paused", e.Status)

		// Soniq declaring it again keeps the sidecar's row.
		py.run(t, "scheduler_add", w.dbURL, map[string]any{"name": "interop.listed", "cron": "0 * * * *"}, nil)
		again := w.schedules(t)["interop.listed"]
		assert.Equal(t, mine["interop.listed"].ID, again.ID)
		assert.Equal(t, "0 * * * *", again.Value)
	})

	t.Run("the scheduler lock is Soniq's", func(t *testing.T) {
		t.Parallel()
		w := newWorld(t, nodeStdio, manifestOpts{})
		l := w.backend.ScheduleLeader()
		lead, done, err := l.Hold(t.Context())
		require.NoError(t, err)
		require.True(t, lead)
		done()
		var got struct{ Leader bool }
		py.run(t, "scheduler_leader", w.dbURL, nil, &got)
		assert.False(t, got.Leader, "Soniq's scheduler must not lead while a sidecar does")
		l.Close(context.Background())
		py.run(t, "scheduler_leader", w.dbURL, nil, &got)
		assert.True(t, got.Leader, "Soniq's scheduler leads once the sidecar gave the lock up")
	})

	t.Run("next runs are Soniq's", func(t *testing.T) {
		t.Parallel()
		exprs := []string{"* * * * *", "*/5 * * * *", "0 9 * * 1-5", "30 2 1 * *", "0 0 1 1 *", "15,45 */2 * * *",
			"0 0 13 * 5", "0 12 * * sun", "0 0 * jan,jul *", "59 23 31 12 *", "0 0 29 2 *", "0 0 * * 7", "0 8 * * 5-7", "@hourly", "@daily", "@weekly", "@monthly"}
		ats := []string{"2026-12-02T16:17:42.123456+00:00", "2026-02-28T23:59:59+00:00", "2026-12-31T23:59:00+00:00",
			"2027-03-01T00:00:00+00:00"}
		var cases [][2]string
		for _, e := range exprs {
			for _, a := range ats {
				cases = append(cases, [2]string{e, a})
			}
		}
		var want []string
		py.run(t, "cron_next", "postgres://unused", map[string]any{"cases": cases}, &want)
		require.Len(t, want, len(cases))
		for i, c := range cases {
			spec, err := schedule.Cron(c[0])
			require.NoError(t, err, c[0])
			at, err := time.Parse(time.RFC3339Nano, c[1])
			require.NoError(t, err)
			exp, err := time.Parse(time.RFC3339Nano, want[i])
			require.NoError(t, err, want[i])
			assert.True(t, exp.Equal(spec.Next(at)), "%q after %s: croniter %s, sidecar %s", c[0], c[1], exp, spec.Next(at))
		}
	})

	// After downtime, a schedule that missed many runs fires once, and its
	// next run counts from that firing: the same with Soniq's scheduler
	// and with a sidecar, each on a database of its own.
	t.Run("missed runs fire once on catch-up, as with Soniq's scheduler", func(t *testing.T) {
		t.Parallel()
		setUp := func() *world {
			w := newWorld(t, nodeStdio, manifestOpts{})
			declare(t, w, "catch.every", "interval", "60")
			declare(t, w, "catch.cron", "cron", "0 * * * *")
			// Every scheduler was down for three hours.
			_, err := w.db.Exec(context.Background(), `UPDATE soniq_recurring_jobs SET next_run = now() - interval '3 hours'`)
			require.NoError(t, err)
			return w
		}
		began := time.Now()
		soniqW, sidecarW := setUp(), setUp()
		t.Logf("set up after %s", time.Since(began).Round(time.Millisecond))
		waitSoniq := py.start(t, "scheduler_run", soniqW.dbURL, map[string]any{"seconds": 3})
		sc := sidecarW.startSidecar(nil, "--metrics-addr", "127.0.0.1:0")
		addr := sc.httpAddr(t)
		sc.waitLog(30*time.Second, "scheduler: fired", map[string]any{"job_name": "catch.every"})
		sc.waitLog(30*time.Second, "scheduler: fired", map[string]any{"job_name": "catch.cron"})
		t.Logf("sidecar fired both after %s", time.Since(began).Round(time.Millisecond))
		scrape := obsScrape(t, addr)
		assert.Equal(t, 2.0, scrape["soniq_schedule_fired_total"].Metric[0].GetCounter().GetValue())
		assert.Equal(t, 2.0, scrape["soniq_schedule_late_total"].Metric[0].GetCounter().GetValue(), "both catch-up firings were late")
		waitSoniq()
		t.Logf("Soniq's scheduler done after %s", time.Since(began).Round(time.Millisecond))
		sc.signal(syscall.SIGTERM)
		sc.wait(30 * time.Second)
		for who, w := range map[string]*world{"soniq": soniqW, "sidecar": sidecarW} {
			for _, name := range []string{"catch.every", "catch.cron"} {
				var n int
				require.NoError(t, w.db.QueryRow(context.Background(), `SELECT count(*) FROM soniq_jobs WHERE job_name = $1`, name).Scan(&n))
				assert.Equal(t, 1, n, "%s: %s fired once for three hours of missed runs", who, name)
				row := w.scheduleRow(t, name)
				require.NotNil(t, row.LastRun, "%s: %s", who, name)
				if name == "catch.every" {
					assert.Equal(t, time.Minute, row.NextRun.Sub(*row.LastRun), "%s: the next run counts from the catch-up", who)
				} else {
					assert.Equal(t, row.LastRun.Truncate(time.Hour).Add(time.Hour), *row.NextRun, "%s: the next hour after the catch-up", who)
				}
			}
		}
	})

	// Soniq's scheduler and two sidecars share one database for 30 s of
	// one-second schedules. Leadership moves: the leading sidecar is
	// killed, then the other is stopped, and Soniq's scheduler leads to the
	// end. Every due run fires exactly once (see firings), the schedules
	// keep firing throughout, and all three schedulers fired some.
	t.Run("Soniq's scheduler and two sidecars fire each run exactly once", func(t *testing.T) {
		t.Parallel()
		w := newWorld(t, nodeStdio, manifestOpts{})
		names := []string{"once.a", "once.b", "once.c"} // served by nobody: the jobs stay queued
		logFirings(t, w)
		for _, n := range names {
			declare(t, w, n, "interval", "1")
		}
		sidecarBinary(t) // built before the clock starts
		stop := filepath.Join(w.dir, "stop-soniq")
		began := time.Now()
		waitSoniq := py.start(t, "scheduler_run", w.dbURL, map[string]any{"seconds": 180, "stop_file": stop})
		a, b := w.startSidecar(nil), w.startSidecar(nil)
		// Jobs, not run_count: Soniq's scheduler writes run_count from the
		// copy of the row it loaded at start, so it may go back.
		runs := func() int {
			var n int
			require.NoError(t, w.db.QueryRow(context.Background(), `SELECT count(*) FROM soniq_jobs WHERE job_name = 'once.a'`).Scan(&n))
			return n
		}
		firedBy := func(s *sidecar) int { return len(s.logs("scheduler: fired")) }

		var leader, other *sidecar
		eventually(t, 60*time.Second, "a sidecar leads", func() bool {
			switch {
			case len(a.logs("scheduler: leading")) > 0:
				leader, other = a, b
			case len(b.logs("scheduler: leading")) > 0:
				leader, other = b, a
			}
			return leader != nil
		})
		eventually(t, 60*time.Second, "the leading sidecar fires 8 runs of each schedule", func() bool { return firedBy(leader) >= 8*len(names) })
		leader.kill(t)
		t.Logf("leading sidecar killed after %s", time.Since(began).Round(time.Millisecond))
		eventually(t, 60*time.Second, "the other sidecar leads and fires 8 runs of each", func() bool { return firedBy(other) >= 8*len(names) })
		other.signal(syscall.SIGTERM)
		other.wait(30 * time.Second)
		t.Logf("other sidecar stopped after %s", time.Since(began).Round(time.Millisecond))
		base := runs()
		eventually(t, 60*time.Second, "Soniq's scheduler fires once the sidecars are gone", func() bool {
			return runs() >= base+3 && time.Since(began) >= 30*time.Second
		})
		require.NoError(t, os.WriteFile(stop, nil, 0o644))
		waitSoniq()
		t.Logf("Soniq's scheduler stopped after %s", time.Since(began).Round(time.Millisecond))

		producers := map[string]bool{}
		for _, n := range names {
			fires := firings(t, w, n)
			assert.GreaterOrEqual(t, fires, 10, "%s: the schedule kept firing all along", n)
			rows, err := w.db.Query(context.Background(), `SELECT COALESCE(producer_id, '') FROM soniq_jobs WHERE job_name = $1`, n)
			require.NoError(t, err)
			for rows.Next() {
				var producer string
				require.NoError(t, rows.Scan(&producer))
				switch {
				case strings.Contains(producer, "soniq-sidecar:"):
					producers[producer] = true
				case producer != "":
					producers["soniq"] = true
				}
			}
			require.NoError(t, rows.Err())
		}
		assert.True(t, producers["soniq"], "Soniq's scheduler fired some runs: %v", producers)
		var sidecars int
		for p := range producers {
			if p != "soniq" {
				sidecars++
			}
		}
		assert.Equal(t, 2, sidecars, "both sidecars fired some runs: %v", slices.Collect(maps.Keys(producers)))
	})
}
