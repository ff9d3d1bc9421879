package integration

// The Node SDK's worker API under the real sidecar, over both transports:
// the job context a handler gets from the row it runs.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// apiJobs are the jobs of integration/testdata/handlers/api_handlers.js,
// as the manifest declares them.
var apiJobs = []string{
	"{name: api.context, cancellable: true}",
	"{name: api.permanent, cancellable: true}",
	"{name: api.slow, cancellable: true, timeout: 1s, retry: {delay: 1h}}",
	"{name: api.hooked, cancellable: true}",
	"{name: api.validated, cancellable: true}",
	"{name: api.bigint, cancellable: true}",
}

// apiWorld is a world whose manifest runs integration/testdata/handlers/
// api_handlers.js as handler node-api.
func apiWorld(t *testing.T, transport string) *world {
	t.Helper()
	w := newWorld(t, sdk{name: "node", transport: transport, command: nodeCommand, env: nodeEnv}, manifestOpts{})
	cmd, _ := json.Marshal([]string{"node", filepath.Join(w.root, "integration/testdata/handlers/api_handlers.js")})
	env, _ := json.Marshal(map[string]string{"TEST_NODE_SDK": filepath.Join(w.root, "sdk/node")})
	manifest := fmt.Sprintf("version: 1\nhandlers:\n  - name: node-api\n    command: %s\n    transport: %s\n    processes: 1\n    concurrency: 4\n    startup_timeout: 20s\n    env: %s\n    jobs:\n",
		cmd, transport, env)
	for _, j := range apiJobs {
		manifest += "      - " + j + "\n"
	}
	require.NoError(t, os.WriteFile(w.manifest, []byte(manifest), 0o644))
	return w
}

// A handler's ctx.workerId, ctx.createdAt and ctx.scheduledAt are the row's
// worker_id, created_at and scheduled_at (to the millisecond), null where
// the row has NULL: for a job queued to run at once, a delayed one, and one
// another producer inserted with times of its own.
func TestNodeJobContextFromRow(t *testing.T) {
	t.Parallel()
	for _, transport := range []string{"stdio", "unix"} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			w := apiWorld(t, transport)
			sc := w.startSidecar(nil)
			sc.waitReady(t, "node-api", 1)

			now := w.enqueue("api.context", `{}`, 0)
			delayed, err := w.backend.Enqueue(context.Background(), backends.EnqueueParams{Name: "api.context", Delay: 300 * time.Millisecond})
			require.NoError(t, err)
			var foreign string
			require.NoError(t, w.db.QueryRow(context.Background(),
				`INSERT INTO soniq_jobs (id, job_name, args, created_at, scheduled_at)
				 VALUES (gen_random_uuid(), 'api.context', '{}', '1969-07-20 20:17:40.123456+00', '2001-02-03 04:05:06.789999+00')
				 RETURNING id::text`).Scan(&foreign))
			ids := []string{now, delayed.ID, foreign}
			w.waitDone(t, sc, 30*time.Second, ids...)

			var workerIDs []string
			rows, err := w.db.Query(context.Background(), `SELECT id::text FROM soniq_workers`)
			require.NoError(t, err)
			for rows.Next() {
				var id string
				require.NoError(t, rows.Scan(&id))
				workerIDs = append(workerIDs, id)
			}
			require.NoError(t, rows.Err())
			require.Len(t, workerIDs, 1, "one sidecar")

			for _, id := range ids {
				j := w.job(id)
				var got struct {
					WorkerID      *string `json:"workerId"`
					ScheduledAt   *int64  `json:"scheduledAt"`
					CreatedAt     *int64  `json:"createdAt"`
					DatesAreDates bool    `json:"datesAreDates"`
				}
				require.NoError(t, json.Unmarshal(j.Result, &got), "%s", j.Result)
				require.NotNil(t, j.WorkerID)
				require.NotNil(t, got.WorkerID, "ctx.workerId of %s", id)
				assert.Equal(t, *j.WorkerID, *got.WorkerID, "ctx.workerId is the row's worker_id")
				assert.Equal(t, workerIDs[0], *got.WorkerID, "the sidecar's soniq_workers id")
				require.NotNil(t, got.CreatedAt, "ctx.createdAt of %s", id)
				assert.Equal(t, j.CreatedAt.UnixMilli(), *got.CreatedAt, "ctx.createdAt is the row's created_at")
				if j.ScheduledAt == nil {
					assert.Nil(t, got.ScheduledAt, "scheduled_at NULL: ctx.scheduledAt null")
				} else if assert.NotNil(t, got.ScheduledAt, "ctx.scheduledAt of %s", id) {
					assert.Equal(t, j.ScheduledAt.UnixMilli(), *got.ScheduledAt, "ctx.scheduledAt is the row's scheduled_at")
				}
				assert.True(t, got.DatesAreDates, "Date objects")
			}
			assert.Nil(t, w.job(now).ScheduledAt, "enqueued to run at once")
			assert.NotNil(t, w.job(delayed.ID).ScheduledAt, "enqueued with a delay")
			f := w.job(foreign)
			assert.Equal(t, int64(-14182939877), f.CreatedAt.UnixMilli(), "1969: before the epoch, rounded down")
			assert.Equal(t, int64(981173106789), f.ScheduledAt.UnixMilli())

			sc.stop(t)
			assert.Empty(t, sc.logs("protocol error"))
		})
	}
}

