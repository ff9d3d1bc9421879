// Package completer writes the engine's results to the backend: job
// completions and shutdown NACKs, in batches, from a goroutine of its own,
// so the event loop never waits on the database and the database sees one
// statement per batch, never one round trip per row. Writes run on a
// context detached from shutdown: a result the sidecar holds is written
// even while it stops. It knows the backend and nothing of the loop.
package completer

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// writeTimeout bounds one batch write. It exists only so a wedged database
// cannot hold shutdown open forever; it is not a time budget.
const writeTimeout = 30 * time.Second

// maxBackoff caps the wait between two failed writes. Results held across
// an outage or a failover must land soon after the database can take them
// (within a second of a primary becoming writable), and a retry costs one
// connection attempt. The first try after a failover may still meet a
// session that cannot write (through PgBouncer, one it has not yet
// replaced), so the bound must hold two waits and two tries: at 500 ms it
// did not under load (1.09 s), at 250 ms it leaves half the second spare.
const maxBackoff = 250 * time.Millisecond

// maxBatch bounds how many rows one statement writes.
const maxBatch = 500

// lingerMax bounds how long a small batch waits for more results to join
// it. Every statement has a fixed cost in the database on top of its rows'
// work, and a writer that wrote whatever was pending the moment its
// previous write returned issued many statements of a row or two. 2 ms is
// below a completion's own round trip on a busy machine and small beside
// the job it records.
const lingerMax = 2 * time.Millisecond

// fleetLingerMax bounds the linger of a sidecar in a fleet (SetFleet). N
// sidecars sharing one rate each see 1/N of the results, and writing
// each one's as one sidecar would made N times the statements for the same
// rows. So the linger and the batch it waits for grow with the fleet's
// size, up to this: a result may then wait this long to be written (its
// row stays processing meanwhile), small beside a heartbeat, and the
// fleet's writes stay about as few as one sidecar's up to 125 sidecars.
// At 100 ms a fleet of 128 wrote 2.3 times the statements of 250 ms and
// Postgres spent about 1.3 times the CPU per job (bench/analysis.md).
const fleetLingerMax = 250 * time.Millisecond

// Config is what a Completer writes with. Backend is required; the
// callbacks are optional and are called from the Completer's goroutine.
type Config struct {
	Backend  backends.Backend
	WorkerID string
	Log      *slog.Logger
	// LingerBatch: while results flow (the previous write ended less
	// than lingerMax ago), a batch of fewer completions than this waits up
	// to lingerMax for more; 0 never waits, nor does 1 for a sidecar
	// alone. In a fleet both scale with its size (SetFleet). NACKs, Stop
	// and Hurry never wait.
	LingerBatch int
	// Requeued is called after a batch put rows back to queued for now
	// (a retry or snooze without delay), so claiming resumes without
	// waiting for the next poll.
	Requeued func()
	// AfterWrite is called after every batch written.
	AfterWrite func()
	// Settled is called with the job ids of every batch of completions
	// written (applied or refused by their guard).
	Settled func(ids []string)
	// ChildrenWritten is called with the number of child jobs a batch
	// carried with done writes whose guard matched (a child that met a
	// queued duplicate included).
	ChildrenWritten func(n int)
}

