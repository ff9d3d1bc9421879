package main

import (
	"log/slog"
	"net/http"
	"sync"
	"time"
)

// scrapeTracker watches the /metrics requests served, so that run can hold
// its exit until a scraper has read the shutdown NACKs it just counted.
// Those NACKs happen only in the last moments of a sidecar's life (an
// async-only shutdown exits some 40 ms after them), and Prometheus, which
// pulls, would otherwise almost never see the counter move.
type scrapeTracker struct {
	mu sync.Mutex
	// served counts completed scrapes; lastStart is when the latest of them
	// began (what it returned was collected after that instant).
	served    int64
	lastStart time.Time
	// done is closed, and replaced, whenever a scrape completes.
	done chan struct{}
}

func newScrapeTracker() *scrapeTracker { return &scrapeTracker{done: make(chan struct{})} }

// wrap records every request h serves.
func (s *scrapeTracker) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		h.ServeHTTP(w, r)
		s.mu.Lock()
		defer s.mu.Unlock()
		s.served++
		if start.After(s.lastStart) {
			s.lastStart = start
		}
		close(s.done)
		s.done = make(chan struct{})
	})
}

// awaitScrapeAfter waits, for at most max, until a scrape that began after
// since has completed. It returns at once (false, nothing to wait for) when
// since is zero, when such a scrape was already served, or when nothing
// has ever scraped this process: no scraper, no point in delaying the exit.
// It reports whether it waited, and whether the scrape came.
func (s *scrapeTracker) awaitScrapeAfter(since time.Time, max time.Duration) (waited, seen bool) {
	if since.IsZero() || max <= 0 {
		return false, false
	}
	deadline := time.NewTimer(max)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		served, last, done := s.served, s.lastStart, s.done
		s.mu.Unlock()
		if served == 0 {
			return waited, false
		}
		if last.After(since) {
			return waited, true
		}
		waited = true
		select {
		case <-done:
		case <-deadline.C:
			return true, false
		}
	}
}

// finalScrape holds run's exit for a scrape that sees the shutdown NACKs
// counted since the previous one, for at most wait, and logs what happened.
func finalScrape(s *scrapeTracker, lastNack time.Time, wait time.Duration, log *slog.Logger) {
	if lastNack.IsZero() || wait <= 0 {
		return
	}
	start := time.Now()
	waited, seen := s.awaitScrapeAfter(lastNack, wait)
	switch {
	case seen:
		// Said even when a scrape came before the exit was held (waited
		// 0): the on-call reader, and the tests, look for this line.
		log.Info("final /metrics scrape served after the shutdown NACKs", "waited", time.Since(start).Round(time.Millisecond))
	case !waited:
		return // never scraped: nothing was held
	default:
		log.Warn("no /metrics scrape came after the shutdown NACKs; exiting without it (raise --metrics-final-scrape-wait above the scrape interval)",
			"waited", time.Since(start).Round(time.Millisecond))
	}
}
