package protocol

import (
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Code classifies a frame error. The first eight are the codes of the conformance vectors.
type Code string

// Frame error codes.
const (
	CodeOversize     Code = "oversize"
	CodeInvalidUTF8  Code = "invalid_utf8"
	CodeInvalidJSON  Code = "invalid_json"
	CodeNotObject    Code = "not_object"
	CodeUnknownType  Code = "unknown_type"
	CodeMissingField Code = "missing_field"
	CodeWrongType    Code = "wrong_type"
	CodeInvalidValue Code = "invalid_value"
	// CodeTruncated is a stream-level error of the Decoder: the input ended in the middle
	// of a line (bytes without a terminating "\n"). It unwraps to io.ErrUnexpectedEOF.
	CodeTruncated Code = "truncated"
)

// QuoteBytes is how many bytes of the offending frame a FrameError keeps.
const QuoteBytes = 200

// FrameError reports a frame that is not a valid protocol message.
type FrameError struct {
	Code Code
	// Field is the dotted path of the offending field ("id", "error.message",
	// "jobs[0].cancellable") for missing_field, wrong_type and invalid_value.
	Field string
	// Detail says what was wrong in words ("want int, got number 1.0").
	Detail string
	// Limit is the frame size limit in force (oversize only).
	Limit int
	// Size is the frame's length in bytes, excluding the line terminator.
	Size int
	// Quote holds the first QuoteBytes bytes of the frame.
	Quote []byte
}

func (e *FrameError) Error() string {
	var b strings.Builder
	b.WriteString("protocol: ")
	b.WriteString(string(e.Code))
	if e.Field != "" {
		b.WriteString(" at ")
		b.WriteString(e.Field)
	}
	switch {
	case e.Code == CodeOversize:
		fmt.Fprintf(&b, ": frame of %d bytes exceeds the limit of %d bytes", e.Size, e.Limit)
	case e.Detail != "":
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	b.WriteString("; frame ")
	b.WriteString(strconv.Quote(string(e.Quote)))
	if e.Size > len(e.Quote) {
		fmt.Fprintf(&b, " (first %d of %d bytes)", len(e.Quote), e.Size)
	}
	return b.String()
}

// Unwrap returns io.ErrUnexpectedEOF for a truncated frame, nil otherwise.
func (e *FrameError) Unwrap() error {
	if e.Code == CodeTruncated {
		return io.ErrUnexpectedEOF
	}
	return nil
}

func quote(frame []byte) []byte {
	if len(frame) > QuoteBytes {
		frame = frame[:QuoteBytes]
	}
	return append([]byte(nil), frame...)
}
