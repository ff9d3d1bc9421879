package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// holders describes, for every row still processing, who holds it, read
// before the sidecars are stopped: the worker row (its status and how old
// its heartbeat is) and the sidecar process behind it, alive or not. A row
// stuck under a live, heartbeating worker is a different bug from one held
// by a dead worker nobody recovered, and the log lines printed beside it
// are the holder's.
func (c *cluster) holders(ctx context.Context, pool *pgxpool.Pool) (map[string]string, error) {
	rows, err := pool.Query(ctx, `SELECT j.id::text, coalesce(j.worker_id::text, ''), coalesce(w.status, ''), coalesce(w.pid, 0),
		coalesce(w.hostname, ''), coalesce(extract(epoch FROM now() - w.last_heartbeat)::float8, -1)
	FROM soniq_jobs j LEFT JOIN soniq_workers w ON w.id = j.worker_id
	WHERE j.queue = $1 AND j.status = 'processing'`, queueName)
	if err != nil {
		return nil, fmt.Errorf("reading the holders of processing rows: %w", err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, worker, status, host string
		var pid int
		var age float64
		if err := rows.Scan(&id, &worker, &status, &pid, &host, &age); err != nil {
			return nil, fmt.Errorf("reading the holders of processing rows: %w", err)
		}
		switch {
		case worker == "":
			out[id] = "no worker (worker_id is NULL)"
		case status == "":
			out[id] = fmt.Sprintf("worker %s, whose row is gone", worker)
		default:
			out[id] = fmt.Sprintf("worker %s (row %s, last heartbeat %s ago, host %s pid %d): %s", worker, status,
				(time.Duration(age * float64(time.Second))).Round(time.Millisecond), host, pid, c.sidecarOf(pid))
		}
	}
	return out, rows.Err()
}

// sidecarOf names the sidecar incarnation with that pid and whether it runs.
func (c *cluster) sidecarOf(pid int) string {
	c.rec.mu.Lock()
	defer c.rec.mu.Unlock()
	for _, in := range c.rec.incs {
		if in.PID != pid {
			continue
		}
		if in.p.Exited() {
			return fmt.Sprintf("sidecar %s pid %d, exited (log %s)", in.Sidecar, in.PID, in.Log)
		}
		return fmt.Sprintf("sidecar %s pid %d, ALIVE (log %s)", in.Sidecar, in.PID, in.Log)
	}
	return "no sidecar of this run has that pid (another host or a predecessor's pid)"
}
