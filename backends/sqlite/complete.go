package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// completionRow is one completion as the JSON element the batch statements
// read through json_each. Pointers become JSON null, hence SQL NULL.
type completionRow struct {
	ID          string  `json:"id"`
	Attempts    int     `json:"attempts"` // the attempt the write settles
	Result      *string `json:"result,omitempty"`
	ExpiresAt   *string `json:"expires_at,omitempty"`
	ScheduledAt *string `json:"scheduled_at,omitempty"`
	Error       *string `json:"error,omitempty"`
	Reason      string  `json:"reason,omitempty"`
}

// completionBatches groups a Complete call by the statement each row needs.
type completionBatches struct {
	deleted    []completionRow // done with ResultTTL 0
	done       []completionRow
	retry      []completionRow
	snooze     []completionRow
	deadLetter []completionRow
	cancelled  []completionRow
}

func buildBatches(cs []backends.Completion, ts time.Time) (completionBatches, error) {
	var bs completionBatches
	for _, c := range cs {
		if c.Attempts < 1 {
			return bs, fmt.Errorf("job %s: %w", c.JobID, backends.ErrNoAttempt)
		}
		row := completionRow{ID: c.JobID, Attempts: c.Attempts}
		switch c.Outcome {
		case backends.OutcomeDone:
			if c.ResultTTL <= 0 {
				bs.deleted = append(bs.deleted, row)
				continue
			}
			if res := bytes.TrimSpace(c.Result); len(res) > 0 && !bytes.Equal(res, []byte("null")) {
				if !json.Valid(res) {
					return bs, fmt.Errorf("job %s: result is not valid JSON", c.JobID)
				}
				s := string(res)
				row.Result = &s
			}
			exp := formatTime(ts.Add(c.ResultTTL))
			row.ExpiresAt = &exp
			bs.done = append(bs.done, row)
		case backends.OutcomeRetry:
			if c.Delay > 0 {
				s := formatTime(ts.Add(c.Delay))
				row.ScheduledAt = &s
			}
			e := backends.TruncateError(c.Error)
			row.Error = &e
			bs.retry = append(bs.retry, row)
		case backends.OutcomeSnooze:
			delay := min(max(c.Delay, 0), backends.MaxSnooze)
			s := formatTime(ts.Add(delay))
			row.ScheduledAt = &s
			// Soniq's reschedule_job writes "SNOOZE" alone when there is no reason.
			e := "SNOOZE"
			if c.Reason != "" {
				e = "SNOOZE: " + c.Reason
			}
			e = backends.TruncateError(e)
			row.Error = &e
			bs.snooze = append(bs.snooze, row)
		case backends.OutcomeDeadLetter:
			e := backends.TruncateError(c.Error)
			row.Error = &e
			// dead_letter_reason is NOT NULL; an unset reason is the common case.
			row.Reason = c.Reason
			if row.Reason == "" {
				row.Reason = backends.ReasonMaxRetriesExceeded
			}
			bs.deadLetter = append(bs.deadLetter, row)
		case backends.OutcomeCancelled:
			bs.cancelled = append(bs.cancelled, row)
		default:
			return bs, fmt.Errorf("job %s: unknown outcome %d", c.JobID, int(c.Outcome))
		}
	}
	return bs, nil
}

func marshalJSON(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("encoding batch: %w", err)
	}
	return string(b), nil
}

