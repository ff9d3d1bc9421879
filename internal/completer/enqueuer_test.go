package completer

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/internal/memory"
)

func TestEnqueuerWritesAndAnswersEachRequest(t *testing.T) {
	b := memory.New()
	dup, err := b.Enqueue(context.Background(), backends.EnqueueParams{Name: "kid", DedupKey: "k"})
	require.NoError(t, err)

	var mu sync.Mutex
	answers := map[any]EnqueueAnswer{}
	e := NewEnqueuer(EnqueuerConfig{Backend: b, Answered: func(a EnqueueAnswer) {
		mu.Lock()
		defer mu.Unlock()
		answers[a.Key] = a
	}})
	e.Start()
	fresh := backends.NewID()
	e.Enqueue(EnqueueRequest{Key: "fresh", Params: backends.EnqueueParams{ID: fresh, Name: "kid"}})
	e.Enqueue(EnqueueRequest{Key: "dup", Params: backends.EnqueueParams{ID: backends.NewID(), Name: "kid", DedupKey: "k"}})
	e.Enqueue(EnqueueRequest{Key: "bad", Params: backends.EnqueueParams{ID: "not-a-uuid", Name: "kid"}})
	e.Stop() // writes what it was given first
	e.Enqueue(EnqueueRequest{Key: "late", Params: backends.EnqueueParams{Name: "kid"}})

	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, fresh, answers["fresh"].JobID)
	assert.NoError(t, answers["fresh"].Err)
	j, err := b.Get(context.Background(), fresh)
	require.NoError(t, err)
	assert.Equal(t, backends.StatusQueued, j.Status)
	assert.Equal(t, dup.ID, answers["dup"].JobID, "a dedup hit is answered with the queued duplicate's id")
	assert.Error(t, answers["bad"].Err)
	assert.Empty(t, answers["bad"].JobID)
	assert.ErrorIs(t, answers["late"].Err, ErrStopped, "a request after Stop is answered at once")
}
