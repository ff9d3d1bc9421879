package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/backends/postgres"
	"github.com/soniq-dev/soniq-sidecar/backends/postgres/pgtest"
)

// soniqRequirements pins the Soniq release the sidecar must interoperate
// with; it is the only place that version is written down.
const soniqRequirements = "soniq-requirements.txt"

// TestSoniqInterop proves compatibility against the released Soniq package,
// driven through its public Python API (testdata/soniq_interop.py).
func TestSoniqInterop(t *testing.T) {
	t.Parallel()
	py := soniqPython(t)

	t.Run("soniq setup then sidecar migrate changes nothing", func(t *testing.T) {
		url := pgtest.NewDatabase(t)
		py.run(t, "setup", url, nil, nil)
		before := catalog(t, url)
		require.Greater(t, len(before), 60, "catalog snapshot covers Soniq's tables")
		b := open(t, url)
		require.NoError(t, b.Migrate(t.Context()), "sidecar migrate after soniq setup")
		assert.Equal(t, before, catalog(t, url), "catalog after sidecar migrate")
		_, err := b.PendingCancels(t.Context(), backends.NewID())
		require.NoError(t, err, "migrate added the sidecar's own cancel-request table")
	})

	t.Run("sidecar migrate then soniq setup yields soniq's schema", func(t *testing.T) {
		reference := pgtest.NewDatabase(t)
		py.run(t, "setup", reference, nil, nil)

		url := pgtest.NewDatabase(t)
		b := open(t, url)
		require.NoError(t, b.Migrate(t.Context()), "sidecar migrate on an empty database")
		sidecarOnly := catalog(t, url)
		var setup struct{ Applied int }
		py.run(t, "setup", url, nil, &setup)
		assert.Equal(t, 5, setup.Applied, "soniq applies its own migrations (the sidecar records none)")
		assert.Equal(t, catalog(t, reference), catalog(t, url), "schema equals a soniq-only install")
		assert.Subset(t, catalog(t, url), sidecarOnly, "soniq setup kept every object the sidecar created unchanged")
		require.NoError(t, b.Migrate(t.Context()), "sidecar migrate again")
		assert.Equal(t, catalog(t, reference), catalog(t, url))
	})

	t.Run("jobs round trip", func(t *testing.T) {
		url := pgtest.NewDatabase(t)
		py.run(t, "setup", url, nil, nil)
		b := open(t, url)
		require.NoError(t, b.Migrate(t.Context()))
		ctx := t.Context()

		workerID := "6f1c3f0e-8a57-4d4e-9a57-0d1f0c2b9e11"
		require.NoError(t, b.RegisterWorker(ctx, backends.Worker{ID: workerID, Hostname: "interop", PID: 1}))

		sub, err := b.Subscribe(ctx)
		require.NoError(t, err)

		// A job enqueued by Soniq wakes and is claimed by the sidecar.
		var echo struct{ ID string }
		py.run(t, "enqueue", url, map[string]any{"name": "interop.echo", "args": map[string]any{"n": 1, "s": "é"}, "queue": "interop"}, &echo)
		select {
		case q := <-sub:
			assert.Equal(t, backends.Wakeup{Queue: "interop"}, q, "notification payload is the queue name")
		case <-time.After(10 * time.Second):
			t.Fatal("no soniq_new_job notification from Soniq's enqueue")
		}
		claimed, err := b.Claim(ctx, backends.ClaimParams{WorkerID: workerID, Names: []string{"interop.echo"}, Limit: 10})
		require.NoError(t, err)
		require.Len(t, claimed, 1)
		assert.Equal(t, echo.ID, claimed[0].ID)
		assert.JSONEq(t, `{"n":1,"s":"é"}`, string(claimed[0].Args))
		assert.Equal(t, 1, claimed[0].Attempts)
		assert.Equal(t, "interop", claimed[0].Queue)

		// Finished by the sidecar, reported by Soniq.
		applied, err := b.Complete(ctx, workerID, []backends.Completion{{JobID: echo.ID, Attempts: claimed[0].Attempts, Outcome: backends.OutcomeDone,
			Result: json.RawMessage(`{"ok":true}`), ResultTTL: time.Hour}})
		require.NoError(t, err)
		require.Equal(t, []string{echo.ID}, applied)
		var res struct{ Result map[string]any }
		py.run(t, "get_result", url, map[string]any{"id": echo.ID}, &res)
		assert.Equal(t, map[string]any{"ok": true}, res.Result)
		stats := py.stats(t, url)
		assert.Equal(t, int64(1), stats["done"])

		// unique_job: both sides compute the same args_hash, so either
		// order resolves to the first row.
		var uniq struct{ ID string }
		py.run(t, "enqueue", url, map[string]any{"name": "interop.unique", "args": json.RawMessage(`{"b":[1,2.5,"ü"],"a":1.0}`), "unique": true}, &uniq)
		j, err := b.Enqueue(ctx, backends.EnqueueParams{Name: "interop.unique", UniqueJob: true,
			Args: json.RawMessage(`{ "a": 1.0, "b": [1, 2.50, "\u00fc"] }`)})
		require.NoError(t, err)
		assert.Equal(t, uniq.ID, j.ID, "sidecar unique enqueue returns Soniq's queued row")
		j, err = b.Enqueue(ctx, backends.EnqueueParams{Name: "interop.unique2", UniqueJob: true, Args: json.RawMessage(`{"k":"v"}`)})
		require.NoError(t, err)
		py.run(t, "enqueue", url, map[string]any{"name": "interop.unique2", "args": map[string]any{"k": "v"}, "unique": true}, &uniq)
		assert.Equal(t, j.ID, uniq.ID, "Soniq unique enqueue returns the sidecar's queued row")

		// dedup_key conflicts resolve the same way.
		var dedup struct{ ID string }
		py.run(t, "enqueue", url, map[string]any{"name": "interop.dedup", "dedup_key": "k-1"}, &dedup)
		j, err = b.Enqueue(ctx, backends.EnqueueParams{Name: "interop.dedup", DedupKey: "k-1"})
		require.NoError(t, err)
		assert.Equal(t, dedup.ID, j.ID)

		// Dead-lettered by the sidecar, listed and replayed by Soniq.
		var fail struct{ ID string }
		py.run(t, "enqueue", url, map[string]any{"name": "interop.fail", "args": map[string]any{"x": 2}}, &fail)
		_, err = b.Claim(ctx, backends.ClaimParams{WorkerID: workerID, Names: []string{"interop.fail"}, Limit: 1})
		require.NoError(t, err)
		applied, err = b.Complete(ctx, workerID, []backends.Completion{{JobID: fail.ID, Attempts: 1, Outcome: backends.OutcomeDeadLetter,
			Error: "boom", Reason: backends.ReasonPermanentFailure}})
		require.NoError(t, err)
		require.Equal(t, []string{fail.ID}, applied)
		var dls []struct {
			ID                string         `json:"id"`
			JobName           string         `json:"job_name"`
			Args              map[string]any `json:"args"`
			Attempts          int            `json:"attempts"`
			LastError         string         `json:"last_error"`
			Reason            string         `json:"dead_letter_reason"`
			ResurrectionCount int            `json:"resurrection_count"`
		}
		py.run(t, "dead_letters", url, nil, &dls)
		require.Len(t, dls, 1)
		assert.Equal(t, fail.ID, dls[0].ID)
		assert.Equal(t, "interop.fail", dls[0].JobName)
		assert.Equal(t, map[string]any{"x": 2.0}, dls[0].Args)
		assert.Equal(t, 1, dls[0].Attempts)
		assert.Equal(t, "boom", dls[0].LastError)
		assert.Equal(t, backends.ReasonPermanentFailure, dls[0].Reason)

		var replay struct{ ID string }
		py.run(t, "replay", url, map[string]any{"id": fail.ID}, &replay)
		require.NotEmpty(t, replay.ID, "Soniq replayed the sidecar's dead letter")
		again, err := b.Get(ctx, replay.ID)
		require.NoError(t, err)
		assert.Equal(t, backends.StatusQueued, again.Status)
		assert.Equal(t, 0, again.Attempts)
		assert.JSONEq(t, `{"x":2}`, string(again.Args))
		sidecarDL, err := b.ListDeadLetter(ctx, 0)
		require.NoError(t, err)
		require.Len(t, sidecarDL, 1)
		assert.Equal(t, 1, sidecarDL[0].ResurrectionCount)

		// Both sides count the same.
		own, err := b.Stats(ctx)
		require.NoError(t, err)
		raw, err := json.Marshal(own)
		require.NoError(t, err)
		var ownMap map[string]int64
		require.NoError(t, json.Unmarshal(raw, &ownMap))
		assert.Equal(t, py.stats(t, url), ownMap)
		assert.Equal(t, int64(1), ownMap["dead_letter"])
	})

	t.Run("lock keys are soniq's", func(t *testing.T) {
		url := pgtest.NewDatabase(t)
		py.run(t, "setup", url, nil, nil)
		b := open(t, url)

		release, ok, err := b.TryLeader(t.Context())
		require.NoError(t, err)
		require.True(t, ok)
		var lead struct{ Leader bool }
		py.run(t, "maintenance_leader", url, nil, &lead)
		assert.False(t, lead.Leader, "Soniq's maintenance must not run while the sidecar leads")
		release(t.Context())
		py.run(t, "maintenance_leader", url, nil, &lead)
		assert.True(t, lead.Leader, "Soniq's maintenance runs once the sidecar released")

		// While Soniq's migration lock is held, the sidecar's Migrate waits.
		var keys map[string]int64
		py.run(t, "advisory_keys", url, nil, &keys)
		conn, err := pgx.Connect(t.Context(), url)
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close(context.Background()) })
		_, err = conn.Exec(t.Context(), "SELECT pg_advisory_lock($1)", keys["soniq.migrations"])
		require.NoError(t, err)
		short, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
		defer cancel()
		err = b.Migrate(short)
		require.Error(t, err, "migrate must wait for soniq's migration lock")
		assert.True(t, errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "timeout"), "got %v", err)
		_, err = conn.Exec(t.Context(), "SELECT pg_advisory_unlock($1)", keys["soniq.migrations"])
		require.NoError(t, err)
		require.NoError(t, b.Migrate(t.Context()))
	})
}

