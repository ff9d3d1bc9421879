package integration

// The dead-letter commands on the real binary, on both real databases:
// selections, --dry-run, the confirmation rule for more than 100 rows (with
// and without a terminal), and the streamed export.

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/backends/postgres"
	"github.com/soniq-dev/soniq-sidecar/backends/postgres/pgtest"
	"github.com/soniq-dev/soniq-sidecar/backends/sqlite"
)

// dlDatabase is one real database for the dead-letter CLI tests: its URL
// for the binary, the sidecar's backend to read the outcome with, and a
// raw insert of dead-letter rows as any other program would write them.
type dlDatabase struct {
	url string
	b   backends.Backend
	// insertDead writes n dead-letter rows of name on queue, moved age ago,
	// with a last_error of errorBytes bytes.
	insertDead func(t *testing.T, n int, name, queue string, age time.Duration, errorBytes int)
}

// dlDatabases are the two real databases, each made fresh per call.
var dlDatabases = []struct {
	name string
	open func(t *testing.T) dlDatabase
}{
	{"postgres", openDLPostgres},
	{"sqlite", openDLSQLite},
}

func openDLPostgres(t *testing.T) dlDatabase {
	url := pgtest.NewDatabase(t)
	runCLI(t, url, nil, "migrate").ok(t)
	b, err := postgres.Open(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	pool, err := pgxpool.New(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return dlDatabase{url: url, b: b, insertDead: func(t *testing.T, n int, name, queue string, age time.Duration, errorBytes int) {
		_, err := pool.Exec(t.Context(), `INSERT INTO soniq_dead_letter_jobs
			(id, job_name, args, queue, priority, max_attempts, attempts, last_error, dead_letter_reason,
			 original_created_at, moved_to_dead_letter_at)
			SELECT gen_random_uuid(), $1, jsonb_build_object('i', g, 'q', $2::text), $2, 7, 4, 4,
			       left(repeat('boom ' || g || ' ', $5), $5), 'max_retries_exceeded',
			       now() - make_interval(secs => $3), now() - make_interval(secs => $3)
			FROM generate_series(1, $4) g`, name, queue, age.Seconds(), n, errorBytes)
		require.NoError(t, err, "insert dead-letter rows")
	}}
}

// sqliteInsertDead writes dead-letter rows with Python's sqlite3 module, as
// another program would (and fast: the race-instrumented test binary's own
// SQLite driver needs minutes for the 200,000 rows of the export test).
const sqliteInsertDead = `import sqlite3, sys
path, n, name, queue, moved, error_bytes = sys.argv[1:]
db = sqlite3.connect(path, timeout=30)
db.execute("""WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < ?1)
	INSERT INTO soniq_dead_letter_jobs
	(id, job_name, args, queue, priority, max_attempts, attempts, last_error, dead_letter_reason,
	 original_created_at, moved_to_dead_letter_at, created_at)
	SELECT lower(hex(randomblob(4)) || '-' || hex(randomblob(2)) || '-4' || substr(hex(randomblob(2)), 2) || '-a' ||
	             substr(hex(randomblob(2)), 2) || '-' || hex(randomblob(6))),
	       ?2, json_object('i', i, 'q', ?3), ?3, 7, 4, 4,
	       substr('boom ' || i || ' ' || hex(zeroblob(?5)), 1, ?5), 'max_retries_exceeded', ?4, ?4, ?4
	FROM g""", (int(n), name, queue, moved, int(error_bytes)))
db.commit()
`

func openDLSQLite(t *testing.T) dlDatabase {
	path := filepath.Join(t.TempDir(), "dl.db")
	url := "sqlite:" + path
	runCLI(t, url, nil, "migrate").ok(t)
	b, err := sqlite.Open(t.Context(), path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	return dlDatabase{url: url, b: b, insertDead: func(t *testing.T, n int, name, queue string, age time.Duration, errorBytes int) {
		// Timestamps in the form Soniq's SQLite backend writes.
		moved := time.Now().UTC().Add(-age).Format("2006-01-02T15:04:05.000000+00:00")
		out, err := exec.CommandContext(t.Context(), "python3", "-c", sqliteInsertDead, path,
			fmt.Sprint(n), name, queue, moved, fmt.Sprint(errorBytes)).CombinedOutput()
		require.NoError(t, err, "insert dead-letter rows: %s", out)
	}}
}

// cliResult is one finished run of the binary.
type cliResult struct {
	args           []string
	stdout, stderr string
	code           int
	maxRSSKiB      int64
}

func (r cliResult) ok(t *testing.T) cliResult {
	t.Helper()
	require.Equal(t, 0, r.code, "soniq-sidecar %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(r.args, " "), r.code, r.stdout, r.stderr)
	return r
}

// runCLI runs the binary against url with stdin (nil: /dev/null, never a
// terminal) and waits for it.
func runCLI(t *testing.T, url string, stdin io.Reader, args ...string) cliResult {
	t.Helper()
	return runCLITo(t, url, stdin, nil, args...)
}

// runCLITo is runCLI with stdout sent to out (nil: captured). The data
// commands run on the plain build: they start no goroutines of their own
// for the race detector to watch, and the instrumented binary takes about a
// second to start on a loaded machine, dozens of times per test.
func runCLITo(t *testing.T, url string, stdin io.Reader, out io.Writer, args ...string) cliResult {
	t.Helper()
	return runBinary(t, plainSidecar(t), url, stdin, out, args...)
}

func plainSidecar(t testing.TB) string {
	t.Helper()
	bin, err := buildPlainSidecar()
	require.NoError(t, err)
	return bin
}

// buildPlainSidecar builds the binary as released (no race detector, whose
// shadow memory and slowdown would measure the instrumentation rather than
// the program), once per test process.
var buildPlainSidecar = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "soniq-sidecar-plain-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "soniq-sidecar")
	_, file, _, _ := runtime.Caller(0)
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "./cmd/soniq-sidecar")
	cmd.Dir = filepath.Dir(filepath.Dir(file))
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building soniq-sidecar: %v\n%s", err, out)
	}
	return bin, nil
})

