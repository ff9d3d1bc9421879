package main

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

func (c *cluster) collect(ctx context.Context, pool *pgxpool.Pool, produced []Produced, rss []RSSSample) (*History, error) {
	jobs := map[string]*Job{}
	var order []string
	for _, p := range produced {
		jobs[p.ID] = &Job{ID: p.ID, Name: p.Name, Status: "missing"}
		order = append(order, p.ID)
	}
	unconfirmed := map[string]bool{}
	for _, p := range produced {
		if p.Unconfirmed {
			unconfirmed[p.ID] = true
		}
	}
	row := func(id, name string) *Job {
		j, ok := jobs[id]
		if !ok { // a row nobody enqueued: checked all the same
			j = &Job{ID: id, Name: name}
			jobs[id] = j
			order = append(order, id)
		}
		return j
	}
	rows, err := pool.Query(ctx, `SELECT id::text, job_name, status, attempts, max_attempts, created_at, updated_at, coalesce(last_error, '')
	FROM soniq_jobs WHERE queue = $1`, queueName)
	if err != nil {
		return nil, fmt.Errorf("reading soniq_jobs: %w", err)
	}
	for rows.Next() {
		var id, name, status, lastErr string
		var attempts, maxAttempts int
		var created, updated time.Time
		if err := rows.Scan(&id, &name, &status, &attempts, &maxAttempts, &created, &updated, &lastErr); err != nil {
			rows.Close()
			return nil, err
		}
		j := row(id, name)
		j.Status, j.Attempts, j.MaxAttempts, j.Enqueued, j.LastError = status, attempts, maxAttempts, created, lastErr
		if status == "done" {
			j.Finished = updated
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var both []string
	rows, err = pool.Query(ctx, `SELECT id::text, job_name, attempts, max_attempts, dead_letter_reason, original_created_at, moved_to_dead_letter_at, coalesce(last_error, '')
	FROM soniq_dead_letter_jobs WHERE queue = $1`, queueName)
	if err != nil {
		return nil, fmt.Errorf("reading soniq_dead_letter_jobs: %w", err)
	}
	for rows.Next() {
		var id, name, reason, lastErr string
		var attempts, maxAttempts int
		var created, moved time.Time
		if err := rows.Scan(&id, &name, &attempts, &maxAttempts, &reason, &created, &moved, &lastErr); err != nil {
			rows.Close()
			return nil, err
		}
		j := row(id, name)
		if j.Status != "missing" && j.Status != "" {
			both = append(both, id)
		}
		j.Status, j.Attempts, j.MaxAttempts, j.Enqueued, j.Finished, j.Reason, j.LastError = "dead_letter", attempts, maxAttempts, created, moved, reason, lastErr
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}

	h := &History{RSS: rss}
	for _, id := range order {
		j := jobs[id]
		if j.Status == "missing" && unconfirmed[id] {
			continue // its INSERT never landed
		}
		h.Jobs = append(h.Jobs, *j)
	}
	for _, id := range both {
		h.Problems = append(h.Problems, fmt.Sprintf("job %s is both in soniq_jobs and in soniq_dead_letter_jobs", id))
	}
	c.rec.mu.Lock()
	h.Faults = append(h.Faults, c.rec.faults...)
	h.Problems = append(h.Problems, c.rec.problems...)
	for _, in := range c.rec.incs {
		in.End, in.ExitCode = in.p.ExitedAt(), in.p.ExitCode()
		if err := scanSidecarLog(&in.Incarnation); err != nil {
			c.rec.mu.Unlock()
			return nil, err
		}
		h.Incarnations = append(h.Incarnations, in.Incarnation)
	}
	c.rec.mu.Unlock()
	sort.Slice(h.Faults, func(i, j int) bool { return h.Faults[i].At.Before(h.Faults[j].At) })
	var paths []string
	for _, name := range sidecarNames() {
		paths = append(paths, c.historyPath(name))
	}
	if h.Executions, err = readExecutions(paths); err != nil {
		return nil, err
	}
	attribute(h.Executions, h.Incarnations)
	if h.Beats, err = readBeats(ctx, pool); err != nil {
		return nil, err
	}
	return h, nil
}

// details prints each violation with what explains it: the row, the
// executions, the faults around them, the sidecars' log lines about the job.
func (c *cluster) details(h *History, rep *Report) string {
	var b strings.Builder
	jobs := map[string]Job{}
	for _, j := range h.Jobs {
		jobs[j.ID] = j
	}
	execs := map[string][]Execution{}
	for _, e := range h.Executions {
		execs[e.JobID] = append(execs[e.JobID], e)
	}
	for i, v := range rep.Violations {
		fmt.Fprintf(&b, "VIOLATION %d %s", i+1, v.Rule)
		if v.JobID != "" {
			fmt.Fprintf(&b, " job %s", v.JobID)
		}
		fmt.Fprintf(&b, ": %s\n", v.Text)
		if v.JobID == "" || i >= 30 {
			continue
		}
		j := jobs[v.JobID]
		fmt.Fprintf(&b, "  row: %s %s attempts %d/%d enqueued %s finished %s %s\n", j.Name, j.Status, j.Attempts, j.MaxAttempts, clock(j.Enqueued), clock(j.Finished), j.Reason)
		if holder, ok := h.Holders[v.JobID]; ok {
			fmt.Fprintf(&b, "  holder at the end of the drain: %s\n", holder)
		}
		from, to := j.Enqueued, j.Finished
		for k, e := range execs[v.JobID] {
			fmt.Fprintf(&b, "  execution %d: %s\n", k+1, e.describe())
			if from.IsZero() || e.Start.Before(from) {
				from = e.Start
			}
			if e.End.After(to) {
				to = e.End
			}
		}
		if to.IsZero() {
			to = from
		}
		lo, hi := from.Add(-15*time.Second), to.Add(15*time.Second)
		for _, f := range h.Faults {
			if f.At.After(lo) && f.At.Before(hi) {
				fmt.Fprintf(&b, "  fault: %s\n", f)
			}
		}
		for _, o := range h.Outages {
			if o.To.After(lo) && o.From.Before(hi) {
				fmt.Fprintf(&b, "  postgres unreachable %s from %s for %s\n", o.Path, clock(o.From), o.To.Sub(o.From).Round(time.Millisecond))
			}
		}
		for _, in := range h.Incarnations {
			for _, t := range in.RowLost {
				if t.After(lo) && t.Before(hi) {
					fmt.Fprintf(&b, "  sidecar %s pid %d: found its worker row recovered at %s\n", in.Sidecar, in.PID, clock(t))
				}
			}
		}
		for _, in := range h.Incarnations {
			for _, line := range logLinesAbout(in.Log, v.JobID, 12) {
				fmt.Fprintf(&b, "  %s: %s\n", filepath.Base(in.Log), line)
			}
		}
	}
	return b.String()
}
