package sqlite

import (
	"database/sql"
	"fmt"
	"time"
)

// Soniq's SQLite backend writes datetime.now(timezone.utc).isoformat():
// microseconds and an explicit +00:00 offset, and Python drops the fraction
// entirely when it is zero. Mirroring that byte for byte keeps the TEXT
// columns comparable as strings, which is how both Soniq and this package
// compare them ("…05+00:00" sorts before "…05.000001+00:00", as it must).
const (
	isoMicroLayout  = "2006-01-02T15:04:05.000000+00:00"
	isoSecondLayout = "2006-01-02T15:04:05+00:00"
)

// formatTime renders t as Soniq's SQLite backend would.
func formatTime(t time.Time) string {
	t = t.UTC().Truncate(time.Microsecond)
	if t.Nanosecond() == 0 {
		return t.Format(isoSecondLayout)
	}
	return t.Format(isoMicroLayout)
}

// now is the current time at the precision stored.
func now() time.Time {
	return time.Now().UTC().Truncate(time.Microsecond)
}

// parseLayouts accept what Soniq writes plus SQLite's own CURRENT_TIMESTAMP
// form and naive timestamps (taken as UTC). Go accepts a fractional second
// after the seconds field even when the layout has none.
var parseLayouts = [...]string{
	"2006-01-02T15:04:05Z07:00",
	"2006-01-02 15:04:05Z07:00",
	"2006-01-02T15:04:05",
	"2006-01-02 15:04:05",
}

// parseTime reads a TEXT timestamp.
func parseTime(s string) (time.Time, error) {
	for _, layout := range parseLayouts {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("unrecognised timestamp %q", s)
}

// parseNullTime reads a nullable TEXT timestamp; column names the error.
func parseNullTime(s sql.NullString, column string) (*time.Time, error) {
	if !s.Valid || s.String == "" {
		return nil, nil
	}
	t, err := parseTime(s.String)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", column, err)
	}
	return &t, nil
}
