package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/backends/postgres"
	"github.com/soniq-dev/soniq-sidecar/internal/completer"
	"github.com/soniq-dev/soniq-sidecar/internal/maintenance"
	"github.com/soniq-dev/soniq-sidecar/internal/reserve"
)

// ---- 6c: a simulated fleet against one Postgres ----
//
// N in-process sidecars share one database and a fixed total rate, split
// evenly. Each runs the real backend's claim (carrying its waiting
// results, as the supervisor's claimer does), the real result writer
// (internal/completer) and return, and sizes its reserve with the
// supervisor's own policy (internal/reserve), told the fleet's size as
// the supervisor learns it from the workers table. No handler runs: a
// started job "ends" after its service time, which gives each sidecar its
// share of the total rate. Postgres' CPU per job and the rows per claim
// are read over a window once every sidecar's rate has been measured.

// fleetPoint is one fleet size.
type fleetPoint struct {
	Sidecars       int     `json:"sidecars"`
	SlotsEach      int     `json:"slots_each"`
	RateEach       float64 `json:"target_jobs_per_s_each"`
	Jobs           int64   `json:"jobs"` // completed in the window
	Seconds        float64 `json:"seconds"`
	JobsPerS       float64 `json:"jobs_per_s"`
	PostgresCPU10k float64 `json:"postgres_cpu_s_per_10k"`
	Claims         int64   `json:"claims"`
	RowsPerClaim   float64 `json:"rows_per_claim"`
	Writes         int64   `json:"result_writes"` // statements of the writer, claims that carried results not counted
	Returned       int64   `json:"returned"`
	FailedClaims   int64   `json:"failed_claims,omitempty"`
	// Runs are the rounds' Postgres CPU-s per 10,000 jobs (the figure
	// above is their median; the counts are their sums).
	Runs   []float64 `json:"runs_postgres_cpu_s_per_10k,omitempty"`
	Errors []string  `json:"errors,omitempty"`
	Error  string    `json:"error,omitempty"`
}

// fleetResult is the section: the curve and its parameters.
type fleetResult struct {
	Rate    int           `json:"total_jobs_per_s"`
	Budget  int           `json:"slots_total"`
	Window  float64       `json:"window_s"`
	Warmup  float64       `json:"warmup_s"`
	Ahead   string        `json:"claim_ahead"`
	Rounds  int           `json:"rounds"`
	Unaware bool          `json:"fleet_size_withheld,omitempty"`
	Points  []*fleetPoint `json:"points"`
	Machine string        `json:"loadavg_before"`
}

// fleetKind is the kind the sidecar's worker rows name (backends.MetaKind).
const fleetKind = "soniq-sidecar"

// fleetAhead and fleetAheadMax are the sidecar's defaults.
const (
	fleetAhead    = 100 * time.Millisecond
	fleetAheadMax = 500
)

func (b *bench) fleetSection(ctx context.Context) error {
	c := b.c
	res := &fleetResult{Rate: c.fleetRate, Budget: c.conc, Window: c.fleetWindow.Seconds(), Warmup: c.fleetWarmup.Seconds(),
		Ahead: fleetAhead.String(), Rounds: c.fleetRounds, Unaware: c.fleetUnaware, Machine: loadNow("fleet").Load}
	b.rep.Fleet = res
	// Rounds alternate the order of the sizes, so a change of the
	// machine's load does not fall on the large fleets alone.
	runs := map[int][]*fleetPoint{}
	for round := range c.fleetRounds {
		sizes := slices.Clone(c.fleetSizes)
		if round%2 == 1 {
			slices.Reverse(sizes)
		}
		for _, n := range sizes {
			if c.remaining() < c.fleetWarmup+c.fleetWindow+4*time.Second {
				b.rep.Notes = append(b.rep.Notes, fmt.Sprintf("fleet: round %d stopped before %d simulated sidecars: the %s bound was near", round+1, n, c.budget))
				break
			}
			p, err := b.fleetRun(ctx, n)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err != nil {
				p.Error = err.Error()
				logf("fleet %d round %d: %v", n, round+1, err)
			} else {
				logf("fleet %d round %d: %.0f jobs/s, Postgres %.2f CPU-s per 10,000 jobs, %.1f rows per claim, %d result writes, %d returned, %d failed claims",
					n, round+1, p.JobsPerS, p.PostgresCPU10k, p.RowsPerClaim, p.Writes, p.Returned, p.FailedClaims)
			}
			runs[n] = append(runs[n], p)
		}
	}
	for _, n := range c.fleetSizes {
		if len(runs[n]) > 0 {
			res.Points = append(res.Points, combineFleet(runs[n]))
		}
	}
	return nil
}

