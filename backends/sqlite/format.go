package sqlite

import (
	"bytes"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/soniq-dev/soniq-sidecar/backends"
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

// nullTimeText is the stored form of an optional time.
func nullTimeText(t *time.Time) any {
	if t == nil {
		return nil
	}
	return formatTime(*t)
}

// truncateError bounds s to backends.MaxErrorBytes without splitting a
// UTF-8 sequence.
func truncateError(s string) string {
	if len(s) <= backends.MaxErrorBytes {
		return s
	}
	cut := backends.MaxErrorBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// argsHash is Soniq's compute_args_hash: SHA-256 of
// json.dumps(args, sort_keys=True, separators=(",", ":")) with Python's
// default ensure_ascii. Matching it lets unique_job deduplicate against rows
// Soniq producers enqueued. Numbers are kept as written in the input, which
// matches Python for integers and for floats already in Python's repr form.
func argsHash(args json.RawMessage) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return "", fmt.Errorf("hashing args: %w", err)
	}
	var sb strings.Builder
	writePythonJSON(&sb, v)
	sum := sha256.Sum256([]byte(sb.String()))
	return hex.EncodeToString(sum[:]), nil
}

// writePythonJSON writes v as Python's compact, key-sorted, ASCII-only json.dumps.
func writePythonJSON(sb *strings.Builder, v any) {
	switch x := v.(type) {
	case nil:
		sb.WriteString("null")
	case bool:
		if x {
			sb.WriteString("true")
		} else {
			sb.WriteString("false")
		}
	case json.Number:
		sb.WriteString(x.String())
	case string:
		writePythonString(sb, x)
	case []any:
		sb.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				sb.WriteByte(',')
			}
			writePythonJSON(sb, e)
		}
		sb.WriteByte(']')
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		// Python sorts str keys by code point; UTF-8 byte order agrees.
		sort.Strings(keys)
		sb.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				sb.WriteByte(',')
			}
			writePythonString(sb, k)
			sb.WriteByte(':')
			writePythonJSON(sb, x[k])
		}
		sb.WriteByte('}')
	}
}

func writePythonString(sb *strings.Builder, s string) {
	const hexDigits = "0123456789abcdef"
	writeU := func(r rune) {
		sb.WriteString(`\u`)
		sb.WriteByte(hexDigits[r>>12&0xf])
		sb.WriteByte(hexDigits[r>>8&0xf])
		sb.WriteByte(hexDigits[r>>4&0xf])
		sb.WriteByte(hexDigits[r&0xf])
	}
	sb.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"':
			sb.WriteString(`\"`)
		case r == '\\':
			sb.WriteString(`\\`)
		case r == '\n':
			sb.WriteString(`\n`)
		case r == '\r':
			sb.WriteString(`\r`)
		case r == '\t':
			sb.WriteString(`\t`)
		case r == '\b':
			sb.WriteString(`\b`)
		case r == '\f':
			sb.WriteString(`\f`)
		case r < 0x20 || (r >= 0x7f && r < 0x10000):
			writeU(r)
		case r >= 0x10000:
			hi, lo := utf16.EncodeRune(r)
			writeU(hi)
			writeU(lo)
		default:
			sb.WriteRune(r)
		}
	}
	sb.WriteByte('"')
}
