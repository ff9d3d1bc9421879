package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// ---- limits: fleet-wide caps against the same jobs unlimited ----
//
// One sidecar (Python SDK over stdio) whose bench jobs all name one limit
// group, beside the same sidecar without it:
//   - keys: no-op jobs spread over -limits-keys keys with `concurrency: 2`
//     each, drained in the same rounds as the unlimited row (jobs/s and
//     Postgres CPU per job);
//   - backlog: one key with a backlog at its cap (long sleeps hold its two
//     slots): one claim timed at 1,000 rows queued and at -limits-backlog,
//     then the pickup latency of another key's jobs against the unlimited
//     row's;
//   - rate: `rate: N/1s` on the scope: jobs/s sustained, and the most
//     claims in any one-second window, from the sidecar's own claim log
//     (and the handler starts, which follow the claims by a varying delay).

const limitsGroup = "bench-limited"

// limitsResult is the section's figures.
type limitsResult struct {
	Keys   int `json:"keys"`
	N      int `json:"jobs_per_run"`
	Rounds int `json:"rounds"`

	Unlimited []tpRun `json:"unlimited_runs"`
	Limited   []tpRun `json:"limited_runs"`
	// Medians over the rounds.
	UnlimitedJobsPerS float64 `json:"unlimited_jobs_per_s,omitempty"`
	LimitedJobsPerS   float64 `json:"limited_jobs_per_s,omitempty"`
	UnlimitedPG10k    float64 `json:"unlimited_postgres_cpu_s_per_10k,omitempty"`
	LimitedPG10k      float64 `json:"limited_postgres_cpu_s_per_10k,omitempty"`

	Backlog        int     `json:"backlog"`
	ClaimMS1k      float64 `json:"claim_ms_at_1000,omitempty"`
	ClaimMSBacklog float64 `json:"claim_ms_at_backlog,omitempty"`
	PickupP99      float64 `json:"pickup_p99_ms_beside_backlog,omitempty"`
	PickupP50      float64 `json:"pickup_p50_ms_beside_backlog,omitempty"`
	UnlimitedP99   float64 `json:"unlimited_pickup_p99_ms,omitempty"`
	UnlimitedP50   float64 `json:"unlimited_pickup_p50_ms,omitempty"`
	BacklogError   string  `json:"backlog_error,omitempty"`

	RateN         int     `json:"rate_per_s"`
	RateJobs      int     `json:"rate_jobs"`
	RateJobsPerS  float64 `json:"rate_jobs_per_s,omitempty"`
	RateMaxPerSec int     `json:"rate_most_claims_in_1s,omitempty"`
	RateMaxStarts int     `json:"rate_most_starts_in_1s,omitempty"`
	RateClaims    int     `json:"rate_claims,omitempty"`
	RateError     string  `json:"rate_error,omitempty"`
}

// limitedVariant is the Python stdio sidecar with every bench job in one
// limit group of caps (the group's fields, as the manifest writes them).
func limitedVariant(caps string) variant {
	v := sidecarVariant("python", "stdio")
	v.Key += "-limited"
	v.Label += ", limited (" + caps + ")"
	v.limitGroup = caps
	return v
}

