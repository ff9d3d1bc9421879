package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/backends/backendtest"
	"github.com/soniq-dev/soniq-sidecar/backends/postgres/pgtest"
)

// openTest returns a migrated backend on a fresh database, and its URL.
func openTest(t *testing.T) (*Backend, string) {
	t.Helper()
	url := pgtest.NewDatabase(t)
	b := openURL(t, url)
	require.NoError(t, b.Migrate(t.Context()), "migrate")
	return b, url
}

func openURL(t *testing.T, url string) *Backend {
	t.Helper()
	b, err := Open(t.Context(), url)
	require.NoError(t, err, "open")
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func TestContract(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) backendtest.Harness {
		b, _ := openTest(t)
		return harness(b, b)
	})
}

// TestContractThroughTransactionPooler runs the whole contract through
// PgBouncer in transaction mode (pool_mode=transaction): the schema is made
// over a direct connection (migrate needs one), the backend under test goes
// through the pooler, and its LISTEN connection goes straight to Postgres.
func TestContractThroughTransactionPooler(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) backendtest.Harness {
		direct, url := openTest(t)
		pooled, err := OpenWith(t.Context(), pgtest.ThroughPooler(t, url), Options{TransactionPooling: true, ListenURL: url})
		require.NoError(t, err, "open through the pooler")
		t.Cleanup(func() { _ = pooled.Close() })
		h := harness(pooled, direct)
		h.Migrate = direct.Migrate
		return h
	})
}

// harness is the contract harness for b, whose raw hooks run on raw (b
// itself, or a direct connection to the same database).
func harness(b, raw *Backend) backendtest.Harness {
	exec := func(ctx context.Context, what, sql string, args ...any) error {
		if _, err := raw.pool.Exec(ctx, sql, args...); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	}
	return backendtest.Harness{
		Backend: b,
		SetRawStatus: func(ctx context.Context, id, status string) error {
			return exec(ctx, "set raw status", `UPDATE soniq_jobs SET status = $2 WHERE id = $1`, id, status)
		},
		InsertRawStatus: func(ctx context.Context, status string) error {
			id := backends.NewID()
			return exec(ctx, "insert raw status",
				`INSERT INTO soniq_jobs (id, job_name, args, status) VALUES ($1, 'raw.status', '{}', $2)`, id, status)
		},
		BackdateHeartbeat: func(ctx context.Context, id string, d time.Duration) error {
			return exec(ctx, "backdate heartbeat", `UPDATE soniq_workers
			SET last_heartbeat = last_heartbeat - make_interval(secs => $2) WHERE id = $1`, id, d.Seconds())
		},
		BackdateExpiry: func(ctx context.Context, id string, d time.Duration) error {
			return exec(ctx, "backdate expiry", `UPDATE soniq_jobs
			SET expires_at = expires_at - make_interval(secs => $2) WHERE id = $1`, id, d.Seconds())
		},
		BackdateCreated: func(ctx context.Context, id string, d time.Duration) error {
			return exec(ctx, "backdate created", `UPDATE soniq_jobs
			SET created_at = created_at - make_interval(secs => $2) WHERE id = $1`, id, d.Seconds())
		},
		BackdateCancelRequest: func(ctx context.Context, id string, d time.Duration) error {
			return exec(ctx, "backdate cancel request", `UPDATE soniq_sidecar_cancel_requests
			SET requested_at = requested_at - make_interval(secs => $2),
			    resolved_at = resolved_at - make_interval(secs => $2) WHERE job_id = $1`, id, d.Seconds())
		},
		BackdateDeadLetter: func(ctx context.Context, id string, d time.Duration) error {
			return exec(ctx, "backdate dead letter", `UPDATE soniq_dead_letter_jobs
			SET moved_to_dead_letter_at = moved_to_dead_letter_at - make_interval(secs => $2) WHERE id = $1`, id, d.Seconds())
		},
		OrphanJob: func(ctx context.Context, id string) error {
			return exec(ctx, "orphan job", `UPDATE soniq_jobs SET worker_id = NULL WHERE id = $1`, id)
		},
		SetRawAttempts: func(ctx context.Context, id string, attempts int) error {
			return exec(ctx, "set raw attempts", `UPDATE soniq_jobs SET attempts = $2 WHERE id = $1`, id, attempts)
		},
		TaskRegistry: func(ctx context.Context) ([]backendtest.TaskRow, error) {
			rows, err := raw.pool.Query(ctx, `SELECT task_name, worker_id, last_seen_at FROM soniq_task_registry`)
			if err != nil {
				return nil, fmt.Errorf("read task registry: %w", err)
			}
			out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (backendtest.TaskRow, error) {
				var tr backendtest.TaskRow
				err := r.Scan(&tr.TaskName, &tr.WorkerID, &tr.LastSeenAt)
				return tr, err
			})
			if err != nil {
				return nil, fmt.Errorf("read task registry: %w", err)
			}
			return out, nil
		},
		StallClaim: func(ctx context.Context) (func() error, func() error, error) {
			return stallClaim(ctx, raw)
		},
		HoldJob: func(ctx context.Context, id string) (func(int) error, func() error, error) {
			return holdJob(ctx, raw, id)
		},
	}
}