// Completer batches terminal writes and NACKs. Create it with New, start
// its goroutine with Start, and end it with Stop, which returns once what
// it was given is written.
type Completer struct {
	backend     backends.Backend
	workerID    string
	log         *slog.Logger
	requeued    func()
	afterWrite  func()
	settled     func(ids []string)
	children    func(n int)
	lingerBatch int

	mu          sync.Mutex
	completions []backends.Completion
	writing     int                   // completions[:writing] are in run's write
	lent        []backends.Completion // taken into claims (Lend), not yet back
	nacks       []backends.Job        // rows NACKed at shutdown, at the attempt held
	returns     []backends.Job        // claimed rows given back unstarted (ReturnJobs)
	closed      bool
	hurried     bool // shutdown began: write what arrives at once
	// holdUntil: the NACKs wait until then for Finish, to go out with the
	// stop mark (NackFinal); zero when they do not wait.
	holdUntil time.Time
	finishing bool // Finish: the last write may carry the stop mark
	marked    bool // the stop mark was written with the last NACKs
	lingering bool // run waits for its small batch to grow
	lingerFor int  // the batch size that ends the wait
	// The shutdown's give-up point (Deadline): writes in flight are cut
	// there, and a write begun later gets deadlineAfter, once.
	deadline      time.Time
	deadlineAfter time.Duration
	cutTimer      *time.Timer
	inFlight      context.CancelFunc // the write under way, nil between writes
	inFlightAt    time.Time
	gaveUp        bool          // some writes were given up
	wake          chan struct{} // capacity 1: "there is work"
	// written counts the batches written; a claim issued after the last
	// one has seen every row the writer put back (run --once).
	written atomic.Int64
	started atomic.Bool
	// fleet is how many sidecars share this one's queues (SetFleet).
	fleet atomic.Int64
	done  chan struct{} // closed when the goroutine has drained and exited
}

// New prepares a Completer; nothing runs before Start.
func New(cfg Config) *Completer {
	w := &Completer{
		backend: cfg.Backend, workerID: cfg.WorkerID, log: cfg.Log,
		requeued: cfg.Requeued, afterWrite: cfg.AfterWrite, settled: cfg.Settled, children: cfg.ChildrenWritten,
		lingerBatch: cfg.LingerBatch,
		wake:        make(chan struct{}, 1), done: make(chan struct{}),
	}
	if w.log == nil {
		w.log = slog.New(slog.DiscardHandler)
	}
	if w.requeued == nil {
		w.requeued = func() {}
	}
	return w
}

// Start starts the goroutine that writes; Stop ends it. A second Start
// does nothing.
func (w *Completer) Start() {
	if w.started.CompareAndSwap(false, true) {
		go w.run()
	}
}

// Stop asks the Completer to write what it holds and returns once it has,
// or, with the database unreachable, once the last attempt (bounded by
// writeTimeout) has failed; the ids it could not write are logged. It
// must follow Start.
func (w *Completer) Stop() {
	w.close()
	<-w.done
}

// Finish is Stop for the engine's end: when the NACKs are the last writes
// held and the backend can (backends.NackStopper), the worker's stop mark
// goes with them, in one call. marked reports whether it did; if not, the
// caller writes the stop mark itself.
func (w *Completer) Finish() (marked bool) {
	w.mu.Lock()
	w.finishing = true
	w.mu.Unlock()
	w.Stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.marked
}

// Complete queues a job's terminal write.
func (w *Completer) Complete(c backends.Completion) {
	w.mu.Lock()
	w.completions = append(w.completions, c)
	// A lingering writer is woken only once its batch is big enough: one
	// wake-up per result would cost more than the linger saves.
	quiet := w.lingering && len(w.completions) < w.lingerFor
	w.mu.Unlock()
	if !quiet {
		w.signal()
	}
}

// Nack queues a shutdown NACK of a row held at j.Attempts.
func (w *Completer) Nack(j backends.Job) {
	w.mu.Lock()
	w.nacks = append(w.nacks, j)
	w.mu.Unlock()
	w.signal()
}

// NackAll queues the shutdown NACKs of several jobs at once, so that they
// go out in one batch: handed over one by one, the writer could wake at
// the first and write the others in a second round trip.
func (w *Completer) NackAll(held []backends.Job) {
	if len(held) == 0 {
		return
	}
	w.mu.Lock()
	w.nacks = append(w.nacks, held...)
	w.mu.Unlock()
	w.signal()
}

