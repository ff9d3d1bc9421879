package integration

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/backends/postgres/pgtest"
)

// nodeStdio is the SDK the schedule tests run their handlers on: a Node
// handler serves the fired jobs, so no Python process is involved.
var nodeStdio = sdks[2]

// cli runs one of the binary's data commands against the world's
// database and returns its exit code, stdout and stderr.
func (w *world) cli(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, sidecarBinary(t), args...)
	cmd.Dir = w.dir
	cmd.Env = []string{"SONIQ_DATABASE_URL=" + w.dbURL, "GORACE=atexit_sleep_ms=0", "PATH=" + os.Getenv("PATH")}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err, "soniq-sidecar %v", args)
	}
	return code, stdout.String(), stderr.String()
}

// schedules reads `schedule list --json`, by job name.
func (w *world) schedules(t *testing.T) map[string]backends.Schedule {
	t.Helper()
	code, out, errOut := w.cli(t, "schedule", "list", "--json")
	require.Equal(t, 0, code, errOut)
	var list []backends.Schedule
	require.NoError(t, json.Unmarshal([]byte(out), &list), out)
	m := map[string]backends.Schedule{}
	for _, s := range list {
		m[s.Name] = s
	}
	return m
}

// cliJob reads `job ID --json`.
func (w *world) cliJob(t *testing.T, id string) backends.Job {
	t.Helper()
	code, out, errOut := w.cli(t, "job", id, "--json")
	require.Equal(t, 0, code, errOut)
	var j backends.Job
	require.NoError(t, json.Unmarshal([]byte(out), &j), out)
	return j
}

func (w *world) runsRecorded() int {
	n := 0
	for _, r := range w.recorded() {
		if r[0] == "run" {
			n++
		}
	}
	return n
}

const recordSchedule = `schedules:
  - name: t.record
    every: 1s
    args: {n: 1}
    queue: sched
    priority: 7
    max_attempts: 4
`