// holdJob locks one soniq_jobs row FOR UPDATE on a connection of its own;
// writes to that row from other connections queue behind it, in order.
// Waiters are counted in pg_stat_activity (a row lock's waiter waits on the
// holder's transaction id, which pg_locks does not tie to a database).
func holdJob(ctx context.Context, raw *Backend, id string) (waiting func(int) error, release func() error, err error) {
	cfg := raw.pool.Config().ConnConfig
	locker, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("hold job: connect: %w", err)
	}
	watcher, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		_ = locker.Close(ctx)
		return nil, nil, fmt.Errorf("hold job: connect: %w", err)
	}
	closeAll := func() { _ = locker.Close(ctx); _ = watcher.Close(ctx) }
	tx, err := locker.Begin(ctx)
	if err == nil {
		var n int
		err = tx.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM soniq_jobs WHERE id = $1 FOR UPDATE) AS l`, id).Scan(&n)
		if err == nil && n != 1 {
			err = fmt.Errorf("no row %s", id)
		}
	}
	if err != nil {
		closeAll()
		return nil, nil, fmt.Errorf("hold job: lock row %s: %w", id, err)
	}
	waiting = func(n int) error {
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			var got int
			if err := watcher.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&got); err != nil {
				return fmt.Errorf("hold job: read pg_stat_activity: %w", err)
			}
			if got >= n {
				return nil
			}
			time.Sleep(5 * time.Millisecond)
		}
		return fmt.Errorf("hold job: %d statements did not wait for row %s within 30 s", n, id)
	}
	release = func() error {
		defer closeAll()
		return tx.Commit(ctx)
	}
	return waiting, release, nil
}

// stallClaim holds soniq_jobs in ACCESS EXCLUSIVE mode on a connection of
// its own: a claim's statements that only read soniq_workers run, the one
// that takes rows waits for the table's lock, and its snapshot is taken
// after the lock is granted, so it sees whatever was committed meanwhile.
// Its connections are not raw's pool's, so the claim gets the pool's idle
// connection, the one the suite's earlier claims prepared their statements
// on (a first preparation would wait for the lock before any statement ran).
func stallClaim(ctx context.Context, raw *Backend) (stalled, release func() error, err error) {
	cfg := raw.pool.Config().ConnConfig
	locker, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("stall claim: connect: %w", err)
	}
	watcher, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		_ = locker.Close(ctx)
		return nil, nil, fmt.Errorf("stall claim: connect: %w", err)
	}
	closeAll := func() { _ = locker.Close(ctx); _ = watcher.Close(ctx) }
	tx, err := locker.Begin(ctx)
	if err == nil {
		_, err = tx.Exec(ctx, `LOCK TABLE soniq_jobs IN ACCESS EXCLUSIVE MODE`)
	}
	if err != nil {
		closeAll()
		return nil, nil, fmt.Errorf("stall claim: lock soniq_jobs: %w", err)
	}
	stalled = func() error {
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			var waiting int
			if err := watcher.QueryRow(ctx, `SELECT count(*) FROM pg_locks
				WHERE relation = 'soniq_jobs'::regclass AND NOT granted`).Scan(&waiting); err != nil {
				return fmt.Errorf("stall claim: read pg_locks: %w", err)
			}
			if waiting > 0 {
				return nil
			}
			time.Sleep(5 * time.Millisecond)
		}
		return fmt.Errorf("stall claim: no claim waited for soniq_jobs within 30 s")
	}
	release = func() error {
		defer closeAll()
		return tx.Commit(ctx)
	}
	return stalled, release, nil
}

// Migrations through a transaction-mode pooler would lose Soniq's session
// migration lock between statements: Migrate refuses at once and says what
// to do, and the database is left untouched.
func TestMigrateThroughTransactionPoolerRefuses(t *testing.T) {
	url := pgtest.NewDatabase(t)
	pooled, err := OpenWith(t.Context(), pgtest.ThroughPooler(t, url), Options{TransactionPooling: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pooled.Close() })
	err = pooled.Migrate(t.Context())
	require.ErrorIs(t, err, ErrMigrateThroughPooler)
	assert.Contains(t, err.Error(), "direct connection")
	assert.Contains(t, err.Error(), "SONIQ_DATABASE_POOLER=transaction")
	var n int
	require.NoError(t, openURL(t, url).pool.QueryRow(t.Context(),
		`SELECT count(*) FROM pg_tables WHERE tablename LIKE 'soniq_%'`).Scan(&n))
	assert.Zero(t, n, "tables created through the pooler")
}

// Without a listen URL, Subscribe in transaction-pooling mode says the
// sidecar polls only, instead of a LISTEN the pooler would silently lose.
func TestSubscribeThroughTransactionPoolerWithoutListenURLIsPollOnly(t *testing.T) {
	_, url := openTest(t)
	pooled, err := OpenWith(t.Context(), pgtest.ThroughPooler(t, url), Options{TransactionPooling: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pooled.Close() })
	ch, err := pooled.Subscribe(t.Context())
	require.ErrorIs(t, err, backends.ErrNoWakeups)
	assert.Nil(t, ch)
}

func TestOpenErrorsNameTargetNotPassword(t *testing.T) {
	const secret = "pa55-w0rd-secret"
	tests := []struct {
		name, url string
		want      string
	}{
		{"unreachable", "postgres://soniq:" + secret + "@127.0.0.1:1/jobsdb?connect_timeout=2", "127.0.0.1:1/jobsdb"},
		{"bad url", "postgres://soniq:" + secret + "@127.0.0.1:notaport/jobsdb", "parse postgres database URL"},
		{"bad keyword form", "host=127.0.0.1 password=" + secret + " port=xyz", "parse postgres database URL"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			b, err := Open(ctx, tc.url)
			if b != nil {
				_ = b.Close()
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.NotContains(t, err.Error(), secret)
		})
	}
}

func TestMigrateIsIdempotentAndConcurrentSafe(t *testing.T) {
	url := pgtest.NewDatabase(t)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		b := openURL(t, url)
		wg.Go(func() { errs[i] = b.Migrate(t.Context()) })
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "concurrent migrate %d", i)
	}
	b := openURL(t, url)
	require.NoError(t, b.Migrate(t.Context()), "migrate again")
	var tables int
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_tables
	WHERE tablename IN ('soniq_jobs', 'soniq_workers', 'soniq_task_registry', 'soniq_dead_letter_jobs')`).Scan(&tables))
	assert.Equal(t, 4, tables)
	var bookkeeping bool
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT to_regclass('soniq_migrations') IS NOT NULL`).Scan(&bookkeeping))
	assert.False(t, bookkeeping, "Migrate leaves Soniq's bookkeeping to Soniq")
}

func TestTwoInstancesExcludeEachOther(t *testing.T) {
	a, url := openTest(t)
	b := openURL(t, url)
	ctx := t.Context()

	t.Run("leader", func(t *testing.T) {
		releaseA, ok, err := a.TryLeader(ctx)
		require.NoError(t, err)
		require.True(t, ok, "first instance leads")
		_, ok, err = b.TryLeader(ctx)
		require.NoError(t, err)
		assert.False(t, ok, "second instance must not lead while the first holds the lock")
		releaseA(ctx)
		releaseA(ctx) // idempotent
		releaseB, ok, err := b.TryLeader(ctx)
		require.NoError(t, err)
		require.True(t, ok, "second instance leads once the first released")
		releaseB(ctx)
	})

	t.Run("claims never overlap", func(t *testing.T) {
		const jobs = 200
		for i := range jobs {
			_, err := a.Enqueue(ctx, backends.EnqueueParams{Name: "overlap", Args: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))})
			require.NoError(t, err)
		}
		claimed := make(map[string]string)
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i, be := range []*Backend{a, b, a, b} {
			w := registerWorker(t, be, 5000+i)
			wg.Go(func() {
				for {
					got, err := be.Claim(ctx, backends.ClaimParams{WorkerID: w, Names: []string{"overlap"}, Limit: 7})
					if !assert.NoError(t, err) || len(got) == 0 {
						return
					}
					mu.Lock()
					for _, j := range got {
						if prev, dup := claimed[j.ID]; dup {
							t.Errorf("job %s claimed by %s and %s", j.ID, prev, w)
						}
						claimed[j.ID] = w
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		assert.Len(t, claimed, jobs)
	})
}

func registerWorker(t *testing.T, b *Backend, pid int) string {
	t.Helper()
	id := backends.NewID()
	require.NoError(t, b.RegisterWorker(t.Context(), backends.Worker{ID: id, Hostname: "pg-test", PID: pid}))
	return id
}

func TestSubscribeDeliversQueueAndClosesWithContext(t *testing.T) {
	b, _ := openTest(t)
	ctx, cancel := context.WithCancel(t.Context())
	ch, err := b.Subscribe(ctx)
	require.NoError(t, err)
	_, err = b.Enqueue(t.Context(), backends.EnqueueParams{Name: "n", Queue: "mail"})
	require.NoError(t, err)
	select {
	case q := <-ch:
		assert.Equal(t, backends.Wakeup{Queue: "mail"}, q)
	case <-time.After(10 * time.Second):
		t.Fatal("no notification within 10s")
	}
	cancel()
	for range ch { // drains until the goroutine closes it
	}
}

func TestSubscribeReconnectsAfterConnectionLoss(t *testing.T) {
	b, _ := openTest(t)
	ch, err := b.Subscribe(t.Context())
	require.NoError(t, err)
	_, err = b.pool.Exec(t.Context(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
	WHERE datname = current_database() AND query LIKE 'LISTEN%'`)
	require.NoError(t, err)
	// The listener re-LISTENs after a backoff, and then wakes every queue
	// once (notifications sent meanwhile reached nobody); keep enqueueing
	// until a notification gets through.
	deadline := time.After(15 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	woken := false
	for {
		select {
		case q, ok := <-ch:
			require.True(t, ok, "channel closed although ctx is live")
			if !woken {
				assert.Equal(t, backends.Wakeup{}, q, "the LISTEN set up again first wakes every queue")
				woken = true
				continue
			}
			assert.Equal(t, backends.Wakeup{Queue: "again"}, q)
			return
		case <-tick.C:
			_, err := b.Enqueue(t.Context(), backends.EnqueueParams{Name: "n", Queue: "again"})
			require.NoError(t, err)
		case <-deadline:
			t.Fatal("no notification after the LISTEN connection was killed")
		}
	}
}

