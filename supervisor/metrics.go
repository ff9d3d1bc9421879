package supervisor

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/internal/scheduler"
)

// Metrics holds the supervisor's instruments. It uses the OpenTelemetry
// metric API only; cmd/soniq-sidecar configures the SDK and exporters.
// The four job instruments keep the names Soniq's Prometheus sink uses, so
// existing dashboards work. A nil *Metrics records nothing.
type Metrics struct {
	duration    metric.Float64Histogram
	nacks       metric.Int64Counter
	restarts    metric.Int64Counter
	processes   metric.Int64UpDownCounter
	shutdownSt  metric.Int64Gauge
	claimed     metric.Int64Counter
	resultDrops metric.Int64Counter
	cancelled   metric.Int64Counter
	sharing     metric.Int64Gauge
	fleet       metric.Int64Gauge
	claimIdx    metric.Int64Gauge
	pickup      metric.Float64Histogram
	staleWkrs   metric.Int64Counter
	staleJobs   metric.Int64Counter
	auditFreed  metric.Int64Counter
	returned    metric.Int64Counter
	claimRowsH  metric.Int64Histogram
	reserved    metric.Int64Gauge
	reserveCap  metric.Int64Gauge
	reserveWait metric.Float64Histogram
	limitHeld   metric.Int64UpDownCounter
	limitDefer  metric.Int64Counter
	attach      attachMetrics
	schedules   *scheduler.Metrics
	enqueued    metric.Int64Counter

	// lastNack is when the latest shutdown NACK was counted (unix ns; 0:
	// none), so that run can hold its exit for a scrape that sees it.
	lastNack atomic.Int64

	// queueStats is the last queue-stats snapshot, observed by the
	// soniq_queue_jobs gauge at collection time.
	queueStats atomic.Pointer[backends.Stats]
	// pool reads the backend's connection pool at collection time; nil
	// for a backend without one.
	pool atomic.Pointer[backends.PoolStater]

	// attrSets caches attribute sets by their label values: building one
	// per job showed up in profiles (make bench).
	attrSets sync.Map // attrKey → *labelSet

	// The per-job counts (jobs started, in progress and completed, and
	// each handler's running jobs) are kept here and observed when the
	// metrics are collected. An OTel Add per job and instrument (four or
	// five a job) cost about a tenth of the sidecar's CPU at full load;
	// a map lookup under this lock costs a small part of one.
	jobMu     sync.Mutex
	jobCounts map[attrKey]*jobCount // by queue and job name
	jobEnds   map[attrKey]*int64    // completions, by queue, job name and status
	busy      map[string]*int64     // running jobs, by handler
}

// jobCount is one job name's (and queue's) started and running jobs.
type jobCount struct{ started, inProgress int64 }

type attrKey struct{ queue, name, status string }

// labelSet is one combination of label values, built once: the option an
// observer takes, and the one-option slice a histogram's Record takes. A
// single option passed to Record is a slice made on the heap at every
// call (the instrument is an interface): at full load the three records
// of every job were a fifth of the sidecar's allocations.
type labelSet struct {
	opt    metric.MeasurementOption
	record []metric.RecordOption
}

// labels caches the set kv under k (its callers looked k up first) and
// returns what the cache holds for k.
func (m *Metrics) labels(k attrKey, kv ...attribute.KeyValue) *labelSet {
	opt := metric.WithAttributeSet(attribute.NewSet(kv...))
	l, _ := m.attrSets.LoadOrStore(k, &labelSet{opt: opt, record: []metric.RecordOption{opt}})
	return l.(*labelSet)
}

// attrs returns the cached attribute set {queue, job_name[, status]}.
func (m *Metrics) attrs(queue, name, status string) *labelSet {
	k := attrKey{queue, name, status}
	if l, ok := m.attrSets.Load(k); ok {
		return l.(*labelSet)
	}
	kv := []attribute.KeyValue{attribute.String("queue", queue), attribute.String("job_name", name)}
	if status != "" {
		kv = append(kv, attribute.String("status", status))
	}
	return m.labels(k, kv...)
}

