package postgres

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// NackAndStop writes a shutdown's last NACKs and the stop mark in one
// statement: the NACK's guard holds as Nack's does, the mark counts as a
// heartbeat, a worker row that is gone leaves the NACKs written and says
// so, and a refused NACK writes no mark.
func TestNackAndStop(t *testing.T) {
	b, _ := openTest(t)
	ctx := t.Context()
	status := func(t *testing.T, w string) string {
		t.Helper()
		var s string
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT status FROM soniq_workers WHERE id = $1`, w).Scan(&s))
		return s
	}
	claim := func(t *testing.T, w string, n int) []backends.Job {
		t.Helper()
		for range n {
			_, err := b.Enqueue(ctx, backends.EnqueueParams{Name: "x"})
			require.NoError(t, err)
		}
		held, err := b.Claim(ctx, backends.ClaimParams{WorkerID: w, Limit: n})
		require.NoError(t, err)
		require.Len(t, held, n)
		return held
	}
	tests := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"the NACKs and the mark together", func(t *testing.T) {
			w := registerWorker(t, b, 11)
			held := claim(t, w, 3)
			stale := held[2]
			stale.Attempts = 7 // not the attempt this worker holds: the guard refuses it
			nacked, stopped, err := b.NackAndStop(ctx, w, []backends.Job{held[0], held[1], stale})
			require.NoError(t, err)
			assert.True(t, stopped)
			assert.Equal(t, []string{held[0].ID, held[1].ID}, nacked)
			for _, j := range held[:2] {
				got, err := b.Get(ctx, j.ID)
				require.NoError(t, err)
				assert.Equal(t, backends.StatusQueued, got.Status)
				assert.Nil(t, got.WorkerID)
				assert.Equal(t, 1, got.Attempts, "attempts preserved")
			}
			got, err := b.Get(ctx, held[2].ID)
			require.NoError(t, err)
			assert.Equal(t, backends.StatusProcessing, got.Status, "the guard held")
			assert.Equal(t, backends.WorkerStopped, status(t, w))
		}},
		{"nothing to NACK", func(t *testing.T) {
			w := registerWorker(t, b, 12)
			nacked, stopped, err := b.NackAndStop(ctx, w, nil)
			require.NoError(t, err)
			assert.True(t, stopped)
			assert.Empty(t, nacked)
			assert.Equal(t, backends.WorkerStopped, status(t, w))
		}},
		{"the worker row is gone", func(t *testing.T) {
			w := registerWorker(t, b, 13)
			held := claim(t, w, 1)
			other := registerWorker(t, b, 14)
			nacked, stopped, err := b.NackAndStop(ctx, other, held)
			require.NoError(t, err)
			assert.True(t, stopped)
			assert.Empty(t, nacked, "another worker's rows are not NACKed")
			_, err = b.pool.Exec(ctx, `UPDATE soniq_jobs SET worker_id = NULL, status = 'queued' WHERE id = $1`, held[0].ID)
			require.NoError(t, err)
			_, err = b.pool.Exec(ctx, `DELETE FROM soniq_workers WHERE id = $1`, w)
			require.NoError(t, err)
			nacked, stopped, err = b.NackAndStop(ctx, w, nil)
			require.NoError(t, err)
			assert.False(t, stopped)
			assert.Empty(t, nacked)
		}},
		{"a NACK refused before it is sent writes no mark", func(t *testing.T) {
			w := registerWorker(t, b, 15)
			held := claim(t, w, 1)
			_, _, err := b.NackAndStop(ctx, w, []backends.Job{{ID: held[0].ID}})
			require.ErrorIs(t, err, backends.ErrNoAttempt)
			assert.Equal(t, backends.WorkerActive, status(t, w))
			got, err := b.Get(ctx, held[0].ID)
			require.NoError(t, err)
			assert.Equal(t, backends.StatusProcessing, got.Status)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, tc.run)
	}
}