func runBinary(t *testing.T, bin, url string, stdin io.Reader, out io.Writer, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "SONIQ_DATABASE_URL="+url)
	cmd.Stdin = stdin
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if out != nil {
		cmd.Stdout = out
	}
	err := cmd.Run()
	r := cliResult{args: args, stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ee.Exited():
		r.code = ee.ExitCode()
	default:
		t.Fatalf("soniq-sidecar %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return r
}

// peakRSS is a python3 wrapper that runs a program and reports its peak
// resident memory on stderr. The test cannot read it from its own wait:
// Go starts children with vfork, and Linux counts the parent's (this test
// binary's) resident memory, shared until exec, into the child's peak. A
// real fork from a small process gives the child a peak of its own.
const peakRSS = `import os, sys
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
sys.stderr.write("peak_rss_kib=%d\n" % usage.ru_maxrss)
sys.exit(os.waitstatus_to_exitcode(status))
`

// runMeasured is runBinary with the program's peak resident memory in
// maxRSSKiB.
func runMeasured(t *testing.T, bin, url string, out io.Writer, args ...string) cliResult {
	t.Helper()
	r := runBinary(t, "python3", url, nil, out, append([]string{"-c", peakRSS, bin}, args...)...)
	r.args = args
	rest, line, ok := strings.Cut(strings.TrimSuffix(r.stderr, "\n"), "peak_rss_kib=")
	require.True(t, ok, "no peak from the wrapper: %s", r.stderr)
	_, err := fmt.Sscan(line, &r.maxRSSKiB)
	require.NoError(t, err, "peak %q", line)
	r.stderr = rest
	return r
}

func (db dlDatabase) stats(t *testing.T) backends.Stats {
	t.Helper()
	st, err := db.b.Stats(t.Context())
	require.NoError(t, err)
	return st
}

func (db dlDatabase) dead(t *testing.T) []backends.DeadLetterJob {
	t.Helper()
	rows, err := db.b.ListDeadLetter(t.Context(), 0)
	require.NoError(t, err)
	return rows
}

// resurrections sums resurrection_count by job name and queue.
func (db dlDatabase) resurrections(t *testing.T) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, d := range db.dead(t) {
		out[d.Name+"/"+d.Queue] += d.ResurrectionCount
	}
	return out
}

