package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
)

// Marshal returns m as one compact frame without the trailing "\n".
func Marshal(m Message) ([]byte, error) { return Append(nil, m) }

// Append appends m as one compact frame (no "\n") to dst: keys in the spec's table order,
// absent/null optional fields omitted, no HTML escaping, non-ASCII written as UTF-8. Raw
// JSON values (Job.Args, Result.Result) are compacted, keeping their key order and string
// escapes. It returns an error, and dst unchanged, for a message that could not be decoded
// again: nil, a failed result without Error, invalid raw JSON, Args that is not an object,
// or a non-finite Seconds.
func Append(dst []byte, m Message) ([]byte, error) {
	b, err := appendMessage(dst, m)
	if err != nil {
		return dst, err
	}
	return b, nil
}

func appendMessage(b []byte, m Message) ([]byte, error) {
	var err error
	switch m := m.(type) {
	case *Hello:
		b = append(b, `{"type":"hello","protocol":`...)
		b = strconv.AppendInt(b, int64(m.Protocol), 10)
		b = append(b, `,"sdk":`...)
		b = appendString(b, m.SDK)
		b = append(b, `,"pid":`...)
		b = strconv.AppendInt(b, int64(m.PID), 10)
		b = append(b, `,"jobs":[`...)
		for i, j := range m.Jobs {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"name":`...)
			b = appendString(b, j.Name)
			b = append(b, `,"cancellable":`...)
			b = strconv.AppendBool(b, j.Cancellable)
			b = append(b, '}')
		}
		b = append(b, `],"concurrency":`...)
		b = strconv.AppendInt(b, int64(m.Concurrency), 10)
		if m.SyncConcurrency != 0 {
			b = append(b, `,"sync_concurrency":`...)
			b = strconv.AppendInt(b, int64(m.SyncConcurrency), 10)
		}
	case *Job:
		b = append(b, `{"type":"job","id":`...)
		b = appendString(b, m.ID)
		b = append(b, `,"name":`...)
		b = appendString(b, m.Name)
		b = append(b, `,"args":`...)
		if b, err = appendArgs(b, m.Args, "job"); err != nil {
			return nil, err
		}
		b = append(b, `,"attempt":`...)
		b = strconv.AppendInt(b, int64(m.Attempt), 10)
		b = append(b, `,"max_attempts":`...)
		b = strconv.AppendInt(b, int64(m.MaxAttempts), 10)
		b = append(b, `,"queue":`...)
		b = appendString(b, m.Queue)
		if m.Deadline != nil {
			b = append(b, `,"deadline":`...)
			b = strconv.AppendInt(b, *m.Deadline, 10)
		}
		if m.Traceparent != nil {
			b = append(b, `,"traceparent":`...)
			b = appendString(b, *m.Traceparent)
		}
		if m.WorkerID != nil {
			b = append(b, `,"worker_id":`...)
			b = appendString(b, *m.WorkerID)
		}
		if m.ScheduledAt != nil {
			b = append(b, `,"scheduled_at":`...)
			b = strconv.AppendInt(b, *m.ScheduledAt, 10)
		}
		if m.CreatedAt != nil {
			b = append(b, `,"created_at":`...)
			b = strconv.AppendInt(b, *m.CreatedAt, 10)
		}
	case *Result:
		b = append(b, `{"type":"result","id":`...)
		b = appendString(b, m.ID)
		b = append(b, `,"status":`...)
		b = appendString(b, string(m.Status))
		switch m.Status {
		case StatusDone:
			if m.Result != nil && !bytes.Equal(bytes.TrimSpace(m.Result), []byte("null")) {
				b = append(b, `,"result":`...)
				if b, err = appendRaw(b, m.Result, "result"); err != nil {
					return nil, err
				}
			}
		case StatusFailed:
			if m.Error == nil {
				return nil, errors.New("protocol: encode result: status failed without Error")
			}
			b = append(b, `,"error":{"type":`...)
			b = appendString(b, m.Error.Type)
			b = append(b, `,"message":`...)
			b = appendString(b, m.Error.Message)
			if m.Error.Traceback != nil {
				b = append(b, `,"traceback":`...)
				b = appendString(b, *m.Error.Traceback)
			}
			b = append(b, `,"retryable":`...)
			b = strconv.AppendBool(b, m.Error.Retryable)
			if m.Error.Reason != "" {
				b = append(b, `,"reason":`...)
				b = appendString(b, string(m.Error.Reason))
			}
			b = append(b, '}')
		case StatusSnooze:
			b = append(b, `,"seconds":`...)
			if b, err = appendFloat(b, m.Seconds); err != nil {
				return nil, err
			}
			if m.Reason != nil {
				b = append(b, `,"reason":`...)
				b = appendString(b, *m.Reason)
			}
		}
	case *Cancel:
		b = append(b, `{"type":"cancel","id":`...)
		b = appendString(b, m.ID)
		b = append(b, `,"reason":`...)
		b = appendString(b, string(m.Reason))
	case *Ping:
		b = append(b, `{"type":"ping","seq":`...)
		b = strconv.AppendInt(b, m.Seq, 10)
	case *Pong:
		b = append(b, `{"type":"pong","seq":`...)
		b = strconv.AppendInt(b, m.Seq, 10)
	case *Shutdown:
		b = append(b, `{"type":"shutdown"`...)
	case *Enqueue:
		if b, err = appendEnqueue(b, m); err != nil {
			return nil, err
		}
	case *Enqueued:
		b = append(b, `{"type":"enqueued","id":`...)
		b = appendString(b, m.ID)
		if m.JobID != nil {
			b = append(b, `,"job_id":`...)
			b = appendString(b, *m.JobID)
		}
		if m.Error != nil {
			b = append(b, `,"error":{"code":`...)
			b = appendString(b, string(m.Error.Code))
			b = append(b, `,"message":`...)
			b = appendString(b, m.Error.Message)
			b = append(b, '}')
		}
	default:
		return nil, fmt.Errorf("protocol: encode: unsupported message %T", m)
	}
	return append(b, '}'), nil
}

func appendEnqueue(b []byte, m *Enqueue) ([]byte, error) {
	var err error
	b = append(b, `{"type":"enqueue","parent":`...)
	b = appendString(b, m.Parent)
	b = append(b, `,"id":`...)
	b = appendString(b, m.ID)
	b = append(b, `,"name":`...)
	b = appendString(b, m.Name)
	b = append(b, `,"args":`...)
	if b, err = appendArgs(b, m.Args, "enqueue"); err != nil {
		return nil, err
	}
	if m.Queue != nil {
		b = append(b, `,"queue":`...)
		b = appendString(b, *m.Queue)
	}
	if m.Priority != nil {
		b = append(b, `,"priority":`...)
		b = strconv.AppendInt(b, *m.Priority, 10)
	}
	if m.MaxAttempts != nil {
		b = append(b, `,"max_attempts":`...)
		b = strconv.AppendInt(b, *m.MaxAttempts, 10)
	}
	if m.Delay != nil {
		b = append(b, `,"delay":`...)
		if b, err = appendFloat(b, *m.Delay); err != nil {
			return nil, err
		}
	}
	if m.DedupKey != nil {
		b = append(b, `,"dedup_key":`...)
		b = appendString(b, *m.DedupKey)
	}
	if m.Unique != nil {
		b = append(b, `,"unique":`...)
		b = strconv.AppendBool(b, *m.Unique)
	}
	if m.Immediate != nil {
		b = append(b, `,"immediate":`...)
		b = strconv.AppendBool(b, *m.Immediate)
	}
	return b, nil
}

func appendRaw(b []byte, raw json.RawMessage, field string) ([]byte, error) {
	if scanJSON(raw, maxFrameDepth, nil).kind == argsOK {
		return appendCompact(b, raw), nil
	}
	// What scanJSON refuses (a number beyond a 64-bit float, an unpaired
	// surrogate escape) may still be JSON: encoding/json decides.
	buf := bytes.NewBuffer(b)
	if err := json.Compact(buf, raw); err != nil {
		return nil, fmt.Errorf("protocol: encode %s: %w", field, err)
	}
	return buf.Bytes(), nil
}

// appendCompact appends raw, a JSON value scanJSON accepted, without the
// whitespace between its tokens (what json.Compact does, without its
// per-byte state machine: a jsonb column's text has a space after every
// ',' and ':').
func appendCompact(b []byte, raw []byte) []byte {
	for i := 0; i < len(raw); {
		switch c := raw[i]; c {
		case ' ', '\t', '\n', '\r':
			i++
		case '"':
			end, _ := scanString(raw, i)
			b = append(b, raw[i:end]...)
			i = end
		default:
			start := i
			for i < len(raw) && raw[i] != '"' && raw[i] != ' ' && raw[i] != '\t' && raw[i] != '\n' && raw[i] != '\r' {
				i++
			}
			b = append(b, raw[start:i]...)
		}
	}
	return b
}

// appendFloat formats like encoding/json (and like JavaScript and Python for the values
// the vectors use): shortest representation, exponent only below 1e-6 or from 1e21.
func appendFloat(b []byte, f float64) ([]byte, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil, fmt.Errorf("protocol: encode seconds: %v is not a JSON number", f)
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' { // e-07 → e-7, as encoding/json does
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, nil
}

const hexDigits = "0123456789abcdef"

// appendString writes s as a JSON string escaping only what JSON requires: '"', '\\' and
// control characters (\b \f \n \r \t short, others \u00xx). U+2028, U+2029 and <>& are
// written as they are, like Python's json.dumps(ensure_ascii=False) and JSON.stringify.
// Invalid UTF-8 becomes U+FFFD.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i++
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// appendArgs writes a frame's args: a JSON object, {} when nil.
func appendArgs(b []byte, args []byte, frame string) ([]byte, error) {
	if args == nil {
		return append(b, "{}"...), nil
	}
	start := len(b)
	b, err := appendRaw(b, args, "args")
	if err != nil {
		return nil, err
	}
	if b[start] != '{' {
		return nil, errors.New("protocol: encode " + frame + ": args is not a JSON object")
	}
	return b, nil
}
