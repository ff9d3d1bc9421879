package postgres

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// Complete applies guarded terminal writes: one statement per outcome kind,
// all sent in one pipelined batch, which Postgres runs as one implicit
// transaction (all applied or none).
func (b *Backend) Complete(ctx context.Context, workerID string, cs []backends.Completion) ([]string, error) {
	if len(cs) == 0 {
		return nil, nil
	}
	batch := &pgx.Batch{}
	// As for Claim: with stale statistics the planner walks every row this
	// worker ever ran through idx_soniq_jobs_worker_id to find a few
	// hundred ids. Primary-key lookups are what these statements need
	// whatever the estimates say, so the guards are written as one IS TRUE
	// expression (the same rows pass: a NULL is not TRUE either), which no
	// other index can serve.
	batch.Queue(writePlannerHints)
	applied, err := queueCompletions(batch, workerID, cs)
	if err != nil {
		return nil, err
	}
	if err := b.pool.SendBatch(ctx, batch).Close(); err != nil {
		return nil, b.wrap(err, "complete %d jobs for worker %s", len(cs), workerID)
	}
	return applied(), nil
}

// CompleteAndClaim claims and writes cs in one pipelined batch: one round
// trip and one implicit transaction where Claim and Complete would take
// two. Both or neither take effect, except that the claim's own refusal
// (claimErr: the worker row is not active or is gone) leaves the
// completions written, as separate calls would.
//
// The claim goes first: it locks the worker row before the completions
// lock their job rows, the order stale-worker recovery takes them in, so
// the two cannot deadlock. It therefore does not see what the completions
// requeue; the caller claims again for those, as after a write.
func (b *Backend) CompleteAndClaim(ctx context.Context, workerID string, cs []backends.Completion, p backends.ClaimParams) (applied []string, jobs []backends.Job, claimErr, err error) {
	if p.WorkerID != workerID {
		return nil, nil, nil, fmt.Errorf("complete and claim: the completions are worker %s's and the claim is worker %s's", workerID, p.WorkerID)
	}
	if err := checkClaim(p); err != nil {
		return nil, nil, nil, err
	}
	applied, jobs, claimErr, err = b.completeAndClaim(ctx, workerID, cs, p, takesTurn(p))
	if turnTimedOut(err) {
		// Nothing of the batch was written: the results go again with a
		// claim that takes no turn.
		applied, jobs, claimErr, err = b.completeAndClaim(ctx, workerID, cs, p, false)
	}
	return applied, jobs, claimErr, err
}

// completeAndClaim is CompleteAndClaim's one try, with the claim's turn or
// without.
func (b *Backend) completeAndClaim(ctx context.Context, workerID string, cs []backends.Completion, p backends.ClaimParams, turn bool) (applied []string, jobs []backends.Job, claimErr, err error) {
	batch := &pgx.Batch{}
	// The claim's prelude sets the planner's settings for the whole
	// transaction: they serve the completions too.
	claimed, err := b.queueClaim(ctx, batch, p, turn)
	if err != nil {
		return nil, nil, nil, err
	}
	claimed.queueStatement(batch)
	report := func() []string { return nil }
	if len(cs) > 0 {
		batch.Queue(hashJoinsOn)
		if report, err = queueCompletions(batch, workerID, cs); err != nil {
			return nil, nil, nil, err
		}
		if claimed.plan != nil {
			batch.Queue(hashJoinsOff)
		}
	}
	if claimed.plan != nil {
		b.queueNextWalks(batch, p, *claimed.plan)
	}
	if err := b.pool.SendBatch(ctx, batch).Close(); err != nil {
		return nil, nil, nil, b.wrap(err, "complete %d jobs and claim for worker %s", len(cs), workerID)
	}
	jobs, claimErr = claimed.result()
	return report(), jobs, claimErr, nil
}