func (b *bench) limitsSection(ctx context.Context) error {
	c := b.c
	r := &limitsResult{Keys: c.limitsKeys, N: c.limitsN, Rounds: c.limitsRuns, Backlog: c.limitsBacklog, RateN: c.limitsRate, RateJobs: c.limitsRateJobs}
	b.rep.Limits = r
	// The sections after this one measure a database without limits.
	defer func() {
		if err := b.db.dropLimitIndexes(context.WithoutCancel(ctx)); err != nil {
			logf("limits: %v", err)
		}
	}()
	free := sidecarVariant("python", "stdio")
	capped := limitedVariant(fmt.Sprintf("concurrency: 2, key: args.k over %d keys", c.limitsKeys))
	capped.limitGroup = "concurrency: 2, key: args.k"

	// (a, c) Alternate: each round starts with the other row.
	for round := range c.limitsRuns {
		rows := []variant{free, capped}
		if round%2 == 1 {
			rows = []variant{capped, free}
		}
		for _, v := range rows {
			run, err := b.limitsDrain(ctx, v, round)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			run.Round = round + 1
			if err != nil {
				run.Error = err.Error()
				logf("limits %s round %d: %v", v.Key, round+1, err)
			} else {
				logf("limits %s round %d: %.0f jobs/s (%.2fs), Postgres %.2f CPU-s", v.Key, round+1, run.JobsPerS, run.Seconds, run.PostgresCPU)
			}
			if v.limitGroup == "" {
				r.Unlimited = append(r.Unlimited, run)
			} else {
				r.Limited = append(r.Limited, run)
			}
		}
	}
	r.UnlimitedJobsPerS, r.UnlimitedPG10k = tpMedians(r.Unlimited, c.limitsN)
	r.LimitedJobsPerS, r.LimitedPG10k = tpMedians(r.Limited, c.limitsN)

	// (d) The rate cap.
	if err := b.limitsRate(ctx, r); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		r.RateError = err.Error()
		logf("limits rate: %v", err)
	}

	// (b) A big capped backlog.
	if c.limitsBacklog > 0 {
		if err := b.limitsBacklog(ctx, r, capped); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			r.BacklogError = err.Error()
			logf("limits backlog: %v", err)
		}
	}
	return nil
}

// tpMedians are the median jobs/s and Postgres CPU-s per 10,000 jobs of the
// runs that did not fail.
func tpMedians(runs []tpRun, n int) (jobsPerS, pg10k float64) {
	var js, pg []float64
	for _, r := range runs {
		if r.Error == "" {
			js = append(js, r.JobsPerS)
			pg = append(pg, r.PostgresCPU/float64(n)*10000)
		}
	}
	if len(js) == 0 {
		return 0, 0 // no drain ran (-limits-runs 0): NaN would not encode
	}
	return median(js), median(pg)
}

// limitsDrain drains c.limitsN no-op jobs spread over c.limitsKeys keys
// (args.k), visible at once, with the variant's sidecar.
func (b *bench) limitsDrain(ctx context.Context, v variant, round int) (tpRun, error) {
	c := b.c
	var run tpRun
	if err := b.db.reset(ctx, true); err != nil {
		return run, err
	}
	ws, err := b.startVariant(ctx, v, fmt.Sprintf("limits-%s-%d", v.Key, round), nil)
	if err != nil {
		return run, err
	}
	defer ws.stop()
	own0, ch0 := ws.cpu()
	if err := b.enqueueKeyed(ctx, "bench.noop", c.limitsN, c.limitsKeys, nil); err != nil {
		return run, err
	}
	t0 := time.Now()
	pg0 := b.db.serverCPU()
	if err := b.db.waitDrained(ctx, ws, min(max(c.remaining(), 2*time.Minute), 5*time.Minute)); err != nil {
		return run, err
	}
	own1, ch1 := ws.cpu()
	run.PostgresCPU = b.db.serverCPU() - pg0
	run.SidecarCPU, run.HandlerCPU = own1-own0, ch1-ch0
	ws.stop()
	return b.finishRun(ctx, run, t0, c.limitsN)
}

// enqueueKeyed inserts n queued jobs of name whose args.k is one of keys
// values in turn (keys 0: no k), with extra args, in one transaction.
func (b *bench) enqueueKeyed(ctx context.Context, name string, n, keys int, extra map[string]any) error {
	a, err := json.Marshal(extra)
	if err != nil {
		return err
	}
	if extra == nil {
		a = []byte("{}")
	}
	tx, err := b.db.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `INSERT INTO soniq_jobs
	(id, job_name, args, status, attempts, max_attempts, priority, queue, unique_job, scheduled_at)
	SELECT gen_random_uuid(), $1,
		CASE WHEN $4::int > 0 THEN $2::text::jsonb || jsonb_build_object('k', 'key-' || (g % $4)) ELSE $2::text::jsonb END,
		'queued', 0, 3, 100, 'default', false, NULL
	FROM generate_series(1, $3) g`, name, string(a), n, keys); err != nil {
		return fmt.Errorf("keyed enqueue of %d %s jobs: %w", n, name, err)
	}
	if _, err := tx.Exec(ctx, `SELECT pg_notify('soniq_new_job', 'default')`); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// limitsRate drains c.limitsRateJobs latency jobs under `rate: N/1s`.
