package memory

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// The expected hashes come from soniq.utils.hashing.compute_args_hash
// (Soniq 0.1.0) on the same arguments.
func TestArgsHashMatchesSoniq(t *testing.T) {
	for _, tc := range []struct{ args, want string }{
		{`{}`, "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"},
		{`{"b":2,"a":1}`, "43258cff783fe7036d8a43033f830adfc60ec037382473548ac742b888292777"},
		{`{ "a" : 1, "b" : 2 }`, "43258cff783fe7036d8a43033f830adfc60ec037382473548ac742b888292777"},
		{`{"s":"é€😀","t":"<&>"}`, "747318680f31648fbe3f7c2f8b9d82a2ec73982e075d2f4dd05022f7e55df884"},
		{`{"n":[1,2.5,null,true],"o":{"z":1,"y":"x"}}`, "eda17d69a9715d00adfb9df79fd704aa15563ec9e819167d25e4a83fb041c9e9"},
	} {
		t.Run(tc.args, func(t *testing.T) {
			got, err := argsHash([]byte(tc.args))
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
	_, err := argsHash([]byte(`{"a":`))
	assert.Error(t, err)
}

func TestTruncateError(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		wantLen  int
	}{
		{"short", "boom", 4},
		{"exact", strings.Repeat("a", backends.MaxErrorBytes), backends.MaxErrorBytes},
		{"ascii over", strings.Repeat("a", backends.MaxErrorBytes+1), backends.MaxErrorBytes},
		{"splits a 2-byte rune", "a" + strings.Repeat("é", backends.MaxErrorBytes/2), backends.MaxErrorBytes - 1},
		{"splits a 4-byte rune", "ab" + strings.Repeat("😀", backends.MaxErrorBytes/4), backends.MaxErrorBytes - 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := truncateError(tc.in)
			assert.Len(t, got, tc.wantLen)
			assert.True(t, utf8.ValidString(got))
			assert.True(t, strings.HasPrefix(tc.in, got))
		})
	}
}

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
