package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// A row that changed hands while the sidecar ran its job (another sidecar
// re-claimed it after a recovery) while this sidecar's own worker row stayed
// active: nothing in the sidecar's memory says the job is gone, so only the
// database write's guard (status 'processing' and this worker) keeps the
// late result off the row. The row stays processing under the other worker,
// its result untouched; the sidecar logs the discarded result.
func TestLateResultForRowThatChangedHands(t *testing.T) {
	t.Parallel()
	forEachSDK(t, func(t *testing.T, s sdk) {
		ctx := context.Background()
		w := newWorld(t, s, manifestOpts{})
		release := filepath.Join(w.dir, "release")
		id := w.enqueue("t.sleep_async", fmt.Sprintf(`{"seconds":60,"trigger":%q}`, release), 0)
		sc := w.startSidecar(nil)
		mine := sc.workerID(t)
		w.waitStarted(t, id)

		// The other sidecar: its worker row, then the row moved to it as
		// its claim after a recovery would (attempt counted, still
		// processing).
		other := backends.NewID()
		meta, err := json.Marshal(map[string]string{backends.MetaKind: "soniq-sidecar", backends.MetaInstance: "other"})
		require.NoError(t, err)
		require.NoError(t, w.backend.RegisterWorker(ctx, backends.Worker{ID: other, Hostname: "other@late-result-test",
			PID: 1, Concurrency: 1, Status: backends.WorkerActive, Metadata: meta}))
		tag, err := w.db.Exec(ctx, `UPDATE soniq_jobs SET worker_id = $2::uuid, attempts = attempts + 1, updated_at = now()
				WHERE id = $1::uuid AND status = 'processing' AND worker_id = $3::uuid`, id, other, mine)
		require.NoError(t, err)
		require.EqualValues(t, 1, tag.RowsAffected(), "the row moved while the sidecar still runs the job")
		moved := w.job(id)

		require.NoError(t, os.WriteFile(release, nil, 0o644))
		const discarded = "result discarded: the row is no longer processing for this worker"
		eventually(t, 20*time.Second, "the sidecar's write of the result, applied or discarded", func() bool {
			return len(sc.logs(discarded)) > 0 || w.job(id).Status != backends.StatusProcessing
		})
		assert.Equal(t, 1, countEvents(w.recorded(), "end", id), "the handler finished the job")
		j := w.job(id)
		assert.Equal(t, backends.StatusProcessing, j.Status, "the other worker's row is not marked done")
		require.NotNil(t, j.WorkerID)
		assert.Equal(t, other, *j.WorkerID)
		assert.Equal(t, 2, j.Attempts)
		assert.Nil(t, j.Result, "the late result was not written")
		assert.Equal(t, moved.UpdatedAt, j.UpdatedAt, "the row was not touched")
		sc.waitLog(time.Second, discarded, map[string]any{"job_id": id, "outcome": "done", "level": "WARN"})

		var status string
		require.NoError(t, w.db.QueryRow(ctx, `SELECT status FROM soniq_workers WHERE id = $1::uuid`, mine).Scan(&status))
		assert.Equal(t, backends.WorkerActive, status, "the sidecar's own row stayed active throughout")
		sc.stop(t)
	})
}