// The real binary, on both real databases: a schedule declared in the
// manifest fires every second and its jobs run in a Node handler; the
// fired job is the schedule's and names the sidecar that fired it; the
// metrics count the firings; a restart re-declares the schedule and keeps
// its id and run count.
func TestSchedulesFireOnBothDatabases(t *testing.T) {
	t.Parallel()
	for _, db := range []string{"postgres", "sqlite"} {
		t.Run(db, func(t *testing.T) {
			t.Parallel()
			var w *world
			if db == "postgres" {
				w = newWorld(t, nodeStdio, manifestOpts{})
			} else {
				w, _ = sqliteWorld(t, nodeStdio)
			}
			w.manifest = w.writeCustomManifest(t, "scheduled.yaml", func(s string) string { return s + recordSchedule })

			// A schedule added from the command line, listed with the
			// manifest's.
			code, out, errOut := w.cli(t, "schedule", "add", "t.noop", "--cron", "*/5 * * * *", "--queue", "q5")
			require.Equal(t, 0, code, errOut)
			assert.Contains(t, out, "schedule t.noop added: cron */5 * * * *")

			sc := w.startSidecar(nil, "--metrics-addr", "127.0.0.1:0")
			addr := sc.httpAddr(t)
			worker := sc.workerID(t)
			eventually(t, 30*time.Second, "three scheduled runs in the Node handler", func() bool { return w.runsRecorded() >= 3 })

			// --json: an array of objects keyed by the table's column names.
			_, out, _ = w.cli(t, "schedule", "list", "--json")
			var raw []map[string]any
			require.NoError(t, json.Unmarshal([]byte(out), &raw))
			require.Len(t, raw, 2)
			var keys []string
			for k := range raw[0] {
				keys = append(keys, k)
			}
			assert.ElementsMatch(t, recurringColumns(t, w, db), keys)

			list := w.schedules(t)
			rec := list["t.record"]
			assert.Equal(t, "interval", rec.Type)
			assert.Equal(t, "1", rec.Value)
			assert.Equal(t, backends.ScheduleActive, rec.Status)
			assert.GreaterOrEqual(t, rec.RunCount, 3)
			require.NotNil(t, rec.LastJobID)
			require.NotNil(t, rec.LastRun)
			require.NotNil(t, rec.NextRun)
			noop := list["t.noop"]
			assert.Equal(t, "cron", noop.Type)
			require.NotNil(t, noop.NextRun)
			assert.Equal(t, 0, noop.NextRun.Minute()%5, "a */5 schedule's next run is on a five-minute boundary")
			assert.Equal(t, 0, noop.NextRun.Second())

			j := w.cliJob(t, *rec.LastJobID)
			assert.Equal(t, "t.record", j.Name)
			assert.Equal(t, "sched", j.Queue)
			assert.Equal(t, 7, j.Priority)
			assert.Equal(t, 4, j.MaxAttempts)
			assert.JSONEq(t, `{"n":1}`, string(j.Args))
			require.NotNil(t, j.ProducerID)
			assert.Contains(t, *j.ProducerID, "soniq-sidecar:"+worker, "producer_id names the sidecar that fired it")

			scrape := obsScrape(t, addr)
			fired := scrape["soniq_schedule_fired_total"]
			require.NotNil(t, fired, "soniq_schedule_fired_total is exported")
			assert.NotEmpty(t, fired.GetHelp())
			assert.GreaterOrEqual(t, fired.Metric[0].GetCounter().GetValue(), 3.0)
			for _, name := range []string{"soniq_schedule_late_total", "soniq_schedule_enqueue_failed_total"} {
				f := scrape[name]
				require.NotNil(t, f, "%s is exported at 0", name)
				assert.NotEmpty(t, f.GetHelp())
			}
			assert.Equal(t, 0.0, scrape["soniq_schedule_enqueue_failed_total"].Metric[0].GetCounter().GetValue())
			code, body, err := obsGet(addr, "/readyz")
			require.NoError(t, err)
			assert.Equal(t, http.StatusOK, code)
			assert.NotContains(t, strings.ToLower(body), "schedul", "/readyz shows nothing about schedules")

			sc.signal(syscall.SIGTERM)
			code, _ = sc.wait(30 * time.Second)
			require.Equal(t, 0, code)
			before := w.schedules(t)["t.record"]

			// The restart declares the schedule again: same row, run count
			// kept, and it goes on firing.
			sc2 := w.startSidecar(nil)
			sc2.waitLog(30*time.Second, "schedule declared", map[string]any{"job_name": "t.record", "new": false})
			sc2.waitLog(30*time.Second, "scheduler: fired", map[string]any{"job_name": "t.record"})
			after := w.schedules(t)["t.record"]
			assert.Greater(t, after.RunCount, before.RunCount, "the run count goes on from where it was")
			assert.Equal(t, rec.ID, after.ID, "id kept")
			assert.True(t, rec.CreatedAt.Equal(*after.CreatedAt), "created_at kept")
			sc2.signal(syscall.SIGTERM)
			code, _ = sc2.wait(30 * time.Second)
			require.Equal(t, 0, code)
		})
	}
}

// A bad schedule in the manifest stops `run` before anything starts,
// exit 2, naming the file, the line and the field; on the command line
// it names the flag.
func TestBadScheduleIsAUsageError(t *testing.T) {
	t.Parallel()
	w, _ := sqliteWorld(t, nodeStdio)
	path := w.writeCustomManifest(t, "bad.yaml", func(s string) string {
		return s + "schedules:\n  - name: t.record\n    cron: \"0 25 * * *\"\n"
	})
	line := strings.Count(mustRead(t, path)[:strings.Index(mustRead(t, path), "cron: \"0 25")], "\n") + 1
	code, _, errOut := w.cli(t, "run", "--manifest", path, "--metrics-addr", "")
	assert.Equal(t, 2, code, errOut)
	assert.Contains(t, errOut, fmt.Sprintf("%s:%d: schedules[0].cron: invalid cron expression", path, line))

	code, _, errOut = w.cli(t, "schedule", "add", "t.record", "--cron", "0 25 * * *")
	assert.Equal(t, 2, code, errOut)
	assert.Contains(t, errOut, `--cron: invalid cron expression "0 25 * * *"`)
	code, _, errOut = w.cli(t, "schedule", "add", "t.record", "--every", "1s", "--cron", "* * * * *")
	assert.Equal(t, 2, code, errOut)
	assert.Contains(t, errOut, "not both")
	assert.Empty(t, w.schedules(t), "nothing declared")

	code, _, errOut = w.cli(t, "schedule", "pause", "missing")
	assert.Equal(t, 1, code, errOut)
	assert.Contains(t, errOut, `no schedule named "missing"`)
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Clean(path))
	require.NoError(t, err)
	return string(b)
}