// NackFinal queues the shutdown's last NACKs: the engine is about to stop,
// so they wait up to hold for Finish to write them with the worker's stop
// mark in one call (backends.NackStopper), a round trip less before the
// exit over a slow link. Past hold (the handler processes are slow to
// leave) they are written on their own, as Nack's are.
func (w *Completer) NackFinal(held []backends.Job, hold time.Duration) {
	if len(held) == 0 {
		return
	}
	w.mu.Lock()
	w.nacks = append(w.nacks, held...)
	if _, ok := w.backend.(backends.NackStopper); ok && w.holdUntil.IsZero() {
		// Never so long that the write deadline would cut their write.
		if !w.deadline.IsZero() {
			hold = min(hold, time.Until(w.deadline)/2)
		}
		w.holdUntil = time.Now().Add(hold)
	}
	w.mu.Unlock()
	w.signal()
}

// Return queues a claimed row that never reached a handler to go back to
// the queue, its attempt refunded (Backend.ReturnJobs).
func (w *Completer) Return(j backends.Job) {
	w.mu.Lock()
	w.returns = append(w.returns, j)
	w.mu.Unlock()
	w.signal()
}

func (w *Completer) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *Completer) wrote() {
	w.written.Add(1)
	if w.afterWrite != nil {
		w.afterWrite()
	}
}

// Pending is how many writes the Completer still holds.
func (w *Completer) Pending() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.completions) + len(w.lent) + len(w.nacks) + len(w.returns)
}

// SetFleet tells the writer how many sidecars, this one included, share
// its queues: its linger, and the batch it waits for, scale with it (see
// fleetLingerMax). 0 or 1 is a sidecar alone.
func (w *Completer) SetFleet(n int) { w.fleet.Store(int64(max(n, 1))) }

// linger is how long a small batch may wait, and how large a batch stops
// waiting, for the fleet's size.
func (w *Completer) linger() (time.Duration, int) {
	f := max(w.fleet.Load(), 1)
	return min(lingerMax*time.Duration(f), max(fleetLingerMax, lingerMax)), min(w.lingerBatch*int(f), maxBatch)
}

// Lend gives a claim about to be sent up to n of the completions waiting
// that no write has taken, to be written in the claim's own transaction
// (backends.CompleteClaimer): at full load results arrive as slots free
// up, and one round trip then does what two did. The caller must end the
// loan with Lent. Nothing is lent once shutdown has begun: what remains is
// written at once, on the shutdown's deadline.
func (w *Completer) Lend(n int) []backends.Completion {
	w.mu.Lock()
	defer w.mu.Unlock()
	k := min(len(w.completions)-w.writing, n, maxBatch)
	if k <= 0 || w.closed || w.hurried || !w.deadline.IsZero() {
		return nil
	}
	cs := slices.Clone(w.completions[w.writing : w.writing+k])
	w.completions = slices.Delete(w.completions, w.writing, w.writing+k)
	w.lent = append(w.lent, cs...)
	return cs
}

// Lent ends the loan of cs. Written, they are settled as the writer settles
// its own batches (applied names the rows whose guard matched); not
// written (the claim failed), they go back to the writer, which writes them
// as it writes every other completion.
func (w *Completer) Lent(cs []backends.Completion, applied []string, written bool) {
	if written {
		w.settle(cs, applied)
		w.wrote()
	}
	// By row and attempt: a retried copy of an earlier attempt's write and
	// the later attempt's own may be lent to two claims at once.
	type write struct {
		id       string
		attempts int
	}
	ended := make(map[write]bool, len(cs))
	for _, c := range cs {
		ended[write{c.JobID, c.Attempts}] = true
	}
	w.mu.Lock()
	w.lent = slices.DeleteFunc(w.lent, func(c backends.Completion) bool { return ended[write{c.JobID, c.Attempts}] })
	if !written {
		w.completions = append(w.completions, cs...)
	}
	w.mu.Unlock()
	w.signal()
}

// Written is how many batches the Completer has written. A claim issued
// after the last one has seen every row the Completer put back.
func (w *Completer) Written() int64 { return w.written.Load() }