func TestCloseStopsSubscriptions(t *testing.T) {
	url := pgtest.NewDatabase(t)
	b, err := Open(t.Context(), url)
	require.NoError(t, err)
	ch, err := b.Subscribe(t.Context())
	require.NoError(t, err)
	require.NoError(t, b.Close())
	_, ok := <-ch
	assert.False(t, ok, "Close closes the subscription channel")
}

func TestLongErrorIsStoredTruncated(t *testing.T) {
	b, _ := openTest(t)
	ctx := t.Context()
	w := registerWorker(t, b, 1)
	j, err := b.Enqueue(ctx, backends.EnqueueParams{Name: "long"})
	require.NoError(t, err)
	_, err = b.Claim(ctx, backends.ClaimParams{WorkerID: w, Limit: 1})
	require.NoError(t, err)
	applied, err := b.Complete(ctx, w, []backends.Completion{{JobID: j.ID, Attempts: 1, Outcome: backends.OutcomeRetry,
		Error: strings.Repeat("é", backends.MaxErrorBytes) + "\x00"}})
	require.NoError(t, err)
	require.Equal(t, []string{j.ID}, applied)
	got, err := b.Get(ctx, j.ID)
	require.NoError(t, err)
	require.NotNil(t, got.LastError)
	assert.Len(t, *got.LastError, backends.MaxErrorBytes)
}

