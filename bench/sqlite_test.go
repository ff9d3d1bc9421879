package main

import (
	"context"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/backends/sqlite"
)

// The bench's bulk fill must write rows the sidecar's SQLite backend
// claims as any producer's: UUID ids, Soniq's timestamp format, in order.
func TestSQLiteFillWritesClaimableSoniqRows(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "soniq.db")
	be, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = be.Close() })
	if err := be.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	f, err := openSQLiteFile(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.close)

	const n = 2500
	before := time.Now().Add(-time.Second)
	if err := f.fill(ctx, n); err != nil {
		t.Fatal(err)
	}
	uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	// Soniq's isoformat(): the fraction only when it is not zero.
	stamp := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?\+00:00$`)
	rows, err := f.db.QueryContext(ctx, `SELECT id, created_at FROM soniq_jobs ORDER BY rowid`)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	var prev time.Time
	for rows.Next() {
		var id, created string
		if err := rows.Scan(&id, &created); err != nil {
			t.Fatal(err)
		}
		if !uuid.MatchString(id) || ids[id] {
			t.Fatalf("id %q: not a fresh version-4 UUID", id)
		}
		ids[id] = true
		if !stamp.MatchString(created) {
			t.Fatalf("created_at %q is not in Soniq's format", created)
		}
		ts, err := time.Parse(time.RFC3339Nano, created)
		if err != nil {
			t.Fatal(err)
		}
		if !ts.After(prev) || ts.Before(before) {
			t.Fatalf("created_at %s after %s: want later than the previous row and than the fill's start", ts, prev)
		}
		prev = ts
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(ids) != n {
		t.Fatalf("%d rows, want %d", len(ids), n)
	}

	wid := backends.NewID()
	if err := be.RegisterWorker(ctx, backends.Worker{ID: wid, Hostname: "bench-test", PID: 1, Concurrency: 64, Version: "test"}); err != nil {
		t.Fatal(err)
	}
	jobs, err := be.Claim(ctx, backends.ClaimParams{WorkerID: wid, Names: []string{"bench.noop"}, Limit: 64})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 64 || string(jobs[0].Args) != "{}" || jobs[0].Queue != "default" || jobs[0].MaxAttempts != 3 {
		t.Fatalf("claimed %d jobs, first %+v: want 64 no-op jobs of queue default, 3 attempts", len(jobs), jobs[0])
	}
}

func TestRateOver(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	times := []time.Time{t0, t0.Add(time.Second), t0.Add(2 * time.Second), t0.Add(10 * time.Second)}
	for _, tc := range []struct {
		k       int
		rate    float64
		wantErr bool
	}{{k: 3, rate: 1}, {k: 4, rate: 0.3}, {k: 1, wantErr: true}, {k: 5, wantErr: true}} {
		rate, _, err := rateOver(times, tc.k)
		if (err != nil) != tc.wantErr || (!tc.wantErr && rate != tc.rate) {
			t.Errorf("rateOver(k=%d) = %v, %v; want %v (error %v)", tc.k, rate, err, tc.rate, tc.wantErr)
		}
	}
	if _, _, err := rateOver([]time.Time{t0, t0}, 2); err == nil {
		t.Error("rateOver over one instant: want an error")
	}
}
