package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// processingByTenant counts the rows of name processing, by args.tenant.
func (w *world) processingByTenant(name string) map[string]int {
	w.t.Helper()
	rows, err := w.db.Query(context.Background(),
		`SELECT COALESCE(args->>'tenant', '<null>'), count(*) FROM soniq_jobs WHERE job_name = $1 AND status = 'processing' GROUP BY 1`, name)
	require.NoError(w.t, err)
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var k string
		var n int
		require.NoError(w.t, rows.Scan(&k, &n))
		out[k] = n
	}
	require.NoError(w.t, rows.Err())
	return out
}

// Two sidecars on one database, a per-tenant cap: at every sample of the
// rows no tenant exceeds its cap, across a SIGKILL of a sidecar holding
// capped rows (its rows count until they are recovered), a tenant paused by
// an override stays queued while the others drain, and raising its
// override live lets it run, one at a time, within a poll interval.
func TestLimitsHoldAcrossTwoSidecarsASigkillAndLiveOverrides(t *testing.T) {
	t.Parallel()
	const name, cap = "t.sleep_async", 2
	w := newWorld(t, sdks[0], manifestOpts{concurrency: 8, limits: map[string]string{name: fmt.Sprintf("{concurrency: %d, key: args.tenant}", cap)}})
	ctx := context.Background()
	zero, one := 0, 1
	paused := "c"
	_, err := w.backend.SetLimit(ctx, backends.LimitOverride{Scope: name, Key: &paused, Concurrency: &zero})
	require.NoError(t, err)
	var ids, cIDs []string
	for range 10 {
		ids = append(ids, w.enqueue(name, `{"tenant":"a","seconds":0.4}`, 0))
	}
	for range 4 {
		ids = append(ids, w.enqueue(name, `{"tenant":"b","seconds":0.4}`, 0))
	}
	for range 3 {
		cIDs = append(cIDs, w.enqueue(name, `{"tenant":"c","seconds":0.2}`, 0))
	}
	free := w.enqueue("t.noop", `{}`, 0)
	env := map[string]string{"SONIQ_HEARTBEAT_TIMEOUT": "3"}
	first := w.startSidecar(env)

	most := map[string]int{}
	sample := func() {
		for k, n := range w.processingByTenant(name) {
			most[k] = max(most[k], n)
			require.LessOrEqual(t, n, cap, "tenant %s at a sample: %v", k, w.processingByTenant(name))
		}
	}
	// The first sidecar alone takes capped rows; then a second one claims
	// beside it; then the first is killed while it holds capped rows.
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) && w.processingByTenant(name)["a"] == 0 {
		sample()
		time.Sleep(10 * time.Millisecond)
	}
	second := w.startSidecar(env)
	for range 20 {
		sample()
		time.Sleep(10 * time.Millisecond)
	}
	// Killed the moment it is seen holding capped rows: read at a fixed
	// instant, the count could fall between one of its 0.4 s jobs' result
	// and its next claim, and find none (.ci/run did, under load).
	var held int
	for time.Now().Before(deadline) {
		sample()
		require.NoError(t, w.db.QueryRow(ctx, `SELECT count(*) FROM soniq_jobs j JOIN soniq_workers wk ON wk.id = j.worker_id
		WHERE j.job_name = $1 AND j.status = 'processing' AND wk.hostname NOT LIKE 'soniq-sidecar-2@%'`, name).Scan(&held))
		if held > 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	first.signal(syscall.SIGKILL)
	first.wait(10 * time.Second)
	require.Positive(t, held, "the killed sidecar held capped rows")
	t.Logf("the killed sidecar held %d capped rows", held)

	// The others drain (the killed sidecar's rows recovered), c stays queued.
	for time.Now().Before(deadline) {
		sample()
		done := 0
		for _, id := range ids {
			if w.job(id).Status == backends.StatusDone {
				done++
			}
		}
		if done == len(ids) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, id := range ids {
		if w.job(id).Status != backends.StatusDone {
			for _, l := range second.logs("") {
				if l["level"] != "INFO" {
					t.Log(l)
				}
			}
		}
		require.Equal(t, backends.StatusDone, w.job(id).Status, "job %s", id)
	}
	assert.Equal(t, backends.StatusDone, w.job(free).Status, "an unlimited job of the same handler ran")
	assert.Equal(t, cap, most["a"], "tenant a reached its cap")
	for _, id := range cIDs {
		assert.Equal(t, backends.StatusQueued, w.job(id).Status, "tenant c is paused")
	}

	// Live: c may run one at a time.
	_, err = w.backend.SetLimit(ctx, backends.LimitOverride{Scope: name, Key: &paused, Concurrency: &one})
	require.NoError(t, err)
	set := time.Now()
	started := time.Time{}
	for time.Now().Before(deadline) {
		n := w.processingByTenant(name)["c"]
		require.LessOrEqual(t, n, 1, "tenant c under its override")
		if n > 0 && started.IsZero() {
			started = time.Now()
		}
		done := 0
		for _, id := range cIDs {
			if w.job(id).Status == backends.StatusDone {
				done++
			}
		}
		if done == len(cIDs) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	require.False(t, started.IsZero(), "tenant c ran after the override")
	assert.Less(t, started.Sub(set), 2*time.Second, "applied within a poll interval (0.2 s here), with room for the load")
	for _, id := range cIDs {
		assert.Equal(t, backends.StatusDone, w.job(id).Status)
	}
	second.signal(syscall.SIGTERM)
	code, _ := second.wait(30 * time.Second)
	assert.Equal(t, 0, code)
}

// The key null paused through the command line (`limit set --null-key`):
// a running sidecar holds the rows whose key is missing, null or not a
// scalar queued while the other keys' rows run, `limit list` shows the
// key null's rows deferred, and `limit clear --null-key` lets them run.
func TestLimitAPausedNullKeyHoldsItsRowsQueuedWhileOtherKeysRun(t *testing.T) {
	t.Parallel()
	const name = "t.record"
	w := newWorld(t, sdks[0], manifestOpts{limits: map[string]string{name: "{concurrency: 5, key: args.tenant}"}})
	code, out, errOut := w.cli(t, "limit", "set", name, "--null-key", "--concurrency", "0")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "limit t.record key null set: paused (concurrency 0)")
	code, _, errOut = w.cli(t, "limit", "set", name, "--null-key", "--key", "a", "--concurrency", "0")
	assert.Equal(t, 2, code, "--key and --null-key together")
	assert.Contains(t, errOut, "--key and --null-key")

	var others, nulls []string
	for _, a := range []string{`{"tenant":"a"}`, `{"tenant":"b"}`, `{"tenant":""}`, `{"tenant":7}`} {
		others = append(others, w.enqueue(name, a, 0))
	}
	for _, a := range []string{`{}`, `{"tenant":null}`, `{"tenant":{"id":1}}`, `{"tenant":["a"]}`} {
		nulls = append(nulls, w.enqueue(name, a, 0))
	}
	sc := w.startSidecar(nil)
	w.waitDone(t, sc, 60*time.Second, others...)
	// Claims go on every poll: the key null's rows stay queued through
	// several of them.
	time.Sleep(time.Second)
	for _, id := range nulls {
		assert.Equal(t, backends.StatusQueued, w.job(id).Status, "job %s of the key null", id)
	}

	code, out, errOut = w.cli(t, "limit", "list", "--json")
	require.Equal(t, 0, code, errOut)
	var rows []struct {
		Scope    string  `json:"scope"`
		Key      *string `json:"key"`
		NullKey  bool    `json:"null_key"`
		Paused   bool    `json:"paused"`
		Queued   *int64  `json:"queued"`
		Deferred *int64  `json:"deferred"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rows), out)
	require.Len(t, rows, 2, out)
	assert.Equal(t, name, rows[0].Scope)
	assert.False(t, rows[0].NullKey)
	require.NotNil(t, rows[0].Deferred, out)
	assert.Equal(t, int64(len(nulls)), *rows[0].Deferred, "the scope's deferred rows: the key null's")
	assert.True(t, rows[1].NullKey, out)
	assert.Nil(t, rows[1].Key)
	assert.True(t, rows[1].Paused)
	require.NotNil(t, rows[1].Queued, out)
	assert.Equal(t, [2]int64{int64(len(nulls)), int64(len(nulls))}, [2]int64{*rows[1].Queued, *rows[1].Deferred})
	code, out, _ = w.cli(t, "limit", "list")
	require.Equal(t, 0, code)
	assert.Regexp(t, `(?m)^t\.record\s+null\s+-\s+paused \(concurrency 0\)\s+0\s+4\s+4$`, out)

	code, out, errOut = w.cli(t, "limit", "clear", name, "--null-key")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "limit t.record key null cleared")
	w.waitDone(t, sc, 60*time.Second, nulls...)
	sc.signal(syscall.SIGTERM)
	code, _ = sc.wait(30 * time.Second)
	assert.Equal(t, 0, code)
}