// combineFleet is one size over its rounds: Postgres' CPU per job is the
// median of the rounds', the counts are their sums, the rate their mean.
func combineFleet(ps []*fleetPoint) *fleetPoint {
	out := &fleetPoint{Sidecars: ps[0].Sidecars, SlotsEach: ps[0].SlotsEach, RateEach: ps[0].RateEach}
	var cpus []float64
	var rows float64
	for _, p := range ps {
		if p.Error != "" {
			out.Errors = append(out.Errors, p.Error)
			continue
		}
		cpus = append(cpus, p.PostgresCPU10k)
		out.Runs = append(out.Runs, p.PostgresCPU10k)
		out.Jobs += p.Jobs
		out.Seconds += p.Seconds
		out.Claims += p.Claims
		out.Writes += p.Writes
		out.Returned += p.Returned
		out.FailedClaims += p.FailedClaims
		rows += p.RowsPerClaim * float64(p.Claims)
	}
	if len(cpus) == 0 {
		out.Error = ps[len(ps)-1].Error
		return out
	}
	out.PostgresCPU10k = median(cpus)
	out.JobsPerS = float64(out.Jobs) / out.Seconds
	out.RowsPerClaim = rows / float64(max(out.Claims, 1))
	return out
}

// countingBackend counts the writer's statements.
type countingBackend struct {
	*postgres.Backend
	writes, returned *atomic.Int64
}

func (cb countingBackend) Complete(ctx context.Context, workerID string, cs []backends.Completion) ([]string, error) {
	cb.writes.Add(1)
	return cb.Backend.Complete(ctx, workerID, cs)
}

func (cb countingBackend) ReturnJobs(ctx context.Context, workerID string, held []backends.Job) ([]string, error) {
	out, err := cb.Backend.ReturnJobs(ctx, workerID, held)
	cb.returned.Add(int64(len(out)))
	return out, err
}

// fleetCounters are the fleet's totals, read at the window's edges.
type fleetCounters struct {
	done, claims, rows, writes, returned, failed atomic.Int64
}

func (b *bench) fleetRun(ctx context.Context, n int) (*fleetPoint, error) {
	c := b.c
	slots := max(1, c.conc/n)
	rate := float64(c.fleetRate) / float64(n)
	p := &fleetPoint{Sidecars: n, SlotsEach: slots, RateEach: rate}
	if err := b.db.reset(ctx, true); err != nil {
		return p, err
	}
	if _, err := b.db.pool.Exec(ctx, `DELETE FROM soniq_workers`); err != nil {
		return p, fmt.Errorf("clear the worker rows: %w", err)
	}
	// Enough queued for the whole run with a margin: the queue stays deep.
	backlog := int(float64(c.fleetRate)*(c.fleetWarmup+c.fleetWindow).Seconds()*1.4) + 64*n
	for left := backlog; left > 0; left -= 100000 {
		if err := b.db.enqueueBulk(ctx, "bench.noop", map[string]any{}, min(left, 100000)); err != nil {
			return p, err
		}
	}
	if _, err := b.db.pool.Exec(ctx, `ANALYZE soniq_jobs`); err != nil {
		return p, err
	}
	// One connection pool per sidecar, as N processes would have; small,
	// as a sidecar uses about two connections (its claims, its writes).
	url := c.dbURL + sep(c.dbURL) + "pool_max_conns=2"
	var cnt fleetCounters
	sims := make([]*simSidecar, n)
	defer func() {
		for _, s := range sims {
			if s != nil {
				s.be.Close()
			}
		}
	}()
	for i := range sims {
		be, err := postgres.Open(ctx, url)
		if err != nil {
			return p, err
		}
		s := &simSidecar{be: be, wid: backends.NewID(), slots: slots, svc: time.Duration(float64(slots) / rate * float64(time.Second)),
			sizing: reserve.New(fleetAhead, fleetAheadMax), cnt: &cnt}
		sims[i] = s
		meta, _ := json.Marshal(map[string]string{backends.MetaKind: fleetKind})
		if err := be.RegisterWorker(ctx, backends.Worker{ID: s.wid, Hostname: fmt.Sprintf("bench-fleet-%d", i), PID: os.Getpid(), Concurrency: slots, Version: "bench", Metadata: meta}); err != nil {
			return p, err
		}
		s.w = completer.New(completer.Config{Backend: countingBackend{Backend: be, writes: &cnt.writes, returned: &cnt.returned}, WorkerID: s.wid,
			LingerBatch: (slots + 3) / 4})
	}
	// Every sidecar knows the fleet's size as the supervisor's fleet
	// watcher would read it: the live sidecar rows.
	live, err := sims[0].be.LiveWorkers(ctx, time.Minute)
	if err != nil {
		return p, err
	}
	size := maintenance.FleetSize(live, sims[0].wid, fleetKind, nil)
	if size != n {
		return p, fmt.Errorf("the workers table shows a fleet of %d sidecars, not %d", size, n)
	}
	if c.fleetUnaware {
		size = 1 // each sidecar alone, as before reserves knew the fleet
	}
	for _, s := range sims {
		s.sizing.SetFleet(size)
		s.sizing.SetSlots(s.slots)
		s.w.SetFleet(size)
	}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for _, s := range sims {
		s.w.Start()
		wg.Go(func() {
			if err := s.run(runCtx); err != nil && !errors.Is(err, context.Canceled) {
				errs <- err
				stop()
			}
		})
	}
	finish := func() {
		stop()
		wg.Wait()
		for _, s := range sims {
			s.w.Stop()
		}
	}
	select {
	case <-runCtx.Done():
	case <-time.After(c.fleetWarmup):
	}
	d0, c0, r0, w0, ret0, f0 := cnt.done.Load(), cnt.claims.Load(), cnt.rows.Load(), cnt.writes.Load(), cnt.returned.Load(), cnt.failed.Load()
	pg0, t0 := b.db.serverCPU(), time.Now()
	select {
	case <-runCtx.Done():
	case <-time.After(c.fleetWindow):
	}
	pg1, secs := b.db.serverCPU(), time.Since(t0).Seconds()
	d1, c1, r1, w1, ret1, f1 := cnt.done.Load(), cnt.claims.Load(), cnt.rows.Load(), cnt.writes.Load(), cnt.returned.Load(), cnt.failed.Load()
	finish()
	select {
	case err := <-errs:
		return p, err
	default:
	}
	if ctx.Err() != nil {
		return p, ctx.Err()
	}
	p.Jobs, p.Seconds, p.Claims, p.Writes, p.Returned, p.FailedClaims = d1-d0, secs, c1-c0, w1-w0, ret1-ret0, f1-f0
	if p.Jobs == 0 || p.Claims == 0 {
		return p, fmt.Errorf("%d jobs and %d claims in the window", p.Jobs, p.Claims)
	}
	p.JobsPerS = float64(p.Jobs) / secs
	p.PostgresCPU10k = (pg1 - pg0) * 10000 / float64(p.Jobs)
	p.RowsPerClaim = float64(r1-r0) / float64(p.Claims)
	return p, nil
}

