package main

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// The limited job: chaos.sync runs under a per-tenant concurrency cap, the
// tenant a field of its args the producer sets (round-robin over
// limitTenants values, so the seeded job mix is unchanged).
const (
	limitKeyField = "tenant"
	limitCap      = 2
	limitTenants  = 4
)

// limitManifest is the limit clause of the limited job in every sidecar's
// manifest (the sidecars of one scope must declare the same caps).
func limitManifest() string {
	return fmt.Sprintf("limit: {concurrency: %d, key: args.%s}", limitCap, limitKeyField)
}

// tenantOf is the tenant the producer gives its seq-th job.
func tenantOf(seq int) string { return fmt.Sprintf("t%d", seq%limitTenants) }

// LimitSample is a count of the rows of a limited scope and key that were
// processing at one moment, read from soniq_jobs.
type LimitSample struct {
	Scope, Key string
	At         time.Time
	Count      int
}

// sampleLimits counts the processing rows of each limited scope per key
// every 100 ms until ctx ends, one query each time. It counts rows, not
// executions: a frozen or cut-off sidecar's rows count until they are
// recovered, and a handler still running after its row was recovered
// holds no row and does not count. A query that fails (Postgres down) is
// skipped.
func sampleLimits(ctx context.Context, pool *pgxpool.Pool, caps map[string]int) []LimitSample {
	var names []string
	for n := range caps {
		names = append(names, n)
	}
	var out []LimitSample
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return out
		case <-tick.C:
		}
		qctx, cancel := context.WithTimeout(ctx, time.Second)
		rows, err := pool.Query(qctx, `SELECT job_name, coalesce(args->>$3, 'null'), count(*)
		FROM soniq_jobs WHERE queue = $1 AND status = 'processing' AND job_name = ANY($2)
		GROUP BY 1, 2`, queueName, names, limitKeyField)
		if err == nil {
			at := time.Now()
			for rows.Next() {
				var s LimitSample
				if rows.Scan(&s.Scope, &s.Key, &s.Count) == nil {
					s.At = at
					out = append(out, s)
				}
			}
			rows.Close()
		}
		cancel()
	}
}

// limits: no sample may count more rows of a scope and key processing than
// the scope's cap.
func (c *checker) limits() {
	c.rep.LimitSamples = len(c.h.Limits)
	over := append([]LimitSample(nil), c.h.Limits...)
	sort.SliceStable(over, func(i, j int) bool { return over[i].At.Before(over[j].At) })
	for _, s := range over {
		c.rep.MaxLimited = max(c.rep.MaxLimited, s.Count)
		if cp, ok := c.r.LimitCaps[s.Scope]; ok && s.Count > cp {
			c.violate(ruleLimit, "", "scope %s key %s: %d rows processing at %s, above its cap of %d", s.Scope, s.Key, s.Count, clock(s.At), cp)
		}
	}
}
