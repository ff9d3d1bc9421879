package integration

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/backends/postgres/pgtest"
)

// Pickup latency through PgBouncer in transaction mode, with a LISTEN URL
// straight to Postgres and poll-only: the time from enqueue to the row
// leaving 'queued', observed every 10 ms (so ±10 ms), for an idle sidecar.
func TestPickupLatencyThroughPgBouncer(t *testing.T) {
	// Serial: it bounds pickup latency, which other tests' load would measure too.
	const jobs = 8
	tests := []struct {
		name      string
		poll      time.Duration
		listen    bool
		maxPickup time.Duration // bound on every pickup, tolerance included
	}{
		// A wake-up must beat the (long) poll by far: lost notifications
		// would show as pickups of seconds.
		{"listen url", 5 * time.Second, true, time.Second},
		// Poll-only: within 1.2 × the interval (its jitter), +300 ms for a
		// claim under -race on a shared machine.
		{"poll only", time.Second, false, 1500 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, sdks[0], manifestOpts{})
			env := map[string]string{
				"SONIQ_DATABASE_URL":    pgtest.ThroughPooler(t, w.dbURL),
				"SONIQ_DATABASE_POOLER": "transaction",
				"SONIQ_POLL_INTERVAL":   fmt.Sprint(tc.poll.Seconds()),
			}
			if tc.listen {
				env["SONIQ_DATABASE_LISTEN_URL"] = w.dbURL
			}
			s := w.startSidecar(env)
			s.waitLog(30*time.Second, "handler process ready", nil)
			if !tc.listen {
				s.waitLog(5*time.Second, "polling only", nil)
			}
			// A first job proves the sidecar claims (and the LISTEN is up).
			first := w.enqueue("t.noop", `{}`, 0)
			eventually(t, 15*time.Second, "first job done", func() bool { return w.job(first).Status == backends.StatusDone })

			var lat []time.Duration
			for i := range jobs {
				// Vary the phase against the poll timer.
				time.Sleep(time.Duration(i*137%500) * time.Millisecond)
				start := time.Now()
				id := w.enqueue("t.noop", `{}`, 0)
				for w.job(id).Status == backends.StatusQueued {
					require.Less(t, time.Since(start), 10*time.Second, "job %s never picked up", id)
					time.Sleep(10 * time.Millisecond)
				}
				lat = append(lat, time.Since(start))
			}
			slices.Sort(lat)
			var sum time.Duration
			for _, d := range lat {
				sum += d
			}
			t.Logf("pickup through PgBouncer (transaction), %s, poll %s: mean %s, median %s, max %s over %d jobs",
				tc.name, tc.poll, (sum / jobs).Round(time.Millisecond), lat[jobs/2].Round(time.Millisecond), lat[jobs-1].Round(time.Millisecond), jobs)
			assert.Less(t, lat[jobs-1], tc.maxPickup)
		})
	}
}
