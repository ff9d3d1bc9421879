package integration

// A fleet behind PgBouncer in transaction mode: many sidecars, each with one
// handler process, share a Postgres whose max_connections is far below what
// their direct connections would need.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/backends/postgres"
)

const (
	fleetSize         = 22
	fleetPoolSize     = 8  // PgBouncer default_pool_size: server connections per database
	fleetMaxConns     = 30 // Postgres max_connections
	fleetSidecarConns = 4  // each sidecar's pgx pool
	fleetJobs         = 440
)

// startScript runs one of .ci's start scripts and returns the URL it
// exports; stop is registered as a cleanup.
func startScript(t *testing.T, env []string, script, dir string, args ...string) string {
	t.Helper()
	root := repoRoot(t)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.Chmod(dir, 0o755))
	cmd := exec.Command(filepath.Join(root, ".ci", script), append([]string{"start", dir}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "%s start: %s", script, stderr.String())
	t.Cleanup(func() {
		_ = exec.Command(filepath.Join(root, ".ci", script), "stop", dir).Run()
	})
	line := strings.TrimSpace(string(out))
	_, val, ok := strings.Cut(line, "=")
	require.True(t, ok, "%s start printed %q", script, line)
	return strings.Trim(val, "'")
}

// leaderSpan is one logged maintenance tenure of one sidecar.
type leaderSpan struct {
	sidecar    int
	start, end time.Time
}

