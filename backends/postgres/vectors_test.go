package postgres

import (
	"testing"

	"github.com/soniq-dev/soniq-sidecar/backends/backendtest"
)

// TestEnqueueVectors: the rows of the shared enqueue vectors, as Enqueue writes them.
func TestEnqueueVectors(t *testing.T) {
	t.Parallel()
	b, _ := openTest(t)
	backendtest.EnqueueVectors(t, b, "../testdata/enqueue_vectors.json")
}
