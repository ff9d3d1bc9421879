package backendtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// childrenCases check Completion.Children: jobs a run made, written with
// its done result and only when that write's guard matched.
func childrenCases() []testCase {
	return []testCase{
		{"children/written with a matching done, options and notification included", func(s *suite) {
			w := s.worker()
			parent := s.enqueueNamed("kids.parent")
			s.claimOne(w, "kids.parent")
			ctx, cancel := context.WithCancel(s.ctx)
			defer cancel()
			sub, err := s.b.Subscribe(ctx)
			if errors.Is(err, backends.ErrNoWakeups) {
				sub = nil
			} else {
				require.NoError(s.t, err)
			}
			plain, full := backends.NewID(), backends.NewID()
			applied := s.complete(w, backends.Completion{JobID: parent.ID, Outcome: backends.OutcomeDone,
				ResultTTL: time.Hour, Children: []backends.EnqueueParams{
					{ID: plain, Name: "kids.plain", Args: json.RawMessage(`{"n": 1}`), ProducerID: w},
					{ID: full, Name: "kids.full", Args: json.RawMessage(`{"b": 2, "a": 1}`), Queue: "kids",
						Priority: ptr(7), MaxAttempts: ptr(9), Delay: time.Minute, UniqueJob: true,
						DedupKey: "kids-full"},
				}})
			assert.Equal(s.t, []string{parent.ID}, applied)
			assert.Equal(s.t, backends.StatusDone, s.get(parent.ID).Status)

			p := s.get(plain)
			assert.Equal(s.t, "kids.plain", p.Name)
			assert.Equal(s.t, backends.StatusQueued, p.Status)
			assert.Equal(s.t, 0, p.Attempts)
			assert.Equal(s.t, "default", p.Queue)
			assert.Equal(s.t, 100, p.Priority)
			assert.Equal(s.t, 3, p.MaxAttempts)
			assert.JSONEq(s.t, `{"n": 1}`, string(p.Args))
			require.NotNil(s.t, p.ProducerID)
			assert.Equal(s.t, w, *p.ProducerID)
			assert.Nil(s.t, p.ScheduledAt)

			f := s.get(full)
			assert.Equal(s.t, "kids", f.Queue)
			assert.Equal(s.t, 7, f.Priority)
			assert.Equal(s.t, 9, f.MaxAttempts)
			assert.True(s.t, f.UniqueJob)
			require.NotNil(s.t, f.DedupKey)
			assert.Equal(s.t, "kids-full", *f.DedupKey)
			hash, err := backends.ArgsHash(json.RawMessage(`{"b": 2, "a": 1}`))
			require.NoError(s.t, err)
			require.NotNil(s.t, f.ArgsHash)
			assert.Equal(s.t, hash, *f.ArgsHash, "args_hash as Soniq's enqueue writes it")
			approxNow(s.t, time.Minute, f.ScheduledAt, "scheduled_at")

			if sub == nil {
				return
			}
			deadline := time.After(5 * time.Second)
			for {
				select {
				case q := <-sub:
					if q == (backends.Wakeup{Queue: "kids"}) {
						return
					}
				case <-deadline:
					require.FailNow(s.t, "no new-job notification for the child's queue within 5s")
				}
			}
		}},
		{"children/written with a done that deletes its row (result_ttl 0)", func(s *suite) {
			w := s.worker()
			parent := s.enqueueNamed("kids.ttl0")
			s.claimOne(w, "kids.ttl0")
			kid := backends.NewID()
			s.complete(w, backends.Completion{JobID: parent.ID, Outcome: backends.OutcomeDone,
				Children: []backends.EnqueueParams{{ID: kid, Name: "kids.ttl0.child"}}})
			s.requireGone(parent.ID)
			assert.Equal(s.t, backends.StatusQueued, s.get(kid).Status)
		}},
		{"children/none when the done guard fails", func(s *suite) {
			w, other := s.worker(), s.worker()
			queued := s.enqueueNamed("kids.queued") // never claimed
			stolen := s.enqueueNamed("kids.stolen") // claimed by another worker
			s.claimOne(other, "kids.stolen")
			kids := []string{backends.NewID(), backends.NewID(), backends.NewID()}
			applied := s.complete(w,
				backends.Completion{JobID: queued.ID, Outcome: backends.OutcomeDone, ResultTTL: time.Hour,
					Children: []backends.EnqueueParams{{ID: kids[0], Name: "kids.no"}}},
				backends.Completion{JobID: stolen.ID, Outcome: backends.OutcomeDone,
					Children: []backends.EnqueueParams{{ID: kids[1], Name: "kids.no"}}},
				backends.Completion{JobID: backends.NewID(), Outcome: backends.OutcomeDone, ResultTTL: time.Hour,
					Children: []backends.EnqueueParams{{ID: kids[2], Name: "kids.no"}}})
			assert.Empty(s.t, applied)
			for _, k := range kids {
				s.requireGone(k)
			}
			assert.Equal(s.t, backends.StatusQueued, s.get(queued.ID).Status)
			assert.Equal(s.t, backends.StatusProcessing, s.get(stolen.ID).Status)
		}},
		{"children/none from a done for an earlier attempt of a row this worker holds again", func(s *suite) {
			// A done retried after its first try's reply was lost cannot
			// exist (the first try ended the row), but a done naming an
			// earlier attempt must still write nothing: children belong to
			// the attempt whose done the guard let through.
			w := s.worker()
			kept, deleted := s.enqueueNamed("kids.again.kept"), s.enqueueNamed("kids.again.deleted")
			for _, name := range []string{"kids.again.kept", "kids.again.deleted"} {
				first := s.claimOne(w, name)
				s.complete(w, backends.Completion{JobID: first.ID, Attempts: first.Attempts, Outcome: backends.OutcomeRetry, Error: "e"})
				require.Equal(s.t, 2, s.claimOne(w, name).Attempts)
			}
			kids := []string{backends.NewID(), backends.NewID()}
			applied := s.complete(w,
				backends.Completion{JobID: kept.ID, Attempts: 1, Outcome: backends.OutcomeDone, ResultTTL: time.Hour,
					Children: []backends.EnqueueParams{{ID: kids[0], Name: "kids.no"}}},
				backends.Completion{JobID: deleted.ID, Attempts: 1, Outcome: backends.OutcomeDone,
					Children: []backends.EnqueueParams{{ID: kids[1], Name: "kids.no"}}})
			assert.Empty(s.t, applied)
			for _, k := range kids {
				s.requireGone(k)
			}
			for _, id := range []string{kept.ID, deleted.ID} {
				assert.Equal(s.t, backends.StatusProcessing, s.get(id).Status)
				assert.Equal(s.t, 2, s.get(id).Attempts)
			}
		}},
		{"children/a dedup or unique hit writes that child only, leaving the queued row", func(s *suite) {
			w := s.worker()
			dup := s.enqueue(backends.EnqueueParams{Name: "kids.dedup", DedupKey: "kids-k", Args: json.RawMessage(`{"x":1}`)})
			uniq := s.enqueue(backends.EnqueueParams{Name: "kids.unique", UniqueJob: true, Args: json.RawMessage(`{"y":2}`)})
			parent := s.enqueueNamed("kids.hits")
			s.claimOne(w, "kids.hits")
			byKey, byArgs, fresh := backends.NewID(), backends.NewID(), backends.NewID()
			applied := s.complete(w, backends.Completion{JobID: parent.ID, Outcome: backends.OutcomeDone,
				ResultTTL: time.Hour, Children: []backends.EnqueueParams{
					{ID: byKey, Name: "kids.dedup", DedupKey: "kids-k", Args: json.RawMessage(`{"x":2}`)},
					{ID: byArgs, Name: "kids.unique", UniqueJob: true, Args: json.RawMessage(`{"y": 2}`)},
					{ID: fresh, Name: "kids.fresh"},
				}})
			assert.Equal(s.t, []string{parent.ID}, applied, "a conflicting child does not fail its parent's done")
			s.requireGone(byKey)
			s.requireGone(byArgs)
			assert.Equal(s.t, backends.StatusQueued, s.get(fresh).Status)
			assert.JSONEq(s.t, `{"x":1}`, string(s.get(dup.ID).Args), "the queued duplicate is left as it was")
			assert.Equal(s.t, backends.StatusQueued, s.get(uniq.ID).Status)
			assert.EqualValues(s.t, 3, s.stats().Queued, "two queued rows and the fresh child")
		}},
		{"children/two children of one batch with one dedup key: the first is written", func(s *suite) {
			w := s.worker()
			a, b := s.enqueueNamed("kids.same.a"), s.enqueueNamed("kids.same.b")
			s.claimOne(w, "kids.same.a")
			s.claimOne(w, "kids.same.b")
			ka, kb := backends.NewID(), backends.NewID()
			applied := s.complete(w,
				backends.Completion{JobID: a.ID, Outcome: backends.OutcomeDone, ResultTTL: time.Hour,
					Children: []backends.EnqueueParams{{ID: ka, Name: "kids.same", DedupKey: "same"}}},
				backends.Completion{JobID: b.ID, Outcome: backends.OutcomeDone, ResultTTL: time.Hour,
					Children: []backends.EnqueueParams{{ID: kb, Name: "kids.same", DedupKey: "same"}}})
			assert.ElementsMatch(s.t, []string{a.ID, b.ID}, applied)
			_, errA := s.b.Get(s.ctx, ka)
			_, errB := s.b.Get(s.ctx, kb)
			assert.True(s.t, (errA == nil) != (errB == nil), "exactly one of the two is written: %v, %v", errA, errB)
		}},
		{"children/many children of many parents in one batch", func(s *suite) {
			w := s.worker()
			const parents, each = 4, 150
			var cs []backends.Completion
			var kids []string
			for i := range parents {
				p := s.enqueueNamed(fmt.Sprintf("kids.many.%d", i))
				s.claimOne(w, p.Name)
				c := backends.Completion{JobID: p.ID, Outcome: backends.OutcomeDone, ResultTTL: time.Hour}
				if i%2 == 1 {
					c.ResultTTL = 0
				}
				for k := range each {
					id := backends.NewID()
					kids = append(kids, id)
					c.Children = append(c.Children, backends.EnqueueParams{ID: id, Name: "kids.many.child",
						Args: json.RawMessage(fmt.Sprintf(`{"parent": %d, "k": %d}`, i, k))})
				}
				cs = append(cs, c)
			}
			// A failed parent in the same batch: its children are not written.
			failed := s.enqueueNamed("kids.many.failed")
			s.claimOne(w, "kids.many.failed")
			lost := backends.NewID()
			cs = append(cs, backends.Completion{JobID: failed.ID, Outcome: backends.OutcomeRetry, Error: "e",
				Children: []backends.EnqueueParams{{ID: lost, Name: "kids.many.child"}}})
			applied := s.complete(w, cs...)
			assert.Len(s.t, applied, parents+1)
			assert.EqualValues(s.t, parents*each+1, s.stats().Queued, "every child and the requeued parent")
			for _, k := range []string{kids[0], kids[len(kids)/2], kids[len(kids)-1]} {
				assert.Equal(s.t, "kids.many.child", s.get(k).Name)
			}
			s.requireGone(lost)
		}},
		{"children/written by CompleteAndClaim where the backend offers it", func(s *suite) {
			cc := s.completeClaimer()
			w := s.worker()
			parent := s.enqueueNamed("kids.cc")
			s.claimOne(w, "kids.cc")
			kid := backends.NewID()
			applied, _, claimErr, err := cc.CompleteAndClaim(s.ctx, w, []backends.Completion{{JobID: parent.ID,
				Attempts: 1, Outcome: backends.OutcomeDone, ResultTTL: time.Hour,
				Children: []backends.EnqueueParams{{ID: kid, Name: "kids.cc.child"}}}},
				backends.ClaimParams{WorkerID: w, Names: []string{"kids.none"}, Limit: 1})
			require.NoError(s.t, err)
			require.NoError(s.t, claimErr)
			assert.Equal(s.t, []string{parent.ID}, applied)
			assert.Equal(s.t, backends.StatusQueued, s.get(kid).Status)
		}},
		{"children/args with a NUL escape do not fail the batch", func(s *suite) {
			w := s.worker()
			a, b := s.enqueueNamed("kids.nul.a"), s.enqueueNamed("kids.nul.b")
			s.claimOne(w, "kids.nul.a")
			s.claimOne(w, "kids.nul.b")
			kid := backends.NewID()
			applied := s.complete(w,
				backends.Completion{JobID: a.ID, Outcome: backends.OutcomeDone, ResultTTL: time.Hour,
					Children: []backends.EnqueueParams{{ID: kid, Name: "kids.nul", Args: json.RawMessage(`{"s":"a\u0000b"}`)}}},
				backends.Completion{JobID: b.ID, Outcome: backends.OutcomeDone, ResultTTL: time.Hour})
			assert.ElementsMatch(s.t, []string{a.ID, b.ID}, applied)
			assert.Equal(s.t, backends.StatusQueued, s.get(kid).Status)
		}},
		{"children/enqueue takes the caller's id", func(s *suite) {
			id := backends.NewID()
			j := s.enqueue(backends.EnqueueParams{ID: id, Name: "kids.own.id"})
			assert.Equal(s.t, id, j.ID)
			_, err := s.b.Enqueue(s.ctx, backends.EnqueueParams{ID: "not-a-uuid", Name: "kids.bad.id"})
			assert.Error(s.t, err, "an id that is no uuid is refused")
			dupID := s.enqueue(backends.EnqueueParams{ID: backends.NewID(), Name: "kids.own.dedup", DedupKey: "own"})
			again := s.enqueue(backends.EnqueueParams{ID: backends.NewID(), Name: "kids.own.dedup", DedupKey: "own"})
			assert.Equal(s.t, dupID.ID, again.ID, "a dedup hit returns the queued duplicate's id")
		}},
	}
}

func ptr[T any](v T) *T { return &v }