func TestFleetThroughPgBouncerTransactionMode(t *testing.T) {
	// Serial: the fleet (its own Postgres and PgBouncer, many sidecars) needs the
	// whole machine to keep within its bounds.
	began := time.Now()
	// Not t.TempDir (0700): the servers run as an unprivileged user when
	// the tests run as root.
	base, err := os.MkdirTemp("", "soniq-fleet-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(base, 0o755))
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	// The fleet's own Postgres (low max_connections) and PgBouncer; the
	// shared test server is left alone.
	pgURL := startScript(t, []string{fmt.Sprintf("PG_MAX_CONNECTIONS=%d", fleetMaxConns)}, "pg.sh", filepath.Join(base, "pg"))
	pgbURL := startScript(t, []string{fmt.Sprintf("PGBOUNCER_POOL_SIZE=%d", fleetPoolSize)}, "pgbouncer.sh", filepath.Join(base, "pgb"), pgURL)
	require.Less(t, fleetPoolSize+5, fleetMaxConns)
	require.Greater(t, fleetSize*(fleetSidecarConns+1), fleetMaxConns, "direct connections must not fit")

	ctx := context.Background()
	admin, err := pgx.Connect(ctx, pgURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close(context.Background()) })
	_, err = admin.Exec(ctx, "CREATE DATABASE fleet")
	require.NoError(t, err)
	directURL := strings.Replace(pgURL, "/postgres?", "/fleet?", 1)
	pooledURL := strings.Replace(pgbURL, "/postgres?", "/fleet?", 1)

	// migrate goes straight to Postgres, as docs/operations.md says.
	direct, err := postgres.Open(ctx, directURL)
	require.NoError(t, err)
	require.NoError(t, direct.Migrate(ctx))
	require.NoError(t, direct.Close())

	// Everything else the test does goes through the pooler too.
	b, err := postgres.OpenWith(ctx, pooledURL, postgres.Options{TransactionPooling: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })

	// Server connections to the fleet's database, sampled all along.
	var (
		sampleMu  sync.Mutex
		samples   int
		maxServer int
	)
	sampleCtx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tk := time.NewTicker(100 * time.Millisecond)
		defer tk.Stop()
		for {
			var n int
			if err := admin.QueryRow(sampleCtx, `SELECT count(*) FROM pg_stat_activity WHERE datname = 'fleet'`).Scan(&n); err == nil {
				sampleMu.Lock()
				samples++
				maxServer = max(maxServer, n)
				sampleMu.Unlock()
			}
			select {
			case <-sampleCtx.Done():
				return
			case <-tk.C:
			}
		}
	}()
	t.Cleanup(func() { stopSampling(); <-sampled })

	// Raw reads go through the pooler as well, so that every connection to
	// the fleet's database is one of the pooler's.
	rawCfg, err := pgxpool.ParseConfig(pooledURL)
	require.NoError(t, err)
	rawCfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	raw, err := pgxpool.NewWithConfig(ctx, rawCfg)
	require.NoError(t, err)
	t.Cleanup(raw.Close)

	w := &world{t: t, sdk: sdks[0], root: repoRoot(t), dir: t.TempDir(), dbURL: pooledURL, backend: b, db: raw}
	w.record = filepath.Join(w.dir, "record.txt")
	w.frames = filepath.Join(w.dir, "frames.txt")
	w.manifest = w.writeManifest(manifestOpts{concurrency: 4})

	env := map[string]string{
		"SONIQ_DATABASE_POOLER":    "transaction",
		"SONIQ_POLL_INTERVAL":      "0.5",
		"SONIQ_HEARTBEAT_INTERVAL": "1",
		"SONIQ_HEARTBEAT_TIMEOUT":  "4",
		"SONIQ_CLEANUP_INTERVAL":   "0.5",
	}
	fleet := make([]*sidecar, fleetSize)
	for i := range fleet {
		e := map[string]string{"SONIQ_DATABASE_URL": fmt.Sprintf("%s&pool_max_conns=%d", pooledURL, fleetSidecarConns)}
		for k, v := range env {
			e[k] = v
		}
		fleet[i] = w.startSidecar(e, "--instance", fmt.Sprintf("fleet-%02d", i))
	}
	workerOf := map[string]int{}
	for i, s := range fleet {
		m := s.waitLog(60*time.Second, "polling only", nil)
		require.NotNil(t, m, "sidecar %d never said it polls only", i)
		st := s.waitLog(10*time.Second, "starting", nil)
		require.NotNil(t, st)
		workerOf[st["worker_id"].(string)] = i
	}
	t.Logf("%d sidecars up after %s", fleetSize, time.Since(began).Round(time.Millisecond))

	// Every job done exactly once.
	ids := make(map[string]bool, fleetJobs)
	for range fleetJobs {
		ids[w.enqueue("t.record", `{}`, 0)] = true
	}
	eventually(t, 60*time.Second, "every job done", func() bool {
		var n int
		err := raw.QueryRow(ctx, `SELECT count(*) FROM soniq_jobs WHERE status = 'done'`).Scan(&n)
		return err == nil && n == fleetJobs
	})
	runs := map[string]int{}
	pids := map[string]bool{}
	for _, r := range w.recorded() {
		if r[0] == "run" {
			runs[r[1]]++
			pids[r[2]] = true
		}
	}
	dup, missing := 0, 0
	for id := range ids {
		switch runs[id] {
		case 0:
			missing++
		case 1:
		default:
			dup++
		}
	}
	t.Logf("jobs: %d enqueued, %d run, %d duplicated, %d missing, by %d handler processes, after %s",
		fleetJobs, len(runs), dup, missing, len(pids), time.Since(began).Round(time.Millisecond))
	assert.Zero(t, dup, "jobs run more than once")
	assert.Zero(t, missing, "jobs never run")

	// Stale-worker recovery: SIGKILL the sidecar running a job; the leader
	// of the others requeues it and another sidecar finishes it.
	victimJob := w.enqueue("t.sleep_async", `{"seconds": 3}`, 0)
	var workerID string
	eventually(t, 20*time.Second, "the long job is claimed", func() bool {
		var wid *string
		err := raw.QueryRow(ctx, `SELECT worker_id FROM soniq_jobs WHERE id = $1 AND status = 'processing'`, victimJob).Scan(&wid)
		if err != nil || wid == nil {
			return false
		}
		workerID = *wid
		return true
	})
	victim, ok := workerOf[workerID]
	require.True(t, ok, "worker %s is not one of the fleet", workerID)
	killedAt := fleet[victim].signal(syscall.SIGKILL)
	eventually(t, 30*time.Second, "the killed sidecar's job done elsewhere", func() bool {
		j := w.job(victimJob)
		return j.Status == backends.StatusDone && j.WorkerID != nil && *j.WorkerID != workerID
	})
	t.Logf("stale-worker recovery: sidecar %d SIGKILLed; its job done by another after %s", victim, time.Since(killedAt).Round(time.Millisecond))
	recovered := 0
	for i, s := range fleet {
		if i != victim && len(s.logs("maintenance: recovered stale workers")) > 0 {
			recovered++
		}
	}
	assert.Equal(t, 1, recovered, "sidecars that logged the recovery")

	// Stop the fleet (SIGTERM), then read the record.
	for i, s := range fleet {
		if i != victim {
			s.signal(syscall.SIGTERM)
		}
	}
	for i, s := range fleet {
		code, _ := s.wait(30 * time.Second)
		if i != victim {
			assert.Equal(t, 0, code, "sidecar %d exit", i)
		}
	}
	stopSampling()
	<-sampled

	// Exactly one maintenance leader at any time: every sidecar logs its
	// tenures from inside them, so the spans may touch but never overlap.
	var spans []leaderSpan
	for i, s := range fleet {
		var open *leaderSpan
		for _, m := range s.logs("maintenance: ") {
			ts, err := time.Parse(time.RFC3339Nano, m["time"].(string))
			require.NoError(t, err)
			switch m["msg"] {
			case "maintenance: leader":
				open = &leaderSpan{sidecar: i, start: ts}
			case "maintenance: leadership released":
				if open != nil {
					open.end = ts
					spans = append(spans, *open)
					open = nil
				}
			}
		}
	}
	sort.Slice(spans, func(a, b int) bool { return spans[a].start.Before(spans[b].start) })
	overlaps, leaders := 0, map[int]bool{}
	var longest time.Duration
	for k, sp := range spans {
		leaders[sp.sidecar] = true
		longest = max(longest, sp.end.Sub(sp.start))
		if k > 0 && sp.start.Before(spans[k-1].end) {
			overlaps++
			if overlaps <= 5 {
				t.Logf("overlap: sidecar %d led %s–%s while sidecar %d led until %s", sp.sidecar,
					sp.start.Format("15:04:05.000000"), sp.end.Format("15:04:05.000000"),
					spans[k-1].sidecar, spans[k-1].end.Format("15:04:05.000000"))
			}
		}
	}
	t.Logf("leadership: %d tenures by %d sidecars, longest %s, %d overlapping", len(spans), len(leaders), longest, overlaps)
	require.NotEmpty(t, spans, "no maintenance ran")
	assert.Zero(t, overlaps, "two maintenance leaders at once")

	sampleMu.Lock()
	t.Logf("postgres server connections to the fleet's database: max %d over %d samples (pool size %d, max_connections %d, %d sidecars × %d client connections)",
		maxServer, samples, fleetPoolSize, fleetMaxConns, fleetSize, fleetSidecarConns)
	assert.Greater(t, samples, 50)
	assert.LessOrEqual(t, maxServer, fleetPoolSize, "more server connections than the pool size")
	sampleMu.Unlock()
	t.Logf("fleet test took %s", time.Since(began).Round(time.Millisecond))
}
