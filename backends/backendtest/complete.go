package backendtest

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

func completeCases() []testCase {
	cases := []testCase{
		{"done/stores result and expires_at, leaves others untouched", func(s *suite) {
			w := s.worker()
			j := s.enqueueNamed("done.one")
			other := s.enqueueNamed("done.other")
			s.claimOne(w, "done.one")
			otherBefore := snapshot(s.get(other.ID))

			applied := s.complete(w, backends.Completion{JobID: j.ID, Outcome: backends.OutcomeDone,
				Result: json.RawMessage(`{"ok": true, "n": [1, 2]}`), ResultTTL: time.Hour})
			assert.Equal(s.t, []string{j.ID}, applied)
			got := s.get(j.ID)
			assert.Equal(s.t, backends.StatusDone, got.Status)
			assert.JSONEq(s.t, `{"ok": true, "n": [1, 2]}`, string(got.Result))
			approxNow(s.t, time.Hour, got.ExpiresAt, "expires_at")
			assert.Equal(s.t, 1, got.Attempts)
			assert.Nil(s.t, got.LastError)
			assert.Equal(s.t, otherBefore, snapshot(s.get(other.ID)))
		}},
		{"done/nil result leaves result NULL", func(s *suite) {
			w := s.worker()
			j := s.enqueueNamed("done.nil")
			s.claimOne(w, "done.nil")
			s.complete(w, backends.Completion{JobID: j.ID, Outcome: backends.OutcomeDone, ResultTTL: time.Minute})
			got := s.get(j.ID)
			assert.Equal(s.t, backends.StatusDone, got.Status)
			assert.Nil(s.t, got.Result)
		}},
		{"done/result_ttl 0 deletes the row", func(s *suite) {
			w := s.worker()
			j := s.enqueueNamed("done.ttl0")
			s.claimOne(w, "done.ttl0")
			applied := s.complete(w, backends.Completion{JobID: j.ID, Outcome: backends.OutcomeDone,
				Result: json.RawMessage(`1`)})
			assert.Equal(s.t, []string{j.ID}, applied)
			s.requireGone(j.ID)
			assert.Equal(s.t, backends.Stats{}, s.stats())
		}},
		{"retry/requeues with last_error and scheduled_at", func(s *suite) {
			w := s.worker()
			j := s.enqueueNamed("retry.one")
			s.claimOne(w, "retry.one")
			applied := s.complete(w, backends.Completion{JobID: j.ID, Outcome: backends.OutcomeRetry,
				Error: "boom: connection reset", Delay: 30 * time.Second})
			assert.Equal(s.t, []string{j.ID}, applied)
			got := s.get(j.ID)
			assert.Equal(s.t, backends.StatusQueued, got.Status)
			assert.Equal(s.t, 1, got.Attempts, "attempts as claimed")
			require.NotNil(s.t, got.LastError)
			assert.Equal(s.t, "boom: connection reset", *got.LastError)
			approxNow(s.t, 30*time.Second, got.ScheduledAt, "scheduled_at")
			assert.Nil(s.t, got.WorkerID)
			assert.Empty(s.t, s.claim(backends.ClaimParams{WorkerID: w, Limit: 1}), "not runnable before its delay")
		}},
		{"retry/delay 0 sets scheduled_at NULL and is claimable again", func(s *suite) {
			w := s.worker()
			j := s.enqueue(backends.EnqueueParams{Name: "retry.now", Delay: time.Millisecond})
			time.Sleep(20 * time.Millisecond)
			s.claimOne(w, "retry.now")
			s.complete(w, backends.Completion{JobID: j.ID, Outcome: backends.OutcomeRetry, Error: "e"})
			got := s.get(j.ID)
			assert.Nil(s.t, got.ScheduledAt)
			c := s.claimOne(w, "retry.now")
			assert.Equal(s.t, 2, c.Attempts)
		}},
		{"retry/last_error truncated on a UTF-8 boundary", func(s *suite) {
			w := s.worker()
			// "é" is two bytes and "€" three: an odd prefix forces a cut
			// that would split a rune if done by bytes alone.
			long := "x" + strings.Repeat("€", backends.MaxErrorBytes/3+10)
			j := s.enqueueNamed("retry.long")
			s.claimOne(w, "retry.long")
			s.complete(w, backends.Completion{JobID: j.ID, Outcome: backends.OutcomeRetry, Error: long})
			got := s.get(j.ID)
			require.NotNil(s.t, got.LastError)
			le := *got.LastError
			assert.LessOrEqual(s.t, len(le), backends.MaxErrorBytes)
			assert.GreaterOrEqual(s.t, len(le), backends.MaxErrorBytes-3)
			assert.True(s.t, utf8.ValidString(le), "valid UTF-8")
			assert.True(s.t, strings.HasPrefix(long, le), "a prefix of the error")

			short := strings.Repeat("é", backends.MaxErrorBytes/2) // exactly MaxErrorBytes: kept whole
			s.claimOne(w, "retry.long")
			s.complete(w, backends.Completion{JobID: j.ID, Outcome: backends.OutcomeRetry, Error: short})
			assert.Equal(s.t, short, *s.get(j.ID).LastError)
		}},
		{"dead letter/moves the row in one step", func(s *suite) {
			w := s.worker()
			j := s.enqueue(backends.EnqueueParams{Name: "dlq.move", Args: json.RawMessage(`{"k":"v"}`),
				Queue: "mail", Priority: intp(7), MaxAttempts: intp(5)})
			require.NoError(s.t, s.h.BackdateCreated(s.ctx, j.ID, time.Hour))
			created := s.get(j.ID).CreatedAt
			s.claimOne(w, "dlq.move")
			s.complete(w, backends.Completion{JobID: j.ID, Outcome: backends.OutcomeRetry, Error: "first"})
			s.claimOne(w, "dlq.move")
			applied := s.complete(w, backends.Completion{JobID: j.ID, Outcome: backends.OutcomeDeadLetter,
				Error: "second", Reason: backends.ReasonMaxRetriesExceeded})
			assert.Equal(s.t, []string{j.ID}, applied)

			s.requireGone(j.ID)
			dl := s.deadLetters()
			require.Len(s.t, dl, 1)
			d := dl[0]
			assert.Equal(s.t, j.ID, d.ID, "the original id, never remapped")
			assert.Equal(s.t, "dlq.move", d.Name)
			assert.JSONEq(s.t, `{"k":"v"}`, string(d.Args))
			assert.Equal(s.t, "mail", d.Queue)
			assert.Equal(s.t, 7, d.Priority)
			assert.Equal(s.t, 5, d.MaxAttempts)
			assert.Equal(s.t, 2, d.Attempts)
			require.NotNil(s.t, d.LastError)
			assert.Equal(s.t, "second", *d.LastError)
			assert.Equal(s.t, backends.ReasonMaxRetriesExceeded, d.Reason)
			assert.WithinDuration(s.t, created, d.OriginalCreatedAt, time.Millisecond, "original_created_at")
			assert.WithinDuration(s.t, time.Now(), d.MovedAt, tolerance, "moved_to_dead_letter_at")
			assert.Equal(s.t, 0, d.ResurrectionCount)
			assert.Nil(s.t, d.LastResurrectionAt)
			assert.Equal(s.t, backends.Stats{Total: 1, DeadLetter: 1}, s.stats())
		}},
		{"nack/requeues processing rows, attempts and last_error untouched", func(s *suite) {
			w := s.worker()
			j := s.enqueueNamed("nack.one")
			queued := s.enqueueNamed("nack.queued")
			s.claimOne(w, "nack.one")
			s.complete(w, backends.Completion{JobID: j.ID, Outcome: backends.OutcomeRetry, Error: "earlier failure"})
			s.claimOne(w, "nack.one")
			queuedBefore := snapshot(s.get(queued.ID))

			nacked, err := s.nack(w, j.ID, queued.ID, newUUID(s.t))
			require.NoError(s.t, err)
			assert.Equal(s.t, []string{j.ID}, nacked, "only the processing row")
			got := s.get(j.ID)
			assert.Equal(s.t, backends.StatusQueued, got.Status)
			assert.Nil(s.t, got.WorkerID)
			approxNow(s.t, 0, got.ScheduledAt, "scheduled_at")
			assert.WithinDuration(s.t, time.Now(), got.UpdatedAt, tolerance)
			assert.Equal(s.t, 2, got.Attempts, "attempts preserved")
			require.NotNil(s.t, got.LastError)
			assert.Equal(s.t, "earlier failure", *got.LastError)
			assert.Equal(s.t, queuedBefore, snapshot(s.get(queued.ID)), "queued row untouched")

			again, err := s.nack(w, j.ID)
			require.NoError(s.t, err)
			assert.Empty(s.t, again, "idempotent")
			none, err := s.nack(w)
			require.NoError(s.t, err)
			assert.Empty(s.t, none)
		}},
		{"nack/a late NACK on a row recovered and claimed again by another worker changes nothing", func(s *suite) {
			// A NACK held up by a partition: meanwhile stale recovery gave
			// the row back and another worker claimed it. The shutdown
			// NACK of the first worker must not requeue the second's row
			// (it would run a third time, one attempt closer to the dead
			// letter).
			w1 := s.worker()
			j := s.enqueueNamed("nack.late")
			s.claimOne(w1, "nack.late")
			require.NoError(s.t, s.h.BackdateHeartbeat(s.ctx, w1, time.Hour))
			_, jobs, err := s.b.RecoverStaleWorkers(s.ctx, time.Minute, "")
			require.NoError(s.t, err)
			require.Equal(s.t, 1, jobs)
			w2 := s.worker()
			require.Equal(s.t, j.ID, s.claimOne(w2, "nack.late").ID)
			before := snapshot(s.get(j.ID))

			nacked, err := s.nack(w1, j.ID)
			require.NoError(s.t, err)
			assert.Empty(s.t, nacked, "the row is another worker's now")
			assert.Equal(s.t, before, snapshot(s.get(j.ID)), "row untouched")
			got := s.get(j.ID)
			assert.Equal(s.t, backends.StatusProcessing, got.Status)
			require.NotNil(s.t, got.WorkerID)
			assert.Equal(s.t, w2, *got.WorkerID)
			assert.Equal(s.t, 2, got.Attempts)

			// Its holder's own NACK still lands.
			nacked, err = s.nack(w2, j.ID)
			require.NoError(s.t, err)
			assert.Equal(s.t, []string{j.ID}, nacked)
		}},
		{"nack/only the rows of the worker named", func(s *suite) {
			w1, w2 := s.worker(), s.worker()
			mine := s.enqueueNamed("nack.mine")
			theirs := s.enqueueNamed("nack.theirs")
			s.claimOne(w1, "nack.mine")
			s.claimOne(w2, "nack.theirs")
			theirsBefore := snapshot(s.get(theirs.ID))
			nacked, err := s.nack(w1, mine.ID, theirs.ID)
			require.NoError(s.t, err)
			assert.Equal(s.t, []string{mine.ID}, nacked)
			assert.Equal(s.t, backends.StatusQueued, s.get(mine.ID).Status)
			assert.Equal(s.t, theirsBefore, snapshot(s.get(theirs.ID)), "another worker's row untouched")
		}},
		{"snooze/restores the attempt and reschedules", func(s *suite) {
			w := s.worker()
			j := s.enqueueNamed("snooze.one")
			s.claimOne(w, "snooze.one")
			applied := s.complete(w, backends.Completion{JobID: j.ID, Outcome: backends.OutcomeSnooze,
				Reason: "rate limited", Delay: time.Minute})
			assert.Equal(s.t, []string{j.ID}, applied)
			got := s.get(j.ID)
			assert.Equal(s.t, backends.StatusQueued, got.Status)
			assert.Equal(s.t, 0, got.Attempts)
			approxNow(s.t, time.Minute, got.ScheduledAt, "scheduled_at")
			require.NotNil(s.t, got.LastError)
			assert.Equal(s.t, "SNOOZE: rate limited", *got.LastError)
			assert.Nil(s.t, got.WorkerID)
		}},
		{"snooze/gives back exactly one attempt; a row whose attempts changed under its holder is not written", func(s *suite) {
			w := s.worker()
			const name = "snooze.attempts"
			j := s.enqueueNamed(name)
			// Failed once (attempts 1), then claimed again (2) and snoozed: 1.
			s.claimOne(w, name)
			s.complete(w, backends.Completion{JobID: j.ID, Outcome: backends.OutcomeRetry, Error: "e"})
			s.claimOne(w, name)
			s.complete(w, backends.Completion{JobID: j.ID, Outcome: backends.OutcomeSnooze, Reason: "wait"})
			assert.Equal(s.t, 1, s.get(j.ID).Attempts, "one attempt given back")

			// A processing row set to attempts 0 under its holder (by hand,
			// or another program) is not the attempt the holder claimed:
			// the write names attempt 2 and changes nothing.
			time.Sleep(10 * time.Millisecond) // a zero delay: scheduled_at = now must be in the past
			held := s.claimOne(w, name)
			require.NoError(s.t, s.h.SetRawAttempts(s.ctx, j.ID, 0))
			assert.Empty(s.t, s.complete(w, backends.Completion{JobID: j.ID, Attempts: held.Attempts, Outcome: backends.OutcomeSnooze, Reason: "wait"}))
			got := s.get(j.ID)
			assert.Equal(s.t, backends.StatusProcessing, got.Status)
			assert.Equal(s.t, 0, got.Attempts)
		}},
		{"snooze/last_error is SNOOZE alone without a reason, truncated like any error", func(s *suite) {
			w := s.worker()
			j := s.enqueueNamed("snooze.bare")
			s.claimOne(w, "snooze.bare")
			s.complete(w, backends.Completion{JobID: j.ID, Outcome: backends.OutcomeSnooze})
			got := s.get(j.ID)
			require.NotNil(s.t, got.LastError)
			assert.Equal(s.t, "SNOOZE", *got.LastError, "as Soniq's reschedule_job writes it")

			time.Sleep(10 * time.Millisecond) // a zero delay: scheduled_at = now must be in the past
			s.claimOne(w, "snooze.bare")
			s.complete(w, backends.Completion{JobID: j.ID, Outcome: backends.OutcomeSnooze,
				Reason: strings.Repeat("r", 2*backends.MaxErrorBytes)})
			got = s.get(j.ID)
			require.NotNil(s.t, got.LastError)
			assert.Equal(s.t, backends.MaxErrorBytes, len(*got.LastError), "last_error length")
			assert.True(s.t, strings.HasPrefix(*got.LastError, "SNOOZE: rrr"), "starts %.20q", *got.LastError)
		}},
		{"snooze/delay capped at MaxSnooze", func(s *suite) {
			w := s.worker()
			j := s.enqueueNamed("snooze.cap")
			s.claimOne(w, "snooze.cap")
			s.complete(w, backends.Completion{JobID: j.ID, Outcome: backends.OutcomeSnooze,
				Reason: "later", Delay: 3 * backends.MaxSnooze})
			approxNow(s.t, backends.MaxSnooze, s.get(j.ID).ScheduledAt, "scheduled_at")
		}},
		{"complete/batch of 50 mixed outcomes", func(s *suite) {
			const n = 50
			w := s.worker()
			for i := range n {
				s.enqueue(backends.EnqueueParams{Name: "batch", Args: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))})
			}
			claimed := s.claim(backends.ClaimParams{WorkerID: w, Limit: n})
			require.Len(s.t, claimed, n)
			outcomes := []backends.Outcome{backends.OutcomeDone, backends.OutcomeRetry,
				backends.OutcomeDeadLetter, backends.OutcomeSnooze}
			cs := make([]backends.Completion, n)
			for i, j := range claimed {
				cs[i] = backends.Completion{JobID: j.ID, Outcome: outcomes[i%len(outcomes)],
					Result: json.RawMessage(fmt.Sprintf(`{"r":%d}`, i)), ResultTTL: time.Hour,
					Error: fmt.Sprintf("err %d", i), Reason: fmt.Sprintf("reason %d", i), Delay: time.Hour}
			}
			applied := s.complete(w, cs...)
			assert.ElementsMatch(s.t, ids(claimed), applied)

			dead := map[string]backends.DeadLetterJob{}
			for _, d := range s.deadLetters() {
				dead[d.ID] = d
			}
			for i, c := range cs {
				switch c.Outcome {
				case backends.OutcomeDone:
					got := s.get(c.JobID)
					assert.Equal(s.t, backends.StatusDone, got.Status)
					assert.JSONEq(s.t, fmt.Sprintf(`{"r":%d}`, i), string(got.Result))
				case backends.OutcomeRetry:
					got := s.get(c.JobID)
					assert.Equal(s.t, backends.StatusQueued, got.Status)
					assert.Equal(s.t, 1, got.Attempts)
					require.NotNil(s.t, got.LastError)
					assert.Equal(s.t, c.Error, *got.LastError)
				case backends.OutcomeDeadLetter:
					s.requireGone(c.JobID)
					require.Contains(s.t, dead, c.JobID)
					assert.Equal(s.t, c.Reason, dead[c.JobID].Reason)
					require.NotNil(s.t, dead[c.JobID].LastError)
					assert.Equal(s.t, c.Error, *dead[c.JobID].LastError)
				case backends.OutcomeSnooze:
					got := s.get(c.JobID)
					assert.Equal(s.t, 0, got.Attempts)
					require.NotNil(s.t, got.LastError)
					assert.Equal(s.t, "SNOOZE: "+c.Reason, *got.LastError)
				}
			}
			assert.Equal(s.t, backends.Stats{Total: n, Queued: 25, Done: 13, DeadLetter: 12}, s.stats())
		}},
	}
	return append(cases, guardCases()...)
}

