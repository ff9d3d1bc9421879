package integration

// soniq-client (sdk/node-client), the Node producer, against the real sidecar: a job it
// enqueues inside a transaction that rolls back never runs, one inside a transaction that
// commits runs exactly once; its cancel reaches a running job through the sidecar that holds
// it, with the command's answers. Its interop with Soniq's own producer is in
// soniq_interop_test.go (TestSoniqInteropNodeClient).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/backends/postgres/pgtest"
)

// nodeClient runs one command of testdata/node_client.js against url and decodes its JSON
// output into out.
func nodeClient(t *testing.T, root, url, command string, args, out any) {
	t.Helper()
	raw, err := json.Marshal(args)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", filepath.Join(root, "integration/testdata/node_client.js"), command, url, string(raw))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "node_client.js %s: %s (examples/node/producer needs its node_modules: make deps-node)", command, stderr.String())
	require.NoError(t, json.Unmarshal(stdout.Bytes(), out), "node_client.js %s output %q", command, stdout.String())
}

// cancelAnswer is what soniq-client's cancel returns.
type cancelAnswer struct {
	Outcome   string `json:"outcome"`
	Cancelled bool   `json:"cancelled"`
	Message   string `json:"message"`
}

func TestNodeClientUnderSidecar(t *testing.T) {
	t.Parallel()
	w := newWorld(t, sdks[2], manifestOpts{}) // the Node SDK over stdio
	var ids struct {
		RolledBack string `json:"rolled_back"`
		Committed  string `json:"committed"`
	}
	nodeClient(t, w.root, w.dbURL, "transactions", map[string]any{"name": "t.record"}, &ids)
	require.NotEmpty(t, ids.RolledBack)
	require.NotEmpty(t, ids.Committed)

	sc := w.startSidecar(nil)
	t.Cleanup(func() { sc.stop(t) })
	w.waitDone(t, sc, 30*time.Second, ids.Committed)
	_, err := w.backend.Get(context.Background(), ids.RolledBack)
	assert.True(t, errors.Is(err, backends.ErrNotFound), "the rolled-back job has no row: %v", err)

	// A running async job: cancelled by its holder, answered as the command answers.
	a := struct{ ID string }{}
	nodeClient(t, w.root, w.dbURL, "enqueue", map[string]any{"name": "t.await_cancel", "args": map[string]any{"seconds": 60}}, &a)
	w.waitStarted(t, a.ID)
	var c cancelAnswer
	nodeClient(t, w.root, w.dbURL, "cancel", map[string]any{"id": a.ID, "wait": 10000}, &c)
	assert.Equal(t, "cancelled_running", c.Outcome, c.Message)
	assert.True(t, c.Cancelled)
	assert.Equal(t, "cancelled job "+a.ID+" (t.await_cancel): worker "+sc.workerID(t)+
		" cancelled it (reason user); the row is cancelled, attempts 1 of 3, and will not be retried", c.Message)
	eventually(t, 10*time.Second, "the handler saw reason user", func() bool { return len(w.cancelEvents(a.ID)) > 0 })
	assert.Equal(t, []string{"cancelled-user"}, w.cancelEvents(a.ID))

	// A running sync job: refused by its holder, and it runs on.
	y := struct{ ID string }{}
	nodeClient(t, w.root, w.dbURL, "enqueue", map[string]any{"name": "t.sleep_sync", "args": map[string]any{"seconds": 2}}, &y)
	w.waitStarted(t, y.ID)
	nodeClient(t, w.root, w.dbURL, "cancel", map[string]any{"id": y.ID, "wait": 10000}, &c)
	assert.Equal(t, "refused", c.Outcome, c.Message)
	assert.False(t, c.Cancelled)
	assert.Contains(t, c.Message, "job "+y.ID+" (t.sleep_sync) cannot be cancelled: handler "+w.handlerName()+
		" runs it as a sync job (cancellable: false)")
	w.waitDone(t, sc, 30*time.Second, y.ID)

	// Every job ran once; the rolled-back one never.
	runs := map[string]int{}
	for _, r := range w.recorded() {
		if r[0] == "run" || r[0] == "start" {
			runs[r[1]]++
		}
	}
	assert.Equal(t, 1, runs[ids.Committed], "the committed job ran exactly once")
	assert.Zero(t, runs[ids.RolledBack], "the rolled-back job never ran")
	assert.Equal(t, 1, runs[y.ID])
}

