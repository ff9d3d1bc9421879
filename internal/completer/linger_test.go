package completer

// The linger on the fake clock (completer.go): a small batch
// waits up to lingerMax while results flow, and nothing else waits.

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// fakeWrite is one statement the writer issued, with its instant.
type fakeWrite struct {
	at   time.Duration // from the end of the first write
	rows int
	nack bool
}

// gatedBackend records the writer's statements and holds the first one
// until gate is sent to: a write in flight while results arrive. Every
// row is applied; no other method is called.
type gatedBackend struct {
	backends.Backend
	gate   chan struct{}
	mu     sync.Mutex
	calls  int
	writes []time.Time
	rows   []int
	nacks  []bool
}

func (g *gatedBackend) record(rows int, nack bool) {
	g.mu.Lock()
	g.calls++
	first := g.calls == 1
	g.writes, g.rows, g.nacks = append(g.writes, time.Now()), append(g.rows, rows), append(g.nacks, nack)
	g.mu.Unlock()
	if first {
		<-g.gate
	}
}

func (g *gatedBackend) Complete(_ context.Context, _ string, cs []backends.Completion) ([]string, error) {
	g.record(len(cs), false)
	ids := make([]string, len(cs))
	for i, c := range cs {
		ids[i] = c.JobID
	}
	return ids, nil
}

func (g *gatedBackend) Nack(_ context.Context, _ string, held []backends.Job) ([]string, error) {
	g.record(len(held), true)
	ids := make([]string, len(held))
	for i, j := range held {
		ids[i] = j.ID
	}
	return ids, nil
}

func (g *gatedBackend) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.calls
}

func TestResultWriterLinger(t *testing.T) {
	const batch = 16 // lingerBatch: a quarter of an in-flight budget of 64
	type step struct {
		at          time.Duration // after the first write returned
		completions int
	}
	cases := []struct {
		name string
		// What arrives while the first write is in flight.
		completions, nacks int
		hurry, close       bool
		later              []step
		want               []fakeWrite // after the first write
	}{
		{name: "small batch while results flow waits lingerMax", completions: 1,
			want: []fakeWrite{{at: lingerMax, rows: 1}}},
		{name: "a batch growing slowly is written at lingerMax, not later", completions: 1,
			later: []step{{lingerMax / 4, 1}, {lingerMax / 2, 1}, {lingerMax * 3 / 4, 1}, {lingerMax * 5 / 4, 1}},
			// The last one arrived just after the second write: it waits
			// lingerMax from there.
			want: []fakeWrite{{at: lingerMax, rows: 4}, {at: lingerMax * 9 / 4, rows: 1}}},
		{name: "a batch reaching lingerBatch is written then", completions: 1,
			later: []step{{lingerMax / 2, batch - 1}},
			want:  []fakeWrite{{at: lingerMax / 2, rows: batch}}},
		{name: "large batch is written at once", completions: batch,
			want: []fakeWrite{{at: 0, rows: batch}}},
		{name: "after a quiet spell the first result is written at once",
			later: []step{{5 * lingerMax, 1}},
			want:  []fakeWrite{{at: 5 * lingerMax, rows: 1}}},
		{name: "with a NACK pending everything is written at once", completions: 1, nacks: 1,
			want: []fakeWrite{{at: 0, rows: 1}, {at: 0, rows: 1, nack: true}}},
		{name: "once DRAINING began (hurry) results are written at once", completions: 1, hurry: true,
			want: []fakeWrite{{at: 0, rows: 1}}},
		{name: "closing writes at once", completions: 1, close: true,
			want: []fakeWrite{{at: 0, rows: 1}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := &gatedBackend{gate: make(chan struct{})}
				w := New(Config{Backend: g, WorkerID: backends.NewID(), LingerBatch: batch})
				w.Start()
				complete := func(n int) {
					for range n {
						w.Complete(backends.Completion{JobID: backends.NewID(), Outcome: backends.OutcomeDone})
					}
				}
				complete(1) // the writer was idle: written at once, held at the gate
				synctest.Wait()
				require.Equal(t, 1, g.count(), "the first result is written at once")

				complete(tc.completions)
				for range tc.nacks {
					w.Nack(backends.Job{ID: backends.NewID(), Attempts: 1})
				}
				if tc.hurry {
					w.Hurry()
				}
				if tc.close {
					w.close()
				}
				g.gate <- struct{}{}
				start := time.Now()
				for _, s := range tc.later {
					time.Sleep(time.Until(start.Add(s.at)))
					complete(s.completions)
				}
				time.Sleep(time.Until(start.Add(10 * lingerMax)))
				w.Stop()

				g.mu.Lock()
				defer g.mu.Unlock()
				var got []fakeWrite
				for i := 1; i < g.calls; i++ {
					got = append(got, fakeWrite{at: g.writes[i].Sub(start), rows: g.rows[i], nack: g.nacks[i]})
				}
				assert.Equal(t, tc.want, got, "statements after the first")
			})
		})
	}
}

