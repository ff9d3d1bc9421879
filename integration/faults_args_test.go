package integration

// Rows whose args no handler can read, written by another producer straight
// into the table: they must be dead-lettered at claim, and the jobs that
// share a handler process with them must run as if they were not there.

import (
	"context"
	"database/sql"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// insertRaw inserts a queued row with SQL, as a producer other than the
// sidecar would, and returns its id.
func (w *world) insertRaw(t *testing.T, name, argsSQL string) string {
	t.Helper()
	var id string
	require.NoError(t, w.db.QueryRow(context.Background(),
		`INSERT INTO soniq_jobs (id, job_name, args, status, attempts, max_attempts, queue, priority)
		 VALUES (gen_random_uuid(), $1, `+argsSQL+`, 'queued', 0, 3, 'default', 100) RETURNING id::text`, name).Scan(&id))
	return id
}

// assertNoRestart checks that the pool's one process served everything: no
// process was broken, none exited unexpectedly, none was started twice.
func assertNoRestart(t *testing.T, sc *sidecar, handler string, pid int) {
	t.Helper()
	assert.Empty(t, sc.logs("handler process is broken"), "no handler process was broken")
	assert.Empty(t, sc.logs("exited unexpectedly"), "no handler process crashed")
	assert.Equal(t, []int{pid}, sc.readyPIDs(handler), "the first process is the only one that ever became ready")
}

// Postgres: numbers jsonb accepts but no handler can read (they round to
// infinity as a 64-bit float) are dead-lettered at claim with a message
// naming the value; 8 good jobs in the same process run once each.
func TestFaultArgsOutOfRangeNumberPostgres(t *testing.T) {
	t.Parallel()
	forEachSDK(t, func(t *testing.T, s sdk) {
		w := newWorld(t, s, manifestOpts{})
		big := w.insertRaw(t, "t.noop", `'{"big": 1e400}'::jsonb`)
		nested := w.insertRaw(t, "t.record", `'{"nested": {"list": [1, -2e308]}}'::jsonb`)
		var good []string
		for range 8 {
			good = append(good, w.insertRaw(t, "t.record", `'{"n": 1}'::jsonb`))
		}

		sc := w.startSidecar(nil)
		t.Cleanup(func() {
			if t.Failed() {
				pgTally(t, w, sc, good, []string{big, nested})
			}
		})
		pids := sc.waitReady(t, w.handlerName(), 1)
		settled := time.Now()
		dl := w.waitDeadLetter(t, sc, 10*time.Second, big)
		assert.Equal(t, backends.ReasonInvalidArguments, dl.Reason)
		require.NotNil(t, dl.LastError)
		// jsonb stores 1e400 as its 401 digits: the message quotes the start
		// and says how long and how large it is.
		assert.Contains(t, *dl.LastError, "args.big: number 1000000000")
		assert.Contains(t, *dl.LastError, "401 characters, about 1e+400")
		assert.Contains(t, *dl.LastError, "is out of range for a 64-bit float")
		dl = w.waitDeadLetter(t, sc, 10*time.Second, nested)
		assert.Equal(t, backends.ReasonInvalidArguments, dl.Reason)
		require.NotNil(t, dl.LastError)
		assert.Contains(t, *dl.LastError, "args.nested.list[1]: number -2000000000")
		assert.Contains(t, *dl.LastError, "about -2e+308) is out of range for a 64-bit float")

		w.waitDone(t, sc, 20*time.Second, good...)
		t.Logf("bad rows dead-lettered and 8 good jobs done %.1fs after the process was ready", time.Since(settled).Seconds())
		for _, id := range good {
			assert.Equal(t, 1, w.job(id).Attempts, "job %s ran once", id)
			assert.Equal(t, 1, countEvents(w.recorded(), "run", id), "job %s ran once", id)
		}
		for _, id := range []string{big, nested} {
			assert.True(t, w.jobGone(id))
			assert.Zero(t, countEvents(w.recorded(), "run", id), "bad job %s never ran", id)
		}
		assertNoRestart(t, sc, w.handlerName(), pids[0])
		sc.stop(t)
	})
}

// pgTally logs where the rows are, for a failed run.
func pgTally(t *testing.T, w *world, sc *sidecar, good, bad []string) {
	var done, dead, other int
	for _, id := range good {
		if _, ok := w.deadLetter(id); ok {
			dead++
		} else if j, err := w.backend.Get(context.Background(), id); err == nil && j.Status == backends.StatusDone {
			done++
		} else {
			other++
		}
	}
	var badDead int
	for _, id := range bad {
		if _, ok := w.deadLetter(id); ok {
			badDead++
		}
	}
	t.Logf("at failure: good jobs done %d, dead-lettered %d, not settled %d; bad rows dead-lettered %d of %d; processes ready %d",
		done, dead, other, badDead, len(bad), len(sc.readyPIDs(w.handlerName())))
}

// sqliteWorld is a world on a SQLite database file, migrated by the binary.
func sqliteWorld(t *testing.T, s sdk) (*world, *sql.DB) {
	t.Helper()
	root := repoRoot(t)
	w := &world{t: t, sdk: s, root: root, dir: t.TempDir()}
	w.record = filepath.Join(w.dir, "record.txt")
	w.frames = filepath.Join(w.dir, "frames.txt")
	path := filepath.Join(w.dir, "soniq.db")
	w.dbURL = "sqlite:" + path
	w.manifest = w.writeManifest(manifestOpts{})
	cmd := exec.Command(sidecarBinary(t), "migrate")
	cmd.Env = []string{"SONIQ_DATABASE_URL=" + w.dbURL, "GORACE=atexit_sleep_ms=0"}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "soniq-sidecar migrate: %s", out)
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)")
	require.NoError(t, err)
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { _ = db.Close() })
	return w, db
}

