package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/backends/postgres"
	"github.com/soniq-dev/soniq-sidecar/backends/postgres/pgtest"
)

// cancel on a job nobody holds: queued (cancelled at once), finished,
// dead-lettered, unknown; and the argument errors. A running job needs a
// sidecar holding it: integration/cancel_test.go.
func TestCancelWithoutAHolder(t *testing.T) {
	for _, db := range []string{"sqlite", "postgres"} {
		t.Run(db, func(t *testing.T) {
			env := map[string]string{}
			if db == "postgres" {
				env["SONIQ_DATABASE_URL"] = pgtest.NewDatabase(t)
			}
			c := newCLI(t, env)
			if db == "postgres" {
				code, _, errOut := c.run("migrate")
				require.Equal(t, 0, code, errOut)
			}
			enqueue := func(name string) string {
				code, out, errOut := c.run("enqueue", name)
				require.Equal(t, 0, code, errOut)
				return strings.TrimSpace(out)
			}

			queued := enqueue("cancel.queued")
			code, out, errOut := c.run("cancel", queued)
			require.Equal(t, 0, code, errOut)
			assert.Equal(t, "cancelled job "+queued+" (cancel.queued, queue default): it was queued and will not run\n", out)
			code, out, _ = c.run("job", queued, "--json")
			require.Equal(t, 0, code)
			assert.Contains(t, out, `"status":"cancelled"`)
			assert.Contains(t, out, `"attempts":0`)

			code, _, errOut = c.run("cancel", queued)
			assert.Equal(t, 1, code)
			assert.Contains(t, errOut, "job "+queued+" (cancel.queued) has already finished: its status is cancelled; nothing to cancel")

			missing := backends.NewID()
			code, _, errOut = c.run("cancel", missing)
			assert.Equal(t, 1, code)
			assert.Contains(t, errOut, "no job "+missing+" in ")

			if db == "sqlite" {
				dead := enqueue("cancel.dead")
				deadLetter(t, c.dir+"/soniq.db", dead)
				code, _, errOut = c.run("cancel", dead)
				assert.Equal(t, 1, code)
				assert.Contains(t, errOut, "job "+dead+" (cancel.dead) is in the dead-letter table (max_retries_exceeded): it is not running; nothing to cancel")
			}

			for _, tc := range []struct {
				args []string
				want string
			}{
				{[]string{"cancel"}, "cancel: want exactly one job ID, got 0 arguments"},
				{[]string{"cancel", "a", "b"}, "cancel: want exactly one job ID, got 2 arguments"},
				{[]string{"cancel", queued, "--wait", "soon"}, `cancel: --wait "soon"`},
				{[]string{"cancel", queued, "--wait", "-1s"}, `cancel: --wait "-1s"`},
			} {
				code, _, errOut := c.run(tc.args...)
				assert.Equal(t, 2, code, "%v: %s", tc.args, errOut)
				assert.Contains(t, errOut, tc.want, "%v", tc.args)
			}
			code, out, _ = c.run("cancel", "--help")
			assert.Equal(t, 0, code)
			assert.Contains(t, out, "-wait")
		})
	}
}

