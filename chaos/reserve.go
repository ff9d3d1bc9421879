package main

import (
	"context"
	"fmt"
	"math/rand"
	"time"

	"github.com/jackc/pgx/v5"
)

// Faults aimed at claim-ahead: a sidecar SIGKILLed, or sent SIGTERM, at a
// moment its reserve is full (it holds more claimed rows than its handlers
// run). The kill leaves the reserve to recovery, which requeues its rows
// with the claim's attempt kept; the SIGTERM drains it mid-claim, giving it
// back with the attempt refunded. Drawn from their own random stream, so
// every seed's schedule of the other faults is unchanged.
const (
	faultReserveKill  = "reserve-kill"
	faultReserveDrain = "reserve-drain"
)

// ReserveParams shape the reserve faults; Off turns them off.
type ReserveParams struct {
	Off            bool
	GapMin, GapMax time.Duration
}

// PlanReserve draws the reserve faults of a run of length from the seed.
func PlanReserve(seed int64, length time.Duration, p ReserveParams) []Step {
	if p.Off {
		return nil
	}
	rnd := rand.New(rand.NewSource(seed ^ 0x7e5e_12fe))
	var steps []Step
	at := time.Duration(0)
	for {
		at += p.GapMin + time.Duration(rnd.Int63n(int64(p.GapMax-p.GapMin)+1))
		if at >= length {
			return steps
		}
		kind := faultReserveKill
		if rnd.Intn(2) == 0 {
			kind = faultReserveDrain
		}
		target := sidecarNames()[rnd.Intn(3)]
		steps = append(steps, Step{At: at, Kind: kind, Target: target, Dur: time.Duration(rnd.Int63n(int64(time.Second)))})
	}
}

// reserveFull waits, at most bound, until the sidecar holds more rows
// processing under its worker than its handlers' budget (its worker row's
// concurrency), and says what it saw.
func (s *sidecar) reserveFull(ctx context.Context, bound time.Duration) string {
	conn, err := pgx.Connect(ctx, s.c.dbURL)
	if err != nil {
		return "reserve not read: " + err.Error()
	}
	defer conn.Close(context.Background())
	deadline := time.Now().Add(bound)
	held, budget := 0, 0
	for time.Now().Before(deadline) && ctx.Err() == nil {
		err := conn.QueryRow(ctx, `SELECT count(j.id), w.concurrency FROM soniq_workers w
			LEFT JOIN soniq_jobs j ON j.worker_id = w.id AND j.status = 'processing'
			WHERE w.hostname LIKE $1 AND w.status = 'active' GROUP BY w.id, w.concurrency ORDER BY w.started_at DESC LIMIT 1`,
			"chaos-"+s.name+"@%").Scan(&held, &budget)
		if err == nil && held > budget {
			return fmt.Sprintf("reserve full: %d rows processing, budget %d", held, budget)
		}
		sleep(ctx, 20*time.Millisecond)
	}
	return fmt.Sprintf("reserve not full within %s (%d rows processing, budget %d)", bound, held, budget)
}
