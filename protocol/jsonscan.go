package protocol

// The one JSON value rule of the protocol, in one pass: what ArgsUnsendable
// refuses in args at the claim, and what the decoder refuses in a frame,
// with the path to the fault. Only the depth bound differs between them.

import (
	"encoding/json"
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"unicode/utf8"
)

// maxFrameDepth bounds the nesting of a whole frame: what every decoder
// takes (Go's encoding/json and the Node SDK stop at 10,000 levels).
const maxFrameDepth = 10000

// scanJSON validates b as exactly one JSON value under the rules of
// ArgsUnsendable, nested at most maxDepth (≤ maxFrameDepth) deep, and
// returns the first fault (kind argsOK if none). When path is not nil it
// holds the location of the fault on return, for the message; the hot path
// passes nil and allocates nothing.
func scanJSON(b []byte, maxDepth int, path *[]argsPathElem) argsFault {
	var objects [maxFrameDepth/64 + 1]uint64 // bit d: the container at depth d is an object
	depth, state, i, n := 0, scanValue, 0, len(b)
	for {
		for i < n && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
			i++
		}
		switch state {
		case scanValue:
			if i == n {
				return argsFault{kind: argsEOF, start: i, end: i}
			}
			switch c := b[i]; {
			case c == '{' || c == '[':
				if depth == maxDepth {
					return argsFault{kind: argsDepth, start: i, end: i + 1}
				}
				if c == '{' {
					objects[depth/64] |= 1 << (depth % 64)
				} else {
					objects[depth/64] &^= 1 << (depth % 64)
				}
				depth++
				if path != nil {
					*path = append(*path, argsPathElem{array: c == '['})
				}
				i++
				state = scanValue
				if c == '{' {
					state = scanKey
				}
				for i < n && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
					i++
				}
				if i < n && (c == '{' && b[i] == '}' || c == '[' && b[i] == ']') {
					i++
					depth--
					if path != nil {
						*path = (*path)[:len(*path)-1]
					}
					state = scanNext
				}
				continue
			case c == '"':
				var f argsFault
				if i, f = scanString(b, i); f.kind != argsOK {
					return f
				}
			case c == '-' || c >= '0' && c <= '9':
				var f argsFault
				if i, f = scanNumber(b, i); f.kind != argsOK {
					return f
				}
			case c == 't':
				if f := scanLiteral(b, i, "true"); f.kind != argsOK {
					return f
				}
				i += 4
			case c == 'f':
				if f := scanLiteral(b, i, "false"); f.kind != argsOK {
					return f
				}
				i += 5
			case c == 'n':
				if f := scanLiteral(b, i, "null"); f.kind != argsOK {
					return f
				}
				i += 4
			default:
				return nonFiniteOr(b, i, "a value")
			}
			state = scanNext
		case scanKey:
			if i == n {
				return argsFault{kind: argsEOF, start: i, end: i}
			}
			if b[i] != '"' {
				return argsFault{kind: argsSyntax, start: i, end: i + 1, want: "an object key"}
			}
			start := i
			var f argsFault
			if i, f = scanString(b, i); f.kind != argsOK {
				f.inKey = true
				return f
			}
			if path != nil {
				(*path)[len(*path)-1].key = b[start+1 : i-1]
			}
			for i < n && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
				i++
			}
			if i == n {
				return argsFault{kind: argsEOF, start: i, end: i}
			}
			if b[i] != ':' {
				return argsFault{kind: argsSyntax, start: i, end: i + 1, want: "':' after an object key"}
			}
			i++
			state = scanValue
		case scanNext:
			if depth == 0 {
				if i != n {
					return argsFault{kind: argsTrailing, start: i, end: n}
				}
				return argsFault{}
			}
			if i == n {
				return argsFault{kind: argsEOF, start: i, end: i}
			}
			object := objects[(depth-1)/64]&(1<<((depth-1)%64)) != 0
			switch c := b[i]; {
			case c == ',':
				i++
				if object {
					state = scanKey
					if path != nil {
						(*path)[len(*path)-1].key = nil
					}
				} else {
					state = scanValue
					if path != nil {
						(*path)[len(*path)-1].index++
					}
				}
			case object && c == '}' || !object && c == ']':
				i++
				depth--
				if path != nil {
					*path = (*path)[:len(*path)-1]
				}
			case object:
				return argsFault{kind: argsSyntax, start: i, end: i + 1, want: "',' or '}' after an object member"}
			default:
				return argsFault{kind: argsSyntax, start: i, end: i + 1, want: "',' or ']' after an array element"}
			}
		}
	}
}

