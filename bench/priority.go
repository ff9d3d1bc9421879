package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/backends/postgres"
)

// ---- 3b: a high-priority job behind a full reserve ----
//
// One sidecar drains a backlog of fast low-priority no-op jobs, kept
// topped up so its reserve stays full; meanwhile a producer enqueues
// high-priority jobs one at a time at a steady interval. Each one's start
// delay is the handler's start minus the producer's clock before the
// INSERT (as the pickup-latency rows). With claim_ahead the job waits for
// the reserve's rows claimed before it; with claim_ahead 0 only for the
// next claim.

// Priorities of the two kinds of job: lower runs first.
const (
	prioBacklog = 100 // Soniq's default, as enqueueBulk writes
	prioUrgent  = 1
)

type prioRun struct {
	Round int     `json:"round"`
	N     int     `json:"n"`
	P50   float64 `json:"p50_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`
	// Reserved is the median of the sidecar's reserve (its
	// soniq_claim_reserve_jobs gauge) as each high-priority job was
	// enqueued: the claimed rows waiting for a slot ahead of it.
	Reserved float64 `json:"median_reserved"`
	// Target is the median of the size the reserve was kept at
	// (soniq_claim_reserve_target_jobs) at the same moments.
	Target float64 `json:"median_reserve_target"`
	// Dry counts the high-priority jobs enqueued while no low-priority
	// job was queued (nothing ahead of them to measure).
	Dry   int    `json:"enqueued_with_backlog_empty,omitempty"`
	Error string `json:"error,omitempty"`
}

type prioResult struct {
	variant
	Status   string    `json:"status,omitempty"`
	Runs     []prioRun `json:"runs"`
	P50      float64   `json:"median_p50_ms,omitempty"`
	P99      float64   `json:"median_p99_ms,omitempty"`
	Reserved float64   `json:"median_reserved,omitempty"`
	Target   float64   `json:"median_reserve_target,omitempty"`
}

func (b *bench) prioritySection(ctx context.Context) error {
	c := b.c
	var active []*prioResult
	for _, v := range []variant{sidecarVariant("python", "stdio"), ahead0(sidecarVariant("python", "stdio"))} {
		if !c.want(v.Key) {
			continue
		}
		r := &prioResult{variant: v}
		b.rep.Priority = append(b.rep.Priority, r)
		active = append(active, r)
	}
	for round := range c.prioRuns {
		for i := range active {
			r := active[(i+round)%len(active)]
			run, err := b.priorityRun(ctx, r.variant, round)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err != nil {
				run.Error = err.Error()
				logf("priority %s round %d: %v", r.Key, round+1, err)
			} else {
				logf("priority %s round %d: start delay p50 %.2f p99 %.2f ms (n=%d, reserve %.0f of target %.0f)", r.Key, round+1, run.P50, run.P99, run.N, run.Reserved, run.Target)
			}
			run.Round = round + 1
			r.Runs = append(r.Runs, run)
		}
	}
	for _, r := range active {
		var p50, p99, held, target []float64
		for _, run := range r.Runs {
			if run.Error == "" {
				p50, p99, held, target = append(p50, run.P50), append(p99, run.P99), append(held, run.Reserved), append(target, run.Target)
			}
		}
		if len(p50) == 0 {
			r.Status = "failed: see the runs' errors"
			continue
		}
		r.P50, r.P99, r.Reserved, r.Target = median(p50), median(p99), median(held), median(target)
	}
	return nil
}

