package memory

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

func TestSubscribeNeverBlocksEnqueue(t *testing.T) {
	b := New()
	t.Cleanup(func() { _ = b.Close() })
	ch, err := b.Subscribe(t.Context())
	require.NoError(t, err)
	// Nobody reads: enqueues beyond the buffer must still return.
	for range 3 * cap(ch) {
		_, err := b.Enqueue(t.Context(), backends.EnqueueParams{Name: "x"})
		require.NoError(t, err)
	}
	assert.Len(t, ch, cap(ch))
}

func TestCloseEndsSubscriptions(t *testing.T) {
	b := New()
	ch, err := b.Subscribe(context.Background())
	require.NoError(t, err)
	require.NoError(t, b.Close())
	require.NoError(t, b.Close(), "close twice")
	select {
	case _, ok := <-ch:
		assert.False(t, ok)
	case <-time.After(5 * time.Second):
		t.Fatal("channel not closed by Close")
	}
	_, err = b.Subscribe(t.Context())
	assert.Error(t, err, "subscribe after close")
}

func TestInvalidInputs(t *testing.T) {
	b := New()
	t.Cleanup(func() { _ = b.Close() })
	ctx := t.Context()
	_, err := b.Enqueue(ctx, backends.EnqueueParams{})
	assert.Error(t, err, "empty name")
	_, err = b.Enqueue(ctx, backends.EnqueueParams{Name: "x", Args: []byte(`{`)})
	assert.Error(t, err, "invalid args")
	_, err = b.Claim(ctx, backends.ClaimParams{WorkerID: "w", Limit: 0})
	assert.Error(t, err, "limit 0")
	_, err = b.Complete(ctx, "w", []backends.Completion{{JobID: "j", Outcome: 0}})
	assert.Error(t, err, "unknown outcome")
	assert.Error(t, b.SetWorkerStatus(ctx, "missing", backends.WorkerStopped))
	assert.ErrorIs(t, b.Heartbeat(ctx, "missing"), backends.ErrNotFound)
}
