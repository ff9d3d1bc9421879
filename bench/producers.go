package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// ---- the producers: enqueueing from a Node application ----
//
// soniq-client (sdk/node-client) beside pg-boss and graphile-worker, the peers'
// own producers, on the same database: the rate of one bulk call (soniq-client
// enqueueMany, pg-boss insert, graphile-worker addJobs) and the latency of a
// single enqueue (enqueue, send, addJob), one producer at a time in rounds that
// alternate them. bench/producers/producers.mjs does the measuring; the peers'
// schemas come from their own setup (as in the peers section).

// producerResult is one producer's row.
type producerResult struct {
	Key     string    `json:"key"`
	Label   string    `json:"label"`
	Version string    `json:"version,omitempty"`
	Bulk    string    `json:"bulk_call"`
	Single  string    `json:"single_call"`
	Runs    []float64 `json:"bulk_jobs_per_s_runs,omitempty"`
	SingleN int       `json:"single_n,omitempty"`
	Status  string    `json:"status,omitempty"`

	JobsPerS float64 `json:"median_bulk_jobs_per_s,omitempty"`
	P50      float64 `json:"single_p50_ms,omitempty"`
	P95      float64 `json:"single_p95_ms,omitempty"`
	P99      float64 `json:"single_p99_ms,omitempty"`
}

// producers are the rows, in the report's order; peer is the peers section's
// key whose installation and schema setup the row uses.
var producers = []struct {
	key, label, bulk, single, peer string
}{
	{"soniq-client", "soniq-client (this commit)", "`enqueueMany`", "`enqueue`", ""},
	{"pg-boss", "pg-boss", "`insert`", "`send`", "pg-boss"},
	{"graphile-worker", "graphile-worker", "`addJobs`", "`addJob`", "graphile-worker"},
}

func (b *bench) producersSection(ctx context.Context) error {
	c := b.c
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "BENCH_DATABASE_URL=" + c.dbURL,
		"BENCH_CLIENT_APP=" + filepath.Join(c.root, "examples", "node", "producer"),
		fmt.Sprintf("BENCH_PRODUCERS_BATCH=%d", c.producersBatch), fmt.Sprintf("BENCH_PRODUCERS_ROUNDS=%d", c.producersRuns),
		fmt.Sprintf("BENCH_PRODUCERS_SINGLE=%d", c.producersSingle)}
	rows := make([]*producerResult, len(producers))
	for i, p := range producers {
		rows[i] = &producerResult{Key: p.key, Label: p.label, Bulk: p.bulk, Single: p.single}
		if p.peer == "" {
			continue
		}
		if c.peerPaths[p.peer] == "" {
			rows[i].Status = "not measured: no installation given (-peer-installs " + p.peer + "=…)"
			continue
		}
		if err := b.peerSetup(ctx, peerByKey(p.peer)); err != nil {
			rows[i].Status = "failed: setup: " + lastLine(err.Error())
			continue
		}
		name := map[string]string{"pg-boss": "BENCH_PGBOSS_MODULES", "graphile-worker": "BENCH_GRAPHILE_MODULES"}[p.peer]
		env = append(env, name+"="+c.peerPaths[p.peer])
	}
	b.rep.Producers = rows
	b.rep.Params.ProducersBatch, b.rep.Params.ProducersRounds, b.rep.Params.ProducersSingle = c.producersBatch, c.producersRuns, c.producersSingle
	for _, r := range rows {
		if r.Status != "" && c.peersStrict {
			return fmt.Errorf("producers: %s %s", r.Key, r.Status)
		}
	}

	rctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(rctx, c.node, filepath.Join(c.root, "bench", "producers", "producers.mjs"))
	cmd.Env, cmd.Dir = env, c.work
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("producers: bench/producers/producers.mjs: %w\n%s", err, stderr.String())
	}
	for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
		if line != "" {
			logf("%s", line)
		}
	}
	var out struct {
		Rows []struct {
			Key      string    `json:"key"`
			Version  string    `json:"version"`
			Bulk     []float64 `json:"bulk_jobs_per_s"`
			SingleMS []float64 `json:"single_ms"`
		} `json:"rows"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		return fmt.Errorf("producers: reading the result %q: %w", stdout.String(), err)
	}
	for _, o := range out.Rows {
		for _, r := range rows {
			if r.Key != o.Key || len(o.Bulk) == 0 || len(o.SingleMS) == 0 {
				continue
			}
			lats := slices.Clone(o.SingleMS)
			slices.Sort(lats)
			r.Version, r.Runs, r.SingleN = o.Version, o.Bulk, len(lats)
			r.JobsPerS, r.P50, r.P95, r.P99 = median(o.Bulk), pct(lats, 50), pct(lats, 95), pct(lats, 99)
		}
	}
	for _, r := range rows {
		if r.Status == "" && r.SingleN == 0 {
			r.Status = "failed: no result"
			if c.peersStrict {
				return fmt.Errorf("producers: %s gave no result", r.Key)
			}
		}
	}
	return nil
}

func (r *report) writeProducers(w func(string, ...any)) {
	if len(r.Producers) == 0 {
		return
	}
	p := r.Params
	w("## 1d. Enqueueing from Node: soniq-client beside pg-boss and graphile-worker\n\n")
	w("The producer a Node application calls, on the same database, no worker running: one bulk call of %d jobs (jobs/s from the\n", p.ProducersBatch)
	w("call to its return, i.e. its commit; the table emptied before it), then %d single enqueues one after another (latency\n", p.ProducersSingle)
	w("of each call, after 20 warm-up calls); %d rounds alternating the producers (`bench/producers/producers.mjs`).\n", p.ProducersRounds)
	w("soniq-client's bulk call is one statement; its single enqueue one statement with its `pg_notify`.\n\n")
	w("| producer | version | bulk call | jobs/s (median) | runs (jobs/s) | single call | p50 ms | p95 ms | p99 ms |\n")
	w("| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, t := range r.Producers {
		if t.Status != "" {
			w("| %s | %s | %s | %s | | %s | | | |\n", t.Label, t.Version, t.Bulk, t.Status, t.Single)
			continue
		}
		runs := make([]string, len(t.Runs))
		for i, x := range t.Runs {
			runs[i] = f0(x)
		}
		w("| %s | %s | %s | **%s** | %s | %s | %s | %s | %s |\n", t.Label, t.Version, t.Bulk, f0(t.JobsPerS), strings.Join(runs, ", "),
			t.Single, f2(t.P50), f2(t.P95), f2(t.P99))
	}
	w("\n")
}