// handlerAttrs returns the cached attribute set {handler}.
func (m *Metrics) handlerAttrs(handler string) *labelSet {
	k := attrKey{status: "\x00handler", name: handler} // no status has that name
	if l, ok := m.attrSets.Load(k); ok {
		return l.(*labelSet)
	}
	return m.labels(k, attribute.String("handler", handler))
}

// NewMetrics creates the instruments on a meter.
func NewMetrics(m metric.Meter) (*Metrics, error) {
	var (
		x   Metrics
		err error
	)
	mk := func(f func() error) {
		if err == nil {
			err = f()
		}
	}
	mk(func() error { return x.initJobCounts(m) })
	mk(func() (e error) {
		x.duration, e = m.Float64Histogram("soniq_job_duration", metric.WithUnit("s"),
			metric.WithDescription("Job execution time in the handler."),
			metric.WithExplicitBucketBoundaries(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300))
		return
	})
	mk(func() (e error) {
		x.nacks, e = m.Int64Counter("soniq_shutdown_nack", metric.WithDescription("Jobs NACKed back to queued on the FORCE_TIMEOUT_PATH async branch."))
		return
	})
	mk(func() (e error) {
		x.restarts, e = m.Int64Counter("soniq_handler_restarts", metric.WithDescription("Handler process restarts, by reason."))
		return
	})
	mk(func() (e error) {
		x.processes, e = m.Int64UpDownCounter("soniq_handler_processes", metric.WithDescription("Handler processes by state."))
		return
	})
	mk(func() (e error) {
		x.shutdownSt, e = m.Int64Gauge("soniq_shutdown_state", metric.WithDescription("0 RUNNING, 1 DRAINING, 2 FORCE_TIMEOUT_PATH, 3 WAIT_FOR_THREAD, 4 STOPPED."))
		return
	})
	mk(func() (e error) {
		x.claimed, e = m.Int64Counter("soniq_jobs_claimed", metric.WithDescription("Rows claimed from the database."))
		return
	})
	mk(func() (e error) {
		x.resultDrops, e = m.Int64Counter("soniq_late_results_discarded", metric.WithDescription("Results for jobs the sidecar no longer held (after a timeout or NACK)."))
		return
	})
	mk(func() (e error) {
		x.cancelled, e = m.Int64Counter("soniq_jobs_cancelled", metric.WithDescription("Jobs this sidecar cancelled, by reason: user (soniq-sidecar cancel: the row ends cancelled), job_timeout, shutdown_timeout."))
		return
	})
	mk(func() (e error) {
		x.sharing, e = m.Int64Gauge("soniq_foreign_workers_sharing_queues",
			metric.WithDescription("Live workers that are not sidecars (Soniq's own) claiming from a queue this sidecar serves: they take its jobs and dead-letter them as job_not_found."))
		return
	})
	mk(func() (e error) {
		x.fleet, e = m.Int64Gauge("soniq_fleet_sidecars",
			metric.WithDescription("Live sidecars sharing a queue with this one, this one included: reserves and result batches are sized for them."))
		return
	})
	mk(func() (e error) {
		x.claimIdx, e = m.Int64Gauge("soniq_claim_index_missing",
			metric.WithDescription("1 while the Postgres claim-order index is missing (every claim then sorts every queued row; `soniq-sidecar migrate` creates it), else 0."))
		return
	})
	mk(func() (e error) {
		x.pickup, e = m.Float64Histogram("soniq_job_pickup_delay", metric.WithUnit("s"),
			metric.WithDescription("Time a job was due before a sidecar claimed it: the claim's updated_at minus the later of created_at and scheduled_at, all on the database's clock."),
			metric.WithExplicitBucketBoundaries(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300))
		return
	})
	mk(func() (e error) {
		x.staleWkrs, e = m.Int64Counter("soniq_stale_workers_recovered",
			metric.WithDescription("Workers (sidecars or Soniq's own) found silent for longer than the heartbeat timeout and marked stopped by this sidecar's maintenance pass."))
		return
	})
	mk(func() (e error) {
		x.staleJobs, e = m.Int64Counter("soniq_stale_jobs_requeued",
			metric.WithDescription("Jobs those silent workers held in processing, put back to queued by this sidecar's maintenance pass (they run again)."))
		return
	})
	mk(func() error {
		g, e := m.Int64ObservableGauge("soniq_queue_jobs", metric.WithDescription("Jobs by status from the queue-stats contract, refreshed every 15 s."))
		if e != nil {
			return e
		}
		_, e = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
			st := x.queueStats.Load()
			if st == nil {
				return nil
			}
			values := [...]int64{st.Total, st.Queued, st.Processing, st.Done, st.DeadLetter, st.Cancelled}
			for i, k := range backends.StatsKeys {
				o.ObserveInt64(g, values[i], metric.WithAttributes(attribute.String("status", k)))
			}
			return nil
		}, g)
		return e
	})
	mk(func() error {
		conns, e := m.Int64ObservableGauge("soniq_db_pool_connections",
			metric.WithDescription("The sidecar's database connection pool: connections in use and its maximum (pool_max_conns)."))
		if e != nil {
			return e
		}
		waits, e := m.Int64ObservableCounter("soniq_db_pool_waits",
			metric.WithDescription("Database connection acquires that found the pool exhausted and had to wait."))
		if e != nil {
			return e
		}
		waitTime, e := m.Float64ObservableCounter("soniq_db_pool_wait",
			metric.WithUnit("s"),
			metric.WithDescription("Time those acquires spent waiting for a free connection, summed."))
		if e != nil {
			return e
		}
		inUse := metric.WithAttributes(attribute.String("state", "in_use"))
		maxConns := metric.WithAttributes(attribute.String("state", "max"))
		_, e = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
			p := x.pool.Load()
			if p == nil {
				return nil
			}
			st := (*p).PoolStats()
			o.ObserveInt64(conns, int64(st.InUse), inUse)
			o.ObserveInt64(conns, int64(st.Max), maxConns)
			o.ObserveInt64(waits, st.Waited)
			o.ObserveFloat64(waitTime, st.WaitedFor.Seconds())
			return nil
		}, conns, waits, waitTime)
		return e
	})
	mk(func() (e error) {
		x.auditFreed, e = m.Int64Counter("soniq_audit_released",
			metric.WithDescription("Jobs the self-audit found processing under this worker without the sidecar running them, and gave back to queued."))
		return
	})
	mk(func() (e error) {
		x.limitHeld, e = m.Int64UpDownCounter("soniq_limit_running_jobs",
			metric.WithDescription("Jobs of a limited scope this sidecar holds (running, or claimed and waiting for a slot), by scope; summed over the sidecars, what the scope's concurrency cap counts."))
		return
	})
	mk(func() (e error) {
		x.limitDefer, e = m.Int64Counter("soniq_limit_deferred",
			metric.WithDescription("Keys of a limited scope whose runnable rows a claim left queued because of a cap, by scope and limit (concurrency or rate); an unkeyed scope is one key."))
		return
	})
	mk(func() (e error) {
		x.returned, e = m.Int64Counter("soniq_jobs_returned",
			metric.WithDescription("Claimed rows given back to queued unstarted, their attempt refunded, by reason: draining, no_process (the handler has no ready process), waited (longer than the reserve's bound), shutdown (a claim that returned after FORCE_TIMEOUT_PATH), lost_reply (a claim's reply was lost after it took them)."))
		return
	})
	mk(func() (e error) {
		x.claimRowsH, e = m.Int64Histogram("soniq_claim_rows",
			metric.WithDescription("Rows each claim statement took, per handler: free slots plus the reserve's top-up."),
			metric.WithExplicitBucketBoundaries(0, 1, 2, 5, 10, 25, 50, 100, 200, 500, 1000))
		return
	})
	mk(func() (e error) {
		x.reserved, e = m.Int64Gauge("soniq_claim_reserve_jobs",
			metric.WithDescription("Claimed jobs waiting in a handler's reserve for a free slot (claim-ahead), processing under this worker."))
		return
	})
	mk(func() (e error) {
		x.reserveCap, e = m.Int64Gauge("soniq_claim_reserve_target_jobs",
			metric.WithDescription("The size a handler's reserve is kept at: its completion rate times claim_ahead, at most claim_ahead_max, 0 without a ready process."))
		return
	})
	mk(func() (e error) {
		x.reserveWait, e = m.Float64Histogram("soniq_claim_reserve_wait", metric.WithUnit("s"),
			metric.WithDescription("Time a claimed job waited in its handler's reserve before it was handed to a process."),
			metric.WithExplicitBucketBoundaries(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
		return
	})
	mk(func() error { return x.initAttach(m) })
	mk(func() (e error) { x.schedules, e = scheduler.NewMetrics(m); return })
	mk(func() (e error) {
		x.enqueued, e = m.Int64Counter("soniq_jobs_enqueued",
			metric.WithDescription("Jobs this sidecar enqueued, by source: child (written for a handler's ctx.enqueue: with its parent's done, or at once; a dedup or unique hit included) and schedule (fired for a due recurring schedule)."))
		return
	})
	if err != nil {
		return nil, fmt.Errorf("creating supervisor metrics: %w", err)
	}
	// Unlabelled counters are exported at 0 from the start, so that the
	// first recovery is an increase a rate() or increase() can see.
	x.staleWkrs.Add(context.Background(), 0)
	x.staleJobs.Add(context.Background(), 0)
	x.auditFreed.Add(context.Background(), 0)
	for _, source := range enqueueSources {
		x.enqueued.Add(context.Background(), 0, metric.WithAttributes(attribute.String("source", source)))
	}
	for _, reason := range returnReasons {
		x.returned.Add(context.Background(), 0, metric.WithAttributes(attribute.String("reason", reason)))
	}
	return &x, nil
}

// initJobCounts creates the instruments observed from the per-job counts.
func (x *Metrics) initJobCounts(m metric.Meter) error {
	x.jobCounts, x.jobEnds, x.busy = map[attrKey]*jobCount{}, map[attrKey]*int64{}, map[string]*int64{}
	started, err := m.Int64ObservableCounter("soniq_jobs_started", metric.WithDescription("Jobs handed to a handler process."))
	if err != nil {
		return err
	}
	completed, err := m.Int64ObservableCounter("soniq_jobs_completed", metric.WithDescription("Job executions ended, by status: done, failed, timeout, crashed, suspected, snoozed, nacked."))
	if err != nil {
		return err
	}
	inProgress, err := m.Int64ObservableUpDownCounter("soniq_jobs_in_progress", metric.WithDescription("Jobs running in handler processes now."))
	if err != nil {
		return err
	}
	handlerBusy, err := m.Int64ObservableUpDownCounter("soniq_handler_jobs_in_progress", metric.WithDescription("Jobs running in a handler's processes now, per handler (the sum of soniq_jobs_in_progress over its jobs)."))
	if err != nil {
		return err
	}
	_, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		x.jobMu.Lock()
		defer x.jobMu.Unlock()
		for k, c := range x.jobCounts {
			a := x.attrs(k.queue, k.name, "").opt
			o.ObserveInt64(started, c.started, a)
			o.ObserveInt64(inProgress, c.inProgress, a)
		}
		for k, n := range x.jobEnds {
			o.ObserveInt64(completed, *n, x.attrs(k.queue, k.name, k.status).opt)
		}
		for h, n := range x.busy {
			o.ObserveInt64(handlerBusy, *n, x.handlerAttrs(h).opt)
		}
		return nil
	}, started, completed, inProgress, handlerBusy)
	return err
}