// sep is the separator before another parameter of url.
func sep(url string) string {
	for _, ch := range url {
		if ch == '?' {
			return "&"
		}
	}
	return "?"
}

// simSidecar is one simulated sidecar: one pool of slots, its reserve,
// its writer.
type simSidecar struct {
	be     *postgres.Backend
	wid    string
	w      *completer.Completer
	sizing reserve.Sizing
	slots  int
	svc    time.Duration // a job's mean run time: slots / the sidecar's rate
	cnt    *fleetCounters

	running []simJob // in the order they end (start keeps it so)
	pending []simJob // claimed, waiting for a slot (claim order)
	// full: the last claim got every row it asked for; idleUntil: the
	// last claim found the queue empty, the next waits for a poll.
	full      bool
	heldSince time.Time
	idleUntil time.Time
}

type simJob struct {
	job backends.Job
	at  time.Time // queued at (pending), ends at (running)
}

// fleetPoll is the poll interval after a claim that found nothing.
const fleetPoll = 100 * time.Millisecond

// run is the sidecar's loop until ctx ends: end the jobs whose time has
// come, give back reserved rows that waited too long, start what slots
// allow, claim when the free slots and the reserve call for it.
func (s *simSidecar) run(ctx context.Context) error {
	for {
		now := time.Now()
		for len(s.running) > 0 && !s.running[0].at.After(now) {
			j := s.running[0].job
			s.running = s.running[1:]
			s.w.Complete(backends.Completion{JobID: j.ID, Attempts: j.Attempts, Outcome: backends.OutcomeDone, ResultTTL: 300 * time.Second})
			s.sizing.Completed(now)
			s.cnt.done.Add(1)
		}
		if s.sizing.On() && len(s.pending) > 0 {
			bound := s.sizing.WaitBound()
			keep := s.pending[:0]
			for _, t := range s.pending {
				if now.Sub(t.at) >= bound {
					s.w.Return(t.job)
					continue
				}
				keep = append(keep, t)
			}
			s.pending = keep
		}
		for len(s.running) < s.slots && len(s.pending) > 0 {
			s.start(s.pending[0].job, now)
			s.pending = s.pending[1:]
		}
		if err := s.maybeClaim(ctx, now); err != nil {
			return err
		}
		next := now.Add(fleetPoll)
		if len(s.running) > 0 {
			next = s.running[0].at
		}
		if h := s.heldSince.Add(5 * time.Millisecond); !s.heldSince.IsZero() && h.Before(next) {
			next = h
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Until(next)):
		}
	}
}

