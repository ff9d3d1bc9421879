package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// The harness's record of the writes that keep a worker alive. Every
// change of soniq_workers.last_heartbeat (a registration, a heartbeat, a
// claim) adds a row in the same transaction, so a row exists exactly when
// the write landed, with the value stale-worker recovery compares. It is
// the harness's table, made after migrate; the sidecars never read it.
const beatsSchema = `
CREATE TABLE chaos_beats (pid int NOT NULL, at timestamptz NOT NULL);
CREATE FUNCTION chaos_beat() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF NEW.last_heartbeat IS NOT NULL AND (TG_OP = 'INSERT' OR NEW.last_heartbeat IS DISTINCT FROM OLD.last_heartbeat) THEN
		INSERT INTO chaos_beats VALUES (NEW.pid, NEW.last_heartbeat);
	END IF;
	RETURN NULL;
END $$;
CREATE TRIGGER chaos_beat AFTER INSERT OR UPDATE ON soniq_workers
	FOR EACH ROW EXECUTE FUNCTION chaos_beat();`

// installBeats makes the table and its trigger.
func installBeats(ctx context.Context, pool *pgxpool.Pool) error {
	if _, err := pool.Exec(ctx, beatsSchema); err != nil {
		return fmt.Errorf("installing the heartbeat record: %w", err)
	}
	return nil
}

// readBeats returns the recorded writes by sidecar pid, in time order.
func readBeats(ctx context.Context, pool *pgxpool.Pool) (map[int][]time.Time, error) {
	rows, err := pool.Query(ctx, `SELECT pid, at FROM chaos_beats ORDER BY at`)
	if err != nil {
		return nil, fmt.Errorf("reading the heartbeat record: %w", err)
	}
	defer rows.Close()
	out := map[int][]time.Time{}
	for rows.Next() {
		var pid int
		var at time.Time
		if err := rows.Scan(&pid, &at); err != nil {
			return nil, fmt.Errorf("reading the heartbeat record: %w", err)
		}
		out[pid] = append(out[pid], at)
	}
	return out, rows.Err()
}
