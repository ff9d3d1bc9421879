package backendtest

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

func deadLetterCases() []testCase {
	return []testCase{
		{"dead letter/list newest move first, limit", func(s *suite) {
			for i := range 3 {
				s.deadLetterJob(fmt.Sprintf("dlq.list.%d", i))
			}
			all := s.deadLetters()
			require.Len(s.t, all, 3)
			for i := 1; i < len(all); i++ {
				assert.False(s.t, all[i].MovedAt.After(all[i-1].MovedAt), "ordered by moved_to_dead_letter_at desc")
			}
			two, err := s.b.ListDeadLetter(s.ctx, 2)
			require.NoError(s.t, err)
			assert.Len(s.t, two, 2)
		}},
		{"dead letter/replay enqueues a fresh copy and keeps the audit row", func(s *suite) {
			// Soniq's DeadLetterService.replay (features/dead_letter.py)
			// inserts a new soniq_jobs row (fresh id, attempts 0, queued,
			// scheduled_at NOW()) and, in the same transaction, bumps the DLQ
			// row's resurrection_count and last_resurrection_at. The DLQ row
			// stays as the audit trail, so one row can be replayed again.
			w := s.worker()
			j := s.enqueue(backends.EnqueueParams{Name: "dlq.replay", Args: json.RawMessage(`{"to":"a@b"}`),
				Queue: "mail", Priority: intp(3), MaxAttempts: intp(4)})
			s.claimOne(w, "dlq.replay")
			s.complete(w, backends.Completion{JobID: j.ID, Outcome: backends.OutcomeDeadLetter,
				Error: "bad", Reason: backends.ReasonPermanentFailure})

			newID, err := s.b.ReplayDeadLetter(s.ctx, j.ID)
			require.NoError(s.t, err)
			assert.NotEqual(s.t, j.ID, newID, "a fresh id")
			assert.Regexp(s.t, uuidPattern, newID)
			got := s.get(newID)
			assert.Equal(s.t, backends.StatusQueued, got.Status)
			assert.Equal(s.t, 0, got.Attempts)
			assert.Equal(s.t, "dlq.replay", got.Name)
			assert.JSONEq(s.t, `{"to":"a@b"}`, string(got.Args))
			assert.Equal(s.t, "mail", got.Queue)
			assert.Equal(s.t, 3, got.Priority)
			assert.Equal(s.t, 4, got.MaxAttempts)
			assert.Nil(s.t, got.WorkerID)
			if got.ScheduledAt != nil {
				assert.False(s.t, got.ScheduledAt.After(time.Now().Add(tolerance)), "runnable at once")
			}

			d := s.deadLetter(j.ID)
			assert.Equal(s.t, 1, d.ResurrectionCount)
			approxNow(s.t, 0, d.LastResurrectionAt, "last_resurrection_at")
			assert.Equal(s.t, backends.Stats{Total: 2, Queued: 1, DeadLetter: 1}, s.stats())

			time.Sleep(10 * time.Millisecond) // the replayed row's scheduled_at must be in the past
			c := s.claimOne(w, "dlq.replay")
			assert.Equal(s.t, newID, c.ID)

			second, err := s.b.ReplayDeadLetter(s.ctx, j.ID)
			require.NoError(s.t, err)
			assert.NotEqual(s.t, newID, second)
			assert.Equal(s.t, 2, s.deadLetter(j.ID).ResurrectionCount)
		}},
		{"dead letter/replay of a missing row is ErrNotFound", func(s *suite) {
			_, err := s.b.ReplayDeadLetter(s.ctx, newUUID(s.t))
			require.ErrorIs(s.t, err, backends.ErrNotFound)
			assert.Equal(s.t, backends.Stats{}, s.stats())
		}},
		{"dead letter/purge", func(s *suite) {
			keep := s.deadLetterJob("dlq.keep")
			gone := s.deadLetterJob("dlq.gone")
			require.NoError(s.t, s.b.PurgeDeadLetter(s.ctx, gone.ID))
			dl := s.deadLetters()
			require.Len(s.t, dl, 1)
			assert.Equal(s.t, keep.ID, dl[0].ID)
			require.ErrorIs(s.t, s.b.PurgeDeadLetter(s.ctx, gone.ID), backends.ErrNotFound)
			require.ErrorIs(s.t, s.b.PurgeDeadLetter(s.ctx, newUUID(s.t)), backends.ErrNotFound)
			assert.Equal(s.t, backends.Stats{Total: 1, DeadLetter: 1}, s.stats())
		}},
	}
}
