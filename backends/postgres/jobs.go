package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// jobColumns selects a soniq_jobs row in the order scanJob expects. A prefix
// ("j.") is inserted where the statement joins other relations.
func jobColumns(p string) string {
	cols := []string{
		"id::text", "job_name", "args", "args_hash", "status", "attempts", "max_attempts",
		"queue", "priority", "unique_job", "dedup_key", "scheduled_at", "expires_at",
		"last_error", "result", "producer_id", "created_at", "updated_at", "worker_id::text",
	}
	for i, c := range cols {
		cols[i] = p + c
	}
	return strings.Join(cols, ", ")
}

// jobColumnsPlain is jobColumns(""), for statements built once.
var jobColumnsPlain = jobColumns("")

// claimedColumns select a row as a claim returns it: jobColumns but for
// its status and worker id, which the claim itself wrote (processing, the
// claiming worker) and newClaimScanner fills in. Two strings fewer, for every
// row claimed, to send and to make.
var claimedColumns = strings.Join(slices.DeleteFunc(strings.Split(jobColumnsPlain, ", "), func(c string) bool {
	return c == "status" || c == "worker_id::text"
}), ", ")

// scanJob reads one row selected with jobColumns. Columns Soniq leaves
// nullable (attempts, queue, ...) read as the schema defaults when NULL.
func scanJob(row pgx.Row) (backends.Job, error) {
	return newJobScanner().scan(row)
}

// jobScanner reads rows selected with jobColumns into one set of
// destinations, so that a claim's rows cost no allocation beyond their
// values: scanning into fresh locals made every one of them escape to the
// heap, for every row.
type jobScanner struct {
	j                           backends.Job
	args, result                []byte
	attempts, maxAttempts, prio pgtype.Int4
	queue                       pgtype.Text
	unique                      pgtype.Bool
	createdAt, updatedAt        pgtype.Timestamptz
	dest                        []any
	// claimedBy: the rows are a claim's, by this worker (newClaimScanner).
	claimedBy *string
}

func newJobScanner() *jobScanner {
	s := &jobScanner{}
	s.dest = []any{&s.j.ID, &s.j.Name, &s.args, &s.j.ArgsHash, &s.j.Status, &s.attempts, &s.maxAttempts,
		&s.queue, &s.prio, &s.unique, &s.j.DedupKey, &s.j.ScheduledAt, &s.j.ExpiresAt,
		&s.j.LastError, &s.result, &s.j.ProducerID, &s.createdAt, &s.updatedAt, &s.j.WorkerID}
	return s
}

// newClaimScanner reads rows selected with claimedColumns by a claim for
// workerID (a uuid, as the claim checked): their status is processing and
// their worker id is workerID as Postgres writes a uuid (lower case),
// shared by the claim's rows.
func newClaimScanner(workerID string) *jobScanner {
	s := newJobScanner()
	s.claimedBy = new(strings.ToLower(workerID))
	// newJobScanner's destinations without the two columns claimedColumns
	// leaves out: one list to keep in the columns' order.
	s.dest = slices.DeleteFunc(s.dest, func(d any) bool { return d == any(&s.j.Status) || d == any(&s.j.WorkerID) })
	return s
}

// scan reads the row. Every destination is reset first: nothing of the
// previous row is reused (the values returned keep their own memory).
func (s *jobScanner) scan(row pgx.Row) (backends.Job, error) {
	s.j, s.args, s.result = backends.Job{}, nil, nil
	if err := row.Scan(s.dest...); err != nil {
		return backends.Job{}, err
	}
	j := s.j
	if s.claimedBy != nil {
		j.Status, j.WorkerID = backends.StatusProcessing, s.claimedBy
	}
	if s.createdAt.InfinityModifier != pgtype.Finite || s.updatedAt.InfinityModifier != pgtype.Finite {
		// What scanning into a time.Time refused, as before.
		return backends.Job{}, fmt.Errorf("job %s: created_at or updated_at is infinite", j.ID)
	}
	j.Args = json.RawMessage(s.args)
	if s.result != nil {
		j.Result = json.RawMessage(s.result)
	}
	j.Attempts = int(orDefault(s.attempts.Int32, s.attempts.Valid, 0))
	j.MaxAttempts = int(orDefault(s.maxAttempts.Int32, s.maxAttempts.Valid, 3))
	j.Priority = int(orDefault(s.prio.Int32, s.prio.Valid, 100))
	j.Queue = orDefault(s.queue.String, s.queue.Valid, "default")
	j.UniqueJob = orDefault(s.unique.Bool, s.unique.Valid, false)
	j.CreatedAt = orDefault(s.createdAt.Time, s.createdAt.Valid, time.Time{})
	j.UpdatedAt = orDefault(s.updatedAt.Time, s.updatedAt.Valid, time.Time{})
	return j, nil
}