// Holds reports whether a write for job id is waiting or being written. A
// row it holds is still processing in the database although its result is
// decided: the self-audit must not take it for an orphan.
func (w *Completer) Holds(id string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, cs := range [][]backends.Completion{w.completions, w.lent} {
		for _, c := range cs {
			if c.JobID == id {
				return true
			}
		}
	}
	is := func(j backends.Job) bool { return j.ID == id }
	return slices.ContainsFunc(w.nacks, is) || slices.ContainsFunc(w.returns, is)
}

// Hurry makes the Completer write at once from now on, without lingering:
// shutdown began, and what it still writes (final results, NACKs) is due.
func (w *Completer) Hurry() {
	w.mu.Lock()
	w.hurried = true
	w.mu.Unlock()
	w.signal()
}

// Deadline fixes the shutdown's give-up point: a write in flight at at is
// cut there, a write that fails past it is not retried, and a write begun
// past it (a sync job's result, later) gets after, once. What could not be
// written is named in one ERROR line and left processing in the database,
// for stale-worker recovery or a takeover, attempts preserved. Only the
// first call counts.
func (w *Completer) Deadline(at time.Time, after time.Duration) {
	w.mu.Lock()
	if !w.deadline.IsZero() {
		w.mu.Unlock()
		return
	}
	w.deadline, w.deadlineAfter = at, after
	w.cutTimer = time.AfterFunc(time.Until(at), w.cutInFlight)
	w.mu.Unlock()
	w.signal()
}

// cutInFlight cancels the write under way if it began before the deadline.
func (w *Completer) cutInFlight() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.inFlight != nil && w.inFlightAt.Before(w.deadline) {
		w.inFlight()
	}
}

// writeCtx is the context of one write: writeTimeout at most, cut at the
// deadline when one is set, or bounded by deadlineAfter past it. done ends
// it.
func (w *Completer) writeCtx() (ctx context.Context, done func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	bound := writeTimeout
	if !w.deadline.IsZero() {
		if now.Before(w.deadline) {
			bound = min(bound, w.deadline.Sub(now))
		} else {
			bound = min(bound, w.deadlineAfter)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	w.inFlight, w.inFlightAt = cancel, now
	return ctx, func() {
		w.mu.Lock()
		w.inFlight = nil
		w.mu.Unlock()
		cancel()
	}
}

// giveUpAt is when a failed write stops being retried: the deadline if
// one is set, else writeTimeout after closing; zero while neither is.
func (w *Completer) giveUpAt(closedAt time.Time) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case !w.deadline.IsZero() && (closedAt.IsZero() || w.deadline.Before(closedAt.Add(writeTimeout))):
		return w.deadline
	case !closedAt.IsZero():
		return closedAt.Add(writeTimeout)
	}
	return time.Time{}
}

// close asks the writer to drain what it holds and stop; done is closed
// then.
func (w *Completer) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.signal()
}

