package backendtest

import (
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// EnqueueVectors checks that b's Enqueue writes the rows of the shared
// enqueue vectors (backends/testdata/enqueue_vectors.json, at path from the
// calling test's directory), which soniq-client and Soniq's own producer
// are held to as well.
func EnqueueVectors(t *testing.T, b backends.Backend, path string) {
	t.Helper()
	for _, v := range readRowVectors(t, path) {
		t.Run(v.Name, func(t *testing.T) {
			j, err := b.Enqueue(t.Context(), v.params())
			require.NoError(t, err)
			got, err := b.Get(t.Context(), j.ID)
			require.NoError(t, err)
			v.checkRow(t, got)
		})
	}
}

// rowVector is one row case of backends/testdata/enqueue_vectors.json: what an enqueue of
// Job with Args and Options writes (soniq-client checks the same cases).
type rowVector struct {
	Name    string          `json:"name"`
	Job     string          `json:"job"`
	Args    json.RawMessage `json:"args"`
	Options struct {
		Queue       string `json:"queue"`
		Priority    *int   `json:"priority"`
		MaxAttempts *int   `json:"maxAttempts"`
		Delay       int64  `json:"delay"` // ms
		DedupKey    string `json:"dedupKey"`
		Unique      bool   `json:"unique"`
	} `json:"options"`
	Row map[string]json.RawMessage `json:"row"`
}

func (v rowVector) params() backends.EnqueueParams {
	args := v.Args
	if string(args) == "null" {
		args = nil
	}
	o := v.Options
	return backends.EnqueueParams{Name: v.Job, Args: args, Queue: o.Queue, Priority: o.Priority, MaxAttempts: o.MaxAttempts,
		Delay: time.Duration(o.Delay) * time.Millisecond, DedupKey: o.DedupKey, UniqueJob: o.Unique}
}

// checkRow compares a job with the vector's row.
func (v rowVector) checkRow(t *testing.T, j backends.Job) {
	t.Helper()
	want := func(col string, into any) {
		require.NoError(t, json.Unmarshal(v.Row[col], into), "row.%s", col)
	}
	var s struct {
		name, status, queue       string
		argsHash, dedup, producer *string
		worker, lastErr           *string
		attempts, maxAtt, prio    int
		unique                    bool
	}
	want("job_name", &s.name)
	want("status", &s.status)
	want("queue", &s.queue)
	want("args_hash", &s.argsHash)
	want("dedup_key", &s.dedup)
	want("producer_id", &s.producer)
	want("worker_id", &s.worker)
	want("last_error", &s.lastErr)
	want("attempts", &s.attempts)
	want("max_attempts", &s.maxAtt)
	want("priority", &s.prio)
	want("unique_job", &s.unique)
	assert.Equal(t, s.name, j.Name, "job_name")
	assert.Equal(t, s.status, j.Status, "status")
	assert.Equal(t, s.queue, j.Queue, "queue")
	assert.Equal(t, s.argsHash, j.ArgsHash, "args_hash")
	assert.Equal(t, s.dedup, j.DedupKey, "dedup_key")
	assert.Equal(t, s.producer, j.ProducerID, "producer_id")
	assert.Equal(t, s.worker, j.WorkerID, "worker_id")
	assert.Equal(t, s.lastErr, j.LastError, "last_error")
	assert.Equal(t, s.attempts, j.Attempts, "attempts")
	assert.Equal(t, s.maxAtt, j.MaxAttempts, "max_attempts")
	assert.Equal(t, s.prio, j.Priority, "priority")
	assert.Equal(t, s.unique, j.UniqueJob, "unique_job")
	assert.JSONEq(t, string(v.Row["args"]), string(j.Args), "args")
	assert.Nil(t, j.ExpiresAt, "expires_at")
	assert.Nil(t, j.Result, "result")
	var sched *struct {
		AfterCreatedMS int64 `json:"after_created_ms"`
	}
	want("scheduled_at", &sched)
	if sched == nil {
		assert.Nil(t, j.ScheduledAt, "scheduled_at")
	} else if assert.NotNil(t, j.ScheduledAt, "scheduled_at") {
		assert.Equal(t, time.Duration(sched.AfterCreatedMS)*time.Millisecond, j.ScheduledAt.Sub(j.CreatedAt), "scheduled_at - created_at")
	}
}

func readRowVectors(t *testing.T, path string) []rowVector {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	var file struct {
		Rows []rowVector `json:"rows"`
	}
	require.NoError(t, json.Unmarshal(raw, &file))
	require.NotEmpty(t, file.Rows)
	return file.Rows
}