func TestMalformedIDsAreNotFound(t *testing.T) {
	b, _ := openTest(t)
	ctx := t.Context()
	_, err := b.Get(ctx, "nope")
	assert.True(t, errors.Is(err, backends.ErrNotFound))
	ok, err := b.Cancel(ctx, "nope")
	require.NoError(t, err)
	assert.False(t, ok)
	nacked, err := b.Nack(ctx, "nope", []backends.Job{{ID: "nope", Attempts: 1}})
	require.NoError(t, err)
	assert.Empty(t, nacked)
	assert.ErrorIs(t, b.PurgeDeadLetter(ctx, "nope"), backends.ErrNotFound)
	_, err = b.ReplayDeadLetter(ctx, "nope")
	assert.ErrorIs(t, err, backends.ErrNotFound)
}

func TestResultsJSONBRejectsAreMadeStorable(t *testing.T) {
	b, _ := openTest(t)
	ctx := t.Context()
	w := registerWorker(t, b, 1)
	j, err := b.Enqueue(ctx, backends.EnqueueParams{Name: "nul"})
	require.NoError(t, err)
	_, err = b.Claim(ctx, backends.ClaimParams{WorkerID: w, Limit: 1})
	require.NoError(t, err)
	applied, err := b.Complete(ctx, w, []backends.Completion{{JobID: j.ID, Attempts: 1, Outcome: backends.OutcomeDone,
		Result: json.RawMessage(`{"s":"a\u0000b","t":"\ud800","n":12345678901234567890,"k\u0000":"<&>"}`), ResultTTL: time.Hour}})
	require.NoError(t, err)
	require.Equal(t, []string{j.ID}, applied)
	got, err := b.Get(ctx, j.ID)
	require.NoError(t, err)
	assert.JSONEq(t, `{"s":"a\ufffdb","t":"\ufffd","n":12345678901234567890,"k\ufffd":"<&>"}`, string(got.Result))
}

