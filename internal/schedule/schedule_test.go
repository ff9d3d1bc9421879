package schedule

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCronAndEveryReadWhatSoniqReads(t *testing.T) {
	for _, tc := range []struct {
		expr string
		err  string
	}{
		{"*/5 * * * *", ""},
		{"0 9 * * 1-5", ""},
		{"30 2 1 jan,jul *", ""},
		{"0 0 * * sun", ""},
		{"@hourly", ""},
		{"@daily", ""},
		{"", "empty"},
		{"* * * *", "want 5 fields"},
		{"0 * * * * *", "want 5 fields"},
		{"61 * * * *", "invalid cron expression"},
		{"@every 5m", "@every"},
		{"TZ=Europe/Paris 0 * * * *", "UTC"},
		{"@fortnightly", "invalid cron expression"},
	} {
		t.Run(tc.expr, func(t *testing.T) {
			s, err := Cron(tc.expr)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, TypeCron, s.Type)
			assert.Equal(t, tc.expr, s.Value)
		})
	}
	for _, tc := range []struct {
		d     time.Duration
		value string
		err   string
	}{
		{time.Second, "1", ""},
		{90 * time.Second, "90", ""},
		{time.Hour, "3600", ""},
		{0, "", "at least 1s"},
		{500 * time.Millisecond, "", "at least 1s"},
		{1500 * time.Millisecond, "", "whole number of seconds"},
	} {
		s, err := Every(tc.d)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, "%s", tc.d)
			continue
		}
		require.NoError(t, err)
		assert.Equal(t, Spec{Type: TypeInterval, Value: tc.value, secs: int64(tc.d / time.Second)}, s)
	}
}

func TestParseStoredValues(t *testing.T) {
	for _, tc := range []struct {
		typ, value string
		ok         bool
	}{
		{"interval", "60", true},
		{"interval", " 60 ", true}, // Soniq's int() takes it
		{"interval", "0", false},
		{"interval", "-5", false},
		{"interval", "1.5", false},
		{"interval", "abc", false},
		{"cron", "0 * * * *", true},
		{"cron", "bad", false},
		{"weekly", "1", false},
	} {
		_, err := Parse(tc.typ, tc.value)
		assert.Equal(t, tc.ok, err == nil, "%s %q: %v", tc.typ, tc.value, err)
	}
}

func TestNextIsSoniqs(t *testing.T) {
	at := time.Date(2026, 3, 14, 10, 17, 42, 123456789, time.UTC)
	for _, tc := range []struct {
		typ, value string
		want       time.Time
	}{
		// An interval counts from the firing, at the database's precision.
		{"interval", "60", time.Date(2026, 3, 14, 10, 18, 42, 123456000, time.UTC)},
		{"cron", "*/5 * * * *", time.Date(2026, 3, 14, 10, 20, 0, 0, time.UTC)},
		{"cron", "17 10 * * *", time.Date(2026, 3, 15, 10, 17, 0, 0, time.UTC)}, // strictly after
		{"cron", "0 9 * * 1", time.Date(2026, 3, 16, 9, 0, 0, 0, time.UTC)},     // a Monday
		{"cron", "0 0 1 * *", time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC)},
		// Day of month and day of week both restricted: either matches.
		{"cron", "0 0 20 * 0", time.Date(2026, 3, 15, 0, 0, 0, 0, time.UTC)},
		{"cron", "@hourly", time.Date(2026, 3, 14, 11, 0, 0, 0, time.UTC)},
		// 7 is Sunday too.
		{"cron", "0 0 * * 7", time.Date(2026, 3, 15, 0, 0, 0, 0, time.UTC)},
		{"cron", "0 0 * * 1,7", time.Date(2026, 3, 15, 0, 0, 0, 0, time.UTC)},
		{"cron", "0 0 * * 0-7", time.Date(2026, 3, 15, 0, 0, 0, 0, time.UTC)},
	} {
		s, err := Parse(tc.typ, tc.value)
		require.NoError(t, err)
		assert.Equal(t, tc.want, s.Next(at), "%s %q", tc.typ, tc.value)
		// Any zone in, UTC out.
		assert.Equal(t, tc.want, s.Next(at.In(time.FixedZone("x", 5*3600))), "%s %q in another zone", tc.typ, tc.value)
	}
}

func TestNextAfterDueKeepsTheIntervalsGrid(t *testing.T) {
	due := time.Date(2026, 3, 14, 10, 0, 0, 0, time.UTC)
	ms := time.Millisecond
	for _, tc := range []struct {
		name, typ, value string
		firedAfter       time.Duration
		want             time.Time
	}{
		{"on time: the next run is due plus the interval", "interval", "1", 3 * ms, due.Add(time.Second)},
		{"late by less than an interval: still on the grid", "interval", "60", 59 * time.Second, due.Add(time.Minute)},
		{"late by a whole interval: counts from the firing", "interval", "1", time.Second, due.Add(2 * time.Second)},
		{"after downtime: once, from the firing", "interval", "60", 3*time.Hour + 7*ms, due.Add(3*time.Hour + 7*ms + time.Minute)},
		{"cron counts from the firing as before", "cron", "*/5 * * * *", 3 * ms, due.Add(5 * time.Minute)},
		{"cron after downtime", "cron", "*/5 * * * *", 12 * time.Minute, due.Add(15 * time.Minute)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Parse(tc.typ, tc.value)
			require.NoError(t, err)
			assert.Equal(t, tc.want, s.NextAfterDue(due, due.Add(tc.firedAfter)))
		})
	}
}