// run is the writer's goroutine. It returns after close once everything it
// was given has been written or, with the database unreachable, once the
// last attempt (bounded by writeTimeout) has failed; lost ids are logged.
func (w *Completer) run() {
	defer close(w.done)
	backoff := 50 * time.Millisecond
	var closedAt time.Time // when closing began
	// lastWrite is when the last batch was written; lingerUntil, when
	// set, is when the batch now pending stops waiting for more.
	var lastWrite, lingerUntil time.Time
	// waitFor waits d, or until woken (a result, a NACK, Stop), on the one
	// timer of the goroutine: a small batch's linger, the last NACKs' hold.
	var timer *time.Timer
	waitFor := func(d time.Duration) {
		if timer == nil {
			timer = time.NewTimer(d)
		} else {
			timer.Reset(d)
		}
		select {
		case <-w.wake:
		case <-timer.C:
		}
	}
	for {
		w.mu.Lock()
		cs, ns, rs, closed, hurried, lent := w.completions, w.nacks, w.returns, w.closed, w.hurried, len(w.lent)
		holdUntil, final := w.holdUntil, w.finishing && closed && len(cs) == 0 && len(rs) == 0 && lent == 0
		w.mu.Unlock()
		if closed && closedAt.IsZero() {
			closedAt = time.Now()
		}
		if len(cs) == 0 && len(ns) == 0 && len(rs) == 0 {
			// Completions lent to a claim come back written or to be
			// written: the writer waits for them before it ends.
			if closed && lent == 0 {
				return
			}
			<-w.wake
			continue
		}
		if linger, batch := w.linger(); !closed && !hurried && len(ns) == 0 && len(rs) == 0 && len(cs) < batch {
			// A small batch while results flow: wait for more, once per
			// batch and at most the linger. After a quiet spell the first
			// result is written at once, so a lone job's row is not delayed.
			now := time.Now()
			if lingerUntil.IsZero() && now.Sub(lastWrite) < linger {
				lingerUntil = now.Add(linger)
			}
			if d := lingerUntil.Sub(now); d > 0 && w.startLinger(batch) {
				waitFor(d)
				w.mu.Lock()
				w.lingering = false
				w.mu.Unlock()
				continue
			}
		}
		lingerUntil = time.Time{}
		if d := time.Until(holdUntil); !closed && len(cs) == 0 && len(rs) == 0 && len(ns) > 0 && d > 0 {
			// The last NACKs wait for Finish (NackFinal).
			waitFor(d)
			continue
		}
		var err error
		if len(cs) > 0 {
			// What is written is taken under the lock that Lend takes:
			// the prefix marked writing is never lent.
			w.mu.Lock()
			n := min(len(w.completions), maxBatch)
			cs, w.writing = w.completions[:n:n], n
			w.mu.Unlock()
			if n == 0 {
				continue // a claim took them all
			}
			err = w.writeCompletions(cs)
			w.mu.Lock()
			if err == nil {
				w.completions = w.completions[n:]
			}
			w.writing = 0
			w.mu.Unlock()
			if err == nil {
				w.wrote()
			}
		} else if len(ns) > 0 {
			all := len(ns)
			ns = ns[:min(len(ns), maxBatch):min(len(ns), maxBatch)]
			if final && len(ns) == all {
				err = w.writeNacksAndStop(ns)
			} else {
				err = w.writeNacks(ns)
			}
			if err == nil {
				w.mu.Lock()
				w.nacks = w.nacks[len(ns):]
				w.mu.Unlock()
				w.wrote()
			}
		} else {
			rs = rs[:min(len(rs), maxBatch):min(len(rs), maxBatch)]
			if err = w.writeReturns(rs); err == nil {
				w.mu.Lock()
				w.returns = w.returns[len(rs):]
				w.mu.Unlock()
				w.wrote()
			}
		}
		if err == nil {
			backoff = 50 * time.Millisecond
			lastWrite = time.Now()
			continue
		}
		if at := w.giveUpAt(closedAt); !at.IsZero() && !time.Now().Before(at) {
			w.giveUp(err)
			if closed {
				return
			}
			continue
		}
		w.log.Warn("writing results failed; retrying", "rows", len(cs)+len(ns)+len(rs), "retry_in", backoff, "err", err)
		select {
		case <-time.After(backoff):
		case <-w.wake:
		}
		backoff = min(backoff*2, maxBackoff)
	}
}

// startLinger marks the writer lingering unless what arrived since run
// looked makes the batch due; complete then stops waking it for every
// result.
func (w *Completer) startLinger(batch int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lingerFor = batch
	w.lingering = !w.closed && !w.hurried && len(w.nacks) == 0 && len(w.completions) < batch
	return w.lingering
}

