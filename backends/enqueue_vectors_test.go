package backends

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestArgsHashVectors: the shared enqueue vectors (testdata/enqueue_vectors.json), which
// soniq-client's tests and Soniq's own compute_args_hash (integration's
// TestSoniqInteropEnqueueVectors) check too.
func TestArgsHashVectors(t *testing.T) {
	raw, err := os.ReadFile("testdata/enqueue_vectors.json")
	require.NoError(t, err)
	var file struct {
		ArgsHash []struct {
			Name     string `json:"name"`
			Args     string `json:"args"`
			ArgsHash string `json:"args_hash"`
		} `json:"args_hash"`
	}
	require.NoError(t, json.Unmarshal(raw, &file))
	require.NotEmpty(t, file.ArgsHash)
	for _, v := range file.ArgsHash {
		t.Run(v.Name, func(t *testing.T) {
			got, err := ArgsHash(json.RawMessage(v.Args))
			require.NoError(t, err, "args %s", v.Args)
			assert.Equal(t, v.ArgsHash, got, "args %s", v.Args)
		})
	}
}
