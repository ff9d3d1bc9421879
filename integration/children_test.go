package integration

import (
	"context"
	"encoding/json"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// childRow is one t.child row a t.children job made (integration/testdata/handlers).
type childRow struct {
	id      string
	attempt int
	status  string
}

// children reads the t.child rows whose parent is id.
func (w *world) children(t *testing.T, parent string) []childRow {
	t.Helper()
	rows, err := w.db.Query(context.Background(), `SELECT id::text, (args->>'attempt')::int, status
		FROM soniq_jobs WHERE job_name = 't.child' AND args->>'parent' = $1 ORDER BY id`, parent)
	require.NoError(t, err)
	defer rows.Close()
	var out []childRow
	for rows.Next() {
		var c childRow
		require.NoError(t, rows.Scan(&c.id, &c.attempt, &c.status))
		out = append(out, c)
	}
	require.NoError(t, rows.Err())
	return out
}

// TestChildJobs: ctx.enqueue on the real binary, for both SDKs over stdio,
// unix and attach. A parent that fails twice and then succeeds leaves one
// set of children (its last attempt's); immediate children exist while
// their parent runs; a child past max_children_per_job fails its parent with
// ChildJobRefused and writes none; a sidecar SIGKILLed while a parent runs
// leaves none of that attempt's children.
func TestChildJobs(t *testing.T) {
	t.Parallel()
	for _, s := range append(append([]sdk{}, sdks...), podSDKs...) {
		t.Run(s.name+"/"+s.transport, func(t *testing.T) {
			t.Parallel()
			var w *world
			if s.transport == "attach" {
				p := newPod(t, s, manifestOpts{})
				p.startHandler(t)
				w = p.world
			} else {
				w = newWorld(t, s, manifestOpts{})
			}
			sc := w.startSidecar(map[string]string{"SONIQ_MAX_CHILDREN_PER_JOB": "3"})
			retried := w.enqueue("t.children", `{"n":2,"fail_until":3}`, 3)
			now := w.enqueue("t.children", `{"n":2,"immediate":true,"hold":3}`, 1)
			capped := w.enqueue("t.children", `{"n":4}`, 1)

			whileRunning(t, 20*time.Second, "the immediate children written while their parent runs", func() bool {
				return len(w.children(t, now)) == 2 && w.job(now).Status == backends.StatusProcessing
			}, sc)
			w.waitDone(t, sc, 30*time.Second, retried, now)

			kids := w.children(t, retried)
			require.Len(t, kids, 2, "one set of children, not one per attempt")
			for _, c := range kids {
				assert.Equal(t, 3, c.attempt, "the children of the attempt that succeeded")
				assert.Equal(t, "queued", c.status)
			}
			assert.Equal(t, 3, w.job(retried).Attempts)
			var res struct{ IDs []string }
			require.NoError(t, json.Unmarshal(w.job(retried).Result, &res))
			sort.Strings(res.IDs)
			assert.Equal(t, []string{kids[0].id, kids[1].id}, res.IDs, "the rows have the ids ctx.enqueue returned")
			assert.Len(t, w.children(t, now), 2)

			dl := w.waitDeadLetter(t, sc, 20*time.Second, capped)
			require.NotNil(t, dl.LastError)
			assert.Contains(t, *dl.LastError, "ChildJobRefused")
			assert.Contains(t, *dl.LastError, "max_children_per_job")
			assert.Empty(t, w.children(t, capped), "a refused child fails its parent and writes no child")
			sc.stop(t)

			killed := w.startSidecar(nil)
			held := w.enqueue("t.children", `{"n":2,"hold":60}`, 3)
			whileRunning(t, 20*time.Second, "the held parent sent its children", func() bool {
				return countEvents(w.recorded(), "children", held) == 1
			}, killed)
			killed.kill(t)
			assert.Empty(t, w.children(t, held), "a SIGKILLed sidecar leaves none of the attempt's children")
			assert.Equal(t, backends.StatusProcessing, w.job(held).Status, "left to stale-worker recovery")
		})
	}
}
