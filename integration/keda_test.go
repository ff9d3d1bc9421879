package integration

// deploy/kubernetes/keda-scaledobject.yaml: its queue-depth query, run as
// KEDA would against a real Postgres with Soniq's schema and known rows,
// counts exactly the due and running jobs of the names the attach
// deployment's manifest serves; and the object targets that deployment.

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/backends/postgres"
	"github.com/soniq-dev/soniq-sidecar/backends/postgres/pgtest"
	"github.com/soniq-dev/soniq-sidecar/internal/config"
)

// k8sDocs decodes every document of a multi-document Kubernetes YAML file.
func k8sDocs(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var out []map[string]any
	for {
		var d map[string]any
		err := dec.Decode(&d)
		if errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(t, err, path)
		if d != nil {
			out = append(out, d)
		}
	}
}

func k8sDoc(t *testing.T, docs []map[string]any, kind string) map[string]any {
	t.Helper()
	for _, d := range docs {
		if d["kind"] == kind {
			return d
		}
	}
	t.Fatalf("no %s document", kind)
	return nil
}

// dig walks nested maps (and list indexes) of a decoded YAML document.
func dig(t *testing.T, v any, path ...any) any {
	t.Helper()
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			require.True(t, ok, "%v: not a map at %q", path, k)
			v = m[k]
		case int:
			l, ok := v.([]any)
			require.True(t, ok && k < len(l), "%v: no index %d", path, k)
			v = l[k]
		}
	}
	return v
}

func TestKEDAQueueDepthQuery(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	keda := k8sDocs(t, filepath.Join(root, "deploy", "kubernetes", "keda-scaledobject.yaml"))
	attach := k8sDocs(t, filepath.Join(root, "deploy", "kubernetes", "attach.yaml"))

	so := k8sDoc(t, keda, "ScaledObject")
	deployment := k8sDoc(t, attach, "Deployment")
	assert.Equal(t, dig(t, deployment, "metadata", "name"), dig(t, so, "spec", "scaleTargetRef", "name"), "the ScaledObject scales attach.yaml's Deployment")
	trigger := dig(t, so, "spec", "triggers", 0).(map[string]any)
	require.Equal(t, "postgresql", trigger["type"])
	query, _ := dig(t, trigger, "metadata", "query").(string)
	require.NotEmpty(t, query)
	auth := k8sDoc(t, keda, "TriggerAuthentication")
	assert.Equal(t, dig(t, auth, "metadata", "name"), dig(t, trigger, "authenticationRef", "name"))

	// The manifest the deployment's sidecar reads: its job names and its
	// capacity are what the query counts and what one pod is targeted at.
	manifestYAML, _ := dig(t, k8sDoc(t, attach, "ConfigMap"), "data", "soniq-handlers.yaml").(string)
	mf := filepath.Join(t.TempDir(), "soniq-handlers.yaml")
	require.NoError(t, os.WriteFile(mf, []byte(manifestYAML), 0o644))
	m, err := config.LoadManifest(mf)
	require.NoError(t, err)
	require.Len(t, m.Handlers, 1)
	h := m.Handlers[0]
	target, err := strconv.Atoi(dig(t, trigger, "metadata", "targetQueryValue").(string))
	require.NoError(t, err)
	assert.Equal(t, h.Concurrency, target, "targetQueryValue is one pod's capacity (the handler's concurrency)")
	var served []string
	for _, j := range h.Jobs {
		served = append(served, j.Name)
		assert.Contains(t, query, "'"+j.Name+"'", "the query counts every job the manifest serves")
	}
	// maxReplicaCount within the budget the file's comment works out:
	// ceil(N × 1.25) pods of (pool_max_conns 4 + 1) connections ≤ 60.
	maxReplicas := dig(t, so, "spec", "maxReplicaCount").(int)
	surged := (maxReplicas*5 + 3) / 4
	assert.LessOrEqual(t, surged*5, 60, "maxReplicaCount %d: %d pods during a rolling update", maxReplicas, surged)
	assert.Greater(t, ((maxReplicas+1)*5+3)/4*5, 60, "maxReplicaCount is the largest the budget allows")

	// Known rows in a real Soniq schema.
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	b, err := postgres.Open(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	require.NoError(t, b.Migrate(ctx))
	enqueue := func(name string, delay time.Duration) backends.Job {
		j, err := b.Enqueue(ctx, backends.EnqueueParams{Name: name, Args: []byte(`{}`), Delay: delay})
		require.NoError(t, err)
		return j
	}
	worker := backends.NewID()
	require.NoError(t, b.RegisterWorker(ctx, backends.Worker{ID: worker, Hostname: "keda-test", PID: 1, Status: "active", Concurrency: 8}))
	claim := func(name string, n int) []backends.Job {
		js, err := b.Claim(ctx, backends.ClaimParams{WorkerID: worker, Names: []string{name}, Limit: n})
		require.NoError(t, err)
		require.Len(t, js, n)
		return js
	}
	complete := func(c backends.Completion) {
		_, err := b.Complete(ctx, worker, []backends.Completion{c})
		require.NoError(t, err)
	}
	charge, receipt := served[0], served[1]
	// Counted: 2 running, then 3 due.
	enqueue(receipt, 0)
	enqueue(receipt, 0)
	claim(receipt, 2)
	// Not counted: done, dead-lettered, retrying after a backoff, snoozed.
	for range 4 {
		enqueue(charge, 0)
	}
	js := claim(charge, 4)
	complete(backends.Completion{JobID: js[0].ID, Attempts: js[0].Attempts, Outcome: backends.OutcomeDone, ResultTTL: time.Hour})
	complete(backends.Completion{JobID: js[1].ID, Attempts: js[1].Attempts, Outcome: backends.OutcomeDeadLetter, Reason: "max_retries_exceeded", Error: "boom"})
	complete(backends.Completion{JobID: js[2].ID, Attempts: js[2].Attempts, Outcome: backends.OutcomeRetry, Error: "boom", Delay: time.Hour})
	complete(backends.Completion{JobID: js[3].ID, Attempts: js[3].Attempts, Outcome: backends.OutcomeSnooze, Reason: "later", Delay: time.Hour})
	for range 3 {
		enqueue(charge, 0)
	}
	// Not counted: scheduled for later; another deployment's jobs, due and running.
	enqueue(charge, time.Hour)
	for range 4 {
		enqueue("emails.send", 0)
	}
	claim("emails.send", 1)
	require.False(t, slices.Contains(served, "emails.send"))

	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	var n int64
	require.NoError(t, pool.QueryRow(ctx, query).Scan(&n), "the ScaledObject's query:\n%s", query)
	assert.Equal(t, int64(5), n, "2 running + 3 due jobs of %v", served)
	st, err := b.Stats(ctx)
	require.NoError(t, err)
	t.Logf("rows: %+v; the query counts %d; KEDA runs ceil(%d/%d) = %d pods", st, n, n, target, (int(n)+target-1)/target)
}