// giveUp runs when the writer is stopping and the database still refuses
// the write: rather than hold the process open, it logs every job it could
// not record. Those rows stay 'processing' and stale-worker recovery
// requeues them.
func (w *Completer) giveUp(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	results := make([]string, 0, len(w.completions))
	for _, c := range w.completions {
		results = append(results, c.JobID+":"+c.Outcome.String())
	}
	ids := func(js []backends.Job) []string {
		out := make([]string, len(js))
		for i, j := range js {
			out[i] = j.ID
		}
		return out
	}
	w.log.Error("giving up on result writes at shutdown: these rows stay processing, and stale-worker recovery or a takeover requeues them with attempts preserved",
		"lost", len(w.completions)+len(w.nacks)+len(w.returns), "results", results, "nacks", ids(w.nacks), "returns", ids(w.returns), "err", err)
	w.completions, w.nacks, w.returns = nil, nil, nil
	w.gaveUp = true
}

// GaveUp reports whether the Completer gave up on some writes.
func (w *Completer) GaveUp() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gaveUp
}

func (w *Completer) writeCompletions(cs []backends.Completion) error {
	ctx, done := w.writeCtx()
	defer done()
	applied, err := w.backend.Complete(ctx, w.workerID, cs)
	if err != nil {
		return err
	}
	w.settle(cs, applied)
	return nil
}

// settle follows a batch of completions written, by the writer or in a
// claim: the loop learns which rows are settled, claiming resumes for rows
// requeued for now, and each result a guard refused is logged.
func (w *Completer) settle(cs []backends.Completion, applied []string) {
	if w.settled != nil {
		ids := make([]string, len(cs))
		for i, c := range cs {
			ids[i] = c.JobID
		}
		w.settled(ids)
	}
	for _, c := range cs {
		if (c.Outcome == backends.OutcomeRetry || c.Outcome == backends.OutcomeSnooze) && c.Delay == 0 {
			w.requeued()
			break
		}
	}
	w.countChildren(cs, applied)
	if len(applied) == len(cs) {
		return
	}
	ok := make(map[string]bool, len(applied))
	for _, id := range applied {
		ok[id] = true
	}
	for _, c := range cs {
		if !ok[c.JobID] {
			// The guard did its job: the row was NACKed, recovered by
			// stale-worker recovery, claimed by another worker, or this
			// is a retried write whose first try committed.
			w.log.Warn("result discarded: the row is no longer processing for this worker at this attempt", "job_id", c.JobID, "attempt", c.Attempts, "outcome", c.Outcome.String())
		}
	}
}

// countChildren reports the children of the done writes applied.
func (w *Completer) countChildren(cs []backends.Completion, applied []string) {
	if w.children == nil {
		return
	}
	var ok map[string]bool
	n := 0
	for _, c := range cs {
		if len(c.Children) == 0 {
			continue
		}
		if ok == nil {
			ok = make(map[string]bool, len(applied))
			for _, id := range applied {
				ok[id] = true
			}
		}
		if ok[c.JobID] && c.Outcome == backends.OutcomeDone {
			n += len(c.Children)
		}
	}
	if n > 0 {
		w.children(n)
	}
}

func (w *Completer) writeReturns(held []backends.Job) error {
	ctx, done := w.writeCtx()
	defer done()
	_, err := w.backend.ReturnJobs(ctx, w.workerID, held)
	return err
}

// writeNacksAndStop writes the last NACKs with the stop mark, in one call
// when the backend can.
func (w *Completer) writeNacksAndStop(held []backends.Job) error {
	ns, ok := w.backend.(backends.NackStopper)
	if !ok {
		return w.writeNacks(held)
	}
	ctx, done := w.writeCtx()
	defer done()
	_, marked, err := ns.NackAndStop(ctx, w.workerID, held)
	if err == nil {
		w.mu.Lock()
		w.marked = marked
		w.mu.Unlock()
	}
	return err
}

func (w *Completer) writeNacks(held []backends.Job) error {
	ctx, done := w.writeCtx()
	defer done()
	_, err := w.backend.Nack(ctx, w.workerID, held)
	return err
}
