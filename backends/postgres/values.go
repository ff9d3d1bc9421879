package postgres

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// isJSONObject reports whether raw is a single JSON object.
func isJSONObject(raw json.RawMessage) bool {
	var m map[string]json.RawMessage
	return json.Unmarshal(raw, &m) == nil && m != nil
}

// isUUID accepts the canonical 8-4-4-4-12 hex form. Ids that fail it cannot
// name a row, and rejecting them here keeps one bad id from failing a whole
// batch statement with a cast error.
func isUUID(s string) bool { return backends.IsUUID(s) }

// parseUUID reads a uuid that isUUID accepted (36 characters, dashes at
// 8, 13, 18 and 23). It runs for every id a result write sends or checks,
// so it reads each byte's two digits from where they are, without a loop
// over the dashes.
func parseUUID(s string) pgtype.UUID {
	u := pgtype.UUID{Valid: true}
	_ = s[35]
	for i, at := range uuidDigits {
		u.Bytes[i] = hexValue[s[at]]<<4 | hexValue[s[at+1]]
	}
	return u
}

// hexValue is each hex digit's value (in either case), indexed by the
// digit's byte; it is never written after it is built.
var hexValue = func() (t [256]byte) {
	for c := range t {
		t[c] = unhex(byte(c))
	}
	return t
}()

// uuidDigits is where each byte's two hex digits start in a uuid's text.
var uuidDigits = [16]uint8{0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34}

func unhex(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	}
	return c - '0'
}

// storableJSON makes a JSON value acceptable to jsonb, which rejects the
// \u0000 escape and unpaired surrogate escapes that encoding/json (and
// handlers) accept. Without this one such result would fail its whole
// completion batch. Affected strings get U+FFFD; other values are untouched.
func storableJSON(raw string) (string, error) {
	if strings.IndexByte(raw, '\\') < 0 {
		return raw, nil // no escape at all (most results): nothing to look for
	}
	if !strings.Contains(strings.ToLower(raw), `\u0000`) && !strings.Contains(strings.ToLower(raw), `\ud`) {
		return raw, nil
	}
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return "", fmt.Errorf("result is not valid JSON: %w", err)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	// Decoding already turned unpaired surrogates into U+FFFD.
	if err := enc.Encode(replaceNUL(v)); err != nil {
		return "", fmt.Errorf("re-encode result: %w", err)
	}
	return strings.TrimSuffix(buf.String(), "\n"), nil
}

func replaceNUL(v any) any {
	switch x := v.(type) {
	case string:
		return strings.ReplaceAll(x, "\x00", "\uFFFD")
	case []any:
		for i := range x {
			x[i] = replaceNUL(x[i])
		}
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[strings.ReplaceAll(k, "\x00", "\uFFFD")] = replaceNUL(e)
		}
		return out
	}
	return v
}

// inCallersOrder is the ids of the caller's n items (id(i) the i-th's) that
// a statement wrote (written, its returned uuids), in the caller's order and
// each once; it empties written as it goes.
func inCallersOrder(n int, id func(i int) string, written map[pgtype.UUID]bool) []string {
	out := make([]string, 0, len(written))
	for i := range n {
		s := id(i)
		if !isUUID(s) {
			continue
		}
		if u := parseUUID(s); written[u] {
			out = append(out, s)
			delete(written, u)
		}
	}
	return out
}
