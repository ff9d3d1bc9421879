package backendtest

import (
	"encoding/json"
	"errors"
	"regexp"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

var uuidPattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

func enqueueCases() []testCase {
	return []testCase{
		{"enqueue/defaults", func(s *suite) {
			j := s.enqueueNamed("enq.defaults")
			assert.Regexp(s.t, uuidPattern, j.ID)
			got := s.get(j.ID)
			assert.Equal(s.t, j.ID, got.ID)
			assert.Equal(s.t, "enq.defaults", got.Name)
			assert.JSONEq(s.t, `{}`, string(got.Args))
			assert.Equal(s.t, backends.StatusQueued, got.Status)
			assert.Equal(s.t, "default", got.Queue)
			assert.Equal(s.t, 100, got.Priority)
			assert.Equal(s.t, 3, got.MaxAttempts)
			assert.Equal(s.t, 0, got.Attempts)
			assert.False(s.t, got.UniqueJob)
			assert.Nil(s.t, got.DedupKey)
			assert.Nil(s.t, got.ScheduledAt)
			assert.Nil(s.t, got.ExpiresAt)
			assert.Nil(s.t, got.LastError)
			assert.Nil(s.t, got.Result)
			assert.Nil(s.t, got.ProducerID)
			assert.Nil(s.t, got.WorkerID)
			assert.WithinDuration(s.t, time.Now(), got.CreatedAt, tolerance)
			assert.WithinDuration(s.t, time.Now(), got.UpdatedAt, tolerance)
		}},
		{"enqueue/explicit fields", func(s *suite) {
			j := s.enqueue(backends.EnqueueParams{
				Name: "enq.explicit", Args: json.RawMessage(`{"n": 7, "s": "é"}`), Queue: "emails",
				Priority: intp(5), MaxAttempts: intp(9), ProducerID: "producer-1",
			})
			got := s.get(j.ID)
			assert.JSONEq(s.t, `{"n": 7, "s": "é"}`, string(got.Args))
			assert.Equal(s.t, "emails", got.Queue)
			assert.Equal(s.t, 5, got.Priority)
			assert.Equal(s.t, 9, got.MaxAttempts)
			require.NotNil(s.t, got.ProducerID)
			assert.Equal(s.t, "producer-1", *got.ProducerID)
			// Priority 0 is a real priority (runs first), not "unset".
			z := s.get(s.enqueue(backends.EnqueueParams{Name: "enq.zero", Priority: intp(0)}).ID)
			assert.Equal(s.t, 0, z.Priority)
		}},
		{"enqueue/delay sets scheduled_at in the future", func(s *suite) {
			j := s.enqueue(backends.EnqueueParams{Name: "enq.delay", Delay: time.Hour})
			got := s.get(j.ID)
			approxNow(s.t, time.Hour, got.ScheduledAt, "scheduled_at")
			assert.Equal(s.t, backends.StatusQueued, got.Status)
		}},
		{"enqueue/dedup_key conflict returns the queued row", func(s *suite) {
			a := s.enqueue(backends.EnqueueParams{Name: "enq.dedup", DedupKey: "k1"})
			b := s.enqueue(backends.EnqueueParams{Name: "enq.dedup", DedupKey: "k1", Args: json.RawMessage(`{"x":1}`)})
			assert.Equal(s.t, a.ID, b.ID)
			c := s.enqueue(backends.EnqueueParams{Name: "enq.dedup", DedupKey: "k2"})
			assert.NotEqual(s.t, a.ID, c.ID)
			got := s.get(a.ID)
			require.NotNil(s.t, got.DedupKey)
			assert.Equal(s.t, "k1", *got.DedupKey)
			assert.Equal(s.t, int64(2), s.stats().Queued)

			// The dedup index covers queued rows only: once claimed, the key is free again.
			w := s.worker()
			claimed := s.claim(backends.ClaimParams{WorkerID: w, Names: []string{"enq.dedup"}, Limit: 10})
			require.Len(s.t, claimed, 2)
			d := s.enqueue(backends.EnqueueParams{Name: "enq.dedup", DedupKey: "k1"})
			assert.NotEqual(s.t, a.ID, d.ID)
		}},
		{"enqueue/unique_job conflict returns the queued row", func(s *suite) {
			a := s.enqueue(backends.EnqueueParams{Name: "enq.unique", UniqueJob: true, Args: json.RawMessage(`{"a":1,"b":[1,2]}`)})
			// Soniq hashes args with sorted keys, so key order does not matter.
			b := s.enqueue(backends.EnqueueParams{Name: "enq.unique", UniqueJob: true, Args: json.RawMessage(`{"b":[1,2], "a":1}`)})
			assert.Equal(s.t, a.ID, b.ID)
			assert.True(s.t, s.get(a.ID).UniqueJob)
			assert.NotNil(s.t, s.get(a.ID).ArgsHash)

			other := s.enqueue(backends.EnqueueParams{Name: "enq.unique", UniqueJob: true, Args: json.RawMessage(`{"a":2}`)})
			assert.NotEqual(s.t, a.ID, other.ID, "different args")
			otherName := s.enqueue(backends.EnqueueParams{Name: "enq.unique2", UniqueJob: true, Args: json.RawMessage(`{"a":1,"b":[1,2]}`)})
			assert.NotEqual(s.t, a.ID, otherName.ID, "different name")
			notUnique := s.enqueue(backends.EnqueueParams{Name: "enq.unique", Args: json.RawMessage(`{"a":1,"b":[1,2]}`)})
			assert.NotEqual(s.t, a.ID, notUnique.ID, "unique_job false never dedupes")
			assert.Equal(s.t, int64(4), s.stats().Queued)

			w := s.worker()
			s.claim(backends.ClaimParams{WorkerID: w, Names: []string{"enq.unique"}, Limit: 10})
			again := s.enqueue(backends.EnqueueParams{Name: "enq.unique", UniqueJob: true, Args: json.RawMessage(`{"a":1,"b":[1,2]}`)})
			assert.NotEqual(s.t, a.ID, again.ID, "uniqueness covers queued rows only")
		}},
		{"enqueue/get of a missing id is ErrNotFound", func(s *suite) {
			_, err := s.b.Get(s.ctx, newUUID(s.t))
			require.Error(s.t, err)
			assert.True(s.t, errors.Is(err, backends.ErrNotFound), "got %v", err)
		}},
		{"cancel/only queued becomes cancelled", func(s *suite) {
			q := s.enqueueNamed("cancel.queued")
			p := s.enqueueNamed("cancel.processing")
			w := s.worker()
			s.claimOne(w, "cancel.processing")
			before := snapshot(s.get(p.ID))

			ok, err := s.b.Cancel(s.ctx, q.ID)
			require.NoError(s.t, err)
			assert.True(s.t, ok)
			assert.Equal(s.t, backends.StatusCancelled, s.get(q.ID).Status)

			ok, err = s.b.Cancel(s.ctx, p.ID)
			require.NoError(s.t, err)
			assert.False(s.t, ok, "a processing job is not cancelled")
			assert.Equal(s.t, before, snapshot(s.get(p.ID)))

			ok, err = s.b.Cancel(s.ctx, q.ID)
			require.NoError(s.t, err)
			assert.False(s.t, ok, "cancelling twice")
		}},
	}
}