func (b *bench) limitsRate(ctx context.Context, r *limitsResult) error {
	c := b.c
	if err := b.db.reset(ctx, true); err != nil {
		return err
	}
	v := limitedVariant(fmt.Sprintf("rate: %d/1s", c.limitsRate))
	ws, err := b.startVariant(ctx, v, "limits-rate", nil)
	if err != nil {
		return err
	}
	defer ws.stop()
	// Every claim of a rate-capped key is logged in the sidecar's
	// soniq_sidecar_limit_claims at its statement's time, and pruned as the
	// window moves on: a trigger keeps a copy of each for the count.
	for _, q := range []string{
		`CREATE TABLE IF NOT EXISTS bench_limit_claims (claimed_at timestamptz NOT NULL)`,
		`TRUNCATE bench_limit_claims`,
		`CREATE OR REPLACE FUNCTION bench_copy_limit_claim() RETURNS trigger LANGUAGE plpgsql AS
		$$BEGIN INSERT INTO bench_limit_claims VALUES (NEW.claimed_at); RETURN NULL; END$$`,
		`CREATE OR REPLACE TRIGGER bench_copy_limit_claim AFTER INSERT ON soniq_sidecar_limit_claims
		FOR EACH ROW EXECUTE FUNCTION bench_copy_limit_claim()`,
	} {
		if _, err := b.db.pool.Exec(ctx, q); err != nil {
			return fmt.Errorf("the claim log's copy: %w", err)
		}
	}
	defer func() {
		_, _ = b.db.pool.Exec(context.WithoutCancel(ctx), `DROP TRIGGER IF EXISTS bench_copy_limit_claim ON soniq_sidecar_limit_claims`)
	}()
	if err := b.enqueueKeyed(ctx, "bench.latency", c.limitsRateJobs, 0, map[string]any{"t_us": 0}); err != nil {
		return err
	}
	t0 := time.Now()
	bound := time.Duration(float64(c.limitsRateJobs)/float64(c.limitsRate)*3)*time.Second + time.Minute
	if err := b.db.waitDrained(ctx, ws, bound); err != nil {
		return err
	}
	ws.stop()
	starts, err := b.starts(ctx)
	if err != nil {
		return err
	}
	if len(starts) != c.limitsRateJobs {
		return fmt.Errorf("%d of %d rate-capped jobs done", len(starts), c.limitsRateJobs)
	}
	last, _, err := b.db.lastDone(ctx)
	if err != nil {
		return err
	}
	r.RateJobsPerS = float64(c.limitsRateJobs) / last.Sub(t0).Seconds()
	r.RateMaxStarts = mostInWindow(starts, int64(time.Second/time.Microsecond))
	var claims []int64
	rows, err := b.db.pool.Query(ctx, `SELECT (extract(epoch FROM claimed_at) * 1e6)::int8 FROM bench_limit_claims ORDER BY 1`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var us int64
		if err := rows.Scan(&us); err != nil {
			rows.Close()
			return err
		}
		claims = append(claims, us)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if len(claims) < c.limitsRateJobs {
		return fmt.Errorf("%d claims logged for %d rate-capped jobs", len(claims), c.limitsRateJobs)
	}
	r.RateClaims = len(claims)
	r.RateMaxPerSec = mostInWindow(claims, int64(time.Second/time.Microsecond))
	logf("limits rate %d/1s: %.0f jobs/s, at most %d claims in a second (%d handler starts)", c.limitsRate, r.RateJobsPerS, r.RateMaxPerSec, r.RateMaxStarts)
	return nil
}

// starts are the handler start times (µs) of the done bench.latency jobs,
// sorted.
func (b *bench) starts(ctx context.Context) ([]int64, error) {
	rows, err := b.db.pool.Query(ctx, `SELECT COALESCE(result::text, 'null') FROM soniq_jobs WHERE job_name = 'bench.latency' AND status = 'done'`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var res string
		if err := rows.Scan(&res); err != nil {
			return nil, err
		}
		s, err := startedUS(res)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out, rows.Err()
}

// mostInWindow is the most of the sorted times that fall in any window
// [t, t+width): a sliding window, not buckets.
func mostInWindow(sorted []int64, width int64) int {
	most, i := 0, 0
	for j := range sorted {
		for sorted[j]-sorted[i] >= width {
			i++
		}
		most = max(most, j-i+1)
	}
	return most
}

// limitsBacklog holds one key at its cap (two long sleeps running) with a
// backlog queued behind it, times one claim at 1,000 queued and at the
// full backlog, then measures the pickup latency of another key's jobs
// beside it, and the unlimited row's without it.
func (b *bench) limitsBacklog(ctx context.Context, r *limitsResult, v variant) error {
	c := b.c
	if err := b.db.reset(ctx, true); err != nil {
		return err
	}
	big := map[string]any{"k": "big", "seconds": 3600}
	first := min(1000, c.limitsBacklog)
	if err := b.db.enqueueBulk(ctx, "bench.sleep", big, first); err != nil {
		return err
	}
	// The sleeps are cancelled 1 s into the stop, not waited for.
	ws, err := b.startVariant(ctx, v, "limits-backlog", []string{"SONIQ_SHUTDOWN_TIMEOUT=1"})
	if err != nil {
		return err
	}
	defer ws.stop()
	if err := b.waitProcessing(ctx, 2, 30*time.Second); err != nil {
		return err
	}
	be, workerID, err := openRegistered(ctx, c.dbURL, "limits-claimer", 64)
	if err != nil {
		return err
	}
	defer be.Close()
	lim := backends.ClaimLimit{Scope: limitsGroup, Names: []string{"bench.noop", "bench.latency", "bench.sleep"}, Key: []string{"k"}, Concurrency: 2}
	timeClaims := func() (float64, error) {
		var ms []float64
		for range 300 {
			t := time.Now()
			jobs, err := be.Claim(ctx, backends.ClaimParams{WorkerID: workerID, Names: lim.Names, Limit: 64, Limits: []backends.ClaimLimit{lim}})
			if err != nil {
				return 0, fmt.Errorf("timed claim: %w", err)
			}
			if len(jobs) > 0 {
				return 0, fmt.Errorf("a timed claim took %d rows of a key at its cap", len(jobs))
			}
			ms = append(ms, float64(time.Since(t).Microseconds())/1000)
		}
		return median(ms), nil
	}
	if r.ClaimMS1k, err = timeClaims(); err != nil {
		return err
	}
	if c.limitsBacklog > first {
		if err := b.db.enqueueBulk(ctx, "bench.sleep", big, c.limitsBacklog-first); err != nil {
			return err
		}
		if _, err := b.db.pool.Exec(ctx, `ANALYZE soniq_jobs`); err != nil {
			return err
		}
	}
	if r.ClaimMSBacklog, err = timeClaims(); err != nil {
		return err
	}
	logf("limits backlog: one claim %.2f ms at %d queued, %.2f ms at %d", r.ClaimMS1k, first, r.ClaimMSBacklog, c.limitsBacklog)

	// Another key's jobs (the key null: no args.k) beside the backlog.
	n := int(float64(c.latRate) * c.latSecs)
	if err := b.produceLatency(ctx, c.latRate, n); err != nil {
		return err
	}
	if err := b.waitDone(ctx, "bench.latency", n, 60*time.Second); err != nil {
		return err
	}
	lats, err := b.latencies(ctx)
	if err != nil {
		return err
	}
	slices.Sort(lats)
	r.PickupP50, r.PickupP99 = pct(lats, 50), pct(lats, 99)
	ws.stop()

	free, err := b.latencyRun(ctx, sidecarVariant("python", "stdio"), 0, nil)
	if err != nil {
		return fmt.Errorf("the unlimited row's pickup: %w", err)
	}
	r.UnlimitedP50, r.UnlimitedP99 = free.P50, free.P99
	logf("limits backlog: pickup p99 %.1f ms beside it, %.1f ms unlimited", r.PickupP99, r.UnlimitedP99)
	return nil
}

// waitProcessing waits until n rows are processing.
func (b *bench) waitProcessing(ctx context.Context, n int, timeout time.Duration) error {
	end := time.Now().Add(timeout)
	for {
		var got int
		if err := b.db.pool.QueryRow(ctx, `SELECT count(*) FROM soniq_jobs WHERE status = 'processing'`).Scan(&got); err != nil {
			return err
		}
		if got >= n {
			return nil
		}
		if time.Now().After(end) {
			return fmt.Errorf("%d of %d rows processing after %s", got, n, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (r *report) writeLimits(w func(string, ...any)) {
	l := r.Limits
	if l == nil {
		return
	}
	ratio := func(a, b float64) string {
		if b <= 0 || a <= 0 {
			return "—"
		}
		return fmt.Sprintf("%.2f×", a/b)
	}
	runs := func(rs []tpRun) string {
		var out []string
		for _, x := range rs {
			if x.Error != "" {
				out = append(out, "failed: "+lastLine(x.Error))
				continue
			}
			out = append(out, f0(x.JobsPerS))
		}
		return strings.Join(out, ", ")
	}
	w("## 1e. Fleet-wide limits (Python SDK, stdio)\n\n")
	w("The same sidecar with every bench job in one limit group ([limits.md](limits.md)) and without it, in the same rounds.\n\n")
	w("**Many keys at their cap.** %d no-op jobs over %d keys (`args.k`), `concurrency: 2` each, visible at once; %d rounds alternating the rows.\n\n", l.N, l.Keys, l.Rounds)
	w("| row | jobs/s (median) | runs (jobs/s) | Postgres CPU-s per 10,000 jobs |\n| --- | --- | --- | --- |\n")
	w("| unlimited | **%s** | %s | %s |\n", f0(l.UnlimitedJobsPerS), runs(l.Unlimited), f2(l.UnlimitedPG10k))
	w("| limited | **%s** | %s | %s |\n", f0(l.LimitedJobsPerS), runs(l.Limited), f2(l.LimitedPG10k))
	w("| limited ÷ unlimited | %s | | %s |\n\n", ratio(l.LimitedJobsPerS, l.UnlimitedJobsPerS), ratio(l.LimitedPG10k, l.UnlimitedPG10k))
	if l.Backlog > 0 {
		w("**A capped backlog.** One key holds its 2 slots (long sleeps) with %d rows queued behind it. One claim by the driver (the\n", l.Backlog)
		w("sidecar's statements, 64 free slots, the key at its cap: it claims nothing), median of 300: ")
		if l.BacklogError != "" {
			w("failed: %s\n\n", lastLine(l.BacklogError))
		} else {
			w("**%.2f ms** at 1,000 queued, **%.2f ms** at %d (%s).\n", l.ClaimMS1k, l.ClaimMSBacklog, l.Backlog, ratio(l.ClaimMSBacklog, l.ClaimMS1k))
			w("Pickup latency of another key's jobs beside it (%d jobs/s for %.1f s): p50 %.2f ms, p99 **%.2f ms**; the unlimited sidecar's\n", r.Params.LatencyRate, r.Params.LatencySeconds, l.PickupP50, l.PickupP99)
			w("without a backlog: p50 %.2f ms, p99 **%.2f ms** (%s).\n\n", l.UnlimitedP50, l.UnlimitedP99, ratio(l.PickupP99, l.UnlimitedP99))
		}
	}
	w("**A rate cap.** `rate: %d/1s` on the scope, %d jobs queued at once: ", l.RateN, l.RateJobs)
	if l.RateError != "" {
		w("failed: %s\n\n", lastLine(l.RateError))
	} else {
		w("**%s jobs/s** sustained; the most claims in any one-second window (sliding, from the claim log: %d claims), **%d**\n", f0(l.RateJobsPerS), l.RateClaims, l.RateMaxPerSec)
		w("(the most handler starts in any one-second window: %d; a start follows its claim by a varying delay).\n\n", l.RateMaxStarts)
	}
}