// The last_error texts are Soniq's: a timeout is "Job timed out after
// 1.0s" (the timeout as Python prints the float), "Max retries exceeded: "
// before it on the last attempt; a permanent failure is "Retry policy
// declined: " before the error, as Soniq writes for reason permanent_failure.
func TestSoniqLastErrorTexts(t *testing.T) {
	t.Parallel()
	for _, transport := range []string{"stdio", "unix"} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			w := apiWorld(t, transport)
			sc := w.startSidecar(nil)
			sc.waitReady(t, "node-api", 1)
			perm := w.enqueue("api.permanent", `{"invoice": 42}`, 3)
			retried := w.enqueue("api.slow", `{}`, 3)
			last := w.enqueue("api.slow", `{}`, 1)

			dl := w.waitDeadLetter(t, sc, 30*time.Second, perm)
			assert.Equal(t, backends.ReasonPermanentFailure, dl.Reason)
			assert.Equal(t, 1, dl.Attempts)
			require.NotNil(t, dl.LastError)
			assert.True(t, strings.HasPrefix(*dl.LastError, "Retry policy declined: PermanentError: no invoice 42\n"), "%q", *dl.LastError)
			assert.Contains(t, *dl.LastError, "api_handlers.js", "the stack follows")

			dl = w.waitDeadLetter(t, sc, 30*time.Second, last)
			assert.Equal(t, backends.ReasonMaxRetriesExceeded, dl.Reason)
			require.NotNil(t, dl.LastError)
			assert.Equal(t, "Max retries exceeded: Job timed out after 1.0s", *dl.LastError)

			// Retried in an hour: the row waits with the attempt's error.
			whileRunning(t, 30*time.Second, "the timed-out job back in the queue", func() bool {
				j := w.job(retried)
				return j.Status == backends.StatusQueued && j.Attempts == 1
			}, sc)
			j := w.job(retried)
			require.NotNil(t, j.LastError)
			assert.Equal(t, "Job timed out after 1.0s", *j.LastError)
			sc.stop(t)
		})
	}
}

// Hooks, middleware and validation of the Node SDK under the sidecar: a
// failed validation dead-letters the job at once (invalid_arguments, "Corrupted
// argument data: ..." in Soniq's words), a passing one hands the handler the
// normalised args; hooks that throw change nothing; a middleware's value is
// the row's result; a BigInt is stored as its digits, the job done;
// onError sees a permanent failure and a job timeout.
func TestNodeHooksAndValidationUnderSidecar(t *testing.T) {
	t.Parallel()
	for _, transport := range []string{"stdio", "unix"} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			w := apiWorld(t, transport)
			sc := w.startSidecar(nil)
			sc.waitReady(t, "node-api", 1)
			bad := w.enqueue("api.validated", `{"n": "seven"}`, 3)
			good := w.enqueue("api.validated", `{"n": 6.6}`, 3)
			hooked := w.enqueue("api.hooked", `{"x": 1}`, 3)
			perm := w.enqueue("api.permanent", `{"invoice": 7}`, 3)
			slow := w.enqueue("api.slow", `{}`, 1)
			big := w.enqueue("api.bigint", `{}`, 3)

			dl := w.waitDeadLetter(t, sc, 30*time.Second, bad)
			// As Soniq's worker writes args that fail validation.
			assert.Equal(t, backends.ReasonInvalidArguments, dl.Reason)
			assert.Equal(t, 1, dl.Attempts, "not retried")
			require.NotNil(t, dl.LastError)
			assert.Equal(t, `Corrupted argument data: n must be a number, got "seven"`, *dl.LastError)

			w.waitDone(t, sc, 30*time.Second, good, hooked)
			assert.JSONEq(t, `{"n": 7}`, string(w.job(good).Result), "the validator's args")
			assert.JSONEq(t, `{"wrapped": {"got": {"x": 1}}, "attempt": 1}`, string(w.job(hooked).Result), "the middleware's value")
			assert.Equal(t, 1, w.job(hooked).Attempts)
			sc.waitLog(10*time.Second, "beforeJob hook failed for job "+hooked+" (api.hooked): Error: beforeJob broke; ignored", nil)
			sc.waitLog(10*time.Second, "afterJob hook failed for job "+hooked+" (api.hooked): Error: afterJob broke; ignored", nil)

			// What JSON cannot hold is done, as under a Soniq worker, not dead-lettered.
			w.waitDone(t, sc, 30*time.Second, big)
			assert.JSONEq(t, `{"n": "18446744073709551616", "list": ["1"]}`, string(w.job(big).Result))
			assert.Equal(t, 1, w.job(big).Attempts)
			sc.waitLog(10*time.Second, "WARN: job "+big+" (api.bigint) returned bigint, which JSON cannot hold", map[string]any{"handler": "node-api"})

			assert.Equal(t, backends.ReasonPermanentFailure, w.waitDeadLetter(t, sc, 30*time.Second, perm).Reason)
			sc.waitLog(10*time.Second, "onError "+perm+" -: no invoice 7", map[string]any{"handler": "node-api"})
			w.waitDeadLetter(t, sc, 30*time.Second, slow)
			sc.waitLog(10*time.Second, "onError "+slow+" job_timeout:", map[string]any{"handler": "node-api"})
			assert.Empty(t, sc.logs("onError "+bad), "no onError for a failed validation")
			sc.stop(t)
			assert.Empty(t, sc.logs("protocol error"))
		})
	}
}