// A restarted sidecar in a container has the same hostname and pid as its
// dead predecessor, whose rows still reference it through the foreign key:
// registering alone is refused; taking the dead row over succeeds and gives
// the successor the predecessor's processing rows, still processing.
func TestTakeOverDeadPredecessorWithTheSameHostnameAndPid(t *testing.T) {
	b, _ := openTest(t)
	ctx := context.Background()
	old, fresh := backends.NewID(), backends.NewID()
	meta := []byte(`{"kind":"soniq-sidecar","instance":"a","hostname":"pod-a"}`)
	require.NoError(t, b.RegisterWorker(ctx, backends.Worker{ID: old, Hostname: "a@pod-a", PID: 1, Metadata: meta}))
	j, err := b.Enqueue(ctx, backends.EnqueueParams{Name: "x", Args: []byte(`{}`)})
	require.NoError(t, err)
	claimed, err := b.Claim(ctx, backends.ClaimParams{WorkerID: old, Limit: 1})
	require.NoError(t, err)
	require.Len(t, claimed, 1)

	next := backends.Worker{ID: fresh, Hostname: "a@pod-a", PID: 1, Metadata: meta}
	require.ErrorIs(t, b.RegisterWorker(ctx, next), backends.ErrIdentityTaken)
	dead, err := b.SameIdentity(ctx, next)
	require.NoError(t, err)
	require.Len(t, dead, 1)
	jobs, err := b.TakeOver(ctx, next, dead)
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	got, err := b.Get(ctx, j.ID)
	require.NoError(t, err)
	require.Equal(t, backends.StatusProcessing, got.Status)
	require.Equal(t, 1, got.Attempts, "attempts unchanged")
	require.NotNil(t, got.WorkerID)
	require.Equal(t, fresh, *got.WorkerID)
	require.NoError(t, b.Heartbeat(ctx, fresh))
}