// TestSoniqInteropNodeClient: the released Soniq and soniq-client agree on args_hash (every
// case of the shared vectors through Soniq's own compute_args_hash), and a unique job or a
// dedup key enqueued by either producer deduplicates against the other's queued row, in both
// orders.
func TestSoniqInteropNodeClient(t *testing.T) {
	t.Parallel()
	py := soniqPython(t)
	root := repoRoot(t)
	url := pgtest.NewDatabase(t)
	py.run(t, "setup", url, nil, nil)

	raw, err := os.ReadFile(filepath.Join(root, "backends/testdata/enqueue_vectors.json"))
	require.NoError(t, err)
	var vectors struct {
		ArgsHash []struct {
			Name     string `json:"name"`
			Args     string `json:"args"`
			ArgsHash string `json:"args_hash"`
		} `json:"args_hash"`
	}
	require.NoError(t, json.Unmarshal(raw, &vectors))
	require.NotEmpty(t, vectors.ArgsHash)
	texts := make([]string, len(vectors.ArgsHash))
	for i, v := range vectors.ArgsHash {
		texts[i] = v.Args
	}
	var soniqHashes []string
	py.run(t, "args_hashes", url, texts, &soniqHashes)
	require.Len(t, soniqHashes, len(texts))
	for i, v := range vectors.ArgsHash {
		assert.Equal(t, v.ArgsHash, soniqHashes[i], "vector %q: Soniq's compute_args_hash of %s", v.Name, v.Args)
	}

	type id struct{ ID string }
	args := map[string]any{"b": []any{1, 2.5, "ü 🎉"}, "a": 1, "s": "é"}
	// soniq-client first, then Soniq.
	var node, soniq id
	nodeClient(t, root, url, "enqueue", map[string]any{"name": "interop.node.unique", "args": args, "options": map[string]any{"unique": true}}, &node)
	py.run(t, "enqueue", url, map[string]any{"name": "interop.node.unique", "args": args, "unique": true}, &soniq)
	assert.Equal(t, node.ID, soniq.ID, "Soniq's unique enqueue returns soniq-client's queued row")
	// Soniq first, then soniq-client.
	py.run(t, "enqueue", url, map[string]any{"name": "interop.node.unique2", "args": args, "unique": true}, &soniq)
	nodeClient(t, root, url, "enqueue", map[string]any{"name": "interop.node.unique2", "args": args, "options": map[string]any{"unique": true}}, &node)
	assert.Equal(t, soniq.ID, node.ID, "soniq-client's unique enqueue returns Soniq's queued row")
	// Dedup keys, both orders.
	nodeClient(t, root, url, "enqueue", map[string]any{"name": "interop.node.dedup", "args": map[string]any{}, "options": map[string]any{"dedupKey": "k-node"}}, &node)
	py.run(t, "enqueue", url, map[string]any{"name": "interop.node.dedup", "dedup_key": "k-node"}, &soniq)
	assert.Equal(t, node.ID, soniq.ID)
	py.run(t, "enqueue", url, map[string]any{"name": "interop.node.dedup", "dedup_key": "k-soniq"}, &soniq)
	nodeClient(t, root, url, "enqueue", map[string]any{"name": "interop.node.dedup", "args": map[string]any{}, "options": map[string]any{"dedupKey": "k-soniq"}}, &node)
	assert.Equal(t, soniq.ID, node.ID)
	// Different args are different jobs.
	nodeClient(t, root, url, "enqueue", map[string]any{"name": "interop.node.unique", "args": map[string]any{"a": 2}, "options": map[string]any{"unique": true}}, &node)
	assert.NotEqual(t, soniq.ID, node.ID)
	var stats map[string]int64
	py.run(t, "stats", url, nil, &stats)
	assert.Equal(t, int64(5), stats["queued"], "five rows: two unique, two dedup, one more")
}