// A running job whose holder never answers (no sidecar holds it: a worker
// row written here) is reported after --wait, and the request stays.
func TestCancelOfARunningJobNobodyAnswers(t *testing.T) {
	url := pgtest.NewDatabase(t)
	c := newCLI(t, map[string]string{"SONIQ_DATABASE_URL": url})
	code, _, errOut := c.run("migrate")
	require.Equal(t, 0, code, errOut)
	ctx := context.Background()
	b, err := postgres.Open(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	worker := backends.NewID()
	require.NoError(t, b.RegisterWorker(ctx, backends.Worker{ID: worker, Hostname: "silent", PID: 7}))
	j, err := b.Enqueue(ctx, backends.EnqueueParams{Name: "cancel.silent"})
	require.NoError(t, err)
	_, err = b.Claim(ctx, backends.ClaimParams{WorkerID: worker, Limit: 1})
	require.NoError(t, err)

	start := time.Now()
	code, _, errOut = c.run("cancel", j.ID, "--wait", "300ms")
	assert.Equal(t, 1, code)
	assert.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond, "it waited")
	assert.Contains(t, errOut, "job "+j.ID+" (cancel.silent) is running under worker "+worker+": asked it to cancel the job; waiting up to 300ms")
	assert.Contains(t, errOut, "job "+j.ID+" (cancel.silent) is still processing: worker "+worker+" did not answer within 300ms")
	r, err := b.GetCancelRequest(ctx, j.ID)
	require.NoError(t, err)
	assert.Equal(t, backends.CancelPending, r.Status)

	// The holder refuses (as a sidecar does for a sync job): the command
	// says so, naming the handler, and the job runs on.
	ok, err := b.RefuseCancel(ctx, worker, j.ID, "pdf", "sync jobs cannot be interrupted")
	require.NoError(t, err)
	require.True(t, ok)
	// A new request is pending again; answer it as the command waits.
	go func() {
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			if r, err := b.GetCancelRequest(ctx, j.ID); err == nil && r.Status == backends.CancelPending {
				_, _ = b.RefuseCancel(ctx, worker, j.ID, "pdf", "sync jobs cannot be interrupted")
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	code, _, errOut = c.run("cancel", j.ID, "--wait", "5s")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "job "+j.ID+" (cancel.silent) cannot be cancelled: handler pdf runs it as a sync job (cancellable: false) on worker "+worker+
		": sync jobs cannot be interrupted. Nothing was stopped; the job runs on")
	got, err := b.Get(ctx, j.ID)
	require.NoError(t, err)
	assert.Equal(t, backends.StatusProcessing, got.Status)

	// Given back to the queue while the command waits: cancelled at once.
	go func() {
		time.Sleep(200 * time.Millisecond)
		_, _ = b.Nack(ctx, worker, []backends.Job{{ID: j.ID, Attempts: 1}})
	}()
	code, out, errOut := c.run("cancel", j.ID, "--wait", "5s")
	assert.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "cancelled job "+j.ID+" (cancel.silent): it had gone back to the queue (attempts 1 of 3) and will not run again")
}

// A database that drops the command's connections while it waits (a
// restart, a failover) does not end the wait: the command reads again
// until the holder answers or --wait passes.
func TestCancelWaitOutlastsDroppedConnections(t *testing.T) {
	url := pgtest.NewDatabase(t)
	c := newCLI(t, map[string]string{"SONIQ_DATABASE_URL": url})
	code, _, errOut := c.run("migrate")
	require.Equal(t, 0, code, errOut)
	ctx := context.Background()
	b, err := postgres.Open(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	worker := backends.NewID()
	require.NoError(t, b.RegisterWorker(ctx, backends.Worker{ID: worker, Hostname: "flaky", PID: 8}))
	j, err := b.Enqueue(ctx, backends.EnqueueParams{Name: "cancel.flaky"})
	require.NoError(t, err)
	_, err = b.Claim(ctx, backends.ClaimParams{WorkerID: worker, Limit: 1})
	require.NoError(t, err)

	done := make(chan struct{})
	go func() { // owned by the test: ends once the request is answered
		defer close(done)
		admin, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Error(err)
			return
		}
		defer admin.Close(ctx)
		waitPending := func() {
			for {
				if r, err := b.GetCancelRequest(ctx, j.ID); err == nil && r.Status == backends.CancelPending {
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		waitPending()
		// Every other session of this database is dropped, the command's
		// included, for a second.
		for end := time.Now().Add(time.Second); time.Now().Before(end); {
			_, _ = admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
				WHERE datname = current_database() AND pid <> pg_backend_pid()`)
			time.Sleep(20 * time.Millisecond)
		}
		waitPending()
		if _, err := b.RefuseCancel(ctx, worker, j.ID, "pdf", "sync jobs cannot be interrupted"); err != nil {
			t.Error(err)
		}
	}()
	code, _, errOut = c.run("cancel", j.ID, "--wait", "10s")
	<-done
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "cannot be cancelled: handler pdf runs it as a sync job", "the wait went on through the dropped connections")
	assert.NotContains(t, errOut, "unreachable")
}