func TestDeadLetterCLISelections(t *testing.T) {
	t.Parallel()
	for _, d := range dlDatabases {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			db := d.open(t)
			db.insertDead(t, 60, "dl.a", "q1", 0, 40)
			db.insertDead(t, 50, "dl.b", "q2", 0, 40)
			db.insertDead(t, 10, "dl.a", "q3", 48*time.Hour, 40)
			require.Equal(t, backends.Stats{Total: 120, DeadLetter: 120}, db.stats(t))

			// A dry run counts and lists, and changes nothing.
			r := runCLI(t, db.url, nil, "dead-letter", "replay", "--queue", "q1", "--dry-run").ok(t)
			assert.Contains(t, r.stdout, "dry run: would replay 60 dead-letter jobs (queue q1)")
			assert.Contains(t, r.stdout, "… and 50 more")
			assert.Equal(t, 10, strings.Count(r.stdout, "dl.a  "), "ten rows listed:\n%s", r.stdout)
			r = runCLI(t, db.url, nil, "dead-letter", "purge", "--all", "--dry-run").ok(t)
			assert.Contains(t, r.stdout, "would purge 120 dead-letter jobs (all)")
			assert.Equal(t, backends.Stats{Total: 120, DeadLetter: 120}, db.stats(t))

			// 70 rows: at most 100 needs no confirmation, even without a terminal.
			r = runCLI(t, db.url, nil, "dead-letter", "replay", "--job-name", "dl.a").ok(t)
			assert.Equal(t, "replayed 70 dead-letter jobs (job name dl.a)\n", r.stdout)
			assert.Equal(t, backends.Stats{Total: 190, Queued: 70, DeadLetter: 120}, db.stats(t))
			assert.Equal(t, map[string]int{"dl.a/q1": 60, "dl.a/q3": 10, "dl.b/q2": 0}, db.resurrections(t))
			for _, row := range db.dead(t) {
				if row.Name == "dl.a" {
					require.NotNil(t, row.LastResurrectionAt, "last_resurrection_at of %s", row.ID)
				}
			}

			// More than 100 rows and no terminal: exit 2, nothing changed.
			r = runCLI(t, db.url, nil, "dead-letter", "purge", "--all")
			assert.Equal(t, 2, r.code, r.stderr)
			assert.Contains(t, r.stderr, "120 rows match")
			assert.Contains(t, r.stderr, "standard input is not a terminal")
			assert.Contains(t, r.stderr, "pass --yes")
			assert.Equal(t, int64(120), db.stats(t).DeadLetter)

			// Age selectors: --older-than (Soniq's cleanup) and --since.
			r = runCLI(t, db.url, nil, "dead-letter", "purge", "--older-than", "1d").ok(t)
			assert.Equal(t, "purged 10 dead-letter jobs (moved more than 1d ago)\n", r.stdout)
			r = runCLI(t, db.url, nil, "dead-letter", "replay", "--since", "1h", "--queue", "q1", "--queue", "q2")
			assert.Equal(t, 2, r.code, "110 rows is more than 100: --yes is needed")
			assert.Contains(t, r.stderr, "110 rows match (dead-letter jobs (queue q1 or q2; moved within the last 1h))")
			r = runCLI(t, db.url, nil, "dead-letter", "replay", "--since", "1h", "--yes").ok(t)
			assert.Equal(t, "replayed 110 dead-letter jobs (moved within the last 1h)\n", r.stdout)
			assert.Equal(t, map[string]int{"dl.a/q1": 120, "dl.b/q2": 50}, db.resurrections(t))
			assert.Equal(t, backends.Stats{Total: 290, Queued: 180, DeadLetter: 110}, db.stats(t))

			r = runCLI(t, db.url, nil, "dead-letter", "purge", "--job-name", "nobody").ok(t)
			assert.Contains(t, r.stdout, "no rows: nothing to purge")

			// The one-id forms are kept.
			one := db.dead(t)[0]
			r = runCLI(t, db.url, nil, "dead-letter", "replay", one.ID).ok(t)
			j, err := db.b.Get(t.Context(), strings.TrimSpace(r.stdout))
			require.NoError(t, err)
			assert.Equal(t, one.Name, j.Name)
			assert.Equal(t, backends.StatusQueued, j.Status)
			assert.Equal(t, 0, j.Attempts)
			runCLI(t, db.url, nil, "dead-letter", "purge", one.ID).ok(t)
			assert.Equal(t, 1, runCLI(t, db.url, nil, "dead-letter", "purge", one.ID).code, "purging a missing row fails")

			// Usage errors name the problem.
			for _, args := range [][]string{
				{"dead-letter", "replay"},
				{"dead-letter", "replay", one.ID, "--all"},
				{"dead-letter", "purge", one.ID, "--dry-run"},
				{"dead-letter", "purge", "--since", "-5m"},
				{"dead-letter", "export", "--format", "xml"},
			} {
				r := runCLI(t, db.url, nil, args...)
				assert.Equal(t, 2, r.code, "%v: %s", args, r.stderr)
			}
			r = runCLI(t, db.url, nil, "dead-letter", "purge", "--all", "--yes").ok(t)
			assert.Equal(t, "purged 109 dead-letter jobs (all)\n", r.stdout)
			assert.Zero(t, db.stats(t).DeadLetter)
		})
	}
}