// In a fleet the linger and the batch that ends it scale with the fleet's
// size (SetFleet), the linger up to fleetLingerMax: N sidecars sharing a
// rate write about as few statements as one would. A sidecar alone lingers
// as before, and after a quiet spell a result is still written at once.
func TestResultWriterLingersForTheFleet(t *testing.T) {
	const batch = 4 // lingerBatch: a quarter of 16 slots
	type step struct {
		at          time.Duration // after the first write returned
		completions int
	}
	cases := []struct {
		name  string
		fleet int
		steps []step
		want  []fakeWrite
	}{
		{name: "alone: a result while results flow waits lingerMax", fleet: 1,
			steps: []step{{lingerMax / 2, 1}},
			want:  []fakeWrite{{at: lingerMax * 3 / 2, rows: 1}}},
		{name: "alone: after a quiet spell of 5 ms it is written at once", fleet: 1,
			steps: []step{{5 * time.Millisecond, 1}},
			want:  []fakeWrite{{at: 5 * time.Millisecond, rows: 1}}},
		{name: "8 sidecars: results 5 ms apart still flow and wait 8 × lingerMax", fleet: 8,
			steps: []step{{5 * time.Millisecond, 1}, {10 * time.Millisecond, 1}},
			want:  []fakeWrite{{at: 5*time.Millisecond + 8*lingerMax, rows: 2}}},
		{name: "8 sidecars: a batch reaching 8 × lingerBatch is written then", fleet: 8,
			steps: []step{{5 * time.Millisecond, 1}, {10 * time.Millisecond, 8*batch - 1}},
			want:  []fakeWrite{{at: 10 * time.Millisecond, rows: 8 * batch}}},
		{name: "8 sidecars: after a quiet spell of 50 ms it is written at once", fleet: 8,
			steps: []step{{50 * time.Millisecond, 1}},
			want:  []fakeWrite{{at: 50 * time.Millisecond, rows: 1}}},
		{name: "100 sidecars: a result 150 ms into the linger still joins the batch", fleet: 100,
			steps: []step{{5 * time.Millisecond, 1}, {155 * time.Millisecond, 1}},
			want:  []fakeWrite{{at: 5*time.Millisecond + 100*lingerMax, rows: 2}}},
		{name: "128 sidecars: the linger stops at fleetLingerMax", fleet: 128,
			steps: []step{{5 * time.Millisecond, 1}, {90 * time.Millisecond, 3}},
			want:  []fakeWrite{{at: 5*time.Millisecond + fleetLingerMax, rows: 4}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := &gatedBackend{gate: make(chan struct{})}
				w := New(Config{Backend: g, WorkerID: backends.NewID(), LingerBatch: batch})
				w.SetFleet(tc.fleet)
				w.Start()
				complete := func(n int) {
					for range n {
						w.Complete(backends.Completion{JobID: backends.NewID(), Outcome: backends.OutcomeDone})
					}
				}
				complete(1) // written at once, held at the gate
				synctest.Wait()
				require.Equal(t, 1, g.count())
				g.gate <- struct{}{}
				start := time.Now()
				for _, s := range tc.steps {
					time.Sleep(time.Until(start.Add(s.at)))
					complete(s.completions)
				}
				time.Sleep(time.Until(start.Add(time.Second)))
				w.Stop()

				g.mu.Lock()
				defer g.mu.Unlock()
				var got []fakeWrite
				for i := 1; i < g.calls; i++ {
					got = append(got, fakeWrite{at: g.writes[i].Sub(start), rows: g.rows[i], nack: g.nacks[i]})
				}
				assert.Equal(t, tc.want, got, "statements after the first")
			})
		})
	}
}