// orDefault is v when valid (the column was not NULL), else def.
func orDefault[T any](v T, valid bool, def T) T {
	if !valid {
		return def
	}
	return v
}

func deref[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// Soniq's defaults for a job enqueued with no options.
const (
	defaultQueue       = "default"
	defaultPriority    = 100
	defaultMaxAttempts = 3
)

// Enqueue inserts a queued job as Soniq's create_job does: a dedup_key
// conflict (else a unique_job conflict) turns into a no-op update returning
// the existing row, and pg_notify('soniq_new_job', queue) is sent in the
// same implicit transaction. EnqueueTx (enqueuetx.go) writes the same in a
// transaction of the caller's.
func (b *Backend) Enqueue(ctx context.Context, p backends.EnqueueParams) (backends.Job, error) {
	r, err := newEnqueueRow(p)
	if err != nil {
		return backends.Job{}, err
	}
	jobs, err := sendEnqueue(ctx, b.pool, []enqueueRow{r})
	if r.uniqueClash(err) {
		return b.queuedUnique(ctx, b.pool, r)
	}
	if err != nil {
		return backends.Job{}, b.wrap(err, "enqueue %s on queue %s", r.name, r.queue)
	}
	return jobs[0], nil
}

// enqueueRow is one job's insert as Soniq's create_job writes it: the
// statement, its arguments, and the queue its notification names.
type enqueueRow struct {
	name, queue string
	argsHash    *string
	// bothKeys: a dedup_key and unique_job together (see uniqueClash).
	bothKeys bool
	sql      string
	args     []any
}

// newEnqueueRow checks p and fills in Soniq's defaults.
func newEnqueueRow(p backends.EnqueueParams) (enqueueRow, error) {
	if p.Name == "" {
		return enqueueRow{}, errors.New("enqueue: job name is empty")
	}
	args := p.Args
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	var argsHash *string
	if p.UniqueJob {
		h, err := backends.ArgsHash(args)
		if err != nil {
			return enqueueRow{}, fmt.Errorf("enqueue %s: %w", p.Name, err)
		}
		argsHash = &h
	} else if !isJSONObject(args) {
		return enqueueRow{}, fmt.Errorf("enqueue %s: args must be a JSON object", p.Name)
	}
	queue := p.Queue
	if queue == "" {
		queue = defaultQueue
	}
	priority := defaultPriority
	if p.Priority != nil {
		priority = *p.Priority
	}
	maxAttempts := defaultMaxAttempts
	if p.MaxAttempts != nil {
		maxAttempts = *p.MaxAttempts
	}
	var delaySecs *float64
	if p.Delay > 0 {
		s := p.Delay.Seconds()
		delaySecs = &s
	}
	id := p.ID
	if id == "" {
		id = backends.NewID()
	} else if !isUUID(id) {
		return enqueueRow{}, fmt.Errorf("enqueue %s: id %q is not a uuid", p.Name, id)
	}

	sql := enqueueInsert + enqueueReturning
	switch {
	case p.DedupKey != "":
		sql = enqueueOnDedupKey
	case p.UniqueJob:
		sql = enqueueOnUnique
	}
	return enqueueRow{name: p.Name, queue: queue, argsHash: argsHash, bothKeys: p.DedupKey != "" && p.UniqueJob, sql: sql,
		args: []any{id, p.Name, string(args), argsHash, maxAttempts, priority, queue,
			p.UniqueJob, p.DedupKey, delaySecs, p.ProducerID}}, nil
}

// The insert, and its two conflict rules: a queued row with the same
// dedup_key, else (unique_job) a queued unique row with the same name and
// args_hash, is returned as it is instead of a new one.
const enqueueInsert = `INSERT INTO soniq_jobs
	(id, job_name, args, args_hash, max_attempts, priority, queue, unique_job, dedup_key, scheduled_at, producer_id)
	VALUES ($1, $2, $3::text::jsonb, $4, $5, $6, $7, $8, NULLIF($9, ''),
	        now() + make_interval(secs => $10::float8), NULLIF($11, ''))`

var (
	enqueueReturning  = " RETURNING " + jobColumnsPlain
	enqueueOnDedupKey = enqueueInsert + ` ON CONFLICT (dedup_key) WHERE status = 'queued' AND dedup_key IS NOT NULL
	DO UPDATE SET dedup_key = EXCLUDED.dedup_key` + enqueueReturning
	enqueueOnUnique = enqueueInsert + ` ON CONFLICT (job_name, args_hash) WHERE status = 'queued' AND unique_job = TRUE
	DO UPDATE SET unique_job = EXCLUDED.unique_job` + enqueueReturning
)

// querier is what an enqueue runs on: the pool (each batch its own
// implicit transaction) or a caller's transaction.
type querier interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// sendEnqueue writes rows and then one notification per queue they name,
// in one batch (one round trip) on q, and returns the rows as written.
// Postgres delivers the notifications when the transaction commits.
func sendEnqueue(ctx context.Context, q querier, rows []enqueueRow) ([]backends.Job, error) {
	jobs := make([]backends.Job, len(rows))
	batch := &pgx.Batch{}
	sc := newJobScanner()
	queues := make([]string, 0, 1)
	for i, r := range rows {
		batch.Queue(r.sql, r.args...).QueryRow(func(row pgx.Row) (err error) {
			jobs[i], err = sc.scan(row)
			return err
		})
		if !slices.Contains(queues, r.queue) {
			queues = append(queues, r.queue)
		}
	}
	for _, queue := range queues {
		batch.Queue("SELECT pg_notify($1, $2)", notifyChannel, queue)
	}
	if err := q.SendBatch(ctx, batch).Close(); err != nil {
		return nil, err
	}
	return jobs, nil
}

// uniqueClash reports whether err is the one conflict Soniq's insert does
// not resolve: with both a dedup_key and unique_job set, only the
// dedup_key conflict is handled, and a queued unique twin raises a
// unique violation. The caller returns that queued twin instead, which
// honours the contract.
func (r enqueueRow) uniqueClash(err error) bool {
	var pgErr *pgconn.PgError
	return err != nil && r.bothKeys && errors.As(err, &pgErr) &&
		pgErr.Code == "23505" && pgErr.ConstraintName == "idx_soniq_jobs_unique_queued"
}

// queuedUnique reads the queued unique twin of r (see uniqueClash).
func (b *Backend) queuedUnique(ctx context.Context, q querier, r enqueueRow) (backends.Job, error) {
	row := q.QueryRow(ctx, `SELECT `+jobColumnsPlain+` FROM soniq_jobs
	WHERE job_name = $1 AND args_hash = $2 AND status = 'queued' AND unique_job`, r.name, *r.argsHash)
	job, err := scanJob(row)
	if err != nil {
		return backends.Job{}, b.wrap(err, "read queued unique job %s", r.name)
	}
	return job, nil
}

// Get returns one soniq_jobs row.
func (b *Backend) Get(ctx context.Context, id string) (backends.Job, error) {
	if !isUUID(id) {
		return backends.Job{}, notFound("job", id)
	}
	job, err := scanJob(b.pool.QueryRow(ctx, `SELECT `+jobColumns("")+` FROM soniq_jobs WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return backends.Job{}, notFound("job", id)
	}
	if err != nil {
		return backends.Job{}, b.wrap(err, "get job %s", id)
	}
	return job, nil
}

// Cancel cancels a queued job.
func (b *Backend) Cancel(ctx context.Context, id string) (bool, error) {
	if !isUUID(id) {
		return false, nil
	}
	tag, err := b.pool.Exec(ctx, `UPDATE soniq_jobs SET status = 'cancelled', updated_at = now()
	WHERE id = $1 AND status = 'queued'`, id)
	if err != nil {
		return false, b.wrap(err, "cancel job %s", id)
	}
	return tag.RowsAffected() == 1, nil
}

// Claim locks and takes up to p.Limit runnable rows in one statement.
func (b *Backend) Claim(ctx context.Context, p backends.ClaimParams) ([]backends.Job, error) {
	if err := checkClaim(p); err != nil {
		return nil, err
	}
	// The planner's row estimates for a queue table are often wrong (a
	// table analysed while nearly empty, or just truncated, looks tiny),
	// and then it sorts every queued row instead of walking the
	// claim-order index, and joins the update by hashing the whole table:
	// 10 ms instead of 0.3 ms per claim at 10,000 queued rows. Sorts,
	// bitmap and sequential scans are turned off for this one transaction
	// (set_config local, sent in the same pipeline: no extra round trip, no
	// session state), so the index scan and the primary-key lookups win
	// whenever the index exists; without it the claim still sorts, as it
	// must. JIT goes off too: the penalty those settings add to the cost of
	// the final (unavoidable) sort would otherwise trigger a 0.5 s compile.
	//
	// The claim statement itself proves this worker alive (see
	// backends.Backend.Claim): its first CTE refreshes the heartbeat of an
	// active row and keeps that row locked until the claim commits, so a
	// recovery waits for the claim and then sees a fresh heartbeat, and it
	// takes rows only when that CTE found the row active. Deciding both on
	// the claim's one snapshot matters: under READ COMMITTED each statement
	// has its own, and a re-registration committed between a separate
	// liveness check and the claim once let the claim take rows the check
	// had refused, rows the caller then dropped while the worker lived on.
	// The prelude only reads the row's status, to explain an empty claim.
	jobs, err := b.claim(ctx, p, takesTurn(p))
	if turnTimedOut(err) {
		jobs, err = b.claim(ctx, p, false)
	}
	return jobs, err
}

// claim is Claim's one try, with its turn (turn.go) or without.
func (b *Backend) claim(ctx context.Context, p backends.ClaimParams, turn bool) ([]backends.Job, error) {
	batch := &pgx.Batch{}
	c, err := b.queueClaim(ctx, batch, p, turn)
	if err != nil {
		return nil, err
	}
	c.queueStatement(batch)
	if c.plan != nil {
		b.queueNextWalks(batch, p, *c.plan)
	}
	if err := b.pool.SendBatch(ctx, batch).Close(); err != nil {
		return nil, b.wrap(err, "claim jobs for worker %s", p.WorkerID)
	}
	return c.result()
}

func checkClaim(p backends.ClaimParams) error {
	if p.Limit < 0 || p.Ahead < 0 || p.Limit+p.Ahead <= 0 {
		return fmt.Errorf("claim: limit %d and ahead %d must not be negative and must add up to more than 0", p.Limit, p.Ahead)
	}
	if !isUUID(p.WorkerID) {
		return fmt.Errorf("claim: worker id %q is not a uuid (soniq_jobs.worker_id is uuid)", p.WorkerID)
	}
	return nil
}

// pendingClaim is a claim queued in a batch: its prelude, then (after
// whatever else shares the transaction) its statement; result reads it
// once the batch has run.
type pendingClaim struct {
	p       backends.ClaimParams
	plan    *limitPlan  // a claim with limits (limits.go); nil without
	cursors *keyCursors // where the plan's walks go on from
	status  *string
	jobs    []backends.Job
}

// queueClaim queues p's prelude in batch, with the claim's turn when turn
// is set. A claim with limits first reads which keys it may take from (a
// round trip of its own, limits.go) and queues their locks after the
// prelude (and so after the turn: every claimer takes its locks in that
// order).
func (b *Backend) queueClaim(ctx context.Context, batch *pgx.Batch, p backends.ClaimParams, turn bool) (*pendingClaim, error) {
	c := &pendingClaim{p: p, cursors: &b.cursors}
	if len(p.Limits) > 0 {
		plan, err := b.planLimits(ctx, p)
		if err != nil {
			return nil, err
		}
		c.plan = &plan
	}
	scan := func(row pgx.Row) error { return row.Scan(&c.status) }
	if turn {
		batch.Queue(claimTurnPrelude, p.WorkerID, claimTurnIDs(p.Queues), claimTurnWait, claimTurnSpace).QueryRow(scan)
	} else {
		batch.Queue(claimPrelude, p.WorkerID).QueryRow(scan)
	}
	if c.plan != nil {
		queueLimitLocks(batch, p, *c.plan)
	}
	return c, nil
}

// queueStatement queues the claim itself.
func (c *pendingClaim) queueStatement(batch *pgx.Batch) {
	sql, args := claimStatement(c.p)
	if c.plan != nil {
		sql, args = limitedClaimStatement(c.p, *c.plan)
	}
	batch.Queue(sql, args...).Query(func(rows pgx.Rows) error {
		sc := newClaimScanner(c.p.WorkerID)
		var err error
		c.jobs, err = pgx.AppendRows(make([]backends.Job, 0, c.p.Limit+c.p.Ahead), rows, func(r pgx.CollectableRow) (backends.Job, error) { return sc.scan(r) })
		return err
	})
}

// result is what the claim took, or why it took nothing.
func (c *pendingClaim) result() ([]backends.Job, error) {
	p, status, jobs := c.p, c.status, c.jobs
	if c.plan != nil {
		took := tookByKey(p, jobs)
		c.cursors.advance(p, *c.plan, took)
		c.plan.filled(p, took)
		if p.Report != nil && len(c.plan.deferred) > 0 {
			p.Report(c.plan.deferred)
		}
	}
	// Rows taken are this worker's whatever the prelude saw: the claim's
	// own check passed on the snapshot that took them.
	switch {
	case len(jobs) > 0 || (status != nil && *status == backends.WorkerActive):
		return jobs, nil
	case status == nil:
		return nil, fmt.Errorf("claim jobs for worker %s: %w", p.WorkerID, notFound("worker", p.WorkerID))
	default:
		return nil, fmt.Errorf("claim jobs for worker %s: its status is %q: %w", p.WorkerID, *status, backends.ErrWorkerNotActive)
	}
}

// claimPrelude precedes the claim in its implicit transaction: the planner
// settings (they must be set before the claim is planned) and the worker
// row's status, read only to tell an empty claim's reason.
const claimPrelude = `SELECT (SELECT status FROM soniq_workers WHERE id = $1::uuid)
FROM (SELECT ` + plannerSettings + `) AS settings`

// plannerSettings turns off, for the current transaction only, the plans
// that stale statistics make the planner choose (see Claim). With those
// off the plan no longer depends on the arguments, so it is made once per
// connection and reused (plan_cache_mode): planning the claim's CTEs
// anew at every execution was about half of a small claim's, and of a
// small result write's, cost in the database.
const plannerSettings = plannerSettingsButJoins + `, set_config('enable_hashjoin', 'off', true)`

// plannerSettingsButJoins are plannerSettings but for hash joins, which the
// guarded writes need (writePlannerHints).
const plannerSettingsButJoins = `set_config('enable_sort', 'off', true), set_config('enable_bitmapscan', 'off', true),
	set_config('enable_seqscan', 'off', true), set_config('enable_mergejoin', 'off', true),
	set_config('jit', 'off', true), set_config('plan_cache_mode', 'force_generic_plan', true)`

// claimPlannerHints precedes a claim's statements in their implicit
// transaction when nothing else sets the planner's settings first.
const claimPlannerHints = `SELECT ` + plannerSettings

// writePlannerHints precede the guarded writes (doneStatement and the
// others) in their implicit transaction: the claim's settings with hash
// joins on. Each write reads its rows through the primary key (j.id =
// ANY($1)) and pairs them with its arrays' elements; without a hash join
// the only plans left for that pairing compare every row with every
// element, n² comparisons that made a write of 500 rows cost 2 to 3 times
// one hashed. With the rows read by id, a hash join can never hash the
// whole table, whatever the statistics.
const writePlannerHints = `SELECT ` + plannerSettingsButJoins + `, set_config('enable_hashjoin', 'on', true)`

// hashJoinsOn and hashJoinsOff turn hash joins on for the guarded writes
// after a claim in the same transaction, and off again for what follows.
const (
	hashJoinsOn  = `SELECT set_config('enable_hashjoin', 'on', true)`
	hashJoinsOff = `SELECT set_config('enable_hashjoin', 'off', true)`
)

// claimStatement is the claim for p: the statement and its arguments.
func claimStatement(p backends.ClaimParams) (string, []any) {
	args := make([]any, 2, 5)
	args[0], args[1] = p.WorkerID, p.Limit
	var filters int
	if len(p.Queues) > 0 {
		filters |= claimByQueue
		args = append(args, p.Queues)
	}
	if len(p.Names) > 0 {
		filters |= claimByName
		args = append(args, p.Names)
	}
	if len(p.ExcludeNames) > 0 {
		filters |= claimExcluding
		args = append(args, p.ExcludeNames)
	}
	if p.Ahead > 0 {
		filters |= claimAhead
		args = append(args, p.Ahead)
	}
	return claimStatements[filters], args
}

// The filters a claim may add, as bits of an index into claimStatements.
const (
	claimByQueue = 1 << iota
	claimByName
	claimExcluding
	claimAhead // the last argument is Ahead
)

// claimStatements holds the claim's text for every combination of filters,
// built once rather than per claim.
var claimStatements = func() (sqls [16]string) {
	for f := range sqls {
		sqls[f] = buildClaimStatement(f)
	}
	return sqls
}()

// buildClaimStatement writes the claim with the filters f; its arguments
// are the worker id, the limit, then one array per filter in the order of
// the bits.
func buildClaimStatement(f int) string {
	// Filters are added only when set so the planner sees plain predicates
	// it can match to idx_soniq_jobs_queue_status_priority.
	var where strings.Builder
	where.WriteString("status = 'queued' AND (scheduled_at IS NULL OR scheduled_at <= now())")
	// The worker row was found active and locked by this statement's
	// first CTE, or nothing is claimed.
	where.WriteString(" AND EXISTS (SELECT 1 FROM me)")
	n := 2
	addFilter := func(cond string) {
		n++
		fmt.Fprintf(&where, " AND "+cond, n)
	}
	if f&claimByQueue != 0 {
		addFilter("queue = ANY($%d::text[])")
	}
	if f&claimByName != 0 {
		addFilter("job_name = ANY($%d::text[])")
	}
	if f&claimExcluding != 0 {
		addFilter("job_name <> ALL($%d::text[])")
	}
	const order = `ORDER BY priority ASC, scheduled_at ASC NULLS FIRST, created_at ASC`
	picked := `picked AS (
	SELECT id FROM soniq_jobs WHERE ` + where.String() + `
	` + order + `
	LIMIT $2
	FOR UPDATE SKIP LOCKED
)`
	if f&claimAhead != 0 {
		// The reserve's rows follow the slots' in claim order; those on
		// their last attempt among them are locked until the commit and
		// left as they are.
		picked = `slots AS (
	SELECT id FROM soniq_jobs WHERE ` + where.String() + `
	` + order + `
	LIMIT $2
	FOR UPDATE SKIP LOCKED
), ahead AS (
	SELECT id FROM (
		SELECT id, attempts, max_attempts FROM soniq_jobs WHERE ` + where.String() + ` AND id NOT IN (SELECT id FROM slots)
		` + order + `
		LIMIT $` + fmt.Sprint(n+1) + `
		FOR UPDATE SKIP LOCKED
	) next WHERE COALESCE(next.attempts, 0) + 1 < next.max_attempts
), picked AS (
	SELECT id FROM slots UNION ALL SELECT id FROM ahead
)`
	}
	// The rows are updated by their ids as one array (an index lookup
	// each), not by a join with picked: the plan is made once per
	// connection, and one made on an empty queue's statistics joined them
	// by scanning the whole primary-key index, for every claim after.
	return `WITH me AS (
	UPDATE soniq_workers SET last_heartbeat = now() WHERE id = $1::uuid AND status = 'active' RETURNING 1
), ` + picked + `, claimed AS (
	UPDATE soniq_jobs j
	SET status = 'processing', attempts = COALESCE(j.attempts, 0) + 1, worker_id = $1::uuid, updated_at = now()
	WHERE j.id = ANY(ARRAY(SELECT id FROM picked))
	RETURNING j.*
)
SELECT ` + claimedColumns + ` FROM claimed
ORDER BY priority ASC, scheduled_at ASC NULLS FIRST, created_at ASC`
}