// start runs j in a slot from now. Run times spread evenly from half to
// one and a half times the mean, as real jobs' do: the same run time for
// every job would end jobs started together together, and hand the
// writer bursts no handler produces.
func (s *simSidecar) start(j backends.Job, now time.Time) {
	end := now.Add(time.Duration(float64(s.svc) * (0.5 + rand.Float64())))
	i, _ := slices.BinarySearchFunc(s.running, end, func(r simJob, at time.Time) int { return r.at.Compare(at) })
	s.running = slices.Insert(s.running, i, simJob{job: j, at: end})
}

// maybeClaim claims as the supervisor's maybeClaim does for one pool: the
// free slots not covered by pending rows, plus the reserve's top-up.
func (s *simSidecar) maybeClaim(ctx context.Context, now time.Time) error {
	if now.Before(s.idleUntil) {
		return nil
	}
	unfilled := s.slots - len(s.running) - len(s.pending)
	ahead := s.sizing.TopUp(now, max(-unfilled, 0), true)
	free := max(unfilled, 0)
	if free+ahead <= 0 {
		return nil
	}
	// The supervisor's hold (holdClaim): after a full claim, freed slots
	// wait for a quarter of the budget, at most 5 ms, when no reserve is
	// due.
	if ahead == 0 && s.full && free*4 < s.slots {
		if s.heldSince.IsZero() {
			s.heldSince = now
		}
		if now.Sub(s.heldSince) < 5*time.Millisecond {
			return nil
		}
	}
	s.heldSince = time.Time{}
	p := backends.ClaimParams{WorkerID: s.wid, Names: []string{"bench.noop"}, Limit: free, Ahead: ahead}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var jobs []backends.Job
	var err error
	if cs := s.w.Lend(500); len(cs) > 0 {
		var applied []string
		var failed error
		applied, jobs, err, failed = s.be.CompleteAndClaim(cctx, s.wid, cs, p)
		s.w.Lent(cs, applied, failed == nil)
		if failed != nil {
			err = failed
		}
	} else {
		jobs, err = s.be.Claim(cctx, p)
	}
	if err != nil {
		// As the supervisor: a failed claim (a deadlock with another
		// sidecar's write, which Postgres breaks) is tried again later.
		// It took nothing: its transaction rolled back.
		s.cnt.failed.Add(1)
		s.idleUntil = now.Add(fleetPoll)
		return nil
	}
	s.cnt.claims.Add(1)
	s.cnt.rows.Add(int64(len(jobs)))
	s.full = len(jobs) == free+ahead
	s.sizing.Claimed(free+ahead, len(jobs))
	if len(jobs) == 0 {
		s.idleUntil = now.Add(fleetPoll)
	}
	at := time.Now()
	for _, j := range jobs {
		s.pending = append(s.pending, simJob{job: j, at: at})
	}
	return nil
}

// behind says which of the points ran below 95 % of the fleet's rate: a
// fleet that completes fewer jobs than it was set to (its simulator short
// of CPU, or the database slow) sizes smaller reserves and writes smaller
// batches than the rate asks for, and its ratio is not the rate's.
func (f *fleetResult) behind(ps ...*fleetPoint) string {
	var out []string
	for _, p := range ps {
		if p != nil && p.JobsPerS < 0.95*float64(f.Rate) {
			out = append(out, fmt.Sprintf("the %d-sidecar point ran %.0f of %d jobs/s", p.Sidecars, p.JobsPerS, f.Rate))
		}
	}
	if len(out) == 0 {
		return ""
	}
	return "; " + strings.Join(out, ", ") + ": the simulated fleet fell behind its rate (its simulator short of CPU, or the database slow), so it claimed and wrote in smaller batches than that rate asks for"
}

// fleetRatio is Postgres' CPU per job at the largest fleet measured over
// one sidecar's, NaN when either is missing.
func (f *fleetResult) ratio() (float64, *fleetPoint, *fleetPoint) {
	if f == nil {
		return math.NaN(), nil, nil
	}
	var one, many *fleetPoint
	for _, p := range f.Points {
		if p.Error != "" || !ok(p.PostgresCPU10k) {
			continue
		}
		if p.Sidecars == 1 {
			one = p
		}
		if many == nil || p.Sidecars > many.Sidecars {
			many = p
		}
	}
	if one == nil || many == nil || many == one {
		return math.NaN(), nil, nil
	}
	return many.PostgresCPU10k / one.PostgresCPU10k, many, one
}
