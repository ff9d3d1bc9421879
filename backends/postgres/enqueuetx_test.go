package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/backends/postgres/pgtest"
)

// enqueueTxWorld is a migrated database, the backend, the application's
// own pool (direct, or through PgBouncer in transaction mode) and a
// listener on the new-job channel (always direct: LISTEN needs a session).
type enqueueTxWorld struct {
	b      *Backend
	app    *pgxpool.Pool
	listen *pgx.Conn
}

func newEnqueueTxWorld(t *testing.T, throughPooler bool) *enqueueTxWorld {
	t.Helper()
	b, url := openTest(t)
	appURL := url
	if throughPooler {
		// What an application behind a transaction-mode pooler configures:
		// no statement outlives a transaction.
		appURL = pgtest.ThroughPooler(t, url) + "&default_query_exec_mode=exec"
	}
	app, err := pgxpool.New(t.Context(), appURL)
	require.NoError(t, err)
	t.Cleanup(app.Close)
	listen, err := pgx.Connect(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = listen.Close(context.Background()) })
	_, err = listen.Exec(t.Context(), "LISTEN "+notifyChannel)
	require.NoError(t, err)
	return &enqueueTxWorld{b: b, app: app, listen: listen}
}

// begin starts a transaction of the application's, rolled back at the
// end of the test unless it ended (a test failing halfway would otherwise
// keep its connection and hang the pool's Close).
func (w *enqueueTxWorld) begin(t *testing.T) pgx.Tx {
	t.Helper()
	tx, err := w.app.Begin(t.Context())
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}

// next is the payload of the next notification, "" if none came within d.
func (w *enqueueTxWorld) next(t *testing.T, d time.Duration) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	n, err := w.listen.WaitForNotification(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		return ""
	}
	require.NoError(t, err)
	return n.Payload
}

// exists reports whether a soniq_jobs row with id is visible outside any
// transaction of the application's.
func (w *enqueueTxWorld) exists(t *testing.T, id string) bool {
	t.Helper()
	_, err := w.b.Get(t.Context(), id)
	if errors.Is(err, backends.ErrNotFound) {
		return false
	}
	require.NoError(t, err)
	return true
}

