package backendtest

import (
	"context"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

func miscCases() []testCase {
	return []testCase{
		{"schema/store rejects status dead_letter", func(s *suite) {
			j := s.enqueueNamed("raw")
			before := snapshot(s.get(j.ID))
			assert.Error(s.t, s.h.SetRawStatus(s.ctx, j.ID, "dead_letter"))
			assert.Equal(s.t, before, snapshot(s.get(j.ID)), "row unchanged")
			assert.Error(s.t, s.h.InsertRawStatus(s.ctx, "dead_letter"))
			assert.Equal(s.t, backends.Stats{Total: 1, Queued: 1}, s.stats(), "nothing inserted")

			// The hooks themselves work: valid statuses go through.
			require.NoError(s.t, s.h.SetRawStatus(s.ctx, j.ID, backends.StatusCancelled))
			assert.Equal(s.t, backends.StatusCancelled, s.get(j.ID).Status)
			require.NoError(s.t, s.h.InsertRawStatus(s.ctx, backends.StatusDone))
			assert.Equal(s.t, backends.Stats{Total: 2, Done: 1, Cancelled: 1}, s.stats())
		}},
		{"schema/migrate again is harmless", func(s *suite) {
			j := s.enqueueNamed("kept")
			migrate := s.b.Migrate
			if s.h.Migrate != nil {
				migrate = s.h.Migrate
			}
			require.NoError(s.t, migrate(s.ctx))
			require.NoError(s.t, s.b.Ping(s.ctx))
			assert.Equal(s.t, "kept", s.get(j.ID).Name)
		}},
		{"leader/single holder, re-acquired after release", func(s *suite) {
			release, ok, err := s.b.TryLeader(s.ctx)
			require.NoError(s.t, err)
			require.True(s.t, ok)
			require.NotNil(s.t, release)

			release2, ok2, err := s.b.TryLeader(s.ctx)
			require.NoError(s.t, err)
			if ok2 {
				release2(s.ctx)
			}
			assert.False(s.t, ok2, "a second leader while the first holds it")

			release(s.ctx)
			release3, ok3, err := s.b.TryLeader(s.ctx)
			require.NoError(s.t, err)
			require.True(s.t, ok3, "re-acquire after release")
			release3(s.ctx)
		}},
		{"subscribe/delivers the queue and closes on cancel", func(s *suite) {
			ctx, cancel := context.WithCancel(s.ctx)
			defer cancel()
			ch, err := s.b.Subscribe(ctx)
			require.NoError(s.t, err)
			s.enqueue(backends.EnqueueParams{Name: "notify", Queue: "wakeup"})

			deadline := time.After(5 * time.Second)
		wait:
			for {
				select {
				case q, ok := <-ch:
					require.True(s.t, ok, "channel closed before delivery")
					if q == (backends.Wakeup{Queue: "wakeup"}) {
						break wait
					}
				case <-deadline:
					require.FailNow(s.t, "no notification within 5s")
				}
			}

			cancel()
			deadline = time.After(5 * time.Second)
			for {
				select {
				case _, ok := <-ch:
					if !ok {
						return
					}
				case <-deadline:
					require.FailNow(s.t, "channel not closed within 5s of cancel")
				}
			}
		}},
	}
}