// queueCompletions adds the guarded writes of cs to batch, one statement
// per outcome kind, after the planner settings the caller queued; the
// returned function reports, once the batch has run, the ids written, in
// the callers' order.
func queueCompletions(batch *pgx.Batch, workerID string, cs []backends.Completion) (func() []string, error) {
	if !isUUID(workerID) {
		return nil, fmt.Errorf("complete: worker id %q is not a uuid", workerID)
	}
	var (
		// The ids go out as binary uuids: pgx cannot encode a []string
		// as a binary uuid[], and its fallback to text first builds (and
		// drops) an error quoting the whole array, on every batch.
		doneIDs, deleteIDs, retryIDs []pgtype.UUID
		deadIDs, snoozeIDs           []pgtype.UUID
		cancelIDs                    []pgtype.UUID
		// The attempt each write settles, beside its id.
		doneAt, deleteAt, retryAt  []int32
		deadAt, snoozeAt, cancelAt []int32
		doneResults                []string
		doneResultValid            []bool
		doneTTLs                   []float64
		retryErrs                  []string
		retryDelays                []float64
		deadErrs, deadReasons      []string
		snoozeErrs                 []string
		snoozeDelays               []float64
	)
	// Done (kept or deleted) is nearly every completion: room for all.
	if c := cs[0]; c.Outcome == backends.OutcomeDone && c.ResultTTL > 0 {
		doneIDs, doneResults = make([]pgtype.UUID, 0, len(cs)), make([]string, 0, len(cs))
		doneResultValid, doneTTLs = make([]bool, 0, len(cs)), make([]float64, 0, len(cs))
		doneAt = make([]int32, 0, len(cs))
	} else if c.Outcome == backends.OutcomeDone {
		deleteIDs, deleteAt = make([]pgtype.UUID, 0, len(cs)), make([]int32, 0, len(cs))
	}
	type attempt struct {
		id pgtype.UUID
		at int32
	}
	seen := make(map[attempt]bool, len(cs))
	var kids childBatch // done writes with children: children.go
	for _, c := range cs {
		// An id that cannot be a uuid matches no row; a repeated attempt
		// of one id would make one statement touch a row twice: the first
		// completion wins. Two attempts of one row (a write retried after
		// its reply was lost, beside the later attempt's own) both go: the
		// guard lets at most one of them match.
		if !isUUID(c.JobID) {
			continue
		}
		if c.Attempts < 1 {
			return nil, fmt.Errorf("complete job %s: %w", c.JobID, backends.ErrNoAttempt)
		}
		id, at := parseUUID(c.JobID), int32(c.Attempts)
		if seen[attempt{id, at}] {
			continue
		}
		seen[attempt{id, at}] = true
		switch c.Outcome {
		case backends.OutcomeDone:
			if len(c.Children) > 0 {
				if err := kids.add(id, c); err != nil {
					return nil, err
				}
				continue
			}
			if c.ResultTTL <= 0 {
				deleteIDs, deleteAt = append(deleteIDs, id), append(deleteAt, at)
				continue
			}
			res, err := storableJSON(strings.TrimSpace(string(c.Result)))
			if err != nil {
				return nil, fmt.Errorf("complete job %s: %w", c.JobID, err)
			}
			doneIDs, doneAt = append(doneIDs, id), append(doneAt, at)
			// JSON null is stored as SQL NULL, as Soniq skips writing a
			// None result.
			doneResultValid = append(doneResultValid, res != "" && res != "null")
			doneResults = append(doneResults, res)
			doneTTLs = append(doneTTLs, c.ResultTTL.Seconds())
		case backends.OutcomeRetry:
			retryIDs, retryAt = append(retryIDs, id), append(retryAt, at)
			retryErrs = append(retryErrs, backends.TruncateError(c.Error))
			retryDelays = append(retryDelays, max(c.Delay.Seconds(), 0))
		case backends.OutcomeDeadLetter:
			reason := c.Reason
			if reason == "" {
				reason = backends.ReasonMaxRetriesExceeded
			}
			deadIDs, deadAt = append(deadIDs, id), append(deadAt, at)
			deadErrs = append(deadErrs, backends.TruncateError(c.Error))
			deadReasons = append(deadReasons, reason)
		case backends.OutcomeSnooze:
			msg := "SNOOZE"
			if c.Reason != "" {
				msg = "SNOOZE: " + c.Reason
			}
			snoozeIDs, snoozeAt = append(snoozeIDs, id), append(snoozeAt, at)
			snoozeErrs = append(snoozeErrs, backends.TruncateError(msg))
			snoozeDelays = append(snoozeDelays, min(max(c.Delay, 0), backends.MaxSnooze).Seconds())
		case backends.OutcomeCancelled:
			cancelIDs, cancelAt = append(cancelIDs, id), append(cancelAt, at)
		default:
			return nil, fmt.Errorf("complete job %s: unknown outcome %d", c.JobID, c.Outcome)
		}
	}

	// The statements return the ids they wrote as uuids (no string per
	// row); they are matched back to the callers' ids below.
	applied := make(map[pgtype.UUID]bool, len(cs))
	collect := func(rows pgx.Rows) error {
		var id pgtype.UUID
		_, err := pgx.ForEachRow(rows, []any{&id}, func() error {
			applied[id] = true
			return nil
		})
		return err
	}
	queue := func(sql string, args ...any) {
		batch.Queue(sql, args...).Query(collect)
	}
	if len(doneIDs) > 0 {
		queue(doneStatement, doneIDs, doneResults, doneResultValid, doneTTLs, workerID, doneAt)
	}
	if len(deleteIDs) > 0 {
		queue(deleteStatement, deleteIDs, workerID, deleteAt)
	}
	if len(retryIDs) > 0 {
		queue(retryStatement, retryIDs, retryErrs, retryDelays, workerID, retryAt)
	}
	if len(snoozeIDs) > 0 {
		queue(snoozeStatement, snoozeIDs, snoozeErrs, snoozeDelays, workerID, snoozeAt)
	}
	if len(deadIDs) > 0 {
		queue(deadStatement, deadIDs, deadErrs, deadReasons, workerID, deadAt)
	}
	if len(cancelIDs) > 0 {
		queue(cancelStatement, cancelIDs, workerID, cancelAt)
	}
	kids.queueStatements(queue, workerID)
	return func() []string {
		return inCallersOrder(len(cs), func(i int) string { return cs[i].JobID }, applied)
	}, nil
}

