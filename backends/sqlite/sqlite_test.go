package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// soniqTimestamp is what Python's datetime.now(timezone.utc).isoformat()
// produces: microseconds, omitted when zero, and a +00:00 offset.
var soniqTimestamp = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?\+00:00$`)

func TestFormatTime(t *testing.T) {
	tests := []struct {
		name string
		in   time.Time
		want string
	}{
		{"microseconds", time.Date(2025, 3, 4, 5, 6, 7, 123456789, time.UTC), "2025-03-04T05:06:07.123456+00:00"},
		{"leading zero fraction", time.Date(2025, 3, 4, 5, 6, 7, 1000, time.UTC), "2025-03-04T05:06:07.000001+00:00"},
		{"whole second drops the fraction as Python does", time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC), "2025-03-04T05:06:07+00:00"},
		{"sub-microsecond is truncated", time.Date(2025, 3, 4, 5, 6, 7, 999, time.UTC), "2025-03-04T05:06:07+00:00"},
		{"other zones become UTC", time.Date(2025, 3, 4, 7, 6, 7, 5000, time.FixedZone("x", 2*3600)), "2025-03-04T05:06:07.000005+00:00"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := formatTime(tc.in)
			assert.Equal(t, tc.want, got)
			back, err := parseTime(got)
			require.NoError(t, err)
			assert.True(t, back.Equal(tc.in.Truncate(time.Microsecond)), "round trip %s", back)
		})
	}
}

func TestParseTime(t *testing.T) {
	want := time.Date(2025, 3, 4, 5, 6, 7, 120000000, time.UTC)
	tests := []struct {
		in   string
		want time.Time
	}{
		{"2025-03-04T05:06:07.120000+00:00", want},
		{"2025-03-04T05:06:07.12Z", want},
		{"2025-03-04T07:06:07.12+02:00", want},
		{"2025-03-04 05:06:07.12", want},                    // naive: UTC
		{"2025-03-04T05:06:07.120", want},                   // naive, T separator
		{"2025-03-04 05:06:07", want.Truncate(time.Second)}, // CURRENT_TIMESTAMP
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseTime(tc.in)
			require.NoError(t, err)
			assert.True(t, tc.want.Equal(got), "got %s", got)
		})
	}
	_, err := parseTime("yesterday")
	require.Error(t, err)
}

// The expected digests were computed with soniq 0.1.0's compute_args_hash.
func TestArgsHashMatchesSoniq(t *testing.T) {
	tests := []struct {
		args string
		want string
	}{
		{`{"b":2,"a":1}`, "43258cff783fe7036d8a43033f830adfc60ec037382473548ac742b888292777"},
		{`{ "a" : 1, "b" : 2 }`, "43258cff783fe7036d8a43033f830adfc60ec037382473548ac742b888292777"},
		{`{}`, "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"},
		{`{"k":"é中","n":{"y":-3,"x":[]}}`, "f346220952280a9fd2adc56b83fc227226cec0e5e60dc457e464943f47859684"},
		{`{"b":2,"a":[1,"é",null,true,{"z":"😀\n\"\\","y":1.5}],"c":"\u007f\u0001"}`,
			"ccbf8cc41e47d124e9fdb77f62373e0d512ed83475e13977dac33189526ee142"},
	}
	for _, tc := range tests {
		t.Run(tc.args, func(t *testing.T) {
			got, err := backends.ArgsHash(json.RawMessage(tc.args))
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestTruncateError(t *testing.T) {
	long := strings.Repeat("a", backends.MaxErrorBytes-1) + "é" + "tail" // é straddles the limit
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"short", "boom", "boom"},
		{"exact", strings.Repeat("x", backends.MaxErrorBytes), strings.Repeat("x", backends.MaxErrorBytes)},
		{"cut before a split rune", long, strings.Repeat("a", backends.MaxErrorBytes-1)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := backends.TruncateError(tc.in)
			assert.Equal(t, tc.want, got)
			assert.LessOrEqual(t, len(got), backends.MaxErrorBytes)
		})
	}
}

func TestNewUUID(t *testing.T) {
	v4 := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	seen := map[string]bool{}
	for range 100 {
		id := backends.NewID()
		require.Regexp(t, v4, id)
		require.False(t, seen[id], "duplicate %s", id)
		seen[id] = true
	}
}

// rawText reads one TEXT column of a row, "NULL" for SQL NULL.
func rawText(t *testing.T, b *Backend, table, column, id string) string {
	t.Helper()
	var v sql.NullString
	require.NoError(t, b.read.QueryRowContext(t.Context(),
		fmt.Sprintf(`SELECT CAST(%s AS TEXT) FROM %s WHERE id = ?`, column, table), id).Scan(&v))
	if !v.Valid {
		return "NULL"
	}
	return v.String
}

func registerWorker(t *testing.T, b backends.Backend, pid int) string {
	t.Helper()
	id := backends.NewID()
	require.NoError(t, b.RegisterWorker(t.Context(), backends.Worker{ID: id, Hostname: "test", PID: pid}))
	return id
}

func TestStoredTimestampsUseSoniqsFormat(t *testing.T) {
	b, _ := openTest(t)
	ctx := t.Context()
	w := registerWorker(t, b, 1)
	j, err := b.Enqueue(ctx, backends.EnqueueParams{Name: "fmt", Delay: time.Minute})
	require.NoError(t, err)
	_, err = b.Claim(ctx, backends.ClaimParams{WorkerID: w, Limit: 1})
	require.NoError(t, err) // scheduled in the future: nothing claimed, nothing written
	for _, col := range []string{"created_at", "updated_at", "scheduled_at"} {
		assert.Regexp(t, soniqTimestamp, rawText(t, b, "soniq_jobs", col, j.ID), col)
	}
	for _, col := range []string{"last_heartbeat", "started_at"} {
		assert.Regexp(t, soniqTimestamp, rawText(t, b, "soniq_workers", col, w), col)
	}
	assert.Equal(t, "{}", rawText(t, b, "soniq_jobs", "args", j.ID), "args stored as JSON text")
	assert.Equal(t, `[]`, rawText(t, b, "soniq_workers", "queues", w))
}

func TestStoreRejectsDeadLetterStatus(t *testing.T) {
	b, _ := openTest(t)
	ctx := t.Context()
	j, err := b.Enqueue(ctx, backends.EnqueueParams{Name: "x"})
	require.NoError(t, err)
	h := harness(b)
	tests := []struct {
		name string
		do   func() error
	}{
		{"update", func() error { return h.SetRawStatus(ctx, j.ID, "dead_letter") }},
		{"insert", func() error { return h.InsertRawStatus(ctx, "dead_letter") }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.do()
			require.Error(t, err)
			// The trigger's message, not just the CHECK constraint, as in Soniq.
			assert.Contains(t, err.Error(), "DLQ rows live in soniq_dead_letter_jobs")
		})
	}
	got, err := b.Get(ctx, j.ID)
	require.NoError(t, err)
	assert.Equal(t, backends.StatusQueued, got.Status)
}

// A row written by Soniq's own SQLite backend: its INSERT column list
// (attempts and status from defaults) and its timestamp forms, including a
// whole-second timestamp without a fraction.
func insertSoniqRow(t *testing.T, b *Backend, id, name string, priority int, created string) {
	t.Helper()
	_, err := b.write.ExecContext(t.Context(), `INSERT INTO soniq_jobs
		(id, job_name, args, args_hash, max_attempts, priority, queue,
		 unique_job, dedup_key, scheduled_at, producer_id, created_at, updated_at)
		VALUES (?, ?, '{"n": 1}', NULL, 4, ?, 'default', 0, NULL, NULL, NULL, ?, ?)`,
		id, name, priority, created, created)
	require.NoError(t, err)
}

func TestClaimOrderWithSoniqTimestamps(t *testing.T) {
	b, _ := openTest(t)
	ctx := t.Context()
	w := registerWorker(t, b, 1)
	// Same second: Python omits ".000000", which must still sort first.
	insertSoniqRow(t, b, "00000000-0000-4000-8000-000000000003", "late", 100, "2025-01-01T00:00:05.000001+00:00")
	insertSoniqRow(t, b, "00000000-0000-4000-8000-000000000002", "whole", 100, "2025-01-01T00:00:05+00:00")
	insertSoniqRow(t, b, "00000000-0000-4000-8000-000000000001", "urgent", 1, "2025-01-01T00:00:09+00:00")
	// Identical created_at: insertion (rowid) order breaks the tie.
	insertSoniqRow(t, b, "00000000-0000-4000-8000-000000000005", "tie-first", 200, "2025-01-01T00:00:01+00:00")
	insertSoniqRow(t, b, "00000000-0000-4000-8000-000000000004", "tie-second", 200, "2025-01-01T00:00:01+00:00")

	jobs, err := b.Claim(ctx, backends.ClaimParams{WorkerID: w, Limit: 10})
	require.NoError(t, err)
	var names []string
	for _, j := range jobs {
		names = append(names, j.Name)
		assert.Equal(t, 1, j.Attempts, "attempts from Soniq's default 0, plus one")
		assert.Equal(t, 4, j.MaxAttempts)
		assert.JSONEq(t, `{"n":1}`, string(j.Args))
	}
	assert.Equal(t, []string{"urgent", "whole", "late", "tie-first", "tie-second"}, names)

	// One claim at a time gives the same order.
	b2, _ := openTest(t)
	w2 := registerWorker(t, b2, 1)
	insertSoniqRow(t, b2, "a", "b-second", 100, "2025-01-01T00:00:05.5+00:00")
	insertSoniqRow(t, b2, "b", "a-first", 100, "2025-01-01T00:00:05+00:00")
	for _, want := range []string{"a-first", "b-second"} {
		jobs, err := b2.Claim(ctx, backends.ClaimParams{WorkerID: w2, Limit: 1})
		require.NoError(t, err)
		require.Len(t, jobs, 1)
		assert.Equal(t, want, jobs[0].Name)
	}
}

func TestNackFieldSet(t *testing.T) {
	b, _ := openTest(t)
	ctx := t.Context()
	w := registerWorker(t, b, 1)
	j, err := b.Enqueue(ctx, backends.EnqueueParams{Name: "n"})
	require.NoError(t, err)
	claimed, err := b.Claim(ctx, backends.ClaimParams{WorkerID: w, Limit: 1})
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	// A previous attempt's error must survive the NACK.
	_, err = b.write.ExecContext(ctx, `UPDATE soniq_jobs SET last_error = 'earlier' WHERE id = ?`, j.ID)
	require.NoError(t, err)

	nacked, err := b.Nack(ctx, w, []backends.Job{claimed[0], {ID: "missing", Attempts: 1}})
	require.NoError(t, err)
	assert.Equal(t, []string{j.ID}, nacked)

	assert.Equal(t, "queued", rawText(t, b, "soniq_jobs", "status", j.ID))
	assert.Equal(t, "NULL", rawText(t, b, "soniq_jobs", "worker_id", j.ID))
	assert.Equal(t, "1", rawText(t, b, "soniq_jobs", "attempts", j.ID))
	assert.Equal(t, "earlier", rawText(t, b, "soniq_jobs", "last_error", j.ID))
	sched := rawText(t, b, "soniq_jobs", "scheduled_at", j.ID)
	assert.Regexp(t, soniqTimestamp, sched)
	assert.Equal(t, sched, rawText(t, b, "soniq_jobs", "updated_at", j.ID), "one now() for both")

	again, err := b.Nack(ctx, w, claimed)
	require.NoError(t, err)
	assert.Empty(t, again, "idempotent: a queued row is not nacked twice")
	// Nacked rows are claimable at once (scheduled_at = now <= now).
	jobs, err := b.Claim(ctx, backends.ClaimParams{WorkerID: w, Limit: 1})
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	assert.Equal(t, 2, jobs[0].Attempts)
}

// claimAll runs claimers goroutines, each claiming batches from its
// backend until a claim comes back empty, and returns every claimed id.
func claimAll(t *testing.T, bs []*Backend, claimers int) []string {
	t.Helper()
	var (
		mu  sync.Mutex
		ids []string
		wg  sync.WaitGroup
	)
	errs := make(chan error, claimers)
	for i := range claimers {
		b := bs[i%len(bs)]
		w := registerWorker(t, b, 1000+i)
		wg.Go(func() {
			for {
				jobs, err := b.Claim(t.Context(), backends.ClaimParams{WorkerID: w, Limit: 1 + i%7})
				if err != nil {
					errs <- err
					return
				}
				if len(jobs) == 0 {
					return
				}
				mu.Lock()
				for _, j := range jobs {
					ids = append(ids, j.ID)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err, "no claimer may see an error (SQLITE_BUSY included)")
	}
	return ids
}

// enqueueN inserts n queued jobs in one transaction (one fsync instead of
// n) with the columns Enqueue writes, and returns their ids.
func enqueueN(t testing.TB, b *Backend, n int) map[string]bool {
	t.Helper()
	want := make(map[string]bool, n)
	err := b.inWriteTx(context.Background(), "bulk insert", func(tx *sql.Tx) error {
		for i := range n {
			id := backends.NewID()
			ts := formatTime(now())
			if _, err := tx.Exec(`INSERT INTO soniq_jobs
				(id, job_name, args, status, attempts, max_attempts, priority, queue, unique_job, created_at, updated_at)
				VALUES (?, 'bulk', ?, 'queued', 0, 3, 100, 'default', 0, ?, ?)`,
				id, fmt.Sprintf(`{"i":%d}`, i), ts, ts); err != nil {
				return err
			}
			want[id] = true
		}
		return nil
	})
	require.NoError(t, err)
	return want
}

func requireEachOnce(t *testing.T, want map[string]bool, got []string) {
	t.Helper()
	seen := make(map[string]int, len(got))
	for _, id := range got {
		seen[id]++
		require.Equal(t, 1, seen[id], "job %s claimed twice", id)
		require.True(t, want[id], "unexpected job %s", id)
	}
	require.Len(t, seen, len(want), "every job claimed")
}

func TestConcurrentClaimersClaimEachRowOnce(t *testing.T) {
	b, _ := openTest(t)
	want := enqueueN(t, b, 1000)
	requireEachOnce(t, want, claimAll(t, []*Backend{b}, 8))
}

// Two Backends on one file are two writers as far as SQLite is concerned,
// exactly like two sidecar processes: BEGIN IMMEDIATE must keep them apart.
func TestTwoInstancesOnOneFileNeverDoubleClaim(t *testing.T) {
	b1, path := openTest(t)
	b2 := openPath(t, path)
	want := enqueueN(t, b1, 600)
	requireEachOnce(t, want, claimAll(t, []*Backend{b1, b2}, 8))

	st, err := b2.Stats(t.Context())
	require.NoError(t, err)
	assert.Equal(t, int64(600), st.Processing)
}

func TestCompleteBatchAcrossInstances(t *testing.T) {
	b1, path := openTest(t)
	b2 := openPath(t, path)
	ctx := t.Context()
	w := registerWorker(t, b1, 1)
	enqueueN(t, b1, 4)
	jobs, err := b1.Claim(ctx, backends.ClaimParams{WorkerID: w, Limit: 4})
	require.NoError(t, err)
	require.Len(t, jobs, 4)
	// The other instance completes them: the guard is on the row, not the connection.
	applied, err := b2.Complete(ctx, w, []backends.Completion{
		{JobID: jobs[0].ID, Attempts: 1, Outcome: backends.OutcomeDone, Result: json.RawMessage(`{"ok":true}`), ResultTTL: time.Hour},
		{JobID: jobs[1].ID, Attempts: 1, Outcome: backends.OutcomeRetry, Error: "later", Delay: time.Minute},
		{JobID: jobs[2].ID, Attempts: 1, Outcome: backends.OutcomeSnooze, Reason: "busy", Delay: time.Minute},
		{JobID: jobs[3].ID, Attempts: 1, Outcome: backends.OutcomeDeadLetter, Error: "bad", Reason: backends.ReasonInvalidArguments},
	})
	require.NoError(t, err)
	assert.Equal(t, []string{jobs[0].ID, jobs[1].ID, jobs[2].ID, jobs[3].ID}, applied)

	done, err := b1.Get(ctx, jobs[0].ID)
	require.NoError(t, err)
	assert.Equal(t, backends.StatusDone, done.Status)
	assert.JSONEq(t, `{"ok":true}`, string(done.Result))
	snoozed, err := b1.Get(ctx, jobs[2].ID)
	require.NoError(t, err)
	assert.Equal(t, "SNOOZE: busy", *snoozed.LastError)
	assert.Equal(t, 0, snoozed.Attempts)
	dl, err := b1.ListDeadLetter(ctx, 0)
	require.NoError(t, err)
	require.Len(t, dl, 1)
	assert.Equal(t, jobs[3].ID, dl[0].ID)
	assert.Equal(t, backends.ReasonInvalidArguments, dl[0].Reason)
	assert.Regexp(t, soniqTimestamp, rawText(t, b1, "soniq_dead_letter_jobs", "moved_to_dead_letter_at", jobs[3].ID))
}

func TestUniqueJobDedupesSoniqProducedRow(t *testing.T) {
	b, _ := openTest(t)
	ctx := t.Context()
	// What Soniq writes for app.enqueue("uniq", unique=True, args={"b": 2, "a": 1}).
	_, err := b.write.ExecContext(ctx, `INSERT INTO soniq_jobs
		(id, job_name, args, args_hash, max_attempts, priority, queue, unique_job, created_at, updated_at)
		VALUES ('soniq-row', 'uniq', '{"b": 2, "a": 1}',
		        '43258cff783fe7036d8a43033f830adfc60ec037382473548ac742b888292777',
		        3, 100, 'default', 1, '2025-01-01T00:00:00+00:00', '2025-01-01T00:00:00+00:00')`)
	require.NoError(t, err)
	j, err := b.Enqueue(ctx, backends.EnqueueParams{Name: "uniq", UniqueJob: true, Args: json.RawMessage(`{"a":1,"b":2}`)})
	require.NoError(t, err)
	assert.Equal(t, "soniq-row", j.ID)
}

func TestEnqueueRejectsBadInput(t *testing.T) {
	b, _ := openTest(t)
	tests := []struct {
		name string
		p    backends.EnqueueParams
	}{
		{"no name", backends.EnqueueParams{}},
		{"array args", backends.EnqueueParams{Name: "x", Args: json.RawMessage(`[1]`)}},
		{"invalid args", backends.EnqueueParams{Name: "x", Args: json.RawMessage(`{"a":`)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := b.Enqueue(t.Context(), tc.p)
			require.Error(t, err)
		})
	}
}

func TestSubscribeNeverBlocksAndClosesOnClose(t *testing.T) {
	b, err := Open(t.Context(), ":memory:")
	require.NoError(t, err)
	require.NoError(t, b.Migrate(t.Context()))
	ch, err := b.Subscribe(context.Background())
	require.NoError(t, err)
	// Nobody reads: enqueues beyond the buffer must not block.
	for range subscriberBuffer + 10 {
		_, err := b.Enqueue(t.Context(), backends.EnqueueParams{Name: "x", Queue: "q"})
		require.NoError(t, err)
	}
	require.NoError(t, b.Close())
	n := 0
	for q := range ch {
		assert.Equal(t, backends.Wakeup{Queue: "q"}, q)
		n++
	}
	assert.Equal(t, subscriberBuffer, n)
	_, err = b.Subscribe(context.Background())
	require.Error(t, err, "subscribe after close")
}

func TestOpenRejectsBadPaths(t *testing.T) {
	for _, p := range []string{"", "a?b.db"} {
		_, err := Open(t.Context(), p)
		require.Error(t, err, "path %q", p)
	}
}

// BenchmarkClaimComplete measures one claim of up to 32 rows plus one
// batched done completion, per iteration, against a file in WAL mode.
func BenchmarkClaimComplete(b *testing.B) {
	be, _ := openTest(b)
	ctx := context.Background()
	wid := backends.NewID()
	require.NoError(b, be.RegisterWorker(ctx, backends.Worker{ID: wid, Hostname: "bench", PID: 1}))
	const batch = 32
	jobs := 0
	refill := func() { enqueueN(b, be, 100*batch) }
	b.ResetTimer()
	for b.Loop() {
		claimed, err := be.Claim(ctx, backends.ClaimParams{WorkerID: wid, Limit: batch})
		require.NoError(b, err)
		if len(claimed) == 0 {
			b.StopTimer()
			refill()
			b.StartTimer()
			continue
		}
		cs := make([]backends.Completion, len(claimed))
		for i, j := range claimed {
			cs[i] = backends.Completion{JobID: j.ID, Attempts: j.Attempts, Outcome: backends.OutcomeDone, ResultTTL: time.Hour}
		}
		applied, err := be.Complete(ctx, wid, cs)
		require.NoError(b, err)
		require.Len(b, applied, len(claimed))
		jobs += len(claimed)
	}
	b.ReportMetric(float64(jobs)/b.Elapsed().Seconds(), "jobs/s")
}

// A writer in another process holding the file's write lock makes writes
// here wait, never fail with SQLITE_BUSY, until the caller's context ends.
func TestWriteWaitsForAnotherWriter(t *testing.T) {
	b, path := openTest(t)
	other, err := sql.Open(driverName, path+"?_txlock=immediate")
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Close() })
	hold, err := other.BeginTx(t.Context(), nil)
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = b.Enqueue(ctx, backends.EnqueueParams{Name: "blocked"})
	require.Error(t, err, "the lock is held for the whole deadline")
	t.Logf("gave up after %s: %v", time.Since(start), err)

	released := make(chan struct{})
	time.AfterFunc(200*time.Millisecond, func() { _ = hold.Rollback(); close(released) })
	_, err = b.Enqueue(t.Context(), backends.EnqueueParams{Name: "waits"})
	require.NoError(t, err)
	<-released
}

func TestIsBusy(t *testing.T) {
	_, path := openTest(t)
	other, err := sql.Open(driverName, path+"?_txlock=immediate")
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Close() })
	hold, err := other.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = hold.Rollback() })
	// A connection without busy_timeout fails at once: that error is what
	// beginImmediate retries.
	third, err := sql.Open(driverName, path+"?_txlock=immediate")
	require.NoError(t, err)
	t.Cleanup(func() { _ = third.Close() })
	_, err = third.BeginTx(t.Context(), nil)
	require.Error(t, err)
	assert.True(t, isBusy(err), "%v", err)
	assert.False(t, isBusy(errors.New("database is locked")))
}

// The claim reads the claim-order index in order and stops at its limit:
// no sort of every queued row, so its cost does not grow with the queue.
// The plan is checked for every filter the supervisor uses, on a file with
// statistics (ANALYZE) and on one without, as a file Soniq created and
// filled is.
func TestClaimReadsTheClaimOrderIndex(t *testing.T) {
	b, _ := openTest(t)
	ctx := t.Context()
	// A queue worth sorting, with a spread of priorities, and some rows
	// already done, as a live file has.
	_, err := b.write.ExecContext(ctx, `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 5000)
		INSERT INTO soniq_jobs (id, job_name, args, status, queue, priority, created_at)
		SELECT printf('%08d', i), 'j' || (i % 3), '{}', CASE WHEN i % 4 = 0 THEN 'done' ELSE 'queued' END,
			'default', 100 + i % 5, printf('2025-01-01T00:%02d:%02d+00:00', i / 60 % 60, i % 60) FROM n`)
	require.NoError(t, err)
	params := map[string]backends.ClaimParams{
		"all names":     {WorkerID: "w", Limit: 64},
		"queues, names": {WorkerID: "w", Limit: 64, Queues: []string{"default"}, Names: []string{"j1", "j2"}},
		"unknown names": {WorkerID: "w", Limit: 64, ExcludeNames: []string{"j1", "j2"}},
	}
	for _, analysed := range []bool{false, true} {
		if analysed {
			_, err := b.write.ExecContext(ctx, `ANALYZE`)
			require.NoError(t, err)
		}
		for name, p := range params {
			query, args := claimQuery(p, formatTime(now()))
			rows, err := b.write.QueryContext(ctx, "EXPLAIN QUERY PLAN "+query, args...)
			require.NoError(t, err)
			var plan []string
			for rows.Next() {
				var id, parent, unused int
				var detail string
				require.NoError(t, rows.Scan(&id, &parent, &unused, &detail))
				plan = append(plan, detail)
			}
			require.NoError(t, rows.Err())
			require.NoError(t, rows.Close())
			all := strings.Join(plan, "\n")
			assert.Contains(t, all, "soniq_sidecar_claim_order", "%s (analysed %v): the claim-order index:\n%s", name, analysed, all)
			assert.NotContains(t, all, "TEMP B-TREE", "%s (analysed %v): no sort:\n%s", name, analysed, all)
		}
	}
}
