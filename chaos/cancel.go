package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os/exec"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// The cancel fault: `soniq-sidecar cancel ID` on a job drawn at random
// among the queued or the running ones, as an operator would run it. The
// checker's rule: once a cancel was acknowledged (the holder wrote the row
// cancelled, or the command saw it cancelled), the job never runs again and
// never ends any other way.

// faultCancel is the cancel fault's kind; its target is "cancel".
const faultCancel = "cancel"

// ruleCancelled: a job ran again, or ended other than cancelled, after its
// cancel was acknowledged; or a row ended cancelled that nobody cancelled.
const ruleCancelled = "cancelled"

// cancelInFlight is how long after the acknowledgement an execution of the
// cancelled attempt may still start: its job frame was on its way to the
// handler when the cancel came (the cancel frame follows it).
const cancelInFlight = 2 * time.Second

// cancelWait is the command's --wait.
const cancelWait = 5 * time.Second

// Cancel is one cancel the nemesis ran, and what became of its request.
type Cancel struct {
	JobID  string    `json:"job_id"`
	Picked string    `json:"picked"` // the row's status when it was drawn: queued or processing
	At     time.Time `json:"at"`     // the command's start
	Done   time.Time `json:"done"`   // its end
	Code   int       `json:"code"`   // its exit status
	Output string    `json:"output"` // its last line
	// From soniq_sidecar_cancel_requests at the end of the run: the
	// request's status and when it was answered (zero when it has none:
	// a queued job needs no request).
	RequestStatus string    `json:"request_status,omitempty"`
	Resolved      time.Time `json:"resolved,omitzero"`
}

// cancelJob draws a queued (even Pick) or running (odd Pick) job of the
// run's queue and runs the real command on it, over the direct URL.
func (c *cluster) cancelJob(ctx context.Context, st Step) {
	rec := c.rec
	picked := "queued"
	if st.Pick%2 == 1 {
		picked = "processing"
	}
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(qctx, c.dbURL)
	if err != nil {
		rec.logf("skipped %s: %v", st.Kind, err)
		return
	}
	var id string
	err = conn.QueryRow(qctx, `SELECT id::text FROM soniq_jobs WHERE queue = $1 AND status = $2 ORDER BY random() LIMIT 1`,
		queueName, picked).Scan(&id)
	_ = conn.Close(context.WithoutCancel(ctx))
	if errors.Is(err, pgx.ErrNoRows) {
		rec.logf("skipped %s: no %s job", st.Kind, picked)
		return
	}
	if err != nil {
		rec.logf("skipped %s: %v", st.Kind, err)
		return
	}
	cmd := exec.CommandContext(context.WithoutCancel(ctx), c.cfg.sidecarBin, "cancel", id,
		"--wait", cancelWait.String(), "--database-url", c.dbURL)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	at := time.Now()
	err = cmd.Run()
	done := time.Now()
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		rec.problem("soniq-sidecar cancel %s could not be run: %v", id, err)
		return
	}
	line := lastLine(strings.TrimSpace(out.String()))
	rec.cancel(Cancel{JobID: id, Picked: picked, At: at, Done: done, Code: code, Output: line})
	rec.fault(Fault{At: at, Kind: faultCancel, Target: "cancel", Dur: done.Sub(at),
		Detail: fmt.Sprintf("%s job %s: exit %d: %s", picked, id, code, line)})
}

// cancel records a cancel the nemesis ran.
func (r *recorder) cancel(x Cancel) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cancels = append(r.cancels, x)
}

// collectCancels reads the requests of the cancels run, once the
// sidecars are stopped.
func (c *cluster) collectCancels(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}) ([]Cancel, error) {
	c.rec.mu.Lock()
	cancels := append([]Cancel(nil), c.rec.cancels...)
	c.rec.mu.Unlock()
	rows, err := q.Query(ctx, `SELECT job_id::text, status, resolved_at FROM soniq_sidecar_cancel_requests`)
	if err != nil {
		return nil, fmt.Errorf("reading soniq_sidecar_cancel_requests: %w", err)
	}
	defer rows.Close()
	type answer struct {
		status   string
		resolved *time.Time
	}
	answers := map[string]answer{}
	for rows.Next() {
		var id string
		var a answer
		if err := rows.Scan(&id, &a.status, &a.resolved); err != nil {
			return nil, fmt.Errorf("reading soniq_sidecar_cancel_requests: %w", err)
		}
		answers[id] = a
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading soniq_sidecar_cancel_requests: %w", err)
	}
	for i := range cancels {
		if a, ok := answers[cancels[i].JobID]; ok {
			cancels[i].RequestStatus = a.status
			if a.resolved != nil {
				cancels[i].Resolved = *a.resolved
			}
		}
	}
	return cancels, nil
}

// acknowledged is when the job's cancel took effect: the holder's
// acknowledgement (its row written cancelled in the same transaction), or
// the end of a command that saw the row cancelled (a queued job, cancelled
// by the command itself). Zero when no cancel of it took effect.
func acknowledged(cancels []Cancel) time.Time {
	var at time.Time
	earlier := func(t time.Time) {
		if !t.IsZero() && (at.IsZero() || t.Before(at)) {
			at = t
		}
	}
	for _, x := range cancels {
		if x.RequestStatus == "acknowledged" {
			earlier(x.Resolved)
		}
		if x.Code == 0 {
			earlier(x.Done)
		}
	}
	return at
}

// cancelRule: a row ends cancelled only when a cancel reached it; once a
// cancel was acknowledged, the row ends cancelled and no execution starts
// again (but the cancelled attempt's own, whose frame was in flight).
func (c *checker) cancelRule(j Job, es []Execution) {
	cancels := c.cancels[j.ID]
	if j.Status == "cancelled" && len(cancels) == 0 {
		c.violate(ruleCancelled, j.ID, "%s ended cancelled, but nobody cancelled it", j.Name)
		return
	}
	ack := acknowledged(cancels)
	if ack.IsZero() {
		return
	}
	if j.Status != "cancelled" {
		c.violate(ruleCancelled, j.ID, "%s's cancel was acknowledged at %s, yet its row ended %s (attempts %d/%d)",
			j.Name, clock(ack), j.Status, j.Attempts, j.MaxAttempts)
	}
	for _, e := range es {
		late := e.Start.After(ack.Add(c.r.Slack)) && (e.Attempt != j.Attempts || e.Start.After(ack.Add(cancelInFlight+c.r.Slack)))
		if late {
			c.violate(ruleCancelled, j.ID, "%s ran again after its cancel was acknowledged at %s: execution %s",
				j.Name, clock(ack), e.describe())
		}
	}
}

// PlanCancels draws the cancel fault's schedule from the seed, apart from
// the other faults' (as the CPU contention's is), so that a seed's other
// faults stay where they were before cancels were added: one every gap/2
// to gap, each on a running job or a queued one at random.
func PlanCancels(seed int64, length, gap time.Duration) []Step {
	if gap <= 0 {
		return nil
	}
	rnd := rand.New(rand.NewSource(seed ^ 0xca_9ce1))
	var steps []Step
	at := time.Duration(0)
	for {
		at += gap/2 + time.Duration(rnd.Int63n(int64(gap/2)+1))
		if at >= length {
			return steps
		}
		steps = append(steps, Step{At: at, Kind: faultCancel, Target: "cancel", Pick: rnd.Intn(1 << 16)})
	}
}