// Complete applies a batch of guarded terminal writes in one IMMEDIATE
// transaction, one statement per outcome kind, each reading its rows from a
// JSON array through json_each.
func (b *Backend) Complete(ctx context.Context, workerID string, cs []backends.Completion) ([]string, error) {
	if len(cs) == 0 {
		return nil, nil
	}
	t := now()
	ts := formatTime(t)
	bs, err := buildBatches(cs, t)
	if err != nil {
		return nil, fmt.Errorf("completing jobs: %w", err)
	}
	kids, err := buildChildren(cs, t) // children.go
	if err != nil {
		return nil, fmt.Errorf("completing jobs: %w", err)
	}
	var kidQueues []string

	var applied []string
	run := func(ctx context.Context, tx *sql.Tx, what, query string, batch any, args ...any) error {
		payload, err := marshalJSON(batch)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		// Every batch statement numbers its parameters: ?1 the JSON batch,
		// ?2 the worker id, ?3 (updates only) updated_at.
		ids, err := queryIDs(ctx, tx, query, append([]any{payload}, args...)...)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		applied = append(applied, ids...)
		return nil
	}

	err = b.inWriteTx(ctx, "completing jobs", func(tx *sql.Tx) error {
		if len(bs.deleted) > 0 {
			if err := run(ctx, tx, "deleting done jobs", `DELETE FROM soniq_jobs
				WHERE id IN (SELECT value ->> 'id' FROM json_each(?1))
				  AND status = 'processing' AND worker_id = ?2
				  AND EXISTS (SELECT 1 FROM json_each(?1) AS v
				              WHERE v.value ->> 'id' = soniq_jobs.id AND v.value ->> 'attempts' = soniq_jobs.attempts)
				RETURNING id`, bs.deleted, workerID); err != nil {
				return err
			}
		}
		if len(bs.done) > 0 {
			// Like Soniq's mark_job_done, a NULL result leaves the column as it is.
			if err := run(ctx, tx, "marking jobs done", `UPDATE soniq_jobs SET
					status = 'done',
					result = COALESCE(v.value ->> 'result', soniq_jobs.result),
					expires_at = v.value ->> 'expires_at',
					updated_at = ?3
				FROM json_each(?1) AS v
				WHERE soniq_jobs.id = v.value ->> 'id'
				  AND soniq_jobs.status = 'processing' AND soniq_jobs.worker_id = ?2
				  AND soniq_jobs.attempts = v.value ->> 'attempts'
				RETURNING soniq_jobs.id`, bs.done, workerID, ts); err != nil {
				return err
			}
		}
		if len(kids) > 0 {
			// applied holds the done writes alone so far.
			var err error
			if kidQueues, err = writeChildren(ctx, tx, kids, applied, ts); err != nil {
				return err
			}
		}
		if len(bs.retry) > 0 {
			if err := run(ctx, tx, "requeueing failed jobs", `UPDATE soniq_jobs SET
					status = 'queued',
					last_error = v.value ->> 'error',
					scheduled_at = v.value ->> 'scheduled_at',
					worker_id = NULL,
					updated_at = ?3
				FROM json_each(?1) AS v
				WHERE soniq_jobs.id = v.value ->> 'id'
				  AND soniq_jobs.status = 'processing' AND soniq_jobs.worker_id = ?2
				  AND soniq_jobs.attempts = v.value ->> 'attempts'
				RETURNING soniq_jobs.id`, bs.retry, workerID, ts); err != nil {
				return err
			}
		}
		if len(bs.snooze) > 0 {
			if err := run(ctx, tx, "snoozing jobs", `UPDATE soniq_jobs SET
					status = 'queued',
					attempts = MAX(COALESCE(soniq_jobs.attempts, 0) - 1, 0),
					last_error = v.value ->> 'error',
					scheduled_at = v.value ->> 'scheduled_at',
					worker_id = NULL,
					updated_at = ?3
				FROM json_each(?1) AS v
				WHERE soniq_jobs.id = v.value ->> 'id'
				  AND soniq_jobs.status = 'processing' AND soniq_jobs.worker_id = ?2
				  AND soniq_jobs.attempts = v.value ->> 'attempts'
				RETURNING soniq_jobs.id`, bs.snooze, workerID, ts); err != nil {
				return err
			}
		}
		if len(bs.deadLetter) > 0 {
			if err := b.deadLetterBatch(ctx, tx, workerID, ts, bs.deadLetter, &applied); err != nil {
				return err
			}
		}
		if len(bs.cancelled) > 0 {
			if err := b.cancelBatch(ctx, tx, workerID, ts, bs.cancelled, &applied); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, q := range kidQueues {
		b.notify(q)
	}
	ids := make([]string, len(cs))
	for i, c := range cs {
		ids[i] = c.JobID
	}
	return inInputOrder(ids, applied), nil
}

// deadLetterBatch copies the guarded rows into soniq_dead_letter_jobs (id
// kept, tags NULL, resurrection_count 0, as Soniq's mark_job_dead_letter)
// and deletes exactly the rows copied, inside the caller's transaction.
func (b *Backend) deadLetterBatch(ctx context.Context, tx *sql.Tx, workerID, ts string, rows []completionRow, applied *[]string) error {
	payload, err := marshalJSON(rows)
	if err != nil {
		return fmt.Errorf("dead-lettering jobs: %w", err)
	}
	// OR REPLACE: a DLQ row with this id can only be a leftover of the same
	// job; failing the whole batch over it would lose every other result.
	moved, err := queryIDs(ctx, tx, `INSERT OR REPLACE INTO soniq_dead_letter_jobs (
			id, job_name, args, queue, priority, max_attempts, attempts, last_error,
			dead_letter_reason, original_created_at, moved_to_dead_letter_at,
			resurrection_count, last_resurrection_at, tags, created_at)
		SELECT j.id, j.job_name, j.args, COALESCE(j.queue, 'default'), COALESCE(j.priority, 100),
			COALESCE(j.max_attempts, 3), COALESCE(j.attempts, 0), v.value ->> 'error',
			v.value ->> 'reason', COALESCE(j.created_at, ?1), ?1, 0, NULL, NULL, ?1
		FROM soniq_jobs AS j JOIN json_each(?2) AS v ON j.id = v.value ->> 'id'
		WHERE j.status = 'processing' AND j.worker_id = ?3 AND j.attempts = v.value ->> 'attempts'
		RETURNING id`, ts, payload, workerID)
	if err != nil {
		return fmt.Errorf("copying jobs to the dead-letter table: %w", err)
	}
	if len(moved) == 0 {
		return nil
	}
	movedJSON, err := marshalJSON(moved)
	if err != nil {
		return fmt.Errorf("dead-lettering jobs: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM soniq_jobs WHERE id IN (SELECT value FROM json_each(?))`, movedJSON); err != nil {
		return fmt.Errorf("deleting dead-lettered jobs: %w", err)
	}
	*applied = append(*applied, moved...)
	return nil
}

// Nack is the shutdown contract's nack_job for many rows in one statement.
// Soniq's SQLite nack_job writes its ISO now() where the contract says
// NOW()/CURRENT_TIMESTAMP; so does this, keeping scheduled_at comparable.
// Guarded by the worker that holds the rows and the attempt it holds them
// at, as every other write is.
func (b *Backend) Nack(ctx context.Context, workerID string, held []backends.Job) ([]string, error) {
	if len(held) == 0 {
		return nil, nil
	}
	rows := make([]heldRow, 0, len(held))
	seen := make(map[heldRow]bool, len(held))
	for _, j := range held {
		if j.Attempts < 1 {
			return nil, fmt.Errorf("nacking job %s: %w", j.ID, backends.ErrNoAttempt)
		}
		// A repeated attempt would join the row twice; the first wins.
		if r := (heldRow{ID: j.ID, Attempts: j.Attempts}); !seen[r] {
			seen[r] = true
			rows = append(rows, r)
		}
	}
	payload, err := marshalJSON(rows)
	if err != nil {
		return nil, fmt.Errorf("nacking jobs of worker %s: %w", workerID, err)
	}
	ts := formatTime(now())
	var nacked []string
	err = b.inWriteTx(ctx, "nacking jobs for worker "+workerID, func(tx *sql.Tx) error {
		var err error
		nacked, err = queryIDs(ctx, tx, `UPDATE soniq_jobs
			SET status = 'queued', worker_id = NULL, updated_at = ?3, scheduled_at = ?3
			FROM json_each(?1) AS v
			WHERE soniq_jobs.id = v.value ->> 'id'
			  AND soniq_jobs.status = 'processing' AND soniq_jobs.worker_id = ?2
			  AND soniq_jobs.attempts = v.value ->> 'attempts'
			RETURNING soniq_jobs.id`, payload, workerID, ts)
		return err
	})
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	return inInputOrder(ids, nacked), nil
}

// AdoptOrphans gives processing rows with no worker back to workerID.
func (b *Backend) AdoptOrphans(ctx context.Context, workerID string, ids []string) ([]string, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	idsJSON, err := json.Marshal(ids)
	if err != nil {
		return nil, fmt.Errorf("adopting orphaned jobs: encoding ids: %w", err)
	}
	var adopted []string
	err = b.inWriteTx(ctx, "adopting orphaned jobs for worker "+workerID, func(tx *sql.Tx) error {
		var err error
		adopted, err = queryIDs(ctx, tx, `UPDATE soniq_jobs SET worker_id = ?, updated_at = ?
			WHERE id IN (SELECT value FROM json_each(?)) AND status = 'processing' AND worker_id IS NULL
			RETURNING id`, workerID, formatTime(now()), string(idsJSON))
		return err
	})
	if err != nil {
		return nil, err
	}
	return inInputOrder(ids, adopted), nil
}

// inInputOrder returns the members of got in the order of want, each once.
func inInputOrder(want, got []string) []string {
	if len(got) == 0 {
		return nil
	}
	set := make(map[string]struct{}, len(got))
	for _, id := range got {
		set[id] = struct{}{}
	}
	out := make([]string, 0, len(got))
	for _, id := range want {
		if _, ok := set[id]; ok {
			out = append(out, id)
			delete(set, id)
		}
	}
	return out
}