// observePool makes the pool metrics read b's pool, when it has one.
func (m *Metrics) observePool(b backends.Backend) {
	if m == nil {
		return
	}
	if p, ok := b.(backends.PoolStater); ok {
		m.pool.Store(&p)
	}
}

// jobStarted records a job handed to one of its handler's processes.
func (m *Metrics) jobStarted(t *task) {
	if m == nil {
		return
	}
	m.jobMu.Lock()
	c := m.jobCounts[attrKey{queue: t.job.Queue, name: t.job.Name}]
	if c == nil {
		c = &jobCount{}
		m.jobCounts[attrKey{queue: t.job.Queue, name: t.job.Name}] = c
	}
	c.started++
	c.inProgress++
	m.handlerBusyAdd(t.pool.h.Name, 1)
	m.jobMu.Unlock()
}

// handlerBusyAdd adds d to handler's running jobs; jobMu is held.
func (m *Metrics) handlerBusyAdd(handler string, d int64) {
	n := m.busy[handler]
	if n == nil {
		n = new(int64)
		m.busy[handler] = n
	}
	*n += d
}

// jobEnded records the end of a started execution as the handler reported
// it (or as a timeout, crash or NACK decided it).
func (m *Metrics) jobEnded(t *task, status string) {
	if m == nil {
		return
	}
	queue, name := t.job.Queue, t.job.Name
	m.jobMu.Lock()
	c := m.jobCounts[attrKey{queue: queue, name: name}]
	if c == nil { // ended without a start here: counts as it did before
		c = &jobCount{}
		m.jobCounts[attrKey{queue: queue, name: name}] = c
	}
	c.inProgress--
	m.handlerBusyAdd(t.pool.h.Name, -1)
	k := attrKey{queue, name, status}
	n := m.jobEnds[k]
	if n == nil {
		n = new(int64)
		m.jobEnds[k] = n
	}
	*n++
	m.jobMu.Unlock()
	m.duration.Record(context.Background(), time.Since(t.startedAt).Seconds(), m.attrs(queue, name, status).record...)
}

