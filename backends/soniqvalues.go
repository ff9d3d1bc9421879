package backends

// Value rules Soniq applies to what it stores, shared by every backend so
// that rows written by the sidecar and by Soniq agree byte for byte.

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ArgsHash mirrors soniq.utils.hashing.compute_args_hash: the SHA-256 hex
// digest of json.dumps(args, sort_keys=True, separators=(",", ":")) with
// Python's defaults (ensure_ascii, float repr). Equal hashes are what make a
// sidecar unique_job collide with a Soniq one.
func ArgsHash(args json.RawMessage) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return "", fmt.Errorf("args are not valid JSON: %w", err)
	}
	if dec.More() {
		return "", errors.New("args hold more than one JSON value")
	}
	if _, ok := v.(map[string]any); !ok {
		return "", errors.New("args must be a JSON object")
	}
	var buf strings.Builder
	if err := writePythonJSON(&buf, v); err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(buf.String()))
	return hex.EncodeToString(sum[:]), nil
}

func writePythonJSON(w *strings.Builder, v any) error {
	switch x := v.(type) {
	case nil:
		w.WriteString("null")
	case bool:
		w.WriteString(strconv.FormatBool(x))
	case string:
		writePythonString(w, x)
	case json.Number:
		return writePythonNumber(w, string(x))
	case []any:
		w.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				w.WriteByte(',')
			}
			if err := writePythonJSON(w, e); err != nil {
				return err
			}
		}
		w.WriteByte(']')
	case map[string]any:
		// sort_keys compares str code points; UTF-8 byte order is the
		// same order.
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		w.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				w.WriteByte(',')
			}
			writePythonString(w, k)
			w.WriteByte(':')
			if err := writePythonJSON(w, x[k]); err != nil {
				return err
			}
		}
		w.WriteByte('}')
	default:
		return fmt.Errorf("unexpected JSON value of type %T", v)
	}
	return nil
}

// writePythonString escapes as json.dumps with ensure_ascii=True: every
// code point outside ' '..'~' becomes \uXXXX (lower-case hex, surrogate
// pairs above U+FFFF) except the five short escapes.
func writePythonString(w *strings.Builder, s string) {
	w.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			w.WriteString(`\"`)
		case '\\':
			w.WriteString(`\\`)
		case '\n':
			w.WriteString(`\n`)
		case '\r':
			w.WriteString(`\r`)
		case '\t':
			w.WriteString(`\t`)
		case '\b':
			w.WriteString(`\b`)
		case '\f':
			w.WriteString(`\f`)
		default:
			switch {
			case r >= ' ' && r <= '~':
				w.WriteRune(r)
			case r > 0xFFFF:
				r -= 0x10000
				fmt.Fprintf(w, `\u%04x\u%04x`, 0xD800+(r>>10), 0xDC00+(r&0x3FF))
			default:
				fmt.Fprintf(w, `\u%04x`, r)
			}
		}
	}
	w.WriteByte('"')
}

// writePythonNumber renders a JSON number as Python re-serialises it: a
// literal without '.', 'e' or 'E' is an int (exact, any size); anything else
// is a float printed with repr().
func writePythonNumber(w *strings.Builder, lit string) error {
	if !strings.ContainsAny(lit, ".eE") {
		if lit == "-0" {
			lit = "0"
		}
		w.WriteString(lit)
		return nil
	}
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return fmt.Errorf("parse number %s: %w", lit, err)
	}
	w.WriteString(pythonFloatRepr(f))
	return nil
}

// pythonFloatRepr is Python's repr(float): the shortest round-tripping
// digits, positional when the decimal exponent is in [-4, 16), scientific
// otherwise with a sign and at least two exponent digits.
func pythonFloatRepr(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	case math.IsNaN(f):
		return "NaN"
	}
	sci := strconv.FormatFloat(f, 'e', -1, 64) // e.g. -1.2345e+06
	neg := strings.HasPrefix(sci, "-")
	sci = strings.TrimPrefix(sci, "-")
	mant, expStr, _ := strings.Cut(sci, "e")
	exp, _ := strconv.Atoi(expStr)
	digits := strings.Replace(mant, ".", "", 1)
	var out string
	if exp >= -4 && exp < 16 {
		if exp >= 0 {
			if len(digits) <= exp+1 {
				out = digits + strings.Repeat("0", exp+1-len(digits)) + ".0"
			} else {
				out = digits[:exp+1] + "." + digits[exp+1:]
			}
		} else {
			out = "0." + strings.Repeat("0", -exp-1) + digits
		}
	} else {
		m := digits[:1]
		if len(digits) > 1 {
			m += "." + digits[1:]
		}
		sign := "+"
		if exp < 0 {
			sign, exp = "-", -exp
		}
		out = fmt.Sprintf("%se%s%02d", m, sign, exp)
	}
	if neg {
		out = "-" + out
	}
	return out
}

// TruncateError bounds last_error to MaxErrorBytes without cutting
// a UTF-8 sequence, after making the text storable (Postgres text rejects
// NUL bytes and invalid UTF-8).
func TruncateError(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	if len(s) <= MaxErrorBytes {
		return s
	}
	cut := MaxErrorBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}
