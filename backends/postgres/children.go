package postgres

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// childBatch holds a completion batch's done writes that carry children
// (Completion.Children) and the children themselves, as the arrays of the
// two statements that write them: one for the done rows kept, one for
// those deleted (ResultTTL 0). Each statement writes its parents and, in
// the same statement, the children of exactly the parents its guard let
// through, then notifies their queues.
type childBatch struct {
	keptIDs     []pgtype.UUID
	keptResults []string
	keptValid   []bool
	keptTTLs    []float64
	keptAt      []int32
	deletedIDs  []pgtype.UUID
	deletedAt   []int32

	parent, id            []pgtype.UUID
	parentAt              []int32
	name, args, queue     []string
	hash, dedup, producer []pgtype.Text
	maxAttempts, priority []int32
	unique                []bool
	delay                 []float64
}

// add takes one done completion with children; id is its parsed job id.
func (k *childBatch) add(id pgtype.UUID, c backends.Completion) error {
	at := int32(c.Attempts)
	if c.ResultTTL <= 0 {
		k.deletedIDs, k.deletedAt = append(k.deletedIDs, id), append(k.deletedAt, at)
	} else {
		res, err := storableJSON(strings.TrimSpace(string(c.Result)))
		if err != nil {
			return fmt.Errorf("complete job %s: %w", c.JobID, err)
		}
		k.keptIDs = append(k.keptIDs, id)
		k.keptValid = append(k.keptValid, res != "" && res != "null")
		k.keptResults = append(k.keptResults, res)
		k.keptTTLs = append(k.keptTTLs, c.ResultTTL.Seconds())
		k.keptAt = append(k.keptAt, at)
	}
	for _, p := range c.Children {
		if err := k.addChild(id, at, p); err != nil {
			return fmt.Errorf("complete job %s: child %s: %w", c.JobID, p.Name, err)
		}
	}
	return nil
}

// addChild checks one child as Enqueue does and appends its columns.
func (k *childBatch) addChild(parent pgtype.UUID, parentAt int32, p backends.EnqueueParams) error {
	if p.Name == "" {
		return fmt.Errorf("job name is empty")
	}
	childID := p.ID
	if childID == "" {
		childID = backends.NewID()
	} else if !isUUID(childID) {
		return fmt.Errorf("id %q is not a uuid", childID)
	}
	args := p.Args
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	var hash pgtype.Text
	if p.UniqueJob {
		h, err := backends.ArgsHash(args)
		if err != nil {
			return err
		}
		hash = pgtype.Text{String: h, Valid: true}
	} else if !isJSONObject(args) {
		return fmt.Errorf("args must be a JSON object")
	}
	k.parent, k.parentAt = append(k.parent, parent), append(k.parentAt, parentAt)
	k.id = append(k.id, parseUUID(childID))
	k.name = append(k.name, p.Name)
	// As a done result is: jsonb refuses \u0000 and unpaired surrogate
	// escapes, and one such child would fail its whole completion batch.
	stored, err := storableJSON(string(args))
	if err != nil {
		return err
	}
	k.args = append(k.args, stored)
	k.hash = append(k.hash, hash)
	k.maxAttempts = append(k.maxAttempts, int32(deref(p.MaxAttempts, defaultMaxAttempts)))
	k.priority = append(k.priority, int32(deref(p.Priority, defaultPriority)))
	queue := p.Queue
	if queue == "" {
		queue = defaultQueue
	}
	k.queue = append(k.queue, queue)
	k.unique = append(k.unique, p.UniqueJob)
	k.dedup = append(k.dedup, pgtype.Text{String: p.DedupKey, Valid: p.DedupKey != ""})
	k.delay = append(k.delay, max(p.Delay.Seconds(), 0))
	k.producer = append(k.producer, pgtype.Text{String: p.ProducerID, Valid: p.ProducerID != ""})
	return nil
}

