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
		w := NewFleetWatcher(FleetConfig{Backend: fb, WorkerID: "me", Kind: "sidecar", Queues: []string{"a"},
			Interval: time.Minute, Log: logs.logger(), Foreign: func(n int) { counts = append(counts, n) }})
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
