package maintenance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

func TestSharedQueues(t *testing.T) {
	tests := []struct {
		name         string
		ours, theirs []string
		want         string
	}{
		{"both every queue", nil, nil, "every queue"},
		{"we take every queue", nil, []string{"a", "b"}, "a,b"},
		{"they take every queue", []string{"a"}, nil, "a"},
		{"overlap", []string{"a", "b", "c"}, []string{"c", "a", "x"}, "a,c"},
		{"disjoint", []string{"a"}, []string{"b"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, sharedQueues(tt.ours, tt.theirs))
		})
	}
}

// fleetBackend serves the live workers a test sets.
type fleetBackend struct {
	backends.Backend
	mu      sync.Mutex
	workers []backends.Worker
	err     error
}

func (f *fleetBackend) LiveWorkers(context.Context, time.Duration) ([]backends.Worker, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.workers, f.err
}

func (f *fleetBackend) set(err error, ws ...backends.Worker) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.workers, f.err = ws, err
}

func kindMeta(kind string) json.RawMessage {
	return json.RawMessage(`{"` + backends.MetaKind + `":"` + kind + `"}`)
}

// A foreign worker on a shared queue is warned of once while it stays, and
// its leaving is logged; this worker, its peers of the same kind and
// workers on other queues are never reported; a failed read changes
// nothing.
func TestFleetWatcher(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		me := backends.Worker{ID: "me", Queues: []string{"a"}, Metadata: kindMeta("sidecar")}
		peer := backends.Worker{ID: "peer", Queues: []string{"a"}, Metadata: kindMeta("sidecar")}
		soniq := backends.Worker{ID: "soniq", Queues: []string{"a", "b"}}
		elsewhere := backends.Worker{ID: "elsewhere", Queues: []string{"c"}}
		fb := &fleetBackend{workers: []backends.Worker{me, peer, soniq, elsewhere}}
		var logs recorder
		var counts []int
		w := NewFleetWatcher(FleetConfig{FleetScope: FleetScope{Backend: fb, WorkerID: "me", Kind: "sidecar", Queues: []string{"a"},
			Interval: time.Minute}, Log: logs.logger(), Foreign: func(n int) { counts = append(counts, n) }})
		w.Start(t.Context())
		t.Cleanup(w.Stop)
		step := func(err error, ws ...backends.Worker) {
			fb.set(err, ws...)
			time.Sleep(fleetCheckEvery) // Interval is at most fleetCheckEvery
			synctest.Wait()
		}
		synctest.Wait()
		step(nil, me, peer, soniq, elsewhere)
		step(errors.New("connection refused"))
		step(nil, me)
		step(nil, me, soniq)
		w.Stop()
		assert.Equal(t, []int{1, 1, 0, 1}, counts, "the failed read reports nothing")
		var got []string
		for _, r := range logs.records {
			got = append(got, fmt.Sprintf("%s %v %v", r.Msg[:20], r.Attrs["worker_id"], r.Attrs["shared_queues"]))
		}
		assert.Equal(t, []string{
			"a worker that is not soniq a",
			"a worker that shared soniq <nil>",
			"a worker that is not soniq a",
		}, got)
	})
}

// The fleet's size is the live sidecars (rows of this program's kind) that
// share a queue with this one, this one included even before its own row
// shows; Soniq's workers and sidecars on other queues do not count.
func TestFleetSize(t *testing.T) {
	me := backends.Worker{ID: "me", Queues: []string{"a"}, Metadata: kindMeta("sidecar")}
	peer := backends.Worker{ID: "peer", Queues: []string{"a", "b"}, Metadata: kindMeta("sidecar")}
	everyQueue := backends.Worker{ID: "every", Metadata: kindMeta("sidecar")}
	other := backends.Worker{ID: "other", Queues: []string{"c"}, Metadata: kindMeta("sidecar")}
	soniq := backends.Worker{ID: "soniq", Queues: []string{"a"}}
	for _, tc := range []struct {
		name    string
		queues  []string
		workers []backends.Worker
		want    int
	}{
		{"alone", []string{"a"}, []backends.Worker{me}, 1},
		{"its own row not yet read", []string{"a"}, nil, 1},
		{"a peer on the queue, Soniq's worker beside it", []string{"a"}, []backends.Worker{me, peer, soniq}, 2},
		{"a peer on every queue", []string{"a"}, []backends.Worker{me, peer, everyQueue}, 3},
		{"a sidecar on another queue", []string{"a"}, []backends.Worker{me, peer, other}, 2},
		{"this one on every queue", nil, []backends.Worker{me, peer, other, everyQueue, soniq}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, FleetSize(tc.workers, "me", "sidecar", tc.queues))
		})
	}
}

// The sizer counts at start, then 0.25 s, 0.5 s, 1 s ... apart up to its
// interval, so sidecars started together soon see each other; a failed
// read reports nothing.
func TestFleetSizerCountsSoonThenAtItsInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		me := backends.Worker{ID: "me", Queues: []string{"a"}, Metadata: kindMeta("sidecar")}
		peer := func(id string) backends.Worker {
			return backends.Worker{ID: id, Queues: []string{"a"}, Metadata: kindMeta("sidecar")}
		}
		fb := &fleetBackend{workers: []backends.Worker{me}}
		start := time.Now()
		var mu sync.Mutex
		var got []string
		s := NewFleetSizer(FleetSizerConfig{FleetScope: FleetScope{Backend: fb, WorkerID: "me", Kind: "sidecar", Queues: []string{"a"},
			Interval: 10 * time.Second}, Size: func(n int) {
			mu.Lock()
			got = append(got, fmt.Sprintf("%v:%d", time.Since(start), n))
			mu.Unlock()
		}})
		s.Start(t.Context())
		t.Cleanup(s.Stop)
		synctest.Wait()
		fb.set(nil, me, peer("p1"), peer("p2"))
		time.Sleep(500 * time.Millisecond) // the count at 0.25 s
		fb.set(errors.New("connection refused"))
		time.Sleep(time.Second) // the count at 0.75 s fails
		fb.set(nil, me, peer("p1"), peer("p2"), peer("p3"))
		time.Sleep(34500 * time.Millisecond) // 36 s from the start
		s.Stop()
		mu.Lock()
		defer mu.Unlock()
		assert.Equal(t, []string{"0s:1", "250ms:3", "1.75s:4", "3.75s:4", "7.75s:4", "15.75s:4", "25.75s:4", "35.75s:4"}, got)
	})
}
