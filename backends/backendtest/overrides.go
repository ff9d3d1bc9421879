package backendtest

import (
	"encoding/json"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

func overrideCases() []testCase {
	strp := func(s string) *string { return &s }
	return []testCase{
		{"limits/CountByStatus counts the queued and processing rows of the names given", func(s *suite) {
			for range 3 {
				s.enqueueNamed("cnt.a")
			}
			s.enqueueNamed("cnt.b")
			s.enqueueNamed("cnt.other")
			s.claimOne(s.worker(), "cnt.b")
			q, p, err := s.b.CountByStatus(s.ctx, []string{"cnt.a", "cnt.b"})
			require.NoError(s.t, err)
			assert.Equal(s.t, [2]int64{3, 1}, [2]int64{q, p})
			q, p, err = s.b.CountByStatus(s.ctx, []string{"nothing"})
			require.NoError(s.t, err)
			assert.Equal(s.t, [2]int64{0, 0}, [2]int64{q, p})
		}},
		{"limits/overrides: set, update keeping what was not given, list in order, clear", func(s *suite) {
			got, err := s.b.LimitOverrides(s.ctx)
			require.NoError(s.t, err)
			assert.Empty(s.t, got)

			o, err := s.b.SetLimit(s.ctx, backends.LimitOverride{Scope: "emails", Key: strp("acme"), Concurrency: intp(0)})
			require.NoError(s.t, err)
			assert.Equal(s.t, 0, *o.Concurrency, "paused")
			approxNow(s.t, 0, &o.UpdatedAt, "updated_at")
			_, err = s.b.SetLimit(s.ctx, backends.LimitOverride{Scope: "emails", RateN: 50, RatePer: time.Minute})
			require.NoError(s.t, err)
			o, err = s.b.SetLimit(s.ctx, backends.LimitOverride{Scope: "emails", Concurrency: intp(3)})
			require.NoError(s.t, err)
			assert.Equal(s.t, 3, *o.Concurrency)
			assert.Equal(s.t, 50, o.RateN, "the rate set before is kept")
			assert.Equal(s.t, time.Minute, o.RatePer)
			_, err = s.b.SetLimit(s.ctx, backends.LimitOverride{Scope: "a.scope", Key: strp(""), Concurrency: intp(1)})
			require.NoError(s.t, err)

			got, err = s.b.LimitOverrides(s.ctx)
			require.NoError(s.t, err)
			require.Len(s.t, got, 3)
			assert.Equal(s.t, "a.scope", got[0].Scope)
			require.NotNil(s.t, got[0].Key, "the key \"\" is a key, not the scope")
			assert.Equal(s.t, "", *got[0].Key)
			assert.Equal(s.t, "emails", got[1].Scope)
			assert.Nil(s.t, got[1].Key, "the scope's own first")
			assert.Equal(s.t, "acme", *got[2].Key)
			require.NotNil(s.t, got[2].Concurrency)
			assert.Equal(s.t, 0, *got[2].Concurrency)

			cleared, err := s.b.ClearLimit(s.ctx, "emails", strp("acme"), false)
			require.NoError(s.t, err)
			assert.True(s.t, cleared)
			cleared, err = s.b.ClearLimit(s.ctx, "emails", strp("acme"), false)
			require.NoError(s.t, err)
			assert.False(s.t, cleared, "nothing left to clear")
			got, err = s.b.LimitOverrides(s.ctx)
			require.NoError(s.t, err)
			assert.Len(s.t, got, 2)
		}},
	}
}

func nullKeyCases() []testCase {
	strp := func(s string) *string { return &s }
	return []testCase{
		{"limits/the key null's override is one of its own: not the scope's, not the key \"\"", func(s *suite) {
			const scope = "nk.scope"
			_, err := s.b.SetLimit(s.ctx, backends.LimitOverride{Scope: scope, Key: strp("zeta"), Concurrency: intp(5)})
			require.NoError(s.t, err)
			_, err = s.b.SetLimit(s.ctx, backends.LimitOverride{Scope: scope, Key: strp(""), Concurrency: intp(1)})
			require.NoError(s.t, err)
			o, err := s.b.SetLimit(s.ctx, backends.LimitOverride{Scope: scope, NullKey: true, Concurrency: intp(0)})
			require.NoError(s.t, err)
			assert.True(s.t, o.NullKey)
			assert.Nil(s.t, o.Key)
			assert.Equal(s.t, 0, *o.Concurrency)
			_, err = s.b.SetLimit(s.ctx, backends.LimitOverride{Scope: scope, Concurrency: intp(9)})
			require.NoError(s.t, err)
			o, err = s.b.SetLimit(s.ctx, backends.LimitOverride{Scope: scope, NullKey: true, RateN: 3, RatePer: time.Minute})
			require.NoError(s.t, err)
			assert.Equal(s.t, 0, *o.Concurrency, "the pause set before is kept")
			assert.Equal(s.t, 3, o.RateN)

			got, err := s.b.LimitOverrides(s.ctx)
			require.NoError(s.t, err)
			require.Len(s.t, got, 4, "four rows: the scope's, the key null's, the key \"\"'s and zeta's")
			assert.Nil(s.t, got[0].Key, "the scope's own first")
			assert.False(s.t, got[0].NullKey)
			assert.Equal(s.t, 9, *got[0].Concurrency)
			assert.True(s.t, got[1].NullKey, "then the key null's")
			assert.Nil(s.t, got[1].Key)
			assert.Equal(s.t, 0, *got[1].Concurrency)
			require.NotNil(s.t, got[2].Key)
			assert.Equal(s.t, "", *got[2].Key)
			assert.False(s.t, got[2].NullKey)
			assert.Equal(s.t, 1, *got[2].Concurrency)
			assert.Equal(s.t, "zeta", *got[3].Key)

			// Laid over a keyed scope, it pauses the key null alone; a
			// scope without a key has no key null to pause.
			l := backends.ApplyOverrides(backends.ClaimLimit{Scope: scope, Key: []string{"t"}, Concurrency: 2}, got)
			c, _, _ := l.Caps("", true)
			assert.Equal(s.t, -1, c, "the key null paused")
			c, _, _ = l.Caps("", false)
			assert.Equal(s.t, 1, c, "the key \"\" has its own")
			c, _, _ = l.Caps("other", false)
			assert.Equal(s.t, 9, c, "the scope's override")
			l = backends.ApplyOverrides(backends.ClaimLimit{Scope: scope, Concurrency: 2}, got)
			c, _, _ = l.Caps("", true)
			assert.Equal(s.t, 9, c, "a scope without a key: the scope's own")

			cleared, err := s.b.ClearLimit(s.ctx, scope, nil, true)
			require.NoError(s.t, err)
			assert.True(s.t, cleared)
			cleared, err = s.b.ClearLimit(s.ctx, scope, nil, true)
			require.NoError(s.t, err)
			assert.False(s.t, cleared, "nothing left to clear")
			got, err = s.b.LimitOverrides(s.ctx)
			require.NoError(s.t, err)
			require.Len(s.t, got, 3)
			for _, o := range got {
				assert.False(s.t, o.NullKey)
			}
			assert.Nil(s.t, got[0].Key, "the scope's own is still there")
			assert.Equal(s.t, "", *got[1].Key, "and the key \"\"'s")
		}},
		{"limits/a paused key null holds its rows queued while the other keys run", func(s *suite) {
			const name = "nk.claim"
			var nulls []string
			for _, a := range []string{`{}`, `{"t":null}`, `{"t":[1]}`} {
				nulls = append(nulls, s.enqueueArgs(name, a).ID)
			}
			s.enqueueArgs(name, `{"t":"a"}`)
			s.enqueueArgs(name, `{"t":""}`)
			_, err := s.b.SetLimit(s.ctx, backends.LimitOverride{Scope: name, NullKey: true, Concurrency: intp(0)})
			require.NoError(s.t, err)
			os, err := s.b.LimitOverrides(s.ctx)
			require.NoError(s.t, err)
			lim := backends.ApplyOverrides(backends.ClaimLimit{Scope: name, Names: []string{name}, Key: []string{"t"}, Concurrency: 5}, os)
			var got []backends.Deferral
			jobs := s.claim(backends.ClaimParams{WorkerID: s.worker(), Names: []string{name}, Limit: 10, Limits: []backends.ClaimLimit{lim},
				Report: func(ds []backends.Deferral) { got = append(got, ds...) }})
			keys := map[string]bool{}
			for _, j := range jobs {
				k, ok := backends.LimitKey(j.Args, []string{"t"})
				require.True(s.t, ok, "a row of the key null was claimed: %s", j.Args)
				keys[k] = true
			}
			assert.Equal(s.t, map[string]bool{"a": true, "": true}, keys, "the other keys ran, the key \"\" among them")
			for _, id := range nulls {
				assert.Equal(s.t, backends.StatusQueued, s.get(id).Status)
			}
			assert.Equal(s.t, []backends.Deferral{{Scope: name, Limit: "concurrency", Keys: 1}}, got)
			u, err := s.b.LimitUsage(s.ctx, lim, 5)
			require.NoError(s.t, err)
			assert.Equal(s.t, []backends.KeyUsage{{Null: true, Queued: 3, Deferred: 3}}, u.Keys)

			cleared, err := s.b.ClearLimit(s.ctx, name, nil, true)
			require.NoError(s.t, err)
			require.True(s.t, cleared)
			os, err = s.b.LimitOverrides(s.ctx)
			require.NoError(s.t, err)
			lim = backends.ApplyOverrides(backends.ClaimLimit{Scope: name, Names: []string{name}, Key: []string{"t"}, Concurrency: 5}, os)
			jobs = s.claim(backends.ClaimParams{WorkerID: s.worker(), Names: []string{name}, Limit: 10, Limits: []backends.ClaimLimit{lim}})
			assert.Len(s.t, jobs, 3, "cleared: the key null's rows run")
		}},
	}
}

func claimLogCases() []testCase {
	return []testCase{
		{"limits/PruneLimitClaims deletes the logged claims past their scope's horizon, and only those", func(s *suite) {
			const name = "log.rate"
			for range 4 {
				s.enqueueArgs(name, `{"t":"a"}`)
			}
			lim := []backends.ClaimLimit{{Scope: name, Names: []string{name}, Key: []string{"t"}, RateN: 2, RatePer: time.Hour}}
			p := backends.ClaimParams{WorkerID: s.worker(), Names: []string{name}, Limit: 10, Limits: lim}
			require.Len(s.t, s.claim(p), 2)
			assert.Empty(s.t, s.claim(p), "the window is full")
			n, err := s.b.PruneLimitClaims(s.ctx, backends.ClaimLogPrune{Horizons: map[string]time.Duration{name: time.Hour}, Batch: 1, Max: 10})
			require.NoError(s.t, err)
			assert.Zero(s.t, n, "within the scope's horizon: kept")
			assert.Empty(s.t, s.claim(p), "the window is still full")
			n, err = s.b.PruneLimitClaims(s.ctx, backends.ClaimLogPrune{Horizons: map[string]time.Duration{"other": time.Hour}, Batch: 1, Max: 10})
			require.NoError(s.t, err)
			assert.Equal(s.t, 2, n, "a scope not named: past the floor of 0")
			assert.Len(s.t, s.claim(p), 2, "with its log gone, the window counts no claim")
		}},
	}
}

func usageCases() []testCase {
	return []testCase{
		{"limits/LimitUsage: running, queued and deferred per scope and key, the busiest keys first", func(s *suite) {
			const name, other = "use.keyed", "use.other"
			w := s.worker()
			// a: 2 processing (at its cap of 2), 3 queued of which 1 is
			// scheduled for later; b: 1 processing, 4 queued (under the
			// cap); c: paused by its override, 2 queued; the key null: 1
			// queued; 7 (a number): 1 processing.
			for _, a := range []string{`{"t":"a"}`, `{"t":"a"}`, `{"t":"b"}`, `{"t":7}`} {
				s.enqueueArgs(name, a)
			}
			jobs := s.claim(backends.ClaimParams{WorkerID: w, Names: []string{name}, Limit: 10})
			require.Len(s.t, jobs, 4)
			for range 2 {
				s.enqueueArgs(name, `{"t":"a"}`)
			}
			s.enqueue(backends.EnqueueParams{Name: name, Args: json.RawMessage(`{"t":"a"}`), Delay: time.Hour})
			for range 4 {
				s.enqueueArgs(name, `{"t":"b"}`)
			}
			s.enqueueArgs(name, `{"t":"c"}`)
			s.enqueueArgs(name, `{"t":"c"}`)
			s.enqueueArgs(name, `{"t":null}`)
			s.enqueueArgs(other, `{"t":"a"}`) // another name: not the scope's
			lim := backends.ClaimLimit{Scope: name, Names: []string{name}, Key: []string{"t"}, Concurrency: 2,
				Keys: []backends.KeyCaps{{Key: "c", Concurrency: -1}, {Key: "zz", Concurrency: 5}, {Null: true, Concurrency: -1}}}
			u, err := s.b.LimitUsage(s.ctx, lim, 3)
			require.NoError(s.t, err)
			assert.Equal(s.t, [3]int64{4, 10, 2 + 2 + 1}, [3]int64{u.Running, u.Queued, u.Deferred},
				"running, queued, deferred: a's runnable 2, c's 2, the null key's 1")
			assert.Equal(s.t, []backends.KeyUsage{
				{Key: "a", Running: 2, Queued: 3, Deferred: 2},
				{Key: "b", Running: 1, Queued: 4},
				{Key: "7", Running: 1},
			}, u.Busiest, "most running, then most queued, then by key")
			assert.Equal(s.t, []backends.KeyUsage{
				{Key: "c", Queued: 2, Deferred: 2},
				{Key: "zz"},
				{Null: true, Queued: 1, Deferred: 1},
			}, u.Keys, "the asked keys in their order, a key without rows as zeros")

			u, err = s.b.LimitUsage(s.ctx, lim, 0)
			require.NoError(s.t, err)
			assert.Empty(s.t, u.Busiest, "top 0: none")
			u, err = s.b.LimitUsage(s.ctx, lim, 100)
			require.NoError(s.t, err)
			require.Len(s.t, u.Busiest, 5, "every key with rows")
			assert.Equal(s.t, backends.KeyUsage{Key: "c", Queued: 2, Deferred: 2}, u.Busiest[3])
			assert.Equal(s.t, backends.KeyUsage{Null: true, Queued: 1, Deferred: 1}, u.Busiest[4], "the key null last among equals")

			// The scope paused: every runnable row is deferred, except a
			// key whose own override lets it run.
			lim.Concurrency, lim.Keys = -1, []backends.KeyCaps{{Key: "b", Concurrency: 3}}
			u, err = s.b.LimitUsage(s.ctx, lim, 5)
			require.NoError(s.t, err)
			assert.Equal(s.t, int64(2+2+1), u.Deferred, "a, c and the null key; b runs under its own cap")
			assert.Equal(s.t, []backends.KeyUsage{{Key: "b", Running: 1, Queued: 4}}, u.Keys)

			// Without a key: one key, no busiest list; at its cap of 4.
			u, err = s.b.LimitUsage(s.ctx, backends.ClaimLimit{Scope: name, Names: []string{name, other}, Concurrency: 4}, 5)
			require.NoError(s.t, err)
			assert.Equal(s.t, [3]int64{4, 11, 10}, [3]int64{u.Running, u.Queued, u.Deferred})
			assert.Empty(s.t, u.Busiest)
			u, err = s.b.LimitUsage(s.ctx, backends.ClaimLimit{Scope: "none", Names: []string{"nothing"}, Key: []string{"t"}}, 5)
			require.NoError(s.t, err)
			assert.Equal(s.t, backends.ScopeUsage{}, u)
		}},
	}
}
