package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	mrand "math/rand"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// queueName is the one queue the three sidecars serve.
const queueName = "chaos"

// producer enqueues jobs by SQL straight into Postgres, as another producer
// (Soniq's Python client, another service) writes them: an INSERT of the
// row and a NOTIFY, in one transaction. A job is counted once its commit
// succeeded; when Postgres is down the same row (same id) is tried again
// until it lands, so an INSERT whose commit outcome was lost is never
// counted twice nor missed.
type producer struct {
	pool *pgxpool.Pool
	rnd  *mrand.Rand
	rate float64
	log  *os.File   // produced.jsonl
	jobs []Produced // owned by run until it returns
}

// Produced is a job the producer enqueued.
type Produced struct {
	ID   string    `json:"id"`
	Name string    `json:"name"`
	MS   int       `json:"ms"`
	At   time.Time `json:"at"`
	// Unconfirmed: the run ended while its INSERT was being retried; it
	// may or may not have landed.
	Unconfirmed bool `json:"unconfirmed,omitempty"`
}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// next draws the next job: 40 % async, 40 % sync, 10 % each failing kind;
// 10 to 500 ms long.
func (p *producer) next() (name string, ms, maxAttempts int) {
	switch r := p.rnd.Intn(10); {
	case r < 4:
		name = jobAsync
	case r < 8:
		name = jobSync
	case r == 8:
		name = jobFailAsync
	default:
		name = jobFailSync
	}
	ms = 10 + p.rnd.Intn(491)
	maxAttempts = 10 // a kill charges an attempt; no good job should run out
	if designedToFail(name) {
		maxAttempts = 3
	}
	return name, ms, maxAttempts
}

// run enqueues at the rate until ctx is done and returns what it enqueued.
func (p *producer) run(ctx context.Context, rec *recorder) []Produced {
	tick := time.NewTicker(time.Duration(float64(time.Second) / p.rate))
	defer tick.Stop()
	failing := false
	for seq := 1; ; seq++ {
		select {
		case <-ctx.Done():
			return p.jobs
		case <-tick.C:
		}
		name, ms, maxAttempts := p.next()
		id := newUUID()
		args, _ := json.Marshal(map[string]any{"ms": ms, "seq": seq, limitKeyField: tenantOf(seq)})
		for {
			err := p.insert(ctx, id, name, string(args), maxAttempts)
			if err == nil {
				if failing {
					rec.logf("producer: enqueueing again")
					failing = false
				}
				j := Produced{ID: id, Name: name, MS: ms, At: time.Now()}
				p.jobs = append(p.jobs, j)
				if b, err := json.Marshal(j); err == nil {
					_, _ = p.log.Write(append(b, '\n'))
				}
				break
			}
			if !failing {
				rec.logf("producer: enqueue failed, trying the same row again: %v", firstLine(err.Error()))
				failing = true
			}
			select {
			case <-ctx.Done():
				// Its outcome is unknown: the checker looks the id up.
				p.jobs = append(p.jobs, Produced{ID: id, Name: name, MS: ms, At: time.Now(), Unconfirmed: true})
				return p.jobs
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
}

func (p *producer) insert(ctx context.Context, id, name, args string, maxAttempts int) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	tx, err := p.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, `INSERT INTO soniq_jobs
	(id, job_name, args, status, attempts, max_attempts, priority, queue, unique_job, scheduled_at)
	VALUES ($1, $2, $3::text::jsonb, 'queued', 0, $4, 100, $5, false, NULL)
	ON CONFLICT (id) DO NOTHING`, id, name, args, maxAttempts, queueName); err != nil {
		return fmt.Errorf("insert: %w", err)
	}
	if _, err := tx.Exec(ctx, `SELECT pg_notify('soniq_new_job', $1)`, queueName); err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}
