package backendtest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// tolerance bounds every "≈ now" comparison. It is generous because the
// database's clock (Postgres in a container, say) may drift from the test
// process's clock and because shared CI machines stall.
const tolerance = 5 * time.Second

// testCase is one contract clause, run on a fresh harness.
type testCase struct {
	name string
	run  func(s *suite)
}

// Run runs the whole backend contract, each clause as a subtest on a fresh
// harness from newHarness. The clauses run in parallel: each has a backend
// of its own, and most of their time is spent waiting on its database.
func Run(t *testing.T, newHarness Factory) {
	t.Helper()
	var all []testCase
	all = append(all, statsCases()...)
	all = append(all, enqueueCases()...)
	all = append(all, claimCases()...)
	all = append(all, completeCases()...)
	all = append(all, deadLetterCases()...)
	all = append(all, workerCases()...)
	all = append(all, claimRaceCases()...)
	all = append(all, auditCases()...)
	all = append(all, returnCases()...)
	all = append(all, miscCases()...)
	all = append(all, scheduleCases()...)
	all = append(all, cancelCases()...)
	all = append(all, completeClaimCases()...)
	all = append(all, childrenCases()...)
	all = append(all, retriedWriteCases()...)
	all = append(all, limitCases()...)
	all = append(all, overrideCases()...)
	all = append(all, usageCases()...)
	all = append(all, nullKeyCases()...)
	all = append(all, claimLogCases()...)
	for _, tc := range all {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			require.NotNil(t, h.Backend, "factory returned no backend")
			tc.run(&suite{t: t, h: h, b: h.Backend, ctx: t.Context()})
		})
	}
}

// suite bundles one subtest's harness with helpers that fail the test on
// any unexpected error, so clauses read as the contract they check.
type suite struct {
	t       *testing.T
	h       Harness
	b       backends.Backend
	ctx     context.Context
	nextPID int
	workers map[string]backends.Worker // registered by worker(), by id
}

func (s *suite) enqueue(p backends.EnqueueParams) backends.Job {
	s.t.Helper()
	j, err := s.b.Enqueue(s.ctx, p)
	require.NoError(s.t, err, "enqueue %q", p.Name)
	require.NotEmpty(s.t, j.ID, "enqueue %q returned no id", p.Name)
	return j
}

func (s *suite) enqueueNamed(name string) backends.Job {
	s.t.Helper()
	return s.enqueue(backends.EnqueueParams{Name: name})
}

func (s *suite) get(id string) backends.Job {
	s.t.Helper()
	j, err := s.b.Get(s.ctx, id)
	require.NoError(s.t, err, "get %s", id)
	return j
}

func (s *suite) requireGone(id string) {
	s.t.Helper()
	_, err := s.b.Get(s.ctx, id)
	require.ErrorIs(s.t, err, backends.ErrNotFound, "job %s should be gone", id)
}

// worker registers a fresh worker row. Claims need one: Postgres's
// soniq_jobs.worker_id is a uuid foreign key to soniq_workers.
func (s *suite) worker() string {
	s.t.Helper()
	s.nextPID++
	w := backends.Worker{
		ID:          newUUID(s.t),
		Hostname:    "contract-host",
		PID:         100000 + s.nextPID,
		Queues:      []string{"default"},
		Concurrency: 4,
		Version:     "contract",
		Metadata:    json.RawMessage(`{}`),
	}
	require.NoError(s.t, s.b.RegisterWorker(s.ctx, w), "register worker")
	if s.workers == nil {
		s.workers = map[string]backends.Worker{}
	}
	s.workers[w.ID] = w
	return w.ID
}

// registerAgain registers a worker() row again, as a worker does after
// finding it recovered.
func (s *suite) registerAgain(id string) {
	s.t.Helper()
	w, ok := s.workers[id]
	require.True(s.t, ok, "worker %s was not made by worker()", id)
	require.NoError(s.t, s.b.RegisterWorker(s.ctx, w), "register worker %s again", id)
}

func (s *suite) claim(p backends.ClaimParams) []backends.Job {
	s.t.Helper()
	jobs, err := s.b.Claim(s.ctx, p)
	require.NoError(s.t, err, "claim %+v", p)
	return jobs
}