// The guarded writes of queueCompletions. Each reads its rows through the
// primary key (j.id = ANY($1)) and pairs them with its arrays by a hash
// join (writePlannerHints), on a plan made once per connection.
// TestGuardedWritesPairTheirRowsByHash holds every one of them to that plan.
const (
	// doneStatement writes done rows that keep their result. Results arrive as
	// text and are cast, so an invalid JSON result fails loudly instead of
	// being stored mangled.
	doneStatement = `UPDATE soniq_jobs j
	SET status = 'done',
	    result = CASE WHEN u.has_result THEN u.result::jsonb ELSE j.result END,
	    expires_at = now() + make_interval(secs => u.ttl),
	    updated_at = now()
	FROM unnest($1::uuid[], $2::text[], $3::bool[], $4::float8[], $6::int4[]) AS u(id, result, has_result, ttl, attempts)
	WHERE j.id = ANY($1::uuid[]) AND j.id = u.id AND (j.status = 'processing' AND j.worker_id = $5::uuid AND j.attempts = u.attempts) IS TRUE
	RETURNING j.id`

	// deleteStatement deletes done rows (result_ttl 0).
	deleteStatement = `DELETE FROM soniq_jobs j USING unnest($1::uuid[], $3::int4[]) AS u(id, attempts)
	WHERE j.id = ANY($1::uuid[]) AND j.id = u.id AND (j.status = 'processing' AND j.worker_id = $2::uuid AND j.attempts = u.attempts) IS TRUE
	RETURNING j.id`

	// retryStatement puts rows back to queued with their error and delay.
	retryStatement = `UPDATE soniq_jobs j
	SET status = 'queued',
	    last_error = u.err,
	    scheduled_at = CASE WHEN u.delay > 0 THEN now() + make_interval(secs => u.delay) END,
	    worker_id = NULL,
	    updated_at = now()
	FROM unnest($1::uuid[], $2::text[], $3::float8[], $5::int4[]) AS u(id, err, delay, attempts)
	WHERE j.id = ANY($1::uuid[]) AND j.id = u.id AND (j.status = 'processing' AND j.worker_id = $4::uuid AND j.attempts = u.attempts) IS TRUE
	RETURNING j.id`

	// snoozeStatement puts rows back to queued, their attempt given back.
	snoozeStatement = `UPDATE soniq_jobs j
	SET status = 'queued',
	    attempts = GREATEST(COALESCE(j.attempts, 0) - 1, 0),
	    last_error = u.err,
	    scheduled_at = now() + make_interval(secs => u.delay),
	    worker_id = NULL,
	    updated_at = now()
	FROM unnest($1::uuid[], $2::text[], $3::float8[], $5::int4[]) AS u(id, err, delay, attempts)
	WHERE j.id = ANY($1::uuid[]) AND j.id = u.id AND (j.status = 'processing' AND j.worker_id = $4::uuid AND j.attempts = u.attempts) IS TRUE
	RETURNING j.id`

	// deadStatement moves rows to the dead-letter table. The delete and the
	// insert are one statement, so the move is atomic without an explicit
	// transaction. Columns Soniq's jobs table leaves nullable are NOT NULL in
	// the dead-letter table, hence the defaults.
	deadStatement = `WITH u AS (
	SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $5::int4[]) AS u(id, err, reason, attempts)
), moved AS (
	DELETE FROM soniq_jobs j USING u
	WHERE j.id = ANY($1::uuid[]) AND j.id = u.id AND (j.status = 'processing' AND j.worker_id = $4::uuid AND j.attempts = u.attempts) IS TRUE
	RETURNING j.id, j.job_name, j.args, j.queue, j.priority, j.max_attempts, j.attempts,
	          j.created_at, u.err, u.reason
)
INSERT INTO soniq_dead_letter_jobs (id, job_name, args, queue, priority, max_attempts, attempts,
	last_error, dead_letter_reason, original_created_at, moved_to_dead_letter_at, tags)
SELECT id, job_name, args, COALESCE(queue, 'default'), COALESCE(priority, 100),
	COALESCE(max_attempts, 3), COALESCE(attempts, 0), err, reason, COALESCE(created_at, now()), now(), NULL
FROM moved
ON CONFLICT (id) DO UPDATE SET
	attempts = EXCLUDED.attempts, last_error = EXCLUDED.last_error,
	dead_letter_reason = EXCLUDED.dead_letter_reason,
	moved_to_dead_letter_at = EXCLUDED.moved_to_dead_letter_at
RETURNING id::uuid`
)

