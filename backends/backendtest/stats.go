package backendtest

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

func statsCases() []testCase {
	return []testCase{
		{"stats/empty has six zero keys in canonical order", func(s *suite) {
			st := s.stats()
			assert.Equal(s.t, backends.Stats{}, st)
			assertStatsShape(s, st)
		}},
		{"stats/dead_letter counted from the dead-letter table", func(s *suite) {
			s.deadLetterJob("stats.dlq")
			st := s.stats()
			assert.Equal(s.t, backends.Stats{Total: 1, DeadLetter: 1}, st)
			assertStatsShape(s, st)
		}},
		{"stats/mix of states", func(s *suite) {
			w := s.worker()
			s.enqueueNamed("stats.queued")
			s.enqueueNamed("stats.queued")
			s.enqueue(backends.EnqueueParams{Name: "stats.queued", Delay: time.Hour}) // future rows count as queued
			s.enqueueNamed("stats.processing")
			s.claimOne(w, "stats.processing")
			done := s.enqueueNamed("stats.done")
			s.claimOne(w, "stats.done")
			require.Len(s.t, s.complete(w, backends.Completion{JobID: done.ID, Outcome: backends.OutcomeDone, ResultTTL: time.Hour}), 1)
			c := s.enqueueNamed("stats.cancelled")
			ok, err := s.b.Cancel(s.ctx, c.ID)
			require.NoError(s.t, err)
			require.True(s.t, ok)
			s.deadLetterJob("stats.dlq1")
			s.deadLetterJob("stats.dlq2")

			st := s.stats()
			assert.Equal(s.t, backends.Stats{Total: 8, Queued: 3, Processing: 1, Done: 1, DeadLetter: 2, Cancelled: 1}, st)
			assert.Equal(s.t, st.Queued+st.Processing+st.Done+st.DeadLetter+st.Cancelled, st.Total)
			assertStatsShape(s, st)
		}},
	}
}

// assertStatsShape checks the queue-stats wire shape: exactly the six keys, in
// the canonical order, read back from the JSON token stream because a map
// would lose the order.
func assertStatsShape(s *suite, st backends.Stats) {
	s.t.Helper()
	raw, err := json.Marshal(st)
	require.NoError(s.t, err, "marshal stats")

	var generic map[string]json.Number
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	require.NoError(s.t, dec.Decode(&generic), "decode stats")
	var keySet []string
	for k := range generic {
		keySet = append(keySet, k)
	}
	assert.ElementsMatch(s.t, wantStatsKeys, keySet)

	dec = json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	require.NoError(s.t, err)
	require.Equal(s.t, json.Delim('{'), tok)
	var order []string
	for dec.More() {
		k, err := dec.Token()
		require.NoError(s.t, err, "read stats key")
		order = append(order, k.(string))
		_, err = dec.Token() // the count
		require.NoError(s.t, err, "read stats value")
	}
	assert.Equal(s.t, wantStatsKeys, order, "stats key order")
	assert.Equal(s.t, wantStatsKeys, backends.StatsKeys[:], "backends.StatsKeys (the order status prints)")
}

// wantStatsKeys is the wire order, written out: comparing with the
// implementation's own constant would let both drift together.
var wantStatsKeys = []string{"total", "queued", "processing", "done", "dead_letter", "cancelled"}