func TestEnqueueTx(t *testing.T) {
	t.Parallel()
	for _, mode := range []struct {
		name   string
		pooled bool
	}{{"direct", false}, {"through a transaction-mode pooler", true}} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			w := newEnqueueTxWorld(t, mode.pooled)
			ctx := t.Context()
			// The cases share the listener, so they run one after another.

			t.Run("committed: the row exists and a listener is notified at the commit", func(t *testing.T) {
				tx := w.begin(t)
				j, err := w.b.EnqueueTx(ctx, tx, backends.EnqueueParams{Name: "tx.commit", Queue: "q-commit", Args: json.RawMessage(`{"n":1}`)})
				require.NoError(t, err)
				assert.Equal(t, backends.StatusQueued, j.Status)
				assert.False(t, w.exists(t, j.ID), "not visible before the commit")
				assert.Empty(t, w.next(t, 200*time.Millisecond), "no notification before the commit")
				require.NoError(t, tx.Commit(ctx))
				assert.Equal(t, "q-commit", w.next(t, 5*time.Second))
				assert.True(t, w.exists(t, j.ID))
			})

			t.Run("rolled back: no row and no notification", func(t *testing.T) {
				tx := w.begin(t)
				j, err := w.b.EnqueueTx(ctx, tx, backends.EnqueueParams{Name: "tx.rollback", Queue: "q-rollback"})
				require.NoError(t, err)
				require.NoError(t, tx.Rollback(ctx))
				assert.False(t, w.exists(t, j.ID))
				// A job committed afterwards is the first notification: the
				// rolled-back one was never sent.
				_, err = w.b.Enqueue(ctx, backends.EnqueueParams{Name: "tx.after", Queue: "q-after"})
				require.NoError(t, err)
				assert.Equal(t, "q-after", w.next(t, 5*time.Second))
			})

			t.Run("a dedup hit returns the queued duplicate", func(t *testing.T) {
				before, err := w.b.Enqueue(ctx, backends.EnqueueParams{Name: "tx.dedup", Queue: "q-dedup", DedupKey: "k1"})
				require.NoError(t, err)
				require.Equal(t, "q-dedup", w.next(t, 5*time.Second))
				tx := w.begin(t)
				dup, err := w.b.EnqueueTx(ctx, tx, backends.EnqueueParams{Name: "tx.dedup", Queue: "q-dedup", DedupKey: "k1"})
				require.NoError(t, err)
				assert.Equal(t, before.ID, dup.ID, "the committed duplicate")
				first, err := w.b.EnqueueTx(ctx, tx, backends.EnqueueParams{Name: "tx.dedup", DedupKey: "k2"})
				require.NoError(t, err)
				again, err := w.b.EnqueueTx(ctx, tx, backends.EnqueueParams{Name: "tx.dedup", DedupKey: "k2"})
				require.NoError(t, err)
				assert.Equal(t, first.ID, again.ID, "the duplicate enqueued earlier in the same transaction")
				require.NoError(t, tx.Commit(ctx))
				var n int
				require.NoError(t, w.b.pool.QueryRow(ctx, `SELECT count(*) FROM soniq_jobs WHERE job_name = 'tx.dedup'`).Scan(&n))
				assert.Equal(t, 2, n)
				drain(t, w)
			})

			t.Run("a unique hit returns the queued duplicate and leaves the transaction usable", func(t *testing.T) {
				args := json.RawMessage(`{"to":"a@example.com"}`)
				before, err := w.b.Enqueue(ctx, backends.EnqueueParams{Name: "tx.unique", Args: args, UniqueJob: true})
				require.NoError(t, err)
				tx := w.begin(t)
				dup, err := w.b.EnqueueTx(ctx, tx, backends.EnqueueParams{Name: "tx.unique", Args: args, UniqueJob: true})
				require.NoError(t, err)
				assert.Equal(t, before.ID, dup.ID)
				// With a dedup_key too, Soniq's insert raises on the unique
				// twin; the transaction must survive it.
				both, err := w.b.EnqueueTx(ctx, tx, backends.EnqueueParams{Name: "tx.unique", Args: args, UniqueJob: true, DedupKey: "other"})
				require.NoError(t, err)
				assert.Equal(t, before.ID, both.ID)
				other, err := w.b.EnqueueTx(ctx, tx, backends.EnqueueParams{Name: "tx.unique.next"})
				require.NoError(t, err, "the transaction is still usable")
				require.NoError(t, tx.Commit(ctx))
				assert.True(t, w.exists(t, other.ID))
				drain(t, w)
			})

			t.Run("the row is the one Enqueue writes", func(t *testing.T) {
				p := backends.EnqueueParams{Name: "tx.same", Args: json.RawMessage(`{"b":[1,2.5,"é"],"a":null}`), Queue: "q-same",
					Priority: ptr(7), MaxAttempts: ptr(9), Delay: time.Hour, UniqueJob: true, ProducerID: "me"}
				plain, err := w.b.Enqueue(ctx, p)
				require.NoError(t, err)
				_, err = w.b.pool.Exec(ctx, `UPDATE soniq_jobs SET status = 'cancelled' WHERE id = $1`, plain.ID)
				require.NoError(t, err)
				var inTx backends.Job
				require.NoError(t, pgx.BeginFunc(ctx, w.app, func(tx pgx.Tx) error {
					inTx, err = w.b.EnqueueTx(ctx, tx, p)
					return err
				}))
				plain, err = w.b.Get(ctx, plain.ID)
				require.NoError(t, err)
				inTx, err = w.b.Get(ctx, inTx.ID)
				require.NoError(t, err)
				assert.NotEqual(t, plain.ID, inTx.ID)
				assert.WithinDuration(t, *plain.ScheduledAt, *inTx.ScheduledAt, time.Minute)
				for _, j := range []*backends.Job{&plain, &inTx} {
					j.ID, j.ScheduledAt, j.CreatedAt, j.UpdatedAt, j.Status = "", nil, time.Time{}, time.Time{}, ""
				}
				assert.Equal(t, plain, inTx)
				drain(t, w)
			})

			t.Run("many: one round trip, each queue notified once at the commit", func(t *testing.T) {
				tx := w.begin(t)
				jobs, err := w.b.EnqueueManyTx(ctx, tx, []backends.EnqueueParams{
					{Name: "tx.many", Queue: "q-m1", Args: json.RawMessage(`{"i":0}`)},
					{Name: "tx.many", Queue: "q-m2", Args: json.RawMessage(`{"i":1}`)},
					{Name: "tx.many", Queue: "q-m1", Args: json.RawMessage(`{"i":2}`)},
				})
				require.NoError(t, err)
				require.Len(t, jobs, 3)
				for i, j := range jobs {
					assert.JSONEq(t, `{"i":`+string(rune('0'+i))+`}`, string(j.Args), "in the order given")
				}
				assert.Empty(t, w.next(t, 200*time.Millisecond))
				require.NoError(t, tx.Commit(ctx))
				got := []string{w.next(t, 5*time.Second), w.next(t, 5*time.Second)}
				assert.ElementsMatch(t, []string{"q-m1", "q-m2"}, got)
				assert.Empty(t, w.next(t, 200*time.Millisecond), "one notification per queue")
				for _, j := range jobs {
					assert.True(t, w.exists(t, j.ID))
				}
			})

			t.Run("many: a bad element sends nothing and is named", func(t *testing.T) {
				tx := w.begin(t)
				_, err := w.b.EnqueueManyTx(ctx, tx, []backends.EnqueueParams{{Name: "tx.ok"}, {Name: "tx.bad", Args: json.RawMessage(`[1]`)}})
				require.ErrorContains(t, err, "job 1")
				require.ErrorContains(t, err, "tx.bad: args must be a JSON object")
				var n int
				require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM soniq_jobs WHERE job_name = 'tx.ok'`).Scan(&n))
				assert.Zero(t, n)
			})

			t.Run("many with both keys: the clash is answered inside the batch's transaction", func(t *testing.T) {
				args := json.RawMessage(`{"k":"many"}`)
				before, err := w.b.Enqueue(ctx, backends.EnqueueParams{Name: "tx.mboth", Args: args, UniqueJob: true})
				require.NoError(t, err)
				tx := w.begin(t)
				jobs, err := w.b.EnqueueManyTx(ctx, tx, []backends.EnqueueParams{
					{Name: "tx.mboth.new"},
					{Name: "tx.mboth", Args: args, UniqueJob: true, DedupKey: "d"},
				})
				require.NoError(t, err)
				require.NoError(t, tx.Commit(ctx))
				assert.Equal(t, before.ID, jobs[1].ID)
				assert.True(t, w.exists(t, jobs[0].ID))
				drain(t, w)
			})

			t.Run("a nil transaction is refused", func(t *testing.T) {
				_, err := w.b.EnqueueTx(ctx, nil, backends.EnqueueParams{Name: "tx.nil"})
				require.ErrorContains(t, err, "transaction is nil")
			})
		})
	}
}

// drain reads the notifications a case left, so the next case starts clean.
func drain(t *testing.T, w *enqueueTxWorld) {
	t.Helper()
	for w.next(t, 100*time.Millisecond) != "" {
	}
}

func ptr[T any](v T) *T { return &v }