// scanString checks the string starting at b[i] == '"' and returns the
// index after its closing quote.
func scanString(b []byte, i int) (int, argsFault) {
	n := len(b)
	i++
	for {
		for i < n && b[i] >= 0x20 && b[i] != '"' && b[i] != '\\' && b[i] < utf8.RuneSelf {
			i++
		}
		if i == n {
			return i, argsFault{kind: argsEOF, start: i, end: i}
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1, argsFault{}
		case c == '\\':
			if i+1 == n {
				return i, argsFault{kind: argsEOF, start: n, end: n}
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				r, f := hexEscape(b, i)
				if f.kind != argsOK {
					return i, f
				}
				switch {
				case r >= 0xD800 && r < 0xDC00:
					if i+7 < n && b[i+6] == '\\' && b[i+7] == 'u' {
						r2, f := hexEscape(b, i+6)
						if f.kind != argsOK {
							return i, f
						}
						if r2 >= 0xDC00 && r2 < 0xE000 {
							i += 12
							continue
						}
					}
					return i, argsFault{kind: argsSurrogate, start: i, end: i + 6}
				case r >= 0xDC00 && r < 0xE000:
					return i, argsFault{kind: argsSurrogate, start: i, end: i + 6}
				}
				i += 6
			default:
				return i, argsFault{kind: argsSyntax, start: i + 1, end: i + 2, want: "an escape character after '\\'"}
			}
		case c < 0x20:
			return i, argsFault{kind: argsControl, start: i, end: i + 1}
		default:
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size <= 1 {
				return i, argsFault{kind: argsUTF8, start: i, end: i + 1}
			}
			i += size
		}
	}
}

// hexEscape reads the \uXXXX escape at b[i] == '\\'.
func hexEscape(b []byte, i int) (rune, argsFault) {
	var r rune
	for j := i + 2; j < i+6; j++ {
		if j >= len(b) {
			return 0, argsFault{kind: argsEOF, start: len(b), end: len(b)}
		}
		c := b[j]
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, argsFault{kind: argsSyntax, start: j, end: j + 1, want: "4 hex digits after \\u"}
		}
	}
	return r, argsFault{}
}

// maxExp saturates exponents: larger ones are out of range either way.
const maxExp = 1 << 40

// scanNumber checks the number starting at b[i] and returns the index after
// it. A number is out of range when it rounds to infinity as a 64-bit
// float; one that underflows to zero or loses precision is accepted, as the
// handlers' decoders accept it.
func scanNumber(b []byte, i int) (int, argsFault) {
	n, start := len(b), i
	if b[i] == '-' {
		i++
		if i == n {
			return i, argsFault{kind: argsEOF, start: i, end: i}
		}
	}
	digits := func() int {
		s := i
		for i < n && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		return i - s
	}
	// The value is d.ddd × 10^mag with mag from the position of its first
	// non-zero digit and the exponent.
	var mag int64
	zero := false
	switch {
	case i < n && b[i] == '0':
		i++
		zero = true
	case i < n && b[i] >= '1' && b[i] <= '9':
		mag = int64(digits()) - 1
	case string(b[start:min(n, start+9)]) == "-Infinity":
		return i, argsFault{kind: argsNonFinite, start: start, end: start + 9}
	default:
		return numberFault(b, i, "a digit")
	}
	if i < n && b[i] == '.' {
		i++
		fs := i
		if digits() == 0 {
			return numberFault(b, i, "a digit after '.'")
		}
		if zero {
			for j := fs; j < i; j++ {
				if b[j] != '0' {
					zero, mag = false, -int64(j-fs+1)
					break
				}
			}
		}
	}
	if i < n && (b[i] == 'e' || b[i] == 'E') {
		i++
		neg := false
		if i < n && (b[i] == '+' || b[i] == '-') {
			neg = b[i] == '-'
			i++
		}
		es := i
		if digits() == 0 {
			return numberFault(b, i, "a digit in the exponent")
		}
		var exp int64
		for _, c := range b[es:i] {
			if exp < maxExp {
				exp = exp*10 + int64(c-'0')
			}
		}
		if neg {
			exp = -exp
		}
		mag += exp
	}
	// 1.7976931348623157e308 is the largest finite value: below 10^308
	// nothing overflows, from 10^309 everything does.
	switch {
	case zero || mag < 308:
	case mag > 308:
		return i, argsFault{kind: argsRange, start: start, end: i}
	default:
		if _, err := strconv.ParseFloat(string(b[start:i]), 64); err != nil {
			return i, argsFault{kind: argsRange, start: start, end: i}
		}
	}
	return i, argsFault{}
}

func numberFault(b []byte, i int, want string) (int, argsFault) {
	if i == len(b) {
		return i, argsFault{kind: argsEOF, start: i, end: i}
	}
	return i, argsFault{kind: argsSyntax, start: i, end: i + 1, want: want}
}

func scanLiteral(b []byte, i int, lit string) argsFault {
	for j := 0; j < len(lit); j++ {
		if i+j == len(b) {
			return argsFault{kind: argsEOF, start: i + j, end: i + j}
		}
		if b[i+j] != lit[j] {
			return argsFault{kind: argsSyntax, start: i + j, end: i + j + 1, want: "a value"}
		}
	}
	return argsFault{}
}