func open(t *testing.T, url string) *postgres.Backend {
	t.Helper()
	b, err := postgres.Open(t.Context(), url)
	require.NoError(t, err, "open sidecar backend")
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// catalog lists every column, index and constraint of Soniq's soniq_*
// tables (not the sidecar's own soniq_sidecar_* tables), plus Soniq's
// migration bookkeeping, one line each, sorted.
func catalog(t *testing.T, url string) []string {
	t.Helper()
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer func() { _ = conn.Close(context.Background()) }()
	rows, err := conn.Query(ctx, `
SELECT format('column %s.%s %s %s%s%s', c.relname, a.attnum, a.attname, format_type(a.atttypid, a.atttypmod),
	CASE WHEN a.attnotnull THEN ' not null' ELSE '' END, COALESCE(' default ' || pg_get_expr(d.adbin, d.adrelid), ''))
FROM pg_attribute a
JOIN pg_class c ON c.oid = a.attrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE n.nspname = 'public' AND c.relkind = 'r' AND c.relname LIKE 'soniq\_%' AND c.relname NOT LIKE 'soniq\_sidecar\_%'
	AND a.attnum > 0 AND NOT a.attisdropped
UNION ALL
SELECT 'index ' || indexdef FROM pg_indexes WHERE schemaname = 'public' AND tablename LIKE 'soniq\_%' AND tablename NOT LIKE 'soniq\_sidecar\_%'
UNION ALL
SELECT format('constraint %s %s %s', conrelid::regclass, conname, pg_get_constraintdef(oid))
FROM pg_constraint WHERE connamespace = 'public'::regnamespace AND conrelid::regclass::text NOT LIKE 'soniq\_sidecar\_%'
ORDER BY 1`)
	require.NoError(t, err, "read catalog")
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err, "read catalog")
	var hasBookkeeping bool
	require.NoError(t, conn.QueryRow(ctx, `SELECT to_regclass('soniq_migrations') IS NOT NULL`).Scan(&hasBookkeeping))
	if hasBookkeeping {
		var applied string
		require.NoError(t, conn.QueryRow(ctx, `SELECT COALESCE(string_agg(version || ' ' || name, ', ' ORDER BY version), '')
		FROM soniq_migrations`).Scan(&applied))
		lines = append(lines, "soniq_migrations: "+applied)
	}
	return lines
}