// Nack is the shutdown contract's nack_job over many rows, guarded by the
// worker that holds them and the attempt it holds them at.
func (b *Backend) Nack(ctx context.Context, workerID string, held []backends.Job) ([]string, error) {
	if !isUUID(workerID) {
		return nil, nil
	}
	ids, attempts, err := nackArgs(held)
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	// One round trip (exec mode: no statement prepared first): NACKs are
	// among a shutdown's last writes.
	rows, err := b.pool.Query(ctx, `UPDATE soniq_jobs j
	SET status = 'queued', worker_id = NULL, updated_at = now(), scheduled_at = now()
	FROM unnest($1::uuid[], $3::int4[]) AS h(id, attempts)
	WHERE j.id = ANY($1::uuid[]) AND j.id = h.id AND j.status = 'processing' AND j.worker_id = $2 AND j.attempts = h.attempts
	RETURNING j.id`, pgx.QueryExecModeExec, ids, workerID, attempts)
	if err != nil {
		return nil, b.wrap(err, "nack %d jobs for worker %s", len(ids), workerID)
	}
	nacked, err := pgx.CollectRows(rows, pgx.RowTo[pgtype.UUID])
	if err != nil {
		return nil, b.wrap(err, "nack %d jobs for worker %s", len(ids), workerID)
	}
	return nackedIDs(held, nacked), nil
}