// sqliteInsert inserts a queued row as another producer would.
func sqliteInsert(t *testing.T, db *sql.DB, name, args string) string {
	t.Helper()
	id := backends.NewID()
	ts := time.Now().UTC().Format("2006-01-02T15:04:05.000000+00:00")
	_, err := db.Exec(`INSERT INTO soniq_jobs (id, job_name, args, status, attempts, max_attempts, queue, priority, created_at, updated_at)
		VALUES (?, ?, ?, 'queued', 0, 3, 'default', 100, ?, ?)`, id, name, args, ts, ts)
	require.NoError(t, err)
	return id
}

// SQLite keeps args as TEXT, so a producer can store anything: text that is
// not JSON at all (which the sidecar could not even encode into a frame),
// NaN, and values the handlers' decoders refuse. Each bad row is
// dead-lettered at claim; the good jobs in the same process are done with
// one attempt, well inside the 30 s ping timeout that a stalled stream
// would have waited for.
func TestFaultArgsUnreadableSQLite(t *testing.T) {
	t.Parallel()
	bad := []struct {
		name, args, want string
	}{
		{"not json", `{not json`, "args are not valid JSON: invalid character 'n' at byte 1, looking for an object key"},
		{"NaN", `{"x": NaN}`, "args.x: NaN and Infinity are not JSON"},
		{"truncated", `{"a": [1, 2`, "args are not valid JSON: unexpected end at byte 11"},
		{"out of range", `{"big": 1e400}`, "args.big: number 1e400 is out of range for a 64-bit float"},
		{"lone surrogate", `{"s": ["ok", "\ud800"]}`, `args.s[1]: unpaired UTF-16 surrogate escape \ud800`},
		{"invalid UTF-8", "{\"s\": \"caf\xe9\"}", "args.s: invalid UTF-8 byte 0xe9 at byte 10"},
	}
	for _, s := range sdks {
		if s.transport != "stdio" {
			continue
		}
		t.Run(s.name+"/"+s.transport, func(t *testing.T) {
			t.Parallel()
			w, db := sqliteWorld(t, s)
			ids := map[string]string{}
			for _, b := range bad {
				ids[b.name] = sqliteInsert(t, db, "t.record", b.args)
			}
			var good []string
			for range 8 {
				good = append(good, sqliteInsert(t, db, "t.record", `{"n": 1}`))
			}

			sc := w.startSidecar(nil)
			t.Cleanup(func() {
				if t.Failed() {
					var rows []string
					r, err := db.Query(`SELECT status || ' attempts=' || attempts || ' count=' || count(*) FROM soniq_jobs GROUP BY status, attempts`)
					if err == nil {
						for r.Next() {
							var s string
							_ = r.Scan(&s)
							rows = append(rows, s)
						}
						_ = r.Close()
					}
					var dead int
					_ = db.QueryRow(`SELECT count(*) FROM soniq_dead_letter_jobs`).Scan(&dead)
					t.Logf("at failure: soniq_jobs %v; dead-lettered %d; processes ready %d", rows, dead, len(sc.readyPIDs(w.handlerName())))
				}
			})
			pids := sc.waitReady(t, w.handlerName(), 1)
			ready := time.Now()
			// A stalled stream is detected only by the ping timeout (30 s);
			// everything must settle far sooner. 10 s leaves room for a slow,
			// shared machine.
			const bound = 10 * time.Second
			whileRunning(t, bound, "bad rows dead-lettered, good rows done", func() bool {
				var dead, done int
				require.NoError(t, db.QueryRow(`SELECT count(*) FROM soniq_dead_letter_jobs`).Scan(&dead))
				require.NoError(t, db.QueryRow(`SELECT count(*) FROM soniq_jobs WHERE status = 'done'`).Scan(&done))
				return dead == len(bad) && done == len(good)
			}, sc)
			t.Logf("%d bad rows dead-lettered and %d good jobs done %.1fs after the process was ready",
				len(bad), len(good), time.Since(ready).Seconds())

			for _, b := range bad {
				var reason, lastErr string
				var attempts int
				require.NoError(t, db.QueryRow(`SELECT dead_letter_reason, last_error, attempts FROM soniq_dead_letter_jobs WHERE id = ?`,
					ids[b.name]).Scan(&reason, &lastErr, &attempts), b.name)
				t.Logf("%s: last_error %q", b.name, lastErr)
				assert.Equal(t, backends.ReasonInvalidArguments, reason, b.name)
				assert.Contains(t, lastErr, b.want, b.name)
				assert.Equal(t, 1, attempts, b.name)
				assert.Zero(t, countEvents(w.recorded(), "run", ids[b.name]), "%s never ran", b.name)
			}
			for _, id := range good {
				var status string
				var attempts int
				require.NoError(t, db.QueryRow(`SELECT status, attempts FROM soniq_jobs WHERE id = ?`, id).Scan(&status, &attempts))
				assert.Equal(t, "done", status)
				assert.Equal(t, 1, attempts, "job %s ran once", id)
				assert.Equal(t, 1, countEvents(w.recorded(), "run", id), "job %s ran once", id)
			}
			assertNoRestart(t, sc, w.handlerName(), pids[0])
			for _, m := range sc.logs("job dead-lettered") {
				assert.NotEmpty(t, m["reason"], "the log line says why: %v", m)
			}
			assert.Len(t, sc.logs("job dead-lettered: its args cannot be sent to a handler"), len(bad))
			sc.stop(t)
		})
	}
}