// childTail follows a statement's `done` CTE (the parents it wrote, their
// ids and attempts): the children of those parents' attempts are inserted as Enqueue inserts a
// job, except that any conflict (a queued row with the dedup key, a queued
// unique duplicate, an id taken) skips that child; their queues are
// notified in the same transaction. The children's fourteen parameters
// start at $n.
func childTail(n int) string {
	pairs := make([]string, 0, 28)
	for i := 13; i >= 0; i-- { // $c12 before $c1: no token is a prefix of one replaced later
		pairs = append(pairs, "$c"+strconv.Itoa(i), "$"+strconv.Itoa(n+i))
	}
	return strings.NewReplacer(pairs...).Replace(`,
c AS (
	SELECT * FROM unnest($c0::uuid[], $c1::uuid[], $c2::text[], $c3::text[], $c4::text[], $c5::int[], $c6::int[],
		$c7::text[], $c8::bool[], $c9::text[], $c10::float8[], $c11::text[], $c13::int4[]) WITH ORDINALITY
		AS c(parent, id, name, args, hash, max_attempts, priority, queue, uniq, dedup, delay, producer, parent_at, ord)
	WHERE (c.parent, c.parent_at) IN (SELECT id, attempts FROM done)
), kids AS (
	INSERT INTO soniq_jobs
	(id, job_name, args, args_hash, max_attempts, priority, queue, unique_job, dedup_key, scheduled_at, producer_id)
	SELECT id, name, args::jsonb, hash, max_attempts, priority, queue, uniq, dedup,
		CASE WHEN delay > 0 THEN now() + make_interval(secs => delay) END, producer
	FROM c ORDER BY ord
	ON CONFLICT DO NOTHING
), notified AS (
	SELECT count(pg_notify($c12, q.queue)) AS n FROM (SELECT DISTINCT queue FROM c) AS q
)
SELECT done.id FROM done, notified`)
}

// queueStatements adds the statements of k to a completion batch through
// queue (which collects the ids each returns).
func (k *childBatch) queueStatements(queue func(sql string, args ...any), workerID string) {
	if len(k.keptIDs) == 0 && len(k.deletedIDs) == 0 {
		return
	}
	kids := []any{k.parent, k.id, k.name, k.args, k.hash, k.maxAttempts, k.priority, k.queue, k.unique,
		k.dedup, k.delay, k.producer, notifyChannel, k.parentAt}
	if len(k.keptIDs) > 0 {
		queue(childKeptStatement, append([]any{k.keptIDs, k.keptResults, k.keptValid, k.keptTTLs, k.keptAt, workerID}, kids...)...)
	}
	if len(k.deletedIDs) > 0 {
		queue(childDeletedStatement, append([]any{k.deletedIDs, k.deletedAt, workerID}, kids...)...)
	}
}

// The done writes that carry children: the row's write, then its children
// (childTail). Their rows are found and paired with their arrays as the
// other guarded writes' are (doneStatement).
var (
	childKeptStatement = `WITH done AS (
	UPDATE soniq_jobs j
	SET status = 'done',
	    result = CASE WHEN u.has_result THEN u.result::jsonb ELSE j.result END,
	    expires_at = now() + make_interval(secs => u.ttl),
	    updated_at = now()
	FROM unnest($1::uuid[], $2::text[], $3::bool[], $4::float8[], $5::int4[]) AS u(id, result, has_result, ttl, attempts)
	WHERE j.id = ANY($1::uuid[]) AND j.id = u.id AND (j.status = 'processing' AND j.worker_id = $6::uuid AND j.attempts = u.attempts) IS TRUE
	RETURNING j.id, j.attempts
)` + childTail(7)
	childDeletedStatement = `WITH done AS (
	DELETE FROM soniq_jobs j
	USING unnest($1::uuid[], $2::int4[]) AS d(id, attempts)
	WHERE j.id = ANY($1::uuid[]) AND j.id = d.id AND (j.status = 'processing' AND j.worker_id = $3::uuid AND j.attempts = d.attempts) IS TRUE
	RETURNING j.id, j.attempts
)` + childTail(4)
)