// NackAndStop is Nack and the worker's stop mark in one statement: one
// round trip, and the mark commits only with the NACKs.
func (b *Backend) NackAndStop(ctx context.Context, workerID string, held []backends.Job) ([]string, bool, error) {
	if !isUUID(workerID) {
		return nil, false, nil // as Nack; the stop mark alone then says the row is not found
	}
	ids, attempts, err := nackArgs(held)
	if err != nil {
		return nil, false, err
	}
	// The stop mark counts as a heartbeat, as SetWorkerStatus's does.
	ctx = withoutPing(ctx)
	var nacked []pgtype.UUID
	var marked int
	err = b.pool.QueryRow(ctx, `WITH n AS (
	UPDATE soniq_jobs j
	SET status = 'queued', worker_id = NULL, updated_at = now(), scheduled_at = now()
	FROM unnest($1::uuid[], $3::int4[]) AS h(id, attempts)
	WHERE j.id = ANY($1::uuid[]) AND j.id = h.id AND j.status = 'processing' AND j.worker_id = $2 AND j.attempts = h.attempts
	RETURNING j.id
), w AS (
	UPDATE soniq_workers SET status = 'stopped', last_heartbeat = now() WHERE id = $2 RETURNING 1
)
SELECT coalesce((SELECT array_agg(id) FROM n), '{}'), (SELECT count(*) FROM w)::int`,
		pgx.QueryExecModeExec, ids, workerID, attempts).Scan(&nacked, &marked)
	if err != nil {
		return nil, false, b.wrap(err, "nack %d jobs and mark worker %s stopped", len(ids), workerID)
	}
	return nackedIDs(held, nacked), marked > 0, nil
}

// nackArgs are the ids and attempts of the rows held, as a NACK's arrays.
func nackArgs(held []backends.Job) ([]pgtype.UUID, []int32, error) {
	ids := make([]pgtype.UUID, 0, len(held))
	attempts := make([]int32, 0, len(held))
	type attempt struct {
		id pgtype.UUID
		at int32
	}
	seen := make(map[attempt]bool, len(held))
	for _, j := range held {
		// An id that cannot be a uuid matches no row; a repeated attempt
		// would join the row twice. The first wins.
		if !isUUID(j.ID) {
			continue
		}
		if j.Attempts < 1 {
			return nil, nil, fmt.Errorf("nack job %s: %w", j.ID, backends.ErrNoAttempt)
		}
		id, at := parseUUID(j.ID), int32(j.Attempts)
		if seen[attempt{id, at}] {
			continue
		}
		seen[attempt{id, at}] = true
		ids, attempts = append(ids, id), append(attempts, at)
	}
	return ids, attempts, nil
}

// nackedIDs names the rows held that a NACK wrote, in the order held.
func nackedIDs(held []backends.Job, nacked []pgtype.UUID) []string {
	written := make(map[pgtype.UUID]bool, len(nacked))
	for _, id := range nacked {
		written[id] = true
	}
	out := make([]string, 0, len(nacked))
	for _, j := range held {
		if isUUID(j.ID) && written[parseUUID(j.ID)] {
			out = append(out, j.ID)
			delete(written, parseUUID(j.ID))
		}
	}
	return out
}

// AdoptOrphans gives processing rows with no worker back to workerID.
func (b *Backend) AdoptOrphans(ctx context.Context, workerID string, ids []string) ([]string, error) {
	ids = slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return !isUUID(id) })
	if len(ids) == 0 || !isUUID(workerID) {
		return nil, nil
	}
	rows, err := b.pool.Query(ctx, `UPDATE soniq_jobs SET worker_id = $1, updated_at = now()
	WHERE id = ANY($2::uuid[]) AND status = 'processing' AND worker_id IS NULL
	RETURNING id::text`, workerID, ids)
	if err != nil {
		return nil, b.wrap(err, "adopt %d orphaned jobs for worker %s", len(ids), workerID)
	}
	adopted, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, b.wrap(err, "adopt %d orphaned jobs for worker %s", len(ids), workerID)
	}
	return adopted, nil
}
