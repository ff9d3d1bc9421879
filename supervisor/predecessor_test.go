package supervisor

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/internal/config"
	"github.com/soniq-dev/soniq-sidecar/internal/logtest"
	"github.com/soniq-dev/soniq-sidecar/internal/memory"
)

// At start a sidecar looks for earlier worker rows of its identity
// (instance and host, any pid). A row whose heartbeat stands still for two
// of its beats (plus a second) is a dead predecessor, taken over with its
// processing rows; one whose heartbeat moves is a live sidecar with the
// same instance name: an ERROR, never taken over. On the bubble's clock.
func TestRegisterAtStartTellsADeadPredecessorFromALiveTwin(t *testing.T) {
	const beat = time.Second
	cases := []struct {
		name      string
		status    string
		age       time.Duration // of the earlier row's heartbeat when the sidecar starts
		beats     bool          // its owner keeps beating
		takenOver bool
		took      time.Duration // how long registration took
	}{
		{name: "killed a moment ago: watched, then taken over", status: backends.WorkerActive, age: 200 * time.Millisecond,
			takenOver: true, took: 2*beat + time.Second - 200*time.Millisecond},
		{name: "a live sidecar with the same instance name", status: backends.WorkerActive, age: 200 * time.Millisecond, beats: true,
			took: 2*beat + time.Second - 200*time.Millisecond},
		{name: "silent for two beats: taken over at once", status: backends.WorkerActive, age: 3500 * time.Millisecond, takenOver: true},
		{name: "stopped by a clean exit: taken over at once", status: backends.WorkerStopped, age: 100 * time.Millisecond, takenOver: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				mem := memory.New()
				var mu sync.Mutex
				var logs []logtest.Record
				settings := config.DefaultSettings()
				settings.HeartbeatInterval = beat
				m := &config.Manifest{Version: 1, Handlers: []config.Handler{{Name: "h", Command: []string{"x"},
					Processes: 1, Concurrency: 1, SyncConcurrency: 1, Jobs: []config.JobSpec{{Name: "j"}}}}}
				meta, err := json.Marshal(map[string]any{backends.MetaKind: workerKind, backends.MetaInstance: "billing",
					backends.MetaHost: "pod-a", backends.MetaHeartbeatInterval: beat.Seconds()})
				require.NoError(t, err)
				earlier := backends.Worker{ID: backends.NewID(), Hostname: "billing@pod-a", PID: 1, Concurrency: 1, Metadata: meta}
				require.NoError(t, mem.RegisterWorker(ctx, earlier))
				job, err := mem.Enqueue(ctx, backends.EnqueueParams{Name: "j"})
				require.NoError(t, err)
				_, err = mem.Claim(ctx, backends.ClaimParams{WorkerID: earlier.ID, Limit: 1})
				require.NoError(t, err)
				if c.status != backends.WorkerActive {
					require.NoError(t, mem.SetWorkerStatus(ctx, earlier.ID, c.status))
				}
				stop := make(chan struct{})
				var wg sync.WaitGroup
				if c.beats {
					wg.Add(1)
					go func() {
						defer wg.Done()
						tick := time.NewTicker(beat)
						defer tick.Stop()
						for {
							select {
							case <-stop:
								return
							case <-tick.C:
								_ = mem.Heartbeat(ctx, earlier.ID)
							}
						}
					}()
				}
				time.Sleep(c.age)

				s, err := New(Config{Manifest: m, Settings: settings, Backend: mem, Instance: "billing",
					Logger: slog.New(logtest.Handler{Mu: &mu, Records: &logs})})
				require.NoError(t, err)
				require.NoError(t, s.setIdentity("pod-a", 1, 1))
				start := time.Now()
				jobs, err := s.registerAtStart(ctx)
				took := time.Since(start)
				close(stop)
				wg.Wait()
				require.NoError(t, err)
				assert.Equal(t, c.took, took, "registration took")
				require.NoError(t, mem.Heartbeat(ctx, s.WorkerID()), "registered")
				got, err := mem.Get(ctx, job.ID)
				require.NoError(t, err)
				require.NotNil(t, got.WorkerID)
				mu.Lock()
				defer mu.Unlock()
				var clash []logtest.Record
				for _, r := range logs {
					if strings.HasPrefix(r.Msg, "another live sidecar on this host has this instance name") {
						clash = append(clash, r)
					}
				}
				if c.takenOver {
					require.Len(t, jobs, 1)
					assert.Equal(t, job.ID, jobs[0].ID)
					assert.Equal(t, s.WorkerID(), *got.WorkerID, "the predecessor's row is this sidecar's")
					assert.Equal(t, backends.StatusProcessing, got.Status)
					assert.Equal(t, 1, got.Attempts)
					assert.ErrorIs(t, mem.Heartbeat(ctx, earlier.ID), backends.ErrNotFound, "the dead row is gone")
					assert.Empty(t, clash)
					assert.Equal(t, "billing@pod-a", s.workerHostname())
					return
				}
				assert.Empty(t, jobs)
				assert.Equal(t, earlier.ID, *got.WorkerID, "a live sidecar's row is never taken")
				require.NoError(t, mem.Heartbeat(ctx, earlier.ID), "its worker row is untouched")
				require.Len(t, clash, 1, "one line says so")
				assert.Equal(t, "billing", clash[0].Attrs["instance"])
				assert.Equal(t, earlier.ID, clash[0].Attrs["other_worker_id"])
				assert.Equal(t, "billing@pod-a#"+s.WorkerID()[:8], s.workerHostname(), "registered beside it: both are pid 1")
			})
		})
	}
}
