// Package schedule is how a recurring schedule's timing is read and its
// next run computed, the way Soniq's own scheduler does it: an interval in
// whole seconds, or a five-field cron expression in UTC.
package schedule

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// The two schedule types of soniq_recurring_jobs.schedule_type.
const (
	TypeInterval = "interval"
	TypeCron     = "cron"
)

// Spec is a schedule's timing as the table stores it: an interval's value
// is its length in whole seconds, a cron schedule's value is the
// expression.
type Spec struct {
	Type  string
	Value string

	cron cron.Schedule // parsed, for TypeCron
	secs int64         // for TypeInterval
}

// cronParser reads the standard five fields (minute, hour, day of month,
// month, day of week) and the @hourly-style shorthands, as Soniq's cron
// library does. Every time is taken in UTC.
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Cron parses a five-field cron expression (or @yearly, @annually,
// @monthly, @weekly, @daily, @midnight, @hourly).
func Cron(expr string) (Spec, error) {
	expr = strings.TrimSpace(expr)
	if expr == "" {
		return Spec{}, errors.New("cron expression is empty")
	}
	if strings.HasPrefix(expr, "@every") {
		// A shorthand of the Go library, not of cron: Soniq would not read it.
		return Spec{}, fmt.Errorf("invalid cron expression %q: use an interval (every) instead of @every", expr)
	}
	if strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ=") {
		return Spec{}, fmt.Errorf("invalid cron expression %q: schedules are in UTC and take no time zone", expr)
	}
	if !strings.HasPrefix(expr, "@") {
		if n := len(strings.Fields(expr)); n != 5 {
			return Spec{}, fmt.Errorf("invalid cron expression %q: want 5 fields (minute hour day-of-month month day-of-week), got %d", expr, n)
		}
	}
	s, err := cronParser.Parse(sundaySeven(expr))
	if err != nil {
		return Spec{}, fmt.Errorf("invalid cron expression %q: %w", expr, err)
	}
	return Spec{Type: TypeCron, Value: expr, cron: s}, nil
}

// sundaySeven rewrites a day of week of 7 (Sunday, as cron and Soniq's
// library also read it) to 0, the only Sunday the Go library knows: a
// lone 7, or a range ending in 7 (5-7 becomes 5-6,0).
func sundaySeven(expr string) string {
	f := strings.Fields(expr)
	if len(f) != 5 {
		return expr
	}
	items := strings.Split(f[4], ",")
	for i, it := range items {
		switch {
		case it == "7":
			items[i] = "0"
		case len(it) == 3 && it[1] == '-' && it[2] == '7' && it[0] >= '0' && it[0] <= '6':
			items[i] = it[:2] + "6,0"
		}
	}
	f[4] = strings.Join(items, ",")
	return strings.Join(f, " ")
}

// Every is an interval schedule; d must be a whole number of seconds, at
// least one (Soniq's scheduler keeps whole seconds).
func Every(d time.Duration) (Spec, error) {
	if d < time.Second {
		return Spec{}, fmt.Errorf("interval %s must be at least 1s", d)
	}
	if d%time.Second != 0 {
		return Spec{}, fmt.Errorf("interval %s must be a whole number of seconds", d)
	}
	secs := int64(d / time.Second)
	return Spec{Type: TypeInterval, Value: strconv.FormatInt(secs, 10), secs: secs}, nil
}

// Parse reads a stored (schedule_type, schedule_value) pair, as written by
// this package or by Soniq.
func Parse(typ, value string) (Spec, error) {
	switch typ {
	case TypeInterval:
		// Soniq reads the value with int(): surrounding spaces are allowed.
		secs, err := strconv.ParseInt(strings.TrimSpace(value), 10, 64)
		if err != nil {
			return Spec{}, fmt.Errorf("interval schedule value %q is not a whole number of seconds", value)
		}
		if secs < 1 || secs > int64(maxInterval/time.Second) {
			return Spec{}, fmt.Errorf("interval schedule value %q is out of range (1 second to 100 years)", value)
		}
		return Spec{Type: TypeInterval, Value: value, secs: secs}, nil
	case TypeCron:
		s, err := Cron(value)
		if err != nil {
			return Spec{}, err
		}
		s.Value = value
		return s, nil
	}
	return Spec{}, fmt.Errorf("unknown schedule type %q (want interval or cron)", typ)
}

// maxInterval keeps now+interval far from time.Time's overflow.
const maxInterval = 100 * 365 * 24 * time.Hour

// Next is the run after a firing at now, as Soniq computes it: an interval
// counts from now (not from the run that was due, so the runs missed while
// nothing fired are not made up), a cron schedule takes its first match
// strictly after now, in UTC. The result has the database's precision
// (microseconds), so it compares equal once stored and read back.
func (s Spec) Next(now time.Time) time.Time {
	now = now.UTC().Truncate(time.Microsecond)
	switch s.Type {
	case TypeInterval:
		return now.Add(time.Duration(s.secs) * time.Second)
	case TypeCron:
		return s.cron.Next(now).UTC()
	}
	return time.Time{}
}

// NextAfterDue is the run after the run due at due, fired at now. An
// interval counts from the run that was due, so firing a few milliseconds
// after it does not push every later run back (Next counts from the
// firing, and those milliseconds add up at every run); when that run has
// passed too (a firing later than a whole interval, after downtime) it
// counts from now as Next does, so missed runs are not made up. A cron
// schedule takes Next(now) either way: its runs do not depend on the
// firings.
func (s Spec) NextAfterDue(due, now time.Time) time.Time {
	if s.Type == TypeInterval {
		if next := s.Next(due); next.After(now) {
			return next
		}
	}
	return s.Next(now)
}

// Interval is an interval schedule's length; 0 for a cron schedule.
func (s Spec) Interval() time.Duration {
	if s.Type != TypeInterval {
		return 0
	}
	return time.Duration(s.secs) * time.Second
}
