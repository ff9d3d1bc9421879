package main

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/internal/memory"
)

// readyValue is the soniq_ready line of one scrape.
func readyValue(t *testing.T, h http.Handler) string {
	t.Helper()
	for _, l := range strings.Split(scrape(t, h), "\n") {
		if strings.HasPrefix(l, "soniq_ready ") {
			return strings.TrimPrefix(l, "soniq_ready ")
		}
	}
	t.Fatalf("no soniq_ready in the scrape")
	return ""
}

// soniq_ready says what /readyz says, evaluated at each scrape: 0 while the
// database is awaited, unreachable, or a handler has no ready process; 1
// once it is running and ready; 0 again once it has stopped.
func TestReadyGaugeFollowsReadyz(t *testing.T) {
	hs := &health{}
	hs.setWaiting("connecting to the database")
	_, shutdown, mh, err := setupTelemetry(context.Background(), testEnv(nil), withReadiness(hs.ready))
	require.NoError(t, err)
	defer shutdown()
	hs.metrics = mh
	h := healthHandler(hs)

	assert.Equal(t, "0", readyValue(t, h), "waiting for the database")

	b := memory.New()
	sup := exampleSupervisor(t, b)
	hs.setRunning(sup, failingPing{})
	assert.Equal(t, "0", readyValue(t, h), "database unreachable")
	hs.setRunning(sup, b)
	assert.Equal(t, "0", readyValue(t, h), "handler starting")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- sup.Run(ctx) }()
	require.Eventually(t, func() bool { return readyValue(t, h) == "1" }, 30*time.Second, 50*time.Millisecond, "ready once the handler processes said hello")
	code, body := get(t, h, "/readyz")
	assert.Equal(t, http.StatusOK, code, body)

	sup.Shutdown()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("supervisor did not stop")
	}
	assert.Equal(t, "0", readyValue(t, h), "STOPPED")
}

func TestScrapeTrackerAwaitsAScrapeAfterTheNacks(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("x 1\n")) })
	serve := func(h http.Handler) {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/metrics", nil))
	}
	tests := []struct {
		name       string
		before     bool          // a scrape served before the NACK
		after      bool          // a scrape served after it, before the wait
		during     time.Duration // a scrape this long into the wait (0: none)
		nack       bool
		wantWaited bool
		wantSeen   bool
		maxElapsed time.Duration
		minElapsed time.Duration
	}{
		{name: "no NACK: no wait", before: true, maxElapsed: 100 * time.Millisecond},
		{name: "never scraped: no wait", nack: true, maxElapsed: 100 * time.Millisecond},
		{name: "already scraped after the NACK", before: true, nack: true, after: true, wantSeen: true, maxElapsed: 100 * time.Millisecond},
		{name: "scraped during the wait", before: true, nack: true, during: 200 * time.Millisecond, wantWaited: true, wantSeen: true,
			minElapsed: 200 * time.Millisecond, maxElapsed: 1500 * time.Millisecond},
		{name: "no scrape within the wait", before: true, nack: true, wantWaited: true, minElapsed: 2 * time.Second, maxElapsed: 3 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newScrapeTracker()
			h := s.wrap(ok)
			if tc.before {
				serve(h)
			}
			var nack time.Time
			if tc.nack {
				time.Sleep(time.Millisecond)
				nack = time.Now()
			}
			if tc.after {
				time.Sleep(time.Millisecond)
				serve(h)
			}
			stop := make(chan struct{})
			finished := make(chan struct{})
			if tc.during > 0 {
				go func() {
					defer close(finished)
					select {
					case <-time.After(tc.during):
						serve(h)
					case <-stop:
					}
				}()
			} else {
				close(finished)
			}
			start := time.Now()
			waited, seen := s.awaitScrapeAfter(nack, 2*time.Second)
			elapsed := time.Since(start)
			close(stop)
			<-finished
			assert.Equal(t, tc.wantWaited, waited, "waited")
			assert.Equal(t, tc.wantSeen, seen, "seen")
			assert.GreaterOrEqual(t, elapsed, tc.minElapsed)
			assert.Less(t, elapsed, tc.maxElapsed)
		})
	}
	// finalScrape logs nothing and returns at once when nothing was NACKed.
	var buf syncBuffer
	start := time.Now()
	finalScrape(newScrapeTracker(), time.Time{}, time.Minute, slog.New(slog.NewJSONHandler(&buf, nil)))
	assert.Less(t, time.Since(start), 100*time.Millisecond)
	assert.Empty(t, buf.String())

	// A scrape that came after the NACKs before the exit was held is said
	// too: the line means "a scrape saw them", whether or not it waited.
	s := newScrapeTracker()
	serve(s.wrap(ok))
	nack := time.Now()
	time.Sleep(time.Millisecond)
	serve(s.wrap(ok))
	finalScrape(s, nack, time.Minute, slog.New(slog.NewJSONHandler(&buf, nil)))
	assert.Contains(t, buf.String(), "final /metrics scrape served after the shutdown NACKs")
}
