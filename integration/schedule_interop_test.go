package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
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
		l.Close()
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
	// end. Every due run fires exactly once: the runs of a schedule are at
	// least an interval apart (a run fired twice would be two jobs a few
	// milliseconds apart, since each firing moves next_run a second past
	// itself), there is about one a second, and all three schedulers fired
	// some.
	t.Run("Soniq's scheduler and two sidecars fire each run exactly once", func(t *testing.T) {
		t.Parallel()
		w := newWorld(t, nodeStdio, manifestOpts{})
		names := []string{"once.a", "once.b", "once.c"} // served by nobody: the jobs stay queued
		for _, n := range names {
			declare(t, w, n, "interval", "1")
		}
		waitSoniq := py.start(t, "scheduler_run", w.dbURL, map[string]any{"seconds": 30})
		a, b := w.startSidecar(nil), w.startSidecar(nil)
		// Jobs, not run_count: Soniq's scheduler writes run_count from the
		// copy of the row it loaded at start, so it may go back.
		runs := func() int {
			var n int
			require.NoError(t, w.db.QueryRow(context.Background(), `SELECT count(*) FROM soniq_jobs WHERE job_name = 'once.a'`).Scan(&n))
			return n
		}

		var leader, other *sidecar
		eventually(t, 30*time.Second, "a sidecar leads", func() bool {
			switch {
			case len(a.logs("scheduler: leading")) > 0:
				leader, other = a, b
			case len(b.logs("scheduler: leading")) > 0:
				leader, other = b, a
			}
			return leader != nil
		})
		eventually(t, 30*time.Second, "8 runs", func() bool { return runs() >= 8 })
		leader.kill(t)
		eventually(t, 30*time.Second, "8 more runs", func() bool { return runs() >= 16 })
		other.signal(syscall.SIGTERM)
		other.wait(30 * time.Second)
		start := runs()
		waitSoniq()
		assert.Greater(t, runs(), start, "Soniq's scheduler fired once the sidecars were gone")

		producers := map[string]bool{}
		for _, n := range names {
			rows, err := w.db.Query(context.Background(), `SELECT created_at, COALESCE(producer_id, '') FROM soniq_jobs
				WHERE job_name = $1 ORDER BY created_at`, n)
			require.NoError(t, err)
			var created []time.Time
			for rows.Next() {
				var at time.Time
				var producer string
				require.NoError(t, rows.Scan(&at, &producer))
				created = append(created, at)
				switch {
				case strings.Contains(producer, "soniq-sidecar:"):
					producers[producer] = true
				case producer != "":
					producers["soniq"] = true
				}
			}
			require.NoError(t, rows.Err())
			row := w.scheduleRow(t, n)
			require.NotNil(t, row.LastJobID)
			assert.GreaterOrEqual(t, len(created), 20, "%s: about one run a second for 30 s", n)
			for i := 1; i < len(created); i++ {
				gap := created[i].Sub(created[i-1])
				assert.GreaterOrEqual(t, gap, 500*time.Millisecond, "%s: runs %d and %d %s apart: a due run fired twice", n, i-1, i, gap)
			}
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