func (m *Metrics) shutdownNack(queue, name, reason string) {
	if m == nil {
		return
	}
	m.lastNack.Store(time.Now().UnixNano())
	m.nacks.Add(context.Background(), 1, metric.WithAttributes(
		attribute.String("job_name", name), attribute.String("queue", queue), attribute.String("reason", reason)))
}

// LastShutdownNack is when the latest shutdown NACK was counted; zero when
// there was none.
func (m *Metrics) LastShutdownNack() time.Time {
	if m == nil {
		return time.Time{}
	}
	if ns := m.lastNack.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// jobsClaimed records each claimed row's pickup delay: how long it had been
// due (created, or scheduled for) when the claim took it. Every timestamp
// comes from the row, so the database's clock alone decides.
func (m *Metrics) jobsClaimed(jobs []backends.Job) {
	if m == nil || len(jobs) == 0 {
		return
	}
	ctx := context.Background()
	m.claimed.Add(ctx, int64(len(jobs)))
	for i := range jobs {
		j := &jobs[i]
		due := j.CreatedAt
		if j.ScheduledAt != nil && j.ScheduledAt.After(due) {
			due = *j.ScheduledAt
		}
		m.pickup.Record(ctx, max(j.UpdatedAt.Sub(due), 0).Seconds(), m.attrs(j.Queue, j.Name, "").record...)
	}
}

// claimRows records how many rows one claim of handler took.
func (m *Metrics) claimRows(handler string, n int) {
	if m == nil {
		return
	}
	m.claimRowsH.Record(context.Background(), int64(n), m.handlerAttrs(handler).record...)
}

// reserveSize records a handler's reserve and its target.
func (m *Metrics) reserveSize(handler string, held, target int) {
	if m == nil {
		return
	}
	a := m.handlerAttrs(handler).record
	m.reserved.Record(context.Background(), int64(held), a...)
	m.reserveCap.Record(context.Background(), int64(target), a...)
}

// reserveWaited records how long a job waited in its pool's reserve.
func (m *Metrics) reserveWaited(handler string, d time.Duration) {
	if m == nil {
		return
	}
	m.reserveWait.Record(context.Background(), d.Seconds(), m.handlerAttrs(handler).record...)
}

// returnReasons are why claimed rows go back unstarted
// (soniq_jobs_returned_total{reason}), each exported at 0 from the start.
var returnReasons = [...]string{"draining", "no_process", "waited", "shutdown", "lost_reply"}

// jobsReturned counts claimed rows given back unstarted.
func (m *Metrics) jobsReturned(reason string, n int) {
	if m == nil || n <= 0 {
		return
	}
	m.returned.Add(context.Background(), int64(n), metric.WithAttributes(attribute.String("reason", reason)))
}

// limitRunning moves a scope's count of jobs held here.
func (m *Metrics) limitRunning(scope string, delta int) {
	if m == nil || delta == 0 {
		return
	}
	m.limitHeld.Add(context.Background(), int64(delta), metric.WithAttributes(attribute.String("scope", scope)))
}

// limitDeclared exports a scope's series at 0 from the start, so a
// dashboard and an alert see the scope before its first deferral.
func (m *Metrics) limitDeclared(scope string, concurrency, rate bool) {
	if m == nil {
		return
	}
	ctx := context.Background()
	m.limitHeld.Add(ctx, 0, metric.WithAttributes(attribute.String("scope", scope)))
	for limit, on := range map[string]bool{"concurrency": concurrency, "rate": rate} {
		if on {
			m.limitDefer.Add(ctx, 0, metric.WithAttributes(attribute.String("scope", scope), attribute.String("limit", limit)))
		}
	}
}

// limitDeferred counts the keys a claim's caps held back. Called on a
// claim goroutine: the instruments are safe for that.
func (m *Metrics) limitDeferred(ds []backends.Deferral) {
	if m == nil {
		return
	}
	for _, d := range ds {
		m.limitDefer.Add(context.Background(), int64(d.Keys),
			metric.WithAttributes(attribute.String("scope", d.Scope), attribute.String("limit", d.Limit)))
	}
}

// auditReleased counts orphaned rows the self-audit gave back.
func (m *Metrics) auditReleased(n int) {
	if m == nil || n <= 0 {
		return
	}
	m.auditFreed.Add(context.Background(), int64(n))
}

// staleRecovered records a maintenance pass that recovered silent workers.
func (m *Metrics) staleRecovered(workers, jobs int) {
	if m == nil {
		return
	}
	ctx := context.Background()
	if workers > 0 {
		m.staleWkrs.Add(ctx, int64(workers))
	}
	if jobs > 0 {
		m.staleJobs.Add(ctx, int64(jobs))
	}
}

func (m *Metrics) restart(handler, reason string) {
	if m == nil {
		return
	}
	m.restarts.Add(context.Background(), 1, metric.WithAttributes(attribute.String("handler", handler), attribute.String("reason", reason)))
}

func (m *Metrics) processState(handler string, from, to procState, first bool) {
	if m == nil {
		return
	}
	ctx := context.Background()
	if !first {
		m.processes.Add(ctx, -1, metric.WithAttributes(attribute.String("handler", handler), attribute.String("state", from.String())))
	}
	if to != procDead {
		m.processes.Add(ctx, 1, metric.WithAttributes(attribute.String("handler", handler), attribute.String("state", to.String())))
	}
}

func (m *Metrics) state(s State) {
	if m == nil {
		return
	}
	m.shutdownSt.Record(context.Background(), int64(s))
}

func (m *Metrics) setQueueStats(st backends.Stats) {
	if m == nil {
		return
	}
	m.queueStats.Store(&st)
}

func (m *Metrics) foreignWorkers(n int) {
	if m == nil {
		return
	}
	m.sharing.Record(context.Background(), int64(n))
}

func (m *Metrics) fleetSize(n int) {
	if m == nil {
		return
	}
	m.fleet.Record(context.Background(), int64(n))
}

func (m *Metrics) claimIndex(missing bool) {
	if m == nil {
		return
	}
	v := int64(0)
	if missing {
		v = 1
	}
	m.claimIdx.Record(context.Background(), v)
}

func (m *Metrics) lateResult(name, reason string) {
	if m == nil {
		return
	}
	m.resultDrops.Add(context.Background(), 1, metric.WithAttributes(attribute.String("job_name", name), attribute.String("reason", reason)))
}

// scheduleMetrics are the scheduler's counters (nil records nothing).
func (m *Metrics) scheduleMetrics() *scheduler.Metrics {
	if m == nil {
		return nil
	}
	return m.schedules
}

// enqueueSources are the source labels of soniq_jobs_enqueued_total.
var enqueueSources = [...]string{"child", "schedule"}

// jobsEnqueued counts n jobs enqueued by source (enqueueSources).
func (m *Metrics) jobsEnqueued(source string, n int) {
	if m == nil || n <= 0 {
		return
	}
	m.enqueued.Add(context.Background(), int64(n), metric.WithAttributes(attribute.String("source", source)))
}
