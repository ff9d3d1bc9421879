package backendtest

import (
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

			cleared, err := s.b.ClearLimit(s.ctx, "emails", strp("acme"))
			require.NoError(s.t, err)
			assert.True(s.t, cleared)
			cleared, err = s.b.ClearLimit(s.ctx, "emails", strp("acme"))
			require.NoError(s.t, err)
			assert.False(s.t, cleared, "nothing left to clear")
			got, err = s.b.LimitOverrides(s.ctx)
			require.NoError(s.t, err)
			assert.Len(s.t, got, 2)
		}},
	}
}