// soniqEnv runs testdata/soniq_interop.py in a virtualenv holding the pinned
// Soniq release.
type soniqEnv struct{ python string }

// soniqVenvMu makes the parallel tests that need the venv build it once:
// the first builds it while the others wait, then find it ready.
var soniqVenvMu sync.Mutex

// soniqPython returns a virtualenv with soniq-requirements.txt installed. The
// venv is cached in the user cache directory under a hash of the
// requirements, so only the first run (or a new pin) pays for pip.
func soniqPython(t *testing.T) soniqEnv {
	t.Helper()
	soniqVenvMu.Lock()
	defer soniqVenvMu.Unlock()
	python3, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3 not found on PATH: the Soniq interop test needs Python 3 with venv and pip")
	}
	reqs, err := os.ReadFile(soniqRequirements)
	require.NoError(t, err, "read %s", soniqRequirements)
	sum := sha256.Sum256(reqs)
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	venv := filepath.Join(cache, "soniq-sidecar", "soniq-venv-"+hex.EncodeToString(sum[:6]))
	python := filepath.Join(venv, "bin", "python")
	ready := filepath.Join(venv, ".installed")
	if _, err := os.Stat(ready); err == nil {
		return soniqEnv{python: python}
	}
	require.NoError(t, os.RemoveAll(venv), "clear incomplete venv %s", venv)
	require.NoError(t, os.MkdirAll(filepath.Dir(venv), 0o755))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	steps := [][]string{
		{python3, "-m", "venv", venv},
		{python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-r", soniqRequirements},
	}
	for _, args := range steps {
		out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s failed (python3 needs the venv module and pip must reach its package index): %v\n%s",
				strings.Join(args, " "), err, out)
		}
	}
	require.NoError(t, os.WriteFile(ready, reqs, 0o644))
	return soniqEnv{python: python}
}