func TestDeadLetterCLIExport(t *testing.T) {
	t.Parallel()
	for _, d := range dlDatabases {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			db := d.open(t)
			db.insertDead(t, 3, "dl.x", "q1", time.Hour, 30)
			db.insertDead(t, 2, "dl.y", "q2", 0, 30)
			// A row whose text needs quoting, written by the sidecar itself.
			w := backends.Worker{ID: backends.NewID(), Hostname: "export", PID: 1}
			require.NoError(t, db.b.RegisterWorker(t.Context(), w))
			j, err := db.b.Enqueue(t.Context(), backends.EnqueueParams{Name: "dl.z", Queue: "q2", Args: json.RawMessage(`{"s":"a,\"b\"\nc","n":1.5}`)})
			require.NoError(t, err)
			_, err = db.b.Claim(t.Context(), backends.ClaimParams{WorkerID: w.ID, Names: []string{"dl.z"}, Limit: 1})
			require.NoError(t, err)
			_, err = db.b.Complete(t.Context(), w.ID, []backends.Completion{{JobID: j.ID, Attempts: 1, Outcome: backends.OutcomeDeadLetter,
				Error: "Traceback:\n  line \"1\", here", Reason: backends.ReasonPermanentFailure}})
			require.NoError(t, err)
			want := db.dead(t)
			require.Len(t, want, 6)

			// JSON: an array of objects keyed by the table's columns, newest move first.
			r := runCLI(t, db.url, nil, "dead-letter", "export", "--format", "json").ok(t)
			var got []map[string]any
			require.NoError(t, json.Unmarshal([]byte(r.stdout), &got), r.stdout)
			require.Len(t, got, 6)
			for i, row := range got {
				assert.Equal(t, want[i].ID, row["id"])
				assert.Equal(t, want[i].Name, row["job_name"])
				for _, k := range []string{"args", "queue", "priority", "max_attempts", "attempts", "last_error", "dead_letter_reason",
					"original_created_at", "moved_to_dead_letter_at", "resurrection_count", "last_resurrection_at", "tags", "created_at"} {
					assert.Contains(t, row, k)
				}
			}
			zi := len(got) - 1
			for i, row := range got {
				if row["id"] == j.ID {
					zi = i
				}
			}
			assert.Equal(t, map[string]any{"s": "a,\"b\"\nc", "n": 1.5}, got[zi]["args"])
			assert.Equal(t, "Traceback:\n  line \"1\", here", got[zi]["last_error"])
			assert.Contains(t, r.stderr, "exported 6 dead-letter jobs (all) to standard output (json)")

			// CSV to a file, with a selector: a header of column names, one record a row.
			out := filepath.Join(t.TempDir(), "dead.csv")
			r = runCLI(t, db.url, nil, "dead-letter", "export", "--queue", "q2", "--output", out).ok(t)
			assert.Empty(t, r.stdout)
			assert.Contains(t, r.stderr, "exported 3 dead-letter jobs (queue q2) to "+out)
			f, err := os.Open(out)
			require.NoError(t, err)
			defer f.Close()
			records, err := csv.NewReader(f).ReadAll()
			require.NoError(t, err)
			require.Len(t, records, 4)
			assert.Equal(t, []string{"id", "job_name", "args", "queue", "priority", "max_attempts", "attempts", "last_error",
				"dead_letter_reason", "original_created_at", "moved_to_dead_letter_at", "resurrection_count",
				"last_resurrection_at", "tags", "created_at"}, records[0])
			byID := map[string][]string{}
			for _, rec := range records[1:] {
				byID[rec[0]] = rec
				assert.Equal(t, "q2", rec[3])
			}
			z := byID[j.ID]
			require.NotNil(t, z, "the sidecar's row is exported")
			assert.JSONEq(t, `{"s":"a,\"b\"\nc","n":1.5}`, z[2])
			assert.Equal(t, "Traceback:\n  line \"1\", here", z[7])
			assert.Equal(t, "permanent_failure", z[8])
			_, err = time.Parse(time.RFC3339Nano, z[10])
			assert.NoError(t, err, "moved_to_dead_letter_at is RFC 3339")
			assert.Equal(t, "", z[12], "NULL last_resurrection_at is empty")
			entries, err := os.ReadDir(filepath.Dir(out))
			require.NoError(t, err)
			assert.Len(t, entries, 1, "no partial file is left beside the output")

			// Nothing selected: a valid, empty document.
			r = runCLI(t, db.url, nil, "dead-letter", "export", "--format", "json", "--job-name", "nobody").ok(t)
			var none []any
			require.NoError(t, json.Unmarshal([]byte(r.stdout), &none))
			assert.Empty(t, none)
		})
	}
}

