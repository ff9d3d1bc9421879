package integration

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// The self-audit against the real binary and Postgres: a row put
// processing under the live sidecar's worker by SQL, as a program or a bug
// could, is given back and then run; a job the sidecar runs through many
// readings is never touched.
func TestSelfAuditReleasesARowThisWorkerDoesNotHold(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorld(t, sdks[0], manifestOpts{})
	long := w.enqueue("t.sleep_async", `{"seconds":6}`, 0)
	sc := w.startSidecar(map[string]string{"SONIQ_AUDIT_INTERVAL": "1"})
	mine := sc.workerID(t)
	w.waitStarted(t, long)

	// Written as another program would: a job claimed under this worker's
	// id behind its back, which no handler of it runs.
	var orphan string
	require.NoError(t, w.db.QueryRow(ctx, `INSERT INTO soniq_jobs (id, job_name, args, status, attempts, max_attempts, queue, priority, worker_id)
		VALUES (gen_random_uuid(), 't.noop', '{}', 'processing', 1, 3, 'default', 100, $1::uuid) RETURNING id::text`, mine).Scan(&orphan))

	w.waitDone(t, sc, 30*time.Second, orphan)
	j := w.job(orphan)
	assert.Equal(t, backends.StatusDone, j.Status, "given back, then claimed and run")
	assert.Equal(t, 2, j.Attempts, "the orphaned attempt, then the run")
	sc.waitLog(time.Second, "self-audit: released a job this worker held but was not running",
		map[string]any{"job_id": orphan, "job_name": "t.noop", "worker_id": mine, "level": "ERROR"})

	w.waitDone(t, sc, 30*time.Second, long)
	l := w.job(long)
	assert.Equal(t, 1, l.Attempts, "the running job was never given back")
	assert.Len(t, sc.logs("self-audit: released"), 1)
	assert.Equal(t, 1, countEvents(w.recorded(), "start", long))
	sc.stop(t)
}