// run executes one command of the helper script and decodes its JSON output
// into out (when not nil).
func (e soniqEnv) run(t *testing.T, command, url string, args, out any) {
	t.Helper()
	argv := []string{filepath.Join("testdata", "soniq_interop.py"), command, url}
	if args != nil {
		raw, err := json.Marshal(args)
		require.NoError(t, err)
		argv = append(argv, string(raw))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.python, argv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("soniq %s: %v\n%s", command, err, stderr.String())
	}
	if out != nil {
		require.NoError(t, json.Unmarshal(stdout.Bytes(), out), "soniq %s output %q", command, stdout.String())
	}
}

func (e soniqEnv) stats(t *testing.T, url string) map[string]int64 {
	t.Helper()
	var s map[string]int64
	e.run(t, "stats", url, nil, &s)
	return s
}

// TestSoniqInteropResultTypes: a Python handler's return value reads back
// through Soniq's get_result with the types it has under a Soniq worker
// (2.0 stays a float, big ints stay exact, what JSON cannot hold is str() of
// it), over both transports. Values are compared by their Python repr, which
// tells 2 from 2.0.
func TestSoniqInteropResultTypes(t *testing.T) {
	t.Parallel()
	py := soniqPython(t)
	// Each literal is returned by the handler; want is what Soniq's own
	// worker gives back for it. Postgres jsonb writes a number in plain
	// notation (1e+16 reads back as the int 10000000000000000), the same
	// for both sides.
	cases := []struct{ literal, want string }{
		{`{'ratio': 2.0}`, `{'ratio': 2.0}`},
		{`2.0`, `2.0`},
		{`[1, 1.0, -3.5, 0.1, 1e-07, 1e+16, 18446744073709551616, -9223372036854775809]`,
			`[1, 1.0, -3.5, 0.1, 1e-07, 10000000000000000, 18446744073709551616, -9223372036854775809]`},
		{`{'n': None, 's': 'é 🎉 "q" \\', 't': True, 'nested': {'a': [{}, [], {'x': 0.5, 'y': 3.0}]}}`,
			`{'n': None, 's': 'é 🎉 "q" \\', 't': True, 'nested': {'a': [{}, [], {'x': 0.5, 'y': 3.0}]}}`},
		{`None`, `None`},
		// What JSON cannot hold: a Soniq worker marks the job done and its
		// Postgres codec (json.dumps(v, default=str)) stores str() of each
		// such value; the SDK sends the same. (jsonb orders keys by length.)
		{`{'z': 1j, 'ids': {1, 2}, 'raw': b'\xff', 'kept': [1, 2.5]}`, `{'z': '1j', 'ids': '{1, 2}', 'raw': "b'\\xff'", 'kept': [1, 2.5]}`},
		{`{3}`, `'{3}'`},
	}
	type result struct {
		ResultRepr string `json:"result_repr"`
	}

	// What Soniq stores: its own worker runs the handler.
	url := pgtest.NewDatabase(t)
	py.run(t, "setup", url, nil, nil)
	ids := make([]string, len(cases))
	for i, c := range cases {
		var job struct{ ID string }
		py.run(t, "enqueue", url, map[string]any{"name": "interop.literal", "args": map[string]any{"literal": c.literal}, "queue": "soniq"}, &job)
		ids[i] = job.ID
	}
	py.run(t, "work_once", url, map[string]any{"queues": []string{"soniq"}}, nil)
	for i, c := range cases {
		var r result
		py.run(t, "get_result", url, map[string]any{"id": ids[i]}, &r)
		require.Equal(t, c.want, r.ResultRepr, "a Soniq worker's result for %s", c.literal)
	}

	for _, transport := range []string{"stdio", "unix"} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			w := literalWorld(t, transport)
			py.run(t, "setup", w.dbURL, nil, nil)
			ids := make([]string, len(cases))
			for i, c := range cases {
				args, err := json.Marshal(map[string]string{"literal": c.literal})
				require.NoError(t, err)
				ids[i] = w.enqueue("interop.literal", string(args), 0)
			}
			sc := w.startSidecar(nil)
			w.waitDone(t, sc, 30*time.Second, ids...)
			for i, c := range cases {
				var r result
				py.run(t, "get_result", w.dbURL, map[string]any{"id": ids[i]}, &r)
				assert.Equal(t, c.want, r.ResultRepr, "the sidecar's result for %s", c.literal)
			}
			sc.stop(t)
		})
	}
}

// literalWorld is a world whose manifest has one handler on the Python SDK,
// testdata/handlers/literal_results.py, over transport.
func literalWorld(t *testing.T, transport string) *world {
	t.Helper()
	w := newWorld(t, sdks[0], manifestOpts{})
	cmd, err := json.Marshal([]string{"python3", "-u", filepath.Join(w.root, "integration/testdata/handlers/literal_results.py")})
	require.NoError(t, err)
	env, err := json.Marshal(pythonEnv(w.root))
	require.NoError(t, err)
	manifest := "version: 1\nhandlers:\n  - name: literals\n    command: " + string(cmd) + "\n    transport: " + transport +
		"\n    processes: 1\n    concurrency: 2\n    sync_concurrency: 1\n    startup_timeout: 20s\n    env: " + string(env) +
		"\n    jobs:\n      - name: interop.literal\n        cancellable: true\n"
	w.manifest = filepath.Join(w.dir, "literals.yaml")
	require.NoError(t, os.WriteFile(w.manifest, []byte(manifest), 0o644))
	return w
}
