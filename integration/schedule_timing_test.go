package integration

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Two sidecars over three one-second schedules: each fires every second,
// at its due time. A scheduler that looked once a second and counted the
// next run from its firing fired each about 5 times in 8 s (17 in 27 s):
// a due time a few milliseconds past a look waited for the next one, and
// those milliseconds added up at every run. Now each is fired on a timer
// at its next_run, and an interval's next run counts from the run that
// was due. The window is 8 s; 8 runs fall in it, and one may be counted
// on the other side of its edges (the rows' created_at jitter by the
// firing's few milliseconds), so at least 7 are required.
func TestOneSecondSchedulesFireEverySecond(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nodeStdio, manifestOpts{})
	names := []string{"ontime.a", "ontime.b", "ontime.c"} // served by nobody: the jobs stay queued
	logFirings(t, w)
	for _, n := range names {
		declare(t, w, n, "interval", "1")
	}
	a, b := w.startSidecar(nil), w.startSidecar(nil)
	ctx := context.Background()
	count := func(name string) int {
		var n int
		require.NoError(t, w.db.QueryRow(ctx, `SELECT count(*) FROM soniq_jobs WHERE job_name = $1`, name).Scan(&n))
		return n
	}
	eventually(t, 60*time.Second, "two runs of each schedule", func() bool {
		for _, n := range names {
			if count(n) < 2 {
				return false
			}
		}
		return true
	})
	var from time.Time
	require.NoError(t, w.db.QueryRow(ctx, `SELECT now()`).Scan(&from))
	const window = 8 * time.Second
	time.Sleep(window + 500*time.Millisecond)
	for _, n := range names {
		var fired int
		require.NoError(t, w.db.QueryRow(ctx, `SELECT count(*) FROM soniq_jobs WHERE job_name = $1
			AND created_at >= $2 AND created_at < $2 + make_interval(secs => $3)`, n, from, window.Seconds()).Scan(&fired))
		assert.GreaterOrEqual(t, fired, 7, "%s: runs fired in %s", n, window)
		t.Logf("%s: %d runs in %s", n, fired, window)
	}
	for _, s := range []*sidecar{a, b} {
		s.signal(syscall.SIGTERM)
		code, _ := s.wait(30 * time.Second)
		assert.Equal(t, 0, code)
	}
	for _, n := range names {
		firings(t, w, n) // each due run fired once, by whichever sidecar led
	}
}