// nonFiniteOr names NaN and Infinity, which some JSON encoders write (and
// Python's json module reads), or reports a plain syntax fault.
func nonFiniteOr(b []byte, i int, want string) argsFault {
	for _, lit := range [...]string{"NaN", "Infinity", "-Infinity"} {
		if len(b)-i >= len(lit) && string(b[i:i+len(lit)]) == lit {
			return argsFault{kind: argsNonFinite, start: i, end: i + len(lit)}
		}
	}
	if i == len(b) {
		return argsFault{kind: argsEOF, start: i, end: i}
	}
	return argsFault{kind: argsSyntax, start: i, end: i + 1, want: want}
}

// message describes the fault for last_error and the log: where (a path
// such as args.items[3].name) and what, quoting the offending bytes.
func (f argsFault) message(b []byte, root string, maxDepth int) string {
	var elems []argsPathElem
	scanJSON(b, maxDepth, &elems) // the same fault, with its location
	path := jsonPath(root, elems)
	if f.inKey {
		path += " (in a key)"
	}
	at := fmt.Sprintf("at byte %d", f.start)
	in := ""
	if path != root {
		in = " (in " + path + ")"
	}
	notJSON := "the " + root + " is" // "the frame is not valid JSON"
	if root == "args" {
		notJSON = "args are"
	}
	switch f.kind {
	case argsSyntax:
		return fmt.Sprintf("%s not valid JSON: invalid character %s %s, looking for %s%s", notJSON, quoteByte(b[f.start]), at, f.want, in)
	case argsEOF:
		return fmt.Sprintf("%s not valid JSON: unexpected end %s%s", notJSON, at, in)
	case argsTrailing:
		return fmt.Sprintf("%s not valid JSON: data after the top-level value %s: %s", notJSON, at, quoteBytes(b[f.start:f.end], 40))
	case argsControl:
		return fmt.Sprintf("%s not valid JSON: raw control character %s in a string %s, which must be escaped%s", notJSON, quoteByte(b[f.start]), at, in)
	case argsNonFinite:
		return fmt.Sprintf("%s: NaN and Infinity are not JSON (%s %s)", path, b[f.start:f.end], at)
	case argsUTF8:
		return fmt.Sprintf("%s: invalid UTF-8 byte 0x%02x %s", path, b[f.start], at)
	case argsSurrogate:
		return fmt.Sprintf("%s: unpaired UTF-16 surrogate escape %s %s (handlers cannot decode it)", path, b[f.start:f.end], at)
	case argsRange:
		return fmt.Sprintf("%s: number %s is out of range for a 64-bit float", path, describeNumber(b[f.start:f.end]))
	case argsDepth:
		return fmt.Sprintf("%s nested deeper than %d levels", notJSON, maxDepth)
	}
	return ""
}

// jsonPath renders a location under root as args.key, args["odd key"],
// args.list[2].
func jsonPath(root string, elems []argsPathElem) string {
	var s strings.Builder
	s.WriteString(root)
	for i, e := range elems {
		if s.Len() > 300 {
			s.WriteString("…")
			break
		}
		if i == len(elems)-1 && !e.array && e.key == nil {
			break // inside an object, before its first key
		}
		if e.array {
			fmt.Fprintf(&s, "[%d]", e.index)
			continue
		}
		var key string
		if err := json.Unmarshal(append(append([]byte{'"'}, e.key...), '"'), &key); err != nil {
			key = string(e.key)
		}
		key = strings.ToValidUTF8(key, "\uFFFD")
		if isIdentifier(key) {
			s.WriteString("." + key)
		} else {
			s.WriteString("[" + strconv.Quote(truncateUTF8(key, 60)) + "]")
		}
	}
	return s.String()
}

func isIdentifier(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// describeNumber quotes a number literal; a long one (Postgres writes 1e400
// as its 401 digits) by its start, its length and its magnitude.
func describeNumber(lit []byte) string {
	if len(lit) <= 40 {
		return string(lit)
	}
	s := string(lit[:24]) + "…"
	if f, _, err := new(big.Float).Parse(string(lit), 10); err == nil {
		return fmt.Sprintf("%s (%d characters, about %s)", s, len(lit), f.Text('g', 3))
	}
	return fmt.Sprintf("%s (%d characters)", s, len(lit))
}

func quoteByte(c byte) string {
	if c >= 0x20 && c < 0x7f {
		return strconv.QuoteRune(rune(c))
	}
	return fmt.Sprintf("byte 0x%02x", c)
}

// quoteBytes quotes up to n bytes as a Go string literal (valid UTF-8 and
// printable whatever the input).
func quoteBytes(b []byte, n int) string {
	if len(b) > n {
		return strconv.Quote(string(b[:n])) + "…"
	}
	return strconv.Quote(string(b))
}

// truncateUTF8 cuts s to at most n bytes without splitting a character.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
