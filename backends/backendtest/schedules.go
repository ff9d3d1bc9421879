package backendtest

import (
	"encoding/json"
	"sync"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

func (s *suite) upsertSchedule(p backends.ScheduleParams) (backends.Schedule, bool) {
	s.t.Helper()
	sc, created, err := s.b.UpsertSchedule(s.ctx, p)
	require.NoError(s.t, err, "declare schedule %q", p.Name)
	require.NotEmpty(s.t, sc.ID)
	return sc, created
}

func (s *suite) schedules() map[string]backends.Schedule {
	s.t.Helper()
	all, err := s.b.ListSchedules(s.ctx)
	require.NoError(s.t, err, "list schedules")
	out := map[string]backends.Schedule{}
	for _, sc := range all {
		_, dup := out[sc.Name]
		require.False(s.t, dup, "two schedules named %q", sc.Name)
		out[sc.Name] = sc
	}
	return out
}

// µs is the stored precision of schedule times.
func µs(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

func scheduleCases() []testCase {
	return []testCase{
		{"schedules/declare with Soniq's defaults, listed by name", func(s *suite) {
			next := µs(time.Now().Add(time.Minute))
			sc, created := s.upsertSchedule(backends.ScheduleParams{Name: "report.b", Type: "interval", Value: "60", NextRun: next})
			assert.True(s.t, created)
			s.upsertSchedule(backends.ScheduleParams{Name: "report.a", Type: "cron", Value: "*/5 * * * *", NextRun: next,
				Args: json.RawMessage(`{"k":"v"}`), Queue: "reports", Priority: intp(7), MaxAttempts: intp(9)})

			all, err := s.b.ListSchedules(s.ctx)
			require.NoError(s.t, err)
			require.Len(s.t, all, 2)
			assert.Equal(s.t, []string{"report.a", "report.b"}, []string{all[0].Name, all[1].Name}, "by job name")

			b := all[1]
			assert.Equal(s.t, sc.ID, b.ID)
			assert.Equal(s.t, "interval", b.Type)
			assert.Equal(s.t, "60", b.Value)
			assert.Equal(s.t, "default", b.Queue)
			assert.Equal(s.t, 100, b.Priority)
			assert.Equal(s.t, 3, b.MaxAttempts)
			assert.JSONEq(s.t, `{}`, string(b.Args))
			assert.Equal(s.t, backends.ScheduleActive, b.Status)
			assert.Equal(s.t, 0, b.RunCount)
			assert.Nil(s.t, b.LastRun)
			assert.Nil(s.t, b.LastJobID)
			require.NotNil(s.t, b.NextRun)
			assert.True(s.t, next.Equal(*b.NextRun), "next_run %v, want %v", *b.NextRun, next)
			require.NotNil(s.t, b.CreatedAt)
			assert.WithinDuration(s.t, time.Now(), *b.CreatedAt, tolerance)

			a := all[0]
			assert.Equal(s.t, "cron", a.Type)
			assert.Equal(s.t, "*/5 * * * *", a.Value)
			assert.Equal(s.t, "reports", a.Queue)
			assert.Equal(s.t, 7, a.Priority)
			assert.Equal(s.t, 9, a.MaxAttempts)
			assert.JSONEq(s.t, `{"k":"v"}`, string(a.Args))
		}},
		{"schedules/declare refuses args that are not an object", func(s *suite) {
			_, _, err := s.b.UpsertSchedule(s.ctx, backends.ScheduleParams{Name: "bad", Type: "interval", Value: "5",
				Args: json.RawMessage(`[1]`), NextRun: time.Now()})
			require.Error(s.t, err)
			_, _, err = s.b.UpsertSchedule(s.ctx, backends.ScheduleParams{Name: "bad", Type: "weekly", Value: "5", NextRun: time.Now()})
			require.Error(s.t, err)
			assert.Empty(s.t, s.schedules())
		}},
		{"schedules/re-declared keeps id, status, run count; same timing keeps next_run", func(s *suite) {
			first := µs(time.Now().Add(-time.Second))
			sc, _ := s.upsertSchedule(backends.ScheduleParams{Name: "tick", Type: "interval", Value: "30", NextRun: first})
			_, fired := s.fire(sc, first, first.Add(30*time.Second))
			require.True(s.t, fired)
			require.NoError(s.t, s.b.SetScheduleStatus(s.ctx, "tick", backends.SchedulePaused))
			before := s.schedules()["tick"]

			// Same timing, other options: next_run stays.
			again, created := s.upsertSchedule(backends.ScheduleParams{Name: "tick", Type: "interval", Value: "30",
				NextRun: µs(time.Now().Add(time.Hour)), Queue: "q2", Priority: intp(1), MaxAttempts: intp(5), Args: json.RawMessage(`{"x":1}`)})
			assert.False(s.t, created)
			got := s.schedules()["tick"]
			assert.Equal(s.t, sc.ID, again.ID)
			assert.Equal(s.t, sc.ID, got.ID, "id kept")
			assert.Equal(s.t, backends.SchedulePaused, got.Status, "status kept")
			assert.Equal(s.t, 1, got.RunCount, "run count kept")
			assert.Equal(s.t, before.LastJobID, got.LastJobID)
			assert.True(s.t, before.CreatedAt.Equal(*got.CreatedAt), "created_at kept")
			assert.True(s.t, before.LastRun.Equal(*got.LastRun), "last_run kept")
			assert.True(s.t, before.NextRun.Equal(*got.NextRun), "same timing: next_run kept")
			assert.Equal(s.t, "q2", got.Queue)
			assert.Equal(s.t, 1, got.Priority)
			assert.Equal(s.t, 5, got.MaxAttempts)
			assert.JSONEq(s.t, `{"x":1}`, string(got.Args))

			// New timing: the caller's next_run.
			later := µs(time.Now().Add(2 * time.Hour))
			s.upsertSchedule(backends.ScheduleParams{Name: "tick", Type: "cron", Value: "0 * * * *", NextRun: later})
			got = s.schedules()["tick"]
			assert.Equal(s.t, sc.ID, got.ID)
			assert.Equal(s.t, "cron", got.Type)
			assert.True(s.t, later.Equal(*got.NextRun), "new timing: next_run %v, want %v", got.NextRun, later)
			assert.Len(s.t, s.schedules(), 1)
		}},
		{"schedules/pause, resume and remove by name; unknown names are not found", func(s *suite) {
			s.upsertSchedule(backends.ScheduleParams{Name: "p", Type: "interval", Value: "5", NextRun: time.Now()})
			require.NoError(s.t, s.b.SetScheduleStatus(s.ctx, "p", backends.SchedulePaused))
			assert.Equal(s.t, backends.SchedulePaused, s.schedules()["p"].Status)
			require.NoError(s.t, s.b.SetScheduleStatus(s.ctx, "p", backends.ScheduleActive))
			assert.Equal(s.t, backends.ScheduleActive, s.schedules()["p"].Status)
			assert.Error(s.t, s.b.SetScheduleStatus(s.ctx, "p", "stopped"))
			assert.ErrorIs(s.t, s.b.SetScheduleStatus(s.ctx, "nope", backends.SchedulePaused), backends.ErrNotFound)
			assert.ErrorIs(s.t, s.b.RemoveSchedule(s.ctx, "nope"), backends.ErrNotFound)
			require.NoError(s.t, s.b.RemoveSchedule(s.ctx, "p"))
			assert.Empty(s.t, s.schedules())
			assert.ErrorIs(s.t, s.b.RemoveSchedule(s.ctx, "p"), backends.ErrNotFound)
		}},
		{"schedules/due are the active ones at or past next_run", func(s *suite) {
			now := µs(time.Now())
			s.upsertSchedule(backends.ScheduleParams{Name: "past", Type: "interval", Value: "5", NextRun: now.Add(-time.Minute)})
			s.upsertSchedule(backends.ScheduleParams{Name: "now", Type: "interval", Value: "5", NextRun: now})
			s.upsertSchedule(backends.ScheduleParams{Name: "future", Type: "interval", Value: "5", NextRun: now.Add(time.Minute)})
			s.upsertSchedule(backends.ScheduleParams{Name: "paused", Type: "interval", Value: "5", NextRun: now.Add(-time.Minute)})
			require.NoError(s.t, s.b.SetScheduleStatus(s.ctx, "paused", backends.SchedulePaused))
			due, err := s.b.DueSchedules(s.ctx, now)
			require.NoError(s.t, err)
			var names []string
			for _, d := range due {
				names = append(names, d.Name)
			}
			assert.Equal(s.t, []string{"past", "now"}, names, "oldest due first")
		}},
		{"schedules/a first run is set once on a schedule without one", func(s *suite) {
			sc, _ := s.upsertSchedule(backends.ScheduleParams{Name: "n", Type: "interval", Value: "5", NextRun: time.Now()})
			next := µs(time.Now().Add(time.Minute))
			ok, err := s.b.InitScheduleNextRun(s.ctx, sc.ID, next)
			require.NoError(s.t, err)
			assert.False(s.t, ok, "it has one")
			ok, err = s.b.InitScheduleNextRun(s.ctx, backends.NewID(), next)
			require.NoError(s.t, err)
			assert.False(s.t, ok, "no such schedule")
			assert.False(s.t, next.Equal(*s.schedules()["n"].NextRun))
		}},
		{"schedules/fire enqueues the schedule's job and advances it once", func(s *suite) {
			due := µs(time.Now().Add(-2 * time.Second))
			sc, _ := s.upsertSchedule(backends.ScheduleParams{Name: "fire.me", Type: "interval", Value: "10", NextRun: due,
				Args: json.RawMessage(`{"n":1}`), Queue: "cronq", Priority: intp(3), MaxAttempts: intp(7)})
			ctx := s.ctx
			sub, err := s.b.Subscribe(ctx)
			subscribed := err == nil
			firedAt := µs(time.Now())
			next := firedAt.Add(10 * time.Second)
			job, fired, err := s.b.FireSchedule(s.ctx, backends.ScheduleFiring{ScheduleID: sc.ID, Due: due, NextRun: next,
				FiredAt: firedAt, ProducerID: "sidecar-x"})
			require.NoError(s.t, err)
			require.True(s.t, fired)

			got := s.get(job.ID)
			assert.Equal(s.t, "fire.me", got.Name)
			assert.JSONEq(s.t, `{"n":1}`, string(got.Args))
			assert.Equal(s.t, "cronq", got.Queue)
			assert.Equal(s.t, 3, got.Priority)
			assert.Equal(s.t, 7, got.MaxAttempts)
			assert.Equal(s.t, backends.StatusQueued, got.Status)
			assert.Equal(s.t, 0, got.Attempts)
			assert.False(s.t, got.UniqueJob)
			require.NotNil(s.t, got.ProducerID)
			assert.Equal(s.t, "sidecar-x", *got.ProducerID)

			row := s.schedules()["fire.me"]
			assert.Equal(s.t, 1, row.RunCount)
			require.NotNil(s.t, row.LastJobID)
			assert.Equal(s.t, job.ID, *row.LastJobID)
			assert.True(s.t, firedAt.Equal(*row.LastRun), "last_run")
			assert.True(s.t, next.Equal(*row.NextRun), "next_run")

			// The same due run again: the compare-and-swap refuses.
			_, fired, err = s.b.FireSchedule(s.ctx, backends.ScheduleFiring{ScheduleID: sc.ID, Due: due, NextRun: next.Add(time.Second), FiredAt: firedAt})
			require.NoError(s.t, err)
			assert.False(s.t, fired, "a due run fires once")
			assert.Equal(s.t, int64(1), s.stats().Queued)
			assert.Equal(s.t, 1, s.schedules()["fire.me"].RunCount)

			if subscribed {
				select {
				case q := <-sub:
					assert.Equal(s.t, backends.Wakeup{Queue: "cronq"}, q)
				case <-time.After(5 * time.Second):
					s.t.Error("a fired job wakes subscribers")
				}
			}
		}},
		{"schedules/a paused or removed schedule does not fire", func(s *suite) {
			due := µs(time.Now().Add(-time.Second))
			sc, _ := s.upsertSchedule(backends.ScheduleParams{Name: "held", Type: "interval", Value: "10", NextRun: due})
			require.NoError(s.t, s.b.SetScheduleStatus(s.ctx, "held", backends.SchedulePaused))
			_, fired, err := s.b.FireSchedule(s.ctx, backends.ScheduleFiring{ScheduleID: sc.ID, Due: due, NextRun: due.Add(time.Minute), FiredAt: due})
			require.NoError(s.t, err)
			assert.False(s.t, fired)
			require.NoError(s.t, s.b.RemoveSchedule(s.ctx, "held"))
			_, fired, err = s.b.FireSchedule(s.ctx, backends.ScheduleFiring{ScheduleID: sc.ID, Due: due, NextRun: due.Add(time.Minute), FiredAt: due})
			require.NoError(s.t, err)
			assert.False(s.t, fired)
			assert.Equal(s.t, int64(0), s.stats().Total)
		}},
		{"schedules/racing firings of one due run: exactly one fires", func(s *suite) {
			due := µs(time.Now().Add(-time.Second))
			sc, _ := s.upsertSchedule(backends.ScheduleParams{Name: "race", Type: "interval", Value: "10", NextRun: due})
			const n = 8
			var wg sync.WaitGroup
			results := make([]bool, n)
			errs := make([]error, n)
			for i := range n {
				wg.Go(func() {
					at := µs(time.Now())
					_, results[i], errs[i] = s.b.FireSchedule(s.ctx, backends.ScheduleFiring{ScheduleID: sc.ID, Due: due,
						NextRun: at.Add(time.Duration(10+i) * time.Second), FiredAt: at})
				})
			}
			wg.Wait()
			fired := 0
			for i := range n {
				require.NoError(s.t, errs[i])
				if results[i] {
					fired++
				}
			}
			assert.Equal(s.t, 1, fired)
			assert.Equal(s.t, int64(1), s.stats().Queued)
			assert.Equal(s.t, 1, s.schedules()["race"].RunCount)
		}},
		{"schedules/leadership is held, given up and taken again", func(s *suite) {
			l := s.b.ScheduleLeader()
			lead, done, err := l.Hold(s.ctx)
			require.NoError(s.t, err)
			require.True(s.t, lead, "the only scheduler leads")
			done()
			lead, done, err = l.Hold(s.ctx)
			require.NoError(s.t, err)
			require.True(s.t, lead, "and keeps leading")
			done()
			l.Close(s.ctx)
			l2 := s.b.ScheduleLeader()
			defer l2.Close(s.ctx)
			lead, done, err = l2.Hold(s.ctx)
			require.NoError(s.t, err)
			assert.True(s.t, lead, "leadership is free once given up")
			done()
		}},
	}
}

// fire fires sc's run due at due, moving it to next.
func (s *suite) fire(sc backends.Schedule, due, next time.Time) (backends.Job, bool) {
	s.t.Helper()
	j, fired, err := s.b.FireSchedule(s.ctx, backends.ScheduleFiring{ScheduleID: sc.ID, Due: due, NextRun: next, FiredAt: µs(time.Now())})
	require.NoError(s.t, err, "fire schedule %s", sc.Name)
	return j, fired
}
