package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/internal/config"
)

// defaultCancelWait bounds how long `cancel` waits for the holder of a
// running job to answer.
const defaultCancelWait = 10 * time.Second

// cancelPoll is how often `cancel` reads the row while it waits.
const cancelPoll = 100 * time.Millisecond

// newCancelCmd is `cancel ID`: a queued job at once; a running one by
// asking the sidecar that holds it, then waiting (--wait) for its row to be
// cancelled, or for the holder to say it cannot (a sync job).
func newCancelCmd(e env) *cobra.Command {
	var (
		wait    string
		waitFor time.Duration
	)
	return dataCommand(e, dataSpec{
		use:   "cancel ID",
		short: "Cancel a job: a queued one at once, a running one by its sidecar",
		long: `Cancel a job. A queued job is cancelled at once and will not run. A running job
is cancelled by the sidecar that holds it, at its next poll: cancel waits up to
--wait for the row to say cancelled, or for the holder to refuse (a sync job,
cancellable: false). If nobody answers in time the request stays recorded.`,
		example: `  soniq-sidecar cancel 3f1e1f7e-2a51-4c36-9d1e-8a1b2c3d4e5f
  soniq-sidecar cancel 3f1e1f7e-2a51-4c36-9d1e-8a1b2c3d4e5f --wait 1m`,
		flags: func(fs *pflag.FlagSet) {
			fs.StringVar(&wait, "wait", defaultCancelWait.String(), "how long (`DUR`: 10s, 1m, or seconds) to wait for the sidecar that runs the job to cancel it")
		},
		args: func(pos []string) error {
			if len(pos) != 1 {
				return usageErrorf("cancel: want exactly one job ID, got %d arguments", len(pos))
			}
			return nil
		},
		check: func([]string) (err error) {
			waitFor, err = config.ParseDuration(wait)
			if err != nil || waitFor < 0 {
				return usageErrorf("cancel: --wait %q: want a duration ≥ 0 such as 10s, 1m or 2.5", wait)
			}
			return nil
		},
		run: func(ctx context.Context, d dataRun) error {
			return cancelJob(ctx, d, strings.TrimSpace(d.args[0]), waitFor)
		},
	})
}

// cancelJob asks for the cancel of job id and, for a running job, waits
// for its holder's answer.
func cancelJob(ctx context.Context, d dataRun, id string, waitFor time.Duration) error {
	e, b := d.env, d.b
	res, err := b.RequestCancel(ctx, id)
	if errors.Is(err, backends.ErrNotFound) {
		return notCancellable(ctx, b, id, d.url())
	}
	if err != nil {
		return fmt.Errorf("cancelling job %s: %w", id, err)
	}
	j := res.Job
	switch res.Outcome {
	case backends.CancelledQueued:
		fmt.Fprintf(e.stdout, "cancelled job %s (%s, queue %s): it was queued and will not run\n", j.ID, j.Name, j.Queue)
		return nil
	case backends.CancelFinished:
		return exitCodeError{code: exitError, msg: fmt.Sprintf("job %s (%s) has already finished: its status is %s; nothing to cancel", j.ID, j.Name, j.Status)}
	}
	holder := "an unknown worker"
	if j.WorkerID != nil {
		holder = "worker " + *j.WorkerID
	}
	fmt.Fprintf(e.stderr, "job %s (%s) is running under %s: asked it to cancel the job; waiting up to %s\n", j.ID, j.Name, holder, waitFor)
	return awaitCancel(ctx, e, b, j, holder, waitFor)
}