// closesStdinHandler speaks the protocol by hand: it answers every job, and
// after a job with {"close_stdin": true} it closes its stdin and stays
// alive without reading another frame.
const closesStdinHandler = `import json, os, sys, time
out = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
jobs = json.loads(os.environ["RAW_JOBS"])
out.write(json.dumps({"type": "hello", "protocol": 1, "sdk": "raw/1", "pid": os.getpid(), "jobs": jobs, "concurrency": 8}) + "\n")
out.flush()
for line in sys.stdin:
    frame = json.loads(line)
    if frame["type"] == "ping":
        out.write(json.dumps({"type": "pong", "seq": frame["seq"]}) + "\n")
        out.flush()
    elif frame["type"] == "job":
        out.write(json.dumps({"type": "result", "id": frame["id"], "status": "done"}) + "\n")
        out.flush()
        if frame["args"].get("close_stdin"):
            os.close(0)
            print("closed stdin after job", frame["id"], file=sys.stderr, flush=True)
            time.sleep(600)
`

// A handler that closes its stdin while alive gets no more frames: the
// write error is logged once with the handler and pid, and the process is
// replaced within seconds, not after the 30 s ping timeout; a job sent into
// the closed pipe runs again on the replacement.
func TestFaultHandlerClosesItsStdin(t *testing.T) {
	t.Parallel()
	script := filepath.Join(t.TempDir(), "closes_stdin.py")
	require.NoError(t, os.WriteFile(script, []byte(closesStdinHandler), 0o644))
	var jobs []map[string]any
	for _, j := range testJobs {
		jobs = append(jobs, map[string]any{"name": j.name, "cancellable": j.cancellable})
	}
	jj, err := json.Marshal(jobs)
	require.NoError(t, err)
	raw := sdk{name: "raw", transport: "stdio",
		command: func(string) []string { return []string{"python3", "-u", script} },
		env:     func(string) map[string]string { return map[string]string{"RAW_JOBS": string(jj)} },
	}
	w := newWorld(t, raw, manifestOpts{})
	first := w.enqueue("t.noop", `{"close_stdin": true}`, 3)
	sc := w.startSidecar(nil)
	pids := sc.waitReady(t, w.handlerName(), 1)
	w.waitDone(t, sc, 10*time.Second, first)

	second := w.enqueue("t.noop", `{}`, 3)
	sent := time.Now()
	// The job (or a ping, whichever comes first) meets the closed pipe: the
	// failure is reported at once and the process broken 2 s later, then a
	// replacement runs the job. A stalled stream would be noticed only by
	// the ping timeout, 30 s after the first unanswered ping; 15 s leaves
	// room for a slow machine.
	w.waitDone(t, sc, 15*time.Second, second)
	t.Logf("the job was done %.1fs after it was enqueued, attempt %d", time.Since(sent).Seconds(), w.job(second).Attempts)
	var failed []map[string]any
	for _, m := range sc.logs("writing to the handler's stdin failed") {
		if intAttr(m, "pid") == pids[0] {
			failed = append(failed, m)
		}
	}
	require.Len(t, failed, 1, "logged once")
	assert.Equal(t, w.handlerName(), failed[0]["handler"])
	broken := sc.waitLog(time.Second, "handler process is broken", map[string]any{"pid": pids[0]})
	assert.Contains(t, broken["err"], "its stdin is closed")
	// 2 when the job was sent into the closed pipe, 1 when a ping met it
	// first and the job went to the replacement.
	assert.LessOrEqual(t, w.job(second).Attempts, 2)
	assert.Len(t, sc.readyPIDs(w.handlerName()), 2, "one replacement")
	sc.stop(t)
}