// lineCounter counts the bytes and lines it is given and keeps nothing.
type lineCounter struct{ bytes, lines int64 }

func (c *lineCounter) Write(p []byte) (int, error) {
	c.bytes += int64(len(p))
	c.lines += int64(bytes.Count(p, []byte{'\n'}))
	return len(p), nil
}

// TestDeadLetterExportStreams exports 200,000 rows carrying 1,000 bytes of
// last_error each (200 MB of text in that column alone, more as decoded
// rows) and checks that the process's peak resident memory stays a small
// fraction of that: the rows are written as they are read, never gathered.
// The binary is the plain build, as released.
func TestDeadLetterExportStreams(t *testing.T) {
	t.Parallel()
	const (
		rows       = 200_000
		errorBytes = 1000
		// Holding the rows would take more than rows*errorBytes (200 MB).
		maxRSS = 64 << 10 // KiB
	)
	bin := plainSidecar(t)
	for _, d := range dlDatabases {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			db := d.open(t)
			start := time.Now()
			db.insertDead(t, rows, "dl.big", "bulk", 0, errorBytes)
			t.Logf("%s: %d rows inserted in %.1fs", d.name, rows, time.Since(start).Seconds())
			for _, format := range []string{"json", "csv"} {
				var c lineCounter
				start := time.Now()
				r := runMeasured(t, bin, db.url, &c, "dead-letter", "export", "--format", format).ok(t)
				t.Logf("%s %s: %d rows, %.0f MB written in %.1fs, peak RSS %d MiB", d.name, format, rows,
					float64(c.bytes)/1e6, time.Since(start).Seconds(), r.maxRSSKiB>>10)
				assert.Contains(t, r.stderr, fmt.Sprintf("exported %d dead-letter jobs", rows))
				assert.Greater(t, c.bytes, int64(rows*errorBytes), "every row was written")
				wantLines := int64(rows + 2) // JSON: "[", a line a row, "]"
				if format == "csv" {
					wantLines = rows + 1 // the header, a line a row
				}
				assert.Equal(t, wantLines, c.lines)
				assert.Less(t, r.maxRSSKiB, int64(maxRSS), "peak RSS %d MiB while exporting %.0f MB", r.maxRSSKiB>>10, float64(c.bytes)/1e6)
			}
		})
	}
}

