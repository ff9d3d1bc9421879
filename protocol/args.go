package protocol

import (
	"encoding/json"
	"fmt"
)

// maxArgsDepth bounds the nesting of args: every SDK's JSON parser must
// take it (Python's stops near 1,000 levels), with room for the frame
// around them.
const maxArgsDepth = 512

// frameOverhead is generous room for a job frame's other fields.
const frameOverhead = 4096

// ArgsUnsendable says why args cannot travel in a job frame, or "". It
// refuses what would break the handler that read it (the handlers' decoders
// apply the same rules to every frame, and exit on a frame they refuse) or
// what the sidecar could not encode: args over the frame limit, nested
// deeper than maxArgsDepth, not exactly one JSON value, not UTF-8, a NaN or
// Infinity literal, a number that rounds to infinity as a 64-bit float, or
// a \u escape of an unpaired UTF-16 surrogate. Whether the value is an
// object is IsJSONObject's check.
//
// It runs on every claimed row, so it is one pass over the bytes without
// allocating; only a refusal re-scans to build the message.
func ArgsUnsendable(b json.RawMessage, maxFrame int) string {
	if len(b)+frameOverhead > maxFrame {
		return fmt.Sprintf("args of %d bytes do not fit the protocol frame limit of %d bytes", len(b), maxFrame)
	}
	f := scanJSON(b, maxArgsDepth, nil)
	if f.kind == argsOK {
		return ""
	}
	return f.message(b, "args", maxArgsDepth)
}

// IsJSONObject reports whether b's first non-space byte opens an object:
// job args must be one (the rest is ArgsUnsendable's check).
func IsJSONObject(b json.RawMessage) bool {
	for _, c := range b {
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case '{':
			return true
		default:
			return false
		}
	}
	return false
}

type argsFaultKind uint8

const (
	argsOK        argsFaultKind = iota
	argsSyntax                  // an unexpected byte
	argsEOF                     // the text ends inside a value
	argsTrailing                // something after the value
	argsControl                 // a raw control character in a string
	argsNonFinite               // NaN, Infinity, -Infinity
	argsUTF8                    // a byte sequence that is not UTF-8
	argsSurrogate               // \uD800-\uDFFF not part of a high-low pair
	argsRange                   // a number beyond the 64-bit float range
	argsDepth                   // nested deeper than maxArgsDepth
)

// argsFault is the first fault scanJSON found: what, and where in the value.
type argsFault struct {
	kind       argsFaultKind
	start, end int    // the offending bytes
	want       string // argsSyntax: what would have been valid there
	inKey      bool   // the fault is inside an object key
}

// argsPathElem is one level of the location of a fault: an object member
// (key is its raw, still escaped, text) or an array element.
type argsPathElem struct {
	array bool
	index int
	key   []byte
}

// scanner states: what may come next.
const (
	scanValue = iota // a value
	scanKey          // an object key (after '{' or ',')
	scanNext         // after a value: ',' or the container's end, or the end of the text
)
