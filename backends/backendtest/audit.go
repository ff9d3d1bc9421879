package backendtest

import (
	"slices"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// auditCases check what a worker's self-audit reads and writes: the rows
// processing under it, and the guarded give-back of those it does not know.
func auditCases() []testCase {
	return []testCase{
		{"audit/processing jobs are the worker's processing rows only", func(s *suite) {
			w, other := s.worker(), s.worker()
			s.enqueueNamed("audit.a")
			mine1 := s.claimOne(w, "audit.a")
			s.enqueueNamed("audit.a")
			mine2 := s.claimOne(w, "audit.a")
			s.enqueueNamed("audit.b")
			s.claimOne(other, "audit.b")
			s.enqueueNamed("audit.c") // queued, nobody's
			s.enqueueNamed("audit.d")
			done := s.claimOne(w, "audit.d")
			s.complete(w, backends.Completion{JobID: done.ID, Outcome: backends.OutcomeDone})

			got, err := s.b.ProcessingJobs(s.ctx, w)
			require.NoError(s.t, err)
			var ids []string
			for _, j := range got {
				ids = append(ids, j.ID)
				assert.Equal(s.t, backends.StatusProcessing, j.Status)
				assert.Equal(s.t, 1, j.Attempts)
				assert.Equal(s.t, "audit.a", j.Name)
			}
			want := []string{mine1.ID, mine2.ID}
			slices.Sort(ids)
			slices.Sort(want)
			assert.Equal(s.t, want, ids)

			none, err := s.b.ProcessingJobs(s.ctx, s.worker())
			require.NoError(s.t, err)
			assert.Empty(s.t, none)
		}},
		{"audit/release gives back only rows still held at the attempt seen", func(s *suite) {
			w, other := s.worker(), s.worker()
			s.enqueueNamed("rel.a")
			a := s.claimOne(w, "rel.a")
			s.enqueueNamed("rel.b")
			b := s.claimOne(w, "rel.b")
			s.enqueueNamed("rel.c")
			c := s.claimOne(w, "rel.c")
			s.enqueueNamed("rel.d")
			d := s.claimOne(other, "rel.d")
			seen, err := s.b.ProcessingJobs(s.ctx, w)
			require.NoError(s.t, err)
			require.Len(s.t, seen, 3)

			// Since the audit read them: b finished, c was given back and
			// claimed again (attempt 2). d was never this worker's.
			s.complete(w, backends.Completion{JobID: b.ID, Outcome: backends.OutcomeDone})
			_, err = s.nack(w, c.ID)
			require.NoError(s.t, err)
			c2 := s.claimOne(w, "rel.c")
			require.Equal(s.t, 2, c2.Attempts)

			released, err := s.b.ReleaseJobs(s.ctx, w, append(seen, d))
			require.NoError(s.t, err)
			assert.Equal(s.t, []string{a.ID}, released)

			got := s.get(a.ID)
			assert.Equal(s.t, backends.StatusQueued, got.Status)
			assert.Nil(s.t, got.WorkerID)
			assert.Equal(s.t, a.Attempts, got.Attempts, "attempts untouched")
			require.NotNil(s.t, got.ScheduledAt)
			if got, err := s.b.Get(s.ctx, b.ID); err == nil { // a done row may be deleted at once
				assert.Equal(s.t, backends.StatusDone, got.Status)
			}
			assert.Equal(s.t, backends.StatusProcessing, s.get(c.ID).Status, "claimed again since: left alone")
			assert.Equal(s.t, backends.StatusProcessing, s.get(d.ID).Status, "another worker's: left alone")

			again, err := s.b.ReleaseJobs(s.ctx, w, seen)
			require.NoError(s.t, err)
			assert.Empty(s.t, again, "idempotent")
		}},
	}
}