// TestDeadLetterConfirmOnTerminal: on a terminal, a selection of more than
// 100 rows asks, and only y or yes goes ahead.
func TestDeadLetterConfirmOnTerminal(t *testing.T) {
	t.Parallel()
	for _, d := range dlDatabases {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			db := d.open(t)
			db.insertDead(t, 101, "dl.tty", "q", 0, 20)

			out, code := onTerminal(t, db.url, "n\n", "dead-letter", "replay", "--all")
			assert.Contains(t, out, "Replay 101 dead-letter jobs (all)? ")
			assert.Contains(t, out, "[y/N]")
			assert.Contains(t, out, "not confirmed; nothing replayed")
			assert.Equal(t, 1, code)
			assert.Equal(t, backends.Stats{Total: 101, DeadLetter: 101}, db.stats(t))

			out, code = onTerminal(t, db.url, "yes\n", "dead-letter", "replay", "--all")
			assert.Equal(t, 0, code, out)
			assert.Contains(t, out, "replayed 101 dead-letter jobs (all)")
			assert.Equal(t, int64(101), db.stats(t).Queued)

			// --yes skips the question on a terminal too.
			out, code = onTerminal(t, db.url, "", "dead-letter", "purge", "--all", "--yes")
			assert.Equal(t, 0, code, out)
			assert.NotContains(t, out, "[y/N]")
			assert.Contains(t, out, "purged 101 dead-letter jobs (all)")
			assert.Zero(t, db.stats(t).DeadLetter)
		})
	}
}

// onTerminal runs the binary with a pseudo-terminal as its stdin, stdout
// and stderr. Once the prompt ("[y/N] ") shows, it types answer; it returns
// everything the terminal showed and the exit code.
func onTerminal(t *testing.T, url, answer string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, plainSidecar(t), args...)
	cmd.Env = append(os.Environ(), "SONIQ_DATABASE_URL="+url)
	tty, err := pty.Start(cmd)
	require.NoError(t, err, "start on a pty")
	defer tty.Close()
	var (
		screen bytes.Buffer
		buf    = make([]byte, 4096)
		typed  = answer == ""
	)
	for {
		n, err := tty.Read(buf)
		screen.Write(buf[:n])
		if !typed && strings.Contains(screen.String(), "[y/N] ") {
			_, werr := tty.Write([]byte(answer))
			require.NoError(t, werr)
			typed = true
		}
		if err != nil {
			break // EIO once the process has exited and closed its side
		}
	}
	err = cmd.Wait()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	require.True(t, typed, "the prompt never showed:\n%s", screen.String())
	return screen.String(), code
}