// claimOne claims the single queued job named name for workerID.
func (s *suite) claimOne(workerID, name string) backends.Job {
	s.t.Helper()
	jobs := s.claim(backends.ClaimParams{WorkerID: workerID, Names: []string{name}, Limit: 1})
	require.Len(s.t, jobs, 1, "claim %q", name)
	return jobs[0]
}

// complete writes cs for workerID. A completion that names no attempt is
// written for the attempt its row is at now (1 for a row that does not
// exist): the clauses about a write for an earlier attempt name theirs.
func (s *suite) complete(workerID string, cs ...backends.Completion) []string {
	s.t.Helper()
	cs = slices.Clone(cs)
	for i := range cs {
		if cs[i].Attempts == 0 {
			cs[i].Attempts = s.attemptsNow(cs[i].JobID)
		}
	}
	applied, err := s.b.Complete(s.ctx, workerID, cs)
	require.NoError(s.t, err, "complete")
	return applied
}

// nack NACKs ids for workerID, each at the attempt its row is at now (1
// for a row that does not exist).
func (s *suite) nack(workerID string, ids ...string) ([]string, error) {
	s.t.Helper()
	held := make([]backends.Job, len(ids))
	for i, id := range ids {
		held[i] = backends.Job{ID: id, Attempts: s.attemptsNow(id)}
	}
	return s.b.Nack(s.ctx, workerID, held)
}

// attemptsNow is the attempts of row id now, or 1 when it cannot be read
// (no such row, an id that is no uuid).
func (s *suite) attemptsNow(id string) int {
	s.t.Helper()
	j, err := s.b.Get(s.ctx, id)
	if err != nil {
		return 1
	}
	return max(j.Attempts, 1)
}

func (s *suite) stats() backends.Stats {
	s.t.Helper()
	st, err := s.b.Stats(s.ctx)
	require.NoError(s.t, err, "stats")
	return st
}

func (s *suite) deadLetters() []backends.DeadLetterJob {
	s.t.Helper()
	dl, err := s.b.ListDeadLetter(s.ctx, 0)
	require.NoError(s.t, err, "list dead letter")
	return dl
}

func (s *suite) deadLetter(id string) backends.DeadLetterJob {
	s.t.Helper()
	for _, d := range s.deadLetters() {
		if d.ID == id {
			return d
		}
	}
	require.FailNow(s.t, "dead-letter row missing", "id %s", id)
	return backends.DeadLetterJob{}
}

// deadLetterJob enqueues, claims and dead-letters one job named name.
func (s *suite) deadLetterJob(name string) backends.Job {
	s.t.Helper()
	w := s.worker()
	j := s.enqueueNamed(name)
	s.claimOne(w, name)
	applied := s.complete(w, backends.Completion{JobID: j.ID, Outcome: backends.OutcomeDeadLetter,
		Error: "boom", Reason: backends.ReasonPermanentFailure})
	require.Equal(s.t, []string{j.ID}, applied)
	s.requireGone(j.ID)
	return j
}

// approxNow asserts that got is within tolerance of now+offset.
func approxNow(t *testing.T, offset time.Duration, got *time.Time, what string) {
	t.Helper()
	require.NotNil(t, got, "%s is NULL", what)
	assert.WithinDuration(t, time.Now().Add(offset), *got, tolerance, what)
}

// snapshot renders the mutable fields of a row so "changes nothing" can be
// asserted with one comparison, independent of time.Time's representation.
func snapshot(j backends.Job) string {
	ts := func(p *time.Time) string {
		if p == nil {
			return "NULL"
		}
		return p.UTC().Format(time.RFC3339Nano)
	}
	str := func(p *string) string {
		if p == nil {
			return "NULL"
		}
		return fmt.Sprintf("%q", *p)
	}
	return fmt.Sprintf("status=%s attempts=%d worker=%s last_error=%s scheduled=%s expires=%s updated=%s result=%s",
		j.Status, j.Attempts, str(j.WorkerID), str(j.LastError), ts(j.ScheduledAt), ts(j.ExpiresAt),
		ts(&j.UpdatedAt), string(j.Result))
}

// newUUID returns a random (version 4) UUID for ids the suite invents.
func newUUID(t *testing.T) string {
	t.Helper()
	return backends.NewID()
}

func intp(v int) *int { return &v }