// Behind PgBouncer in transaction mode: a sidecar with the listen URL
// (its lock on that direct session), one without (a transaction lock per
// tick) and one on a direct connection share one-second schedules; each
// leader is stopped in turn, and every due run is enqueued exactly once.
func TestSchedulesThroughPgBouncerTransactionMode(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nodeStdio, manifestOpts{})
	w.manifest = w.writeCustomManifest(t, "scheduled.yaml", func(s string) string {
		return s + "schedules:\n  - {name: pgb.a, every: 1s}\n  - {name: pgb.b, every: 1s}\n"
	})
	logFirings(t, w)
	pooled := pgtest.ThroughPooler(t, w.dbURL)
	began := time.Now()
	sidecars := []*sidecar{
		w.startSidecar(map[string]string{"SONIQ_DATABASE_URL": pooled, "SONIQ_DATABASE_POOLER": "transaction", "SONIQ_DATABASE_LISTEN_URL": w.dbURL}),
		w.startSidecar(map[string]string{"SONIQ_DATABASE_URL": pooled, "SONIQ_DATABASE_POOLER": "transaction"}),
		w.startSidecar(nil),
	}
	jobs := func() int {
		var n int
		require.NoError(t, w.db.QueryRow(context.Background(), `SELECT count(*) FROM soniq_jobs WHERE job_name = 'pgb.a'`).Scan(&n))
		return n
	}
	leaders := map[*sidecar]bool{}
	for round := range len(sidecars) {
		var leader *sidecar
		eventually(t, 30*time.Second, "a sidecar leads", func() bool {
			for _, s := range sidecars {
				if !leaders[s] && !s.exited() && len(s.logs("scheduler: leading")) > 0 {
					leader = s
					return true
				}
			}
			return false
		})
		leaders[leader] = true
		t.Logf("round %d: leader found at %s", round, time.Since(began).Round(time.Millisecond))
		target := jobs() + 3
		eventually(t, 30*time.Second, "three runs under this leader", func() bool { return jobs() >= target })
		if round < len(sidecars)-1 {
			leader.signal(syscall.SIGTERM)
			code, _ := leader.wait(30 * time.Second)
			require.Equal(t, 0, code)
			t.Logf("round %d: leader stopped at %s", round, time.Since(began).Round(time.Millisecond))
		}
	}
	for _, s := range sidecars {
		if !s.exited() {
			s.signal(syscall.SIGTERM)
			s.wait(30 * time.Second)
		}
	}
	for _, name := range []string{"pgb.a", "pgb.b"} {
		assert.GreaterOrEqual(t, firings(t, w, name), 8, name)
		assert.Equal(t, firings(t, w, name), w.scheduleRow(t, name).RunCount, "%s: run_count counts each firing", name)
	}
}

// recurringColumns are soniq_recurring_jobs' columns, as the database has them.
func recurringColumns(t *testing.T, w *world, db string) []string {
	t.Helper()
	var cols []string
	if db == "postgres" {
		rows, err := w.db.Query(context.Background(), `SELECT column_name FROM information_schema.columns
			WHERE table_name = 'soniq_recurring_jobs' ORDER BY ordinal_position`)
		require.NoError(t, err)
		for rows.Next() {
			var c string
			require.NoError(t, rows.Scan(&c))
			cols = append(cols, c)
		}
		require.NoError(t, rows.Err())
	} else {
		sdb, err := sql.Open("sqlite", strings.TrimPrefix(w.dbURL, "sqlite:"))
		require.NoError(t, err)
		defer sdb.Close()
		rows, err := sdb.Query(`SELECT name FROM pragma_table_info('soniq_recurring_jobs') ORDER BY cid`)
		require.NoError(t, err)
		for rows.Next() {
			var c string
			require.NoError(t, rows.Scan(&c))
			cols = append(cols, c)
		}
		require.NoError(t, rows.Err())
	}
	require.Len(t, cols, 15)
	return cols
}
