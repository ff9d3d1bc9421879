package backendtest

import (
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// enqueueArgs enqueues a job named name with args.
func (s *suite) enqueueArgs(name, args string) backends.Job {
	s.t.Helper()
	return s.enqueue(backends.EnqueueParams{Name: name, Args: json.RawMessage(args)})
}

// processingByKey counts the rows of names processing, by the key at path
// ("<null>" for the key null).
func (s *suite) processingByKey(path []string, ids []string) map[string]int {
	s.t.Helper()
	out := map[string]int{}
	for _, id := range ids {
		j := s.get(id)
		if j.Status != backends.StatusProcessing {
			continue
		}
		k, ok := backends.LimitKey(j.Args, path)
		if !ok {
			k = "<null>"
		}
		out[k]++
	}
	return out
}

func limitCases() []testCase {
	return []testCase{
		{"limits/concurrent claimers never exceed a scope's cap, at any sample", func(s *suite) {
			const name, cap, rows = "lim.cap", 3, 24
			for i := range rows {
				s.enqueueArgs(name, fmt.Sprintf(`{"i":%d}`, i))
			}
			lim := []backends.ClaimLimit{{Scope: name, Names: []string{name}, Concurrency: cap}}
			var wg sync.WaitGroup
			var mu sync.Mutex
			var samples, maxSeen, done int
			for range 4 {
				w := s.worker()
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 200 {
						jobs, err := s.b.Claim(s.ctx, backends.ClaimParams{WorkerID: w, Names: []string{name}, Limit: 5, Ahead: 5, Limits: lim})
						if !assert.NoError(s.t, err) {
							return
						}
						st, err := s.b.Stats(s.ctx)
						if !assert.NoError(s.t, err) {
							return
						}
						mu.Lock()
						samples++
						maxSeen = max(maxSeen, int(st.Processing))
						finished := done == rows
						mu.Unlock()
						if finished {
							return
						}
						var cs []backends.Completion
						for _, j := range jobs {
							cs = append(cs, backends.Completion{JobID: j.ID, Attempts: j.Attempts, Outcome: backends.OutcomeDone})
						}
						if len(cs) > 0 {
							applied, err := s.b.Complete(s.ctx, w, cs)
							if !assert.NoError(s.t, err) {
								return
							}
							mu.Lock()
							done += len(applied)
							mu.Unlock()
						}
					}
				}()
			}
			wg.Wait()
			assert.LessOrEqual(s.t, maxSeen, cap, "rows processing at some sample (of %d)", samples)
			assert.Equal(s.t, rows, done, "every row ran")
		}},
		{"limits/per key: a key at its cap holds back only its own rows; the key null is one key", func(s *suite) {
			const name, free = "lim.keyed", "lim.free"
			path := []string{"tenant"}
			var ids []string
			for range 5 {
				ids = append(ids, s.enqueueArgs(name, `{"tenant":"a"}`).ID)
			}
			ids = append(ids, s.enqueueArgs(name, `{"tenant":"b"}`).ID, s.enqueueArgs(name, `{"tenant":"b"}`).ID)
			ids = append(ids, s.enqueueArgs(name, `{"tenant":7}`).ID)
			// Missing, null, and non-scalar: all the key null.
			ids = append(ids, s.enqueueArgs(name, `{}`).ID, s.enqueueArgs(name, `{"tenant":null}`).ID, s.enqueueArgs(name, `{"tenant":{"id":1}}`).ID)
			s.enqueueNamed(free)
			s.enqueueNamed(free)
			lim := []backends.ClaimLimit{{Scope: name, Names: []string{name}, Key: path, Concurrency: 1}}
			w := s.worker()
			p := backends.ClaimParams{WorkerID: w, Names: []string{name, free}, Limit: 20, Limits: lim}
			first := s.claim(p)
			got := map[string]int{}
			for _, j := range first {
				if j.Name == free {
					got["free"]++
				}
			}
			assert.Equal(s.t, 2, got["free"], "unlimited rows are not held back by capped keys")
			assert.Equal(s.t, map[string]int{"a": 1, "b": 1, "7": 1, "<null>": 1}, s.processingByKey(path, ids))
			assert.Len(s.t, first, 6)
			assert.Empty(s.t, s.claim(p), "every key is at its cap")
			// Another worker's claim is held back the same way.
			assert.Empty(s.t, s.claim(backends.ClaimParams{WorkerID: s.worker(), Names: []string{name}, Limit: 20, Limits: lim}))
			// Finishing b's row frees b's slot only.
			for _, j := range first {
				if k, ok := backends.LimitKey(j.Args, path); ok && k == "b" {
					s.complete(w, backends.Completion{JobID: j.ID, Attempts: j.Attempts, Outcome: backends.OutcomeDone})
				}
			}
			again := s.claim(p)
			require.Len(s.t, again, 1)
			k, _ := backends.LimitKey(again[0].Args, path)
			assert.Equal(s.t, "b", k)
		}},
		{"limits/a slot is freed by a NACK, a return, a recovery and a completion, with nothing to repair", func(s *suite) {
			const name = "lim.heal"
			for range 6 {
				s.enqueueNamed(name)
			}
			lim := []backends.ClaimLimit{{Scope: name, Names: []string{name}, Concurrency: 1}}
			claim := func(w string) []backends.Job {
				return s.claim(backends.ClaimParams{WorkerID: w, Names: []string{name}, Limit: 4, Limits: lim})
			}
			w := s.worker()
			j := claim(w)
			require.Len(s.t, j, 1)
			assert.Empty(s.t, claim(s.worker()), "at the cap")
			nacked, err := s.b.Nack(s.ctx, w, j)
			require.NoError(s.t, err)
			require.Len(s.t, nacked, 1)

			j = claim(w)
			require.Len(s.t, j, 1, "a NACK frees the slot")
			returned, err := s.b.ReturnJobs(s.ctx, w, j)
			require.NoError(s.t, err)
			require.Len(s.t, returned, 1)

			dead := s.worker()
			j = claim(dead)
			require.Len(s.t, j, 1, "a return frees the slot")
			assert.Empty(s.t, claim(w), "a dead worker's row counts until it is recovered")
			require.NoError(s.t, s.h.BackdateHeartbeat(s.ctx, dead, time.Hour))
			_, n, err := s.b.RecoverStaleWorkers(s.ctx, time.Minute, "")
			require.NoError(s.t, err)
			require.Equal(s.t, 1, n)

			j = claim(w)
			require.Len(s.t, j, 1, "a recovery frees the slot")
			s.complete(w, backends.Completion{JobID: j[0].ID, Attempts: j[0].Attempts, Outcome: backends.OutcomeDone})
			require.Len(s.t, claim(w), 1, "a completion frees the slot")
		}},
		{"limits/limited rows are never reserved ahead; unlimited ones still are", func(s *suite) {
			const name, free, free2 = "lim.noahead", "lim.ahead", "lim.ahead2"
			for range 5 {
				s.enqueueNamed(name)
				s.enqueueNamed(free)
			}
			s.enqueueNamed(free2)
			lim := []backends.ClaimLimit{{Scope: name, Names: []string{name}, Concurrency: 5}}
			jobs := s.claim(backends.ClaimParams{WorkerID: s.worker(), Names: []string{name}, Limit: 1, Ahead: 10, Limits: lim})
			assert.Len(s.t, jobs, 1, "only the free slot's row")
			jobs = s.claim(backends.ClaimParams{WorkerID: s.worker(), Names: []string{name, free, free2}, Limit: 2, Ahead: 10, Limits: lim})
			n := map[string]int{}
			for _, j := range jobs {
				n[j.Name]++
			}
			assert.Equal(s.t, 5, n[free], "the unlimited rows, in slots and ahead")
			assert.Equal(s.t, 1, n[free2], "of every unlimited name")
			assert.LessOrEqual(s.t, n[name], 2, "limited rows only into the free slots")
		}},
		{"limits/a group counts every job naming it, whoever claims them", func(s *suite) {
			for range 3 {
				s.enqueueNamed("grp.x")
				s.enqueueNamed("grp.y")
			}
			lim := []backends.ClaimLimit{{Scope: "grp", Names: []string{"grp.x", "grp.y"}, Concurrency: 2}}
			ys := s.claim(backends.ClaimParams{WorkerID: s.worker(), Names: []string{"grp.y"}, Limit: 5, Limits: lim})
			assert.Len(s.t, ys, 2)
			assert.Empty(s.t, s.claim(backends.ClaimParams{WorkerID: s.worker(), Names: []string{"grp.x"}, Limit: 5, Limits: lim}),
				"grp.y's rows hold the group's slots")
		}},
		{"limits/a keyed group counts every name's rows of a key, whoever claims them", func(s *suite) {
			for range 3 {
				s.enqueueArgs("kgrp.x", `{"t":"a"}`)
				s.enqueueArgs("kgrp.y", `{"t":"a"}`)
				s.enqueueArgs("kgrp.y", `{"t":"b"}`)
			}
			lim := []backends.ClaimLimit{{Scope: "kgrp", Names: []string{"kgrp.x", "kgrp.y", "kgrp.z"}, Key: []string{"t"}, Concurrency: 2}}
			xs := s.claim(backends.ClaimParams{WorkerID: s.worker(), Names: []string{"kgrp.x"}, Limit: 5, Limits: lim})
			assert.Len(s.t, xs, 2, "a's two slots, by x")
			ys := s.claim(backends.ClaimParams{WorkerID: s.worker(), Names: []string{"kgrp.y"}, Limit: 5, Limits: lim})
			got := map[string]int{}
			for _, j := range ys {
				k, _ := backends.LimitKey(j.Args, []string{"t"})
				got[k]++
			}
			assert.Equal(s.t, map[string]int{"b": 2}, got, "x's rows hold a's slots; b has its own")
		}},
		{"limits/a paused scope or key claims nothing and reports the deferral", func(s *suite) {
			const name = "lim.pause"
			s.enqueueArgs(name, `{"t":"a"}`)
			s.enqueueArgs(name, `{"t":"b"}`)
			var got []backends.Deferral
			report := func(ds []backends.Deferral) { got = append(got, ds...) }
			lim := []backends.ClaimLimit{{Scope: name, Names: []string{name}, Key: []string{"t"}, Concurrency: 5,
				Keys: []backends.KeyCaps{{Key: "a", Concurrency: -1}}}}
			w := s.worker()
			jobs := s.claim(backends.ClaimParams{WorkerID: w, Names: []string{name}, Limit: 5, Limits: lim, Report: report})
			require.Len(s.t, jobs, 1)
			k, _ := backends.LimitKey(jobs[0].Args, []string{"t"})
			assert.Equal(s.t, "b", k, "only the paused key is held back")
			assert.Equal(s.t, []backends.Deferral{{Scope: name, Limit: "concurrency", Keys: 1}}, got)
			lim[0].Keys, lim[0].Concurrency = nil, -1
			assert.Empty(s.t, s.claim(backends.ClaimParams{WorkerID: w, Names: []string{name}, Limit: 5, Limits: lim}), "the scope paused")
		}},
		{"limits/a claim that fills a key to a cap reports it, as a key found at the cap", func(s *suite) {
			for _, c := range []struct {
				name, limit string
				lim         backends.ClaimLimit
				take        int
			}{
				{"lim.fill", "concurrency", backends.ClaimLimit{Concurrency: 2}, 2},
				{"lim.fillrate", "rate", backends.ClaimLimit{RateN: 3, RatePer: time.Minute}, 3},
			} {
				for range 5 {
					s.enqueueArgs(c.name, `{"t":"a"}`)
				}
				l := c.lim
				l.Scope, l.Names, l.Key = c.name, []string{c.name}, []string{"t"}
				var got []backends.Deferral
				jobs := s.claim(backends.ClaimParams{WorkerID: s.worker(), Names: []string{c.name}, Limit: 10, Limits: []backends.ClaimLimit{l},
					Report: func(ds []backends.Deferral) { got = append(got, ds...) }})
				assert.Len(s.t, jobs, c.take, c.name)
				// Without it, the caller would not know to claim again when
				// a slot frees or the window moves on: a rate-capped backlog
				// once waited for the poll after each window's last claim.
				assert.Equal(s.t, []backends.Deferral{{Scope: c.name, Limit: c.limit, Keys: 1}}, got, c.name)
			}
		}},
		{"limits/a key under its cap behind hundreds at theirs is claimed within a few claims", func(s *suite) {
			const name, keys = "lim.walk", 300
			path := []string{"t"}
			for i := range keys {
				s.enqueueArgs(name, fmt.Sprintf(`{"t":"k%03d"}`, i))
			}
			lim := []backends.ClaimLimit{{Scope: name, Names: []string{name}, Key: path, Concurrency: 1}}
			w := s.worker()
			require.Len(s.t, s.claim(backends.ClaimParams{WorkerID: w, Names: []string{name}, Limit: keys, Limits: lim}), keys)
			for i := range keys {
				s.enqueueArgs(name, fmt.Sprintf(`{"t":"k%03d"}`, i))
			}
			want := s.enqueueArgs(name, `{"t":"k150x"}`)
			for n := 1; ; n++ {
				jobs := s.claim(backends.ClaimParams{WorkerID: w, Names: []string{name}, Limit: 1, Limits: lim})
				if len(jobs) > 0 {
					require.Len(s.t, jobs, 1)
					assert.Equal(s.t, want.ID, jobs[0].ID, "the only key under its cap")
					break
				}
				// A claim reads a bounded number of keys, so one behind many
				// at their caps may take a few claims to reach: each goes on
				// where the last one stopped.
				require.Less(s.t, n, 25, "claims that found nothing")
			}
		}},
		{"limits/rate: at most N claims in any window, retries included", func(s *suite) {
			const name = "lim.rate"
			for range 6 {
				s.enqueueArgs(name, `{"t":"a"}`)
			}
			s.enqueueArgs(name, `{"t":"b"}`)
			lim := []backends.ClaimLimit{{Scope: name, Names: []string{name}, Key: []string{"t"}, RateN: 2, RatePer: time.Second}}
			w := s.worker()
			p := backends.ClaimParams{WorkerID: w, Names: []string{name}, Limit: 10, Limits: lim}
			start := time.Now()
			first := s.claim(p)
			// The window runs from the first claim's own statement, which is
			// after start and before the claim returned.
			firstDone := time.Now()
			require.Len(s.t, first, 3, "two of a, one of b")
			// A retry is a new claim: the rows come back at once.
			var cs []backends.Completion
			for _, j := range first {
				cs = append(cs, backends.Completion{JobID: j.ID, Attempts: j.Attempts, Outcome: backends.OutcomeRetry, Error: "again"})
			}
			s.complete(w, cs...)
			again := s.claim(p)
			if time.Since(start) < 900*time.Millisecond {
				got := map[string]int{}
				for _, j := range again {
					k, _ := backends.LimitKey(j.Args, []string{"t"})
					got[k]++
				}
				assert.Equal(s.t, 0, got["a"], "a's window is full")
				assert.Equal(s.t, 1, got["b"], "b has one claim left")
			}
			time.Sleep(time.Until(firstDone.Add(1100 * time.Millisecond)))
			later := s.claim(p)
			n := 0
			for _, j := range later {
				if k, _ := backends.LimitKey(j.Args, []string{"t"}); k == "a" {
					n++
				}
			}
			assert.Equal(s.t, 2, n, "the window slid past the first claims")
		}},
	}
}