// Through a transaction-mode pooler the maintenance leader is one across
// separate clients and against a Soniq worker's session lock on a direct
// connection, and a leader whose client dies mid-tenure frees the lock.
func TestLeaderThroughTransactionPoolerIsExclusiveAndDiesWithItsClient(t *testing.T) {
	direct, url := openTest(t)
	open := func() *Backend {
		b, err := OpenWith(t.Context(), pgtest.ThroughPooler(t, url), Options{TransactionPooling: true})
		require.NoError(t, err)
		t.Cleanup(func() { _ = b.Close() })
		return b
	}
	a, b := open(), open()
	ctx := t.Context()

	release, ok, err := a.TryLeader(ctx)
	require.NoError(t, err)
	require.True(t, ok, "first leader")
	for range 20 { // many tries, landing on different server sessions
		_, ok, err := b.TryLeader(ctx)
		require.NoError(t, err)
		require.False(t, ok, "a second leader through the pooler")
	}
	var soniq bool
	require.NoError(t, direct.pool.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", maintenanceLockKey).Scan(&soniq))
	require.False(t, soniq, "a session-lock holder (a Soniq worker) while a pooled sidecar leads")
	release(ctx)

	// A leader's client dies mid-tenure (its socket closes without a word,
	// as on SIGKILL): the pooler drops the server session it pinned.
	c, err := pgx.Connect(ctx, pgtest.ThroughPooler(t, url))
	require.NoError(t, err)
	tx, err := c.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, tx.QueryRow(ctx, "SELECT pg_try_advisory_xact_lock($1)", maintenanceLockKey).Scan(&ok))
	require.True(t, ok, "leader after release")
	_, ok, err = b.TryLeader(ctx)
	require.NoError(t, err)
	require.False(t, ok, "a second leader while the dying one holds it")
	require.NoError(t, c.PgConn().Conn().Close())
	start := time.Now()
	var got bool
	for time.Since(start) < 10*time.Second {
		rel, ok, err := a.TryLeader(ctx)
		require.NoError(t, err)
		if ok {
			rel(ctx)
			got = true
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	require.True(t, got, "leadership never freed after the leader's client died")
	t.Logf("leadership free %s after the leader's client died", time.Since(start).Round(time.Millisecond))
}

// soniqClaim is Soniq 0.1.0's own claim (fetch_and_lock_job with no queue
// filter), copied from the released package.
const soniqClaim = `SELECT * FROM soniq_jobs
WHERE status = 'queued'
  AND (scheduled_at IS NULL OR scheduled_at <= NOW())
ORDER BY priority ASC, scheduled_at ASC NULLS FIRST, created_at ASC
FOR UPDATE SKIP LOCKED
LIMIT 1`

// What a caller may wait out (ErrUnreachable) and what it must not: a
// server that cannot serve connections now, against a statement refused.
func TestUnreachableErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"pooler login retry", &pgconn.PgError{Code: "08P01", Message: "server login has been failing, try again later (server_login_retry)"}, true},
		{"cannot connect now", &pgconn.PgError{Code: "57P03"}, true},
		{"admin shutdown", &pgconn.PgError{Code: "57P01"}, true},
		{"too many clients", &pgconn.PgError{Code: "53300"}, true},
		{"a broken connection", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), true},
		{"refused", &net.OpError{Op: "dial", Err: errors.New("connection refused")}, true},
		{"query cancelled", &pgconn.PgError{Code: "57014"}, false},
		{"undefined table", &pgconn.PgError{Code: "42P01"}, false},
		{"unique violation", &pgconn.PgError{Code: "23505"}, false},
		{"a bug", errors.New("number of field descriptions must equal number of destinations"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, unreachable(tc.err))
			b := &Backend{}
			assert.Equal(t, tc.want, errors.Is(b.wrap(tc.err, "claim"), backends.ErrUnreachable))
		})
	}
}

// Through a transaction-mode pooler a statement given up on (its context
// ended) is cut with no cancel request: PgBouncer 1.18 exits on cancel
// requests met at the wrong moment (upstream issues 801 and 822), and
// make test lost the PgBouncer every test shared that way. Seen from
// Postgres, the statement runs on after the client gave up on it (a cancel
// request would have ended it at once); the pooler still serves.
func TestAStatementCutThroughAPoolerSendsNoCancelRequest(t *testing.T) {
	url := pgtest.NewDatabase(t)
	pooled, err := OpenWith(t.Context(), pgtest.ThroughPooler(t, url), Options{TransactionPooling: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pooled.Close() })
	direct := openURL(t, url)

	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	_, err = pooled.pool.Exec(ctx, `SELECT pg_sleep(2) /* cut by its context */`)
	cancel()
	require.Error(t, err)
	time.Sleep(300 * time.Millisecond) // a cancel request would have landed by now
	var running int
	require.NoError(t, direct.pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
		WHERE state = 'active' AND query LIKE '%cut by its context%' AND pid <> pg_backend_pid()`).Scan(&running))
	assert.Equal(t, 1, running, "the statement was cancelled: a cancel request went through the pooler")
	require.NoError(t, pooled.Ping(t.Context()), "the pooler still serves")
}