func (b *bench) priorityRun(ctx context.Context, v variant, round int) (prioRun, error) {
	c := b.c
	var run prioRun
	err := b.db.reset(ctx, true)
	if err != nil {
		return run, err
	}
	if v.metricsAddr, err = freeAddr(); err != nil {
		return run, err
	}
	ws, err := b.startVariant(ctx, v, fmt.Sprintf("prio-%s-%d", v.Key, round), nil)
	if err != nil {
		return run, err
	}
	defer ws.stop()
	if err := b.db.enqueueBulk(ctx, "bench.noop", map[string]any{}, c.prioBacklog); err != nil {
		return run, err
	}
	// The backlog is topped up by half whenever half of it is gone, until
	// the last high-priority job is enqueued.
	fctx, cancelFill := context.WithCancel(ctx)
	filled := make(chan error, 1)
	go func() { filled <- b.keepBacklog(fctx, c.prioBacklog) }()
	var fillErr error
	fillStopped := false
	stopFill := func() error {
		if !fillStopped {
			fillStopped = true
			cancelFill()
			fillErr = <-filled
		}
		return fillErr
	}
	defer stopFill()
	// The sidecar is busy (its reserve full) once it has finished a first
	// batch of the backlog.
	if err := b.waitDone(ctx, "bench.noop", min(c.prioBacklog/4, 2*c.conc), 30*time.Second); err != nil {
		return run, err
	}

	prod, err := postgres.Open(ctx, c.dbURL)
	if err != nil {
		return run, err
	}
	defer prod.Close()
	if err := prod.Ping(ctx); err != nil {
		return run, err
	}
	prio := prioUrgent
	var held, target []float64
	begin := time.Now()
	for i := range c.prioJobs {
		if d := time.Until(begin.Add(time.Duration(i) * c.prioInterval)); d > 0 {
			time.Sleep(d)
		}
		queued, err := b.backlogQueued(ctx)
		if err != nil {
			return run, err
		}
		if !queued {
			run.Dry++
		}
		gauges, err := scrapeGauges(ctx, v.metricsAddr, "soniq_claim_reserve_jobs", "soniq_claim_reserve_target_jobs")
		if err != nil {
			return run, err
		}
		held, target = append(held, gauges[0]), append(target, gauges[1])
		args, _ := json.Marshal(map[string]int64{"t_us": time.Now().UnixMicro()})
		if _, err := prod.Enqueue(ctx, backends.EnqueueParams{Name: "bench.latency", Args: args, Priority: &prio}); err != nil {
			return run, fmt.Errorf("enqueue high-priority job %d: %w", i+1, err)
		}
	}
	if err := stopFill(); err != nil {
		return run, err
	}
	// The rest of the backlog is not needed: what is still queued goes,
	// what the sidecar holds runs out.
	if _, err := b.db.pool.Exec(ctx, `DELETE FROM soniq_jobs WHERE status = 'queued' AND job_name = 'bench.noop'`); err != nil {
		return run, fmt.Errorf("delete the rest of the backlog: %w", err)
	}
	if err := b.db.waitDrained(ctx, ws, time.Minute); err != nil {
		return run, err
	}
	if run.Dry*10 > c.prioJobs {
		return run, fmt.Errorf("the low-priority backlog was empty when %d of %d high-priority jobs were enqueued: raise -prio-backlog", run.Dry, c.prioJobs)
	}
	lats, err := b.latencies(ctx)
	if err != nil {
		return run, err
	}
	if len(lats) != c.prioJobs {
		return run, fmt.Errorf("%d of %d high-priority jobs done", len(lats), c.prioJobs)
	}
	slices.Sort(lats)
	run.N = len(lats)
	run.P50, run.P99, run.Max = pct(lats, 50), pct(lats, 99), lats[len(lats)-1]
	run.Reserved, run.Target = median(held), median(target)
	return run, nil
}

// keepBacklog adds level/2 low-priority jobs whenever fewer than level/2
// are queued, until ctx ends (then it returns nil).
func (b *bench) keepBacklog(ctx context.Context, level int) error {
	half := max(level/2, 1)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(50 * time.Millisecond):
		}
		// Counted up to half only: a full count of the backlog this
		// often would be a load of its own.
		var queued int
		err := b.db.pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM soniq_jobs
	WHERE status = 'queued' AND job_name = 'bench.noop' LIMIT $1) q`, half).Scan(&queued)
		if err == nil && queued < half {
			err = b.db.enqueueBulk(ctx, "bench.noop", map[string]any{}, half)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("top up the low-priority backlog: %w", err)
		}
	}
}

// backlogQueued says whether a low-priority job is queued.
func (b *bench) backlogQueued(ctx context.Context) (bool, error) {
	var queued bool
	err := b.db.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM soniq_jobs WHERE status = 'queued' AND job_name = 'bench.noop')`).Scan(&queued)
	return queued, err
}

// freeAddr is a loopback address with a port free just now.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port for /metrics: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// scrapeGauges sums each named metric's samples (every label set) in the
// sidecar's /metrics at addr; a metric not exported yet (a gauge never
// set: claim_ahead 0 has no reserve) reads 0.
func scrapeGauges(ctx context.Context, addr string, names ...string) ([]float64, error) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("read the reserve's gauges from /metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("read the reserve's gauges from /metrics: %s", resp.Status)
	}
	sums := make([]float64, len(names))
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		for i, name := range names {
			rest, ok := strings.CutPrefix(line, name)
			if !ok || rest == "" || (rest[0] != '{' && rest[0] != ' ') {
				continue
			}
			f := strings.Fields(rest[strings.LastIndex(rest, "}")+1:])
			if len(f) == 0 {
				continue
			}
			x, err := strconv.ParseFloat(f[0], 64)
			if err != nil {
				return nil, fmt.Errorf("/metrics: %q: %w", line, err)
			}
			sums[i] += x
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read the reserve's gauges from /metrics: %w", err)
	}
	return sums, nil
}

// waitDone waits until n jobs named name are done.
func (b *bench) waitDone(ctx context.Context, name string, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var done int
		if err := b.db.pool.QueryRow(ctx, `SELECT count(*) FROM soniq_jobs WHERE job_name = $1 AND status = 'done'`, name).Scan(&done); err != nil {
			return err
		}
		if done >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d %s jobs done after %s", done, n, name, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}