// awaitCancel reads the row and its cancel request until the row is
// cancelled, the holder refuses, the job ends otherwise, or waitFor passes.
func awaitCancel(ctx context.Context, e env, b backends.Backend, j backends.Job, holder string, waitFor time.Duration) error {
	deadline := time.Now().Add(waitFor)
	tick := time.NewTicker(cancelPoll)
	defer tick.Stop()
	for {
		cur, err := b.Get(ctx, j.ID)
		if errors.Is(err, backends.ErrUnreachable) && time.Now().Before(deadline) {
			// A restart or a failover: the request is recorded; read again.
			if !sleepCtx(ctx, tick.C) {
				return fmt.Errorf("waiting for job %s to be cancelled: %w", j.ID, ctx.Err())
			}
			continue
		}
		switch {
		case errors.Is(err, backends.ErrNotFound):
			return exitCodeError{code: exitError, msg: fmt.Sprintf("job %s (%s) ended before it could be cancelled: its row is gone "+
				"(done with result_ttl 0, or dead-lettered: see `soniq-sidecar job %s`)", j.ID, j.Name, j.ID)}
		case err != nil:
			return fmt.Errorf("waiting for job %s to be cancelled: %w", j.ID, err)
		}
		switch cur.Status {
		case backends.StatusCancelled:
			fmt.Fprintf(e.stdout, "cancelled job %s (%s): %s cancelled it (reason user); the row is cancelled, attempts %d of %d, and will not be retried\n",
				cur.ID, cur.Name, holder, cur.Attempts, cur.MaxAttempts)
			return nil
		case backends.StatusDone:
			return exitCodeError{code: exitError, msg: fmt.Sprintf("job %s (%s) finished (done) before %s acted on the cancel", j.ID, j.Name, holder)}
		case backends.StatusQueued:
			// Given back to the queue meanwhile (a retry, a shutdown, a
			// recovery): a queued job is cancelled at once.
			res, err := b.RequestCancel(ctx, j.ID)
			if err != nil && !errors.Is(err, backends.ErrNotFound) && !errors.Is(err, backends.ErrUnreachable) {
				return fmt.Errorf("cancelling job %s again: %w", j.ID, err)
			}
			if err == nil && res.Outcome == backends.CancelledQueued {
				fmt.Fprintf(e.stdout, "cancelled job %s (%s): it had gone back to the queue (attempts %d of %d) and will not run again\n",
					j.ID, j.Name, res.Job.Attempts, res.Job.MaxAttempts)
				return nil
			}
			if err == nil && res.Outcome == backends.CancelRequested && res.Job.WorkerID != nil {
				holder = "worker " + *res.Job.WorkerID
			}
		case backends.StatusProcessing:
			r, err := b.GetCancelRequest(ctx, j.ID)
			if err != nil && !errors.Is(err, backends.ErrNotFound) && !errors.Is(err, backends.ErrUnreachable) {
				return fmt.Errorf("waiting for job %s to be cancelled: %w", j.ID, err)
			}
			if err == nil && r.Status == backends.CancelRefused {
				return exitCodeError{code: exitError, msg: refusal(j, holder, r)}
			}
		}
		if !time.Now().Before(deadline) {
			return exitCodeError{code: exitError, msg: fmt.Sprintf("job %s (%s) is still %s: %s did not answer within %s. "+
				"The request stays recorded: a sidecar holding the job acts on it at its next poll (a Soniq worker never does); "+
				"run `soniq-sidecar job %s` to see where it is", j.ID, j.Name, cur.Status, holder, waitFor, j.ID)}
		}
		if !sleepCtx(ctx, tick.C) {
			return fmt.Errorf("waiting for job %s to be cancelled: %w", j.ID, ctx.Err())
		}
	}
}

// sleepCtx waits for the next tick; false when ctx ended first.
func sleepCtx(ctx context.Context, tick <-chan time.Time) bool {
	select {
	case <-ctx.Done():
		return false
	case <-tick:
		return true
	}
}

// refusal says why the holder would not cancel the job.
func refusal(j backends.Job, holder string, r backends.CancelRequest) string {
	handler, why := "?", "it cannot be interrupted"
	if r.Handler != nil {
		handler = *r.Handler
	}
	if r.Detail != nil && *r.Detail != "" {
		why = *r.Detail
	}
	return fmt.Sprintf("job %s (%s) cannot be cancelled: handler %s runs it as a sync job (cancellable: false) on %s: %s. "+
		"Nothing was stopped; the job runs on and its row ends as the handler's result says", j.ID, j.Name, handler, holder, why)
}

// notCancellable explains a job that is not in soniq_jobs.
func notCancellable(ctx context.Context, b backends.Backend, id, url string) error {
	dead, err := b.ListDeadLetter(ctx, 0)
	if err != nil {
		return err
	}
	for _, d := range dead {
		if strings.EqualFold(d.ID, id) {
			return exitCodeError{code: exitError, msg: fmt.Sprintf("job %s (%s) is in the dead-letter table (%s): it is not running; nothing to cancel "+
				"(remove it with: dead-letter purge %s)", d.ID, d.Name, d.Reason, d.ID)}
		}
	}
	return exitCodeError{code: exitError, msg: fmt.Sprintf("no job %s in %s (done rows are deleted after their result_ttl)", id, describeDatabase(url))}
}