// guardCases: a completion whose row was NACKed, recovered by stale-worker
// recovery, or re-claimed by another worker changes nothing.
func guardCases() []testCase {
	scenarios := []struct {
		name string
		// lose takes the row away from worker w1.
		lose func(s *suite, w1, jobID, name string)
	}{
		{"nacked", func(s *suite, w1, jobID, _ string) {
			n, err := s.nack(w1, jobID)
			require.NoError(s.t, err)
			require.Equal(s.t, []string{jobID}, n)
		}},
		{"recovered", func(s *suite, w1, _, _ string) {
			require.NoError(s.t, s.h.BackdateHeartbeat(s.ctx, w1, time.Hour))
			workers, jobs, err := s.b.RecoverStaleWorkers(s.ctx, time.Minute, "")
			require.NoError(s.t, err)
			require.Equal(s.t, 1, workers)
			require.Equal(s.t, 1, jobs)
		}},
		{"re-claimed", func(s *suite, w1, jobID, name string) {
			_, err := s.nack(w1, jobID)
			require.NoError(s.t, err)
			time.Sleep(10 * time.Millisecond) // scheduled_at = now must be in the past
			w2 := s.worker()
			require.Equal(s.t, jobID, s.claimOne(w2, name).ID)
		}},
	}
	outcomes := []backends.Completion{
		{Outcome: backends.OutcomeDone, Result: json.RawMessage(`{"late":true}`), ResultTTL: time.Hour},
		{Outcome: backends.OutcomeDone}, // ttl 0 would delete
		{Outcome: backends.OutcomeRetry, Error: "late failure", Delay: time.Hour},
		{Outcome: backends.OutcomeDeadLetter, Error: "late", Reason: backends.ReasonPermanentFailure},
		{Outcome: backends.OutcomeSnooze, Reason: "late", Delay: time.Hour},
	}
	var cases []testCase
	for _, sc := range scenarios {
		for _, oc := range outcomes {
			name := fmt.Sprintf("guard/%s row ignores a late %s", sc.name, oc.Outcome)
			if oc.Outcome == backends.OutcomeDone && oc.ResultTTL == 0 {
				name += " with ttl 0"
			}
			cases = append(cases, testCase{name, func(s *suite) {
				const jobName = "guarded"
				w1 := s.worker()
				j := s.enqueueNamed(jobName)
				s.claimOne(w1, jobName)
				sc.lose(s, w1, j.ID, jobName)
				before := snapshot(s.get(j.ID))

				c := oc
				c.JobID = j.ID
				applied := s.complete(w1, c)
				assert.Empty(s.t, applied)
				assert.Equal(s.t, before, snapshot(s.get(j.ID)), "row unchanged")
				assert.Empty(s.t, s.deadLetters())
			}})
		}
	}
	return cases
}
