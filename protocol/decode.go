package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"unicode/utf8"
)

// maxSafeInt is 2^53−1, the largest integer every JSON implementation represents exactly.
const maxSafeInt = 1<<53 - 1

// Decode decodes one frame (a line without its "\n"; one trailing "\r" is stripped) under
// the default size limit. The error, if any, is a *FrameError.
func Decode(frame []byte) (Message, error) {
	return DecodeLimit(frame, DefaultMaxFrameBytes)
}

// DecodeLimit is Decode with a frame size limit of maxFrameBytes.
func DecodeLimit(frame []byte, maxFrameBytes int) (Message, error) {
	frame = bytes.TrimSuffix(frame, []byte{'\r'})
	if len(frame) > maxFrameBytes {
		return nil, &FrameError{Code: CodeOversize, Limit: maxFrameBytes, Size: len(frame), Quote: quote(frame)}
	}
	m, ferr := decode(frame)
	if ferr != nil {
		ferr.Size = len(frame)
		ferr.Quote = quote(frame)
		return nil, ferr
	}
	return m, nil
}

// decode runs the checks in the order the vectors fix: UTF-8, JSON syntax (the value
// rules of scanJSON included), top-level object, type, then each field in table order (missing, JSON type,
// value range).
func decode(frame []byte) (Message, *FrameError) {
	if !utf8.Valid(frame) {
		return nil, &FrameError{Code: CodeInvalidUTF8, Detail: "frame is not valid UTF-8"}
	}
	// The common case, a valid frame holding one object whose keys have no
	// escapes, is split in place: no map, no copies of its values.
	if scanJSON(frame, maxFrameDepth, nil).kind == argsOK {
		var buf [maxSplitMembers]member
		if members, ok := splitObject(frame, buf[:0]); ok {
			return decodeFields(fields{kv: members})
		}
	}
	var top map[string]json.RawMessage
	err := json.Unmarshal(frame, &top)
	var typeErr *json.UnmarshalTypeError
	if err != nil && !errors.As(err, &typeErr) {
		return nil, &FrameError{Code: CodeInvalidJSON, Detail: err.Error()}
	}
	// The value rules args are held to at the claim, over the whole frame:
	// numbers beyond a 64-bit float, unpaired surrogate escapes.
	if f := scanJSON(frame, maxFrameDepth, nil); f.kind != argsOK {
		return nil, &FrameError{Code: CodeInvalidJSON, Detail: f.message(frame, "frame", maxFrameDepth)}
	}
	if typeErr != nil {
		return nil, &FrameError{Code: CodeNotObject, Detail: "frame is a JSON " + typeErr.Value + ", not an object"}
	}
	if top == nil { // the frame is "null"
		return nil, &FrameError{Code: CodeNotObject, Detail: "frame is a JSON null, not an object"}
	}
	return decodeFields(fields{m: top})
}

// decodeFields decodes a frame's top-level members from its type on.
func decodeFields(f fields) (Message, *FrameError) {
	typ, _, ferr := f.str("type", true)
	if ferr != nil {
		return nil, ferr
	}
	switch Type(typ) {
	case TypeHello:
		return decodeHello(f)
	case TypeJob:
		return decodeJob(f)
	case TypeResult:
		return decodeResult(f)
	case TypeCancel:
		return decodeCancel(f)
	case TypePing:
		seq, _, ferr := f.integer("seq", true, 0)
		if ferr != nil {
			return nil, ferr
		}
		return &Ping{Seq: seq}, nil
	case TypePong:
		seq, _, ferr := f.integer("seq", true, 0)
		if ferr != nil {
			return nil, ferr
		}
		return &Pong{Seq: seq}, nil
	case TypeShutdown:
		return &Shutdown{}, nil
	case TypeEnqueue:
		return decodeEnqueue(f)
	case TypeEnqueued:
		return decodeEnqueued(f)
	}
	return nil, &FrameError{Code: CodeUnknownType, Detail: "unknown message type " + strconv.Quote(typ)}
}

func decodeHello(f fields) (Message, *FrameError) {
	var h Hello
	var ferr *FrameError
	var n int64
	if n, _, ferr = f.integer("protocol", true, 1); ferr != nil {
		return nil, ferr
	}
	h.Protocol = int(n)
	if h.SDK, _, ferr = f.str("sdk", true); ferr != nil {
		return nil, ferr
	}
	if n, _, ferr = f.integer("pid", true, 1); ferr != nil {
		return nil, ferr
	}
	h.PID = int(n)
	if h.Jobs, ferr = decodeHelloJobs(f); ferr != nil {
		return nil, ferr
	}
	if n, _, ferr = f.integer("concurrency", true, 1); ferr != nil {
		return nil, ferr
	}
	h.Concurrency = int(n)
	if n, _, ferr = f.integer("sync_concurrency", false, 1); ferr != nil {
		return nil, ferr
	}
	h.SyncConcurrency = int(n)
	return &h, nil
}

func decodeHelloJobs(f fields) ([]HelloJob, *FrameError) {
	raw, ferr := f.value("jobs", true, '[', "array")
	if ferr != nil {
		return nil, ferr
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil { // cannot fail: the frame is valid JSON
		return nil, &FrameError{Code: CodeInvalidJSON, Detail: err.Error()}
	}
	if len(items) == 0 {
		return nil, &FrameError{Code: CodeInvalidValue, Field: "jobs", Detail: "must list at least one job"}
	}
	jobs := make([]HelloJob, len(items))
	seen := make(map[string]int, len(items))
	for i, item := range items {
		path := "jobs[" + strconv.Itoa(i) + "]"
		if k := kindOf(item); k != '{' {
			return nil, wrongType(path, "object", item)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(item, &m); err != nil {
			return nil, &FrameError{Code: CodeInvalidJSON, Detail: err.Error()}
		}
		e := fields{m: m, prefix: path + "."}
		name, _, ferr := e.str("name", true)
		if ferr != nil {
			return nil, ferr
		}
		if name == "" {
			return nil, &FrameError{Code: CodeInvalidValue, Field: path + ".name", Detail: "must not be empty"}
		}
		if j, dup := seen[name]; dup {
			return nil, &FrameError{Code: CodeInvalidValue, Field: path + ".name",
				Detail: "duplicate job name " + strconv.Quote(name) + " (also jobs[" + strconv.Itoa(j) + "])"}
		}
		seen[name] = i
		cancellable, _, ferr := e.boolean("cancellable", true)
		if ferr != nil {
			return nil, ferr
		}
		jobs[i] = HelloJob{Name: name, Cancellable: cancellable}
	}
	return jobs, nil
}

func decodeJob(f fields) (Message, *FrameError) {
	var j Job
	var ferr *FrameError
	var n int64
	if j.ID, ferr = f.nonEmpty("id"); ferr != nil {
		return nil, ferr
	}
	if j.Name, ferr = f.nonEmpty("name"); ferr != nil {
		return nil, ferr
	}
	if j.Args, ferr = f.value("args", true, '{', "object"); ferr != nil {
		return nil, ferr
	}
	j.Args = bytes.Clone(j.Args) // the frame's buffer is reused
	if n, _, ferr = f.integer("attempt", true, 1); ferr != nil {
		return nil, ferr
	}
	j.Attempt = int(n)
	if n, _, ferr = f.integer("max_attempts", true, 1); ferr != nil {
		return nil, ferr
	}
	j.MaxAttempts = int(n)
	if j.Queue, _, ferr = f.str("queue", true); ferr != nil {
		return nil, ferr
	}
	if j.Deadline, ferr = f.optTime("deadline"); ferr != nil {
		return nil, ferr
	}
	if j.Traceparent, ferr = f.optString("traceparent"); ferr != nil {
		return nil, ferr
	}
	if j.WorkerID, ferr = f.optString("worker_id"); ferr != nil {
		return nil, ferr
	}
	if j.ScheduledAt, ferr = f.optTime("scheduled_at"); ferr != nil {
		return nil, ferr
	}
	if j.CreatedAt, ferr = f.optTime("created_at"); ferr != nil {
		return nil, ferr
	}
	return &j, nil
}

func decodeResult(f fields) (Message, *FrameError) {
	var r Result
	var ferr *FrameError
	if r.ID, ferr = f.nonEmpty("id"); ferr != nil {
		return nil, ferr
	}
	status, ferr := f.status()
	if ferr != nil {
		return nil, ferr
	}
	r.Status = Status(status)
	switch r.Status {
	case StatusDone:
		if raw, ok := f.get("result"); ok && kindOf(raw) != 'n' {
			r.Result = bytes.Clone(raw) // the frame's buffer is reused
		}
	case StatusFailed:
		raw, ferr := f.value("error", true, '{', "object")
		if ferr != nil {
			return nil, ferr
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, &FrameError{Code: CodeInvalidJSON, Detail: err.Error()}
		}
		e := fields{m: m, prefix: "error."}
		re := ResultError{Retryable: true}
		if re.Type, _, ferr = e.str("type", true); ferr != nil {
			return nil, ferr
		}
		if re.Message, _, ferr = e.str("message", true); ferr != nil {
			return nil, ferr
		}
		if re.Traceback, ferr = e.optString("traceback"); ferr != nil {
			return nil, ferr
		}
		if b, ok, ferr := e.boolean("retryable", false); ferr != nil {
			return nil, ferr
		} else if ok {
			re.Retryable = b
		}
		if reason, ferr := e.optString("reason"); ferr != nil {
			return nil, ferr
		} else if reason != nil {
			if ErrorReason(*reason) != ErrorReasonInvalidArguments {
				return nil, &FrameError{Code: CodeInvalidValue, Field: "error.reason",
					Detail: strconv.Quote(*reason) + " is not invalid_arguments"}
			}
			re.Reason = ErrorReasonInvalidArguments
		}
		r.Error = &re
	case StatusSnooze:
		if r.Seconds, ferr = f.seconds(); ferr != nil {
			return nil, ferr
		}
		if r.Reason, ferr = f.optString("reason"); ferr != nil {
			return nil, ferr
		}
	case StatusCancelled:
	default:
		return nil, &FrameError{Code: CodeInvalidValue, Field: "status",
			Detail: strconv.Quote(status) + " is not one of done, failed, snooze, cancelled"}
	}
	return &r, nil
}

func decodeCancel(f fields) (Message, *FrameError) {
	id, _, ferr := f.str("id", true)
	if ferr != nil {
		return nil, ferr
	}
	reason, _, ferr := f.str("reason", true)
	if ferr != nil {
		return nil, ferr
	}
	switch r := CancelReason(reason); r {
	case ReasonJobTimeout, ReasonShutdownTimeout, ReasonUser:
		return &Cancel{ID: id, Reason: r}, nil
	}
	return nil, &FrameError{Code: CodeInvalidValue, Field: "reason",
		Detail: strconv.Quote(reason) + " is not one of job_timeout, shutdown_timeout, user"}
}

func decodeEnqueue(f fields) (Message, *FrameError) {
	var e Enqueue
	var ferr *FrameError
	if e.Parent, ferr = f.nonEmpty("parent"); ferr != nil {
		return nil, ferr
	}
	id, _, ferr := f.str("id", true)
	if ferr != nil {
		return nil, ferr
	}
	if !IsCanonicalUUID(id) {
		return nil, &FrameError{Code: CodeInvalidValue, Field: "id",
			Detail: strconv.Quote(id) + " is not a lower-case UUID (8-4-4-4-12 hex digits)"}
	}
	e.ID = id
	if e.Name, ferr = f.nonEmpty("name"); ferr != nil {
		return nil, ferr
	}
	if e.Args, ferr = f.value("args", true, '{', "object"); ferr != nil {
		return nil, ferr
	}
	e.Args = bytes.Clone(e.Args) // the frame's buffer is reused
	if e.Queue, ferr = f.optNonEmpty("queue"); ferr != nil {
		return nil, ferr
	}
	if e.Priority, ferr = f.optInt("priority", -maxSafeInt); ferr != nil {
		return nil, ferr
	}
	if e.MaxAttempts, ferr = f.optInt("max_attempts", 1); ferr != nil {
		return nil, ferr
	}
	if raw, ferr := f.value("delay", false, '0', "number"); ferr != nil {
		return nil, ferr
	} else if raw != nil {
		d, ferr := nonNegative("delay", raw)
		if ferr != nil {
			return nil, ferr
		}
		e.Delay = &d
	}
	if e.DedupKey, ferr = f.optNonEmpty("dedup_key"); ferr != nil {
		return nil, ferr
	}
	if e.Unique, ferr = f.optBool("unique"); ferr != nil {
		return nil, ferr
	}
	if e.Immediate, ferr = f.optBool("immediate"); ferr != nil {
		return nil, ferr
	}
	return &e, nil
}

func decodeEnqueued(f fields) (Message, *FrameError) {
	var e Enqueued
	var ferr *FrameError
	if e.ID, ferr = f.nonEmpty("id"); ferr != nil {
		return nil, ferr
	}
	if e.JobID, ferr = f.optString("job_id"); ferr != nil {
		return nil, ferr
	}
	raw, ferr := f.value("error", false, '{', "object")
	if ferr != nil || raw == nil {
		return &e, ferr
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, &FrameError{Code: CodeInvalidJSON, Detail: err.Error()}
	}
	ef := fields{m: m, prefix: "error."}
	code, _, ferr := ef.str("code", true)
	if ferr != nil {
		return nil, ferr
	}
	switch c := EnqueueErrorCode(code); c {
	case EnqueueInvalid, EnqueueCap, EnqueueParent, EnqueueUnavailable:
	default:
		return nil, &FrameError{Code: CodeInvalidValue, Field: "error.code",
			Detail: strconv.Quote(code) + " is not one of invalid, cap, parent, unavailable"}
	}
	msg, _, ferr := ef.str("message", true)
	if ferr != nil {
		return nil, ferr
	}
	e.Error = &EnqueuedError{Code: EnqueueErrorCode(code), Message: msg}
	return &e, nil
}

// IsCanonicalUUID reports whether s is a UUID in its canonical lower-case text form,
// 8-4-4-4-12 hex digits.
func IsCanonicalUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
				return false
			}
		}
	}
	return true
}

// fields reads the members of one JSON object, from m or, when m is nil,
// from kv (split in place by splitObject); prefix is the path of nested
// objects.
type fields struct {
	m      map[string]json.RawMessage
	kv     []member
	prefix string
}

// member is one member of an object split in place: its key (without
// quotes, holding no escape) and its raw value, both slices of the frame.
type member struct{ key, value []byte }

// get returns a member's raw value. Of repeated keys the last one counts,
// as encoding/json does when it fills a map.
func (f fields) get(name string) (json.RawMessage, bool) {
	if f.m != nil {
		raw, ok := f.m[name]
		return raw, ok
	}
	for i := len(f.kv) - 1; i >= 0; i-- {
		if string(f.kv[i].key) == name {
			return f.kv[i].value, true
		}
	}
	return nil, false
}

// maxSplitMembers bounds the members splitObject returns; a frame with
// more (no frame of the protocol has) takes the general path.
const maxSplitMembers = 16

// splitObject splits b, which scanJSON accepted, into its top-level
// members when it is an object of at most maxSplitMembers members whose
// keys hold no escape, appended to members (the caller's room for
// maxSplitMembers); false otherwise (the caller then decodes with
// encoding/json).
func splitObject(b []byte, members []member) ([]member, bool) {
	i := skipSpace(b, 0)
	if i == len(b) || b[i] != '{' {
		return nil, false
	}
	i = skipSpace(b, i+1)
	if b[i] == '}' {
		return members, true
	}
	for {
		// b[i] is the key's opening quote (b is valid JSON).
		end, _ := scanString(b, i)
		key := b[i+1 : end-1]
		if bytes.IndexByte(key, '\\') >= 0 || len(members) == maxSplitMembers {
			return nil, false
		}
		i = skipSpace(b, skipSpace(b, end)+1) // past the ':'
		end = skipValue(b, i)
		members = append(members, member{key: key, value: b[i:end]})
		i = skipSpace(b, end)
		if b[i] == '}' {
			return members, true
		}
		i = skipSpace(b, i+1) // past the ','
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipValue returns the index after the valid JSON value starting at b[i].
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		end, _ := scanString(b, i)
		return end
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				end, _ := scanString(b, i)
				i = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
		}
		return i
	}
	for i < len(b) {
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i
		}
		i++
	}
	return i
}

// value returns the raw value of a field whose JSON kind must be kind (see kindOf); want
// names the expected type in the error. A missing required field is missing_field; a missing or null
// optional field returns nil; null for a required field is wrong_type.
func (f fields) value(name string, required bool, kind byte, want string) (json.RawMessage, *FrameError) {
	raw, ok := f.get(name)
	if !ok || (!required && kindOf(raw) == 'n') {
		if required {
			return nil, &FrameError{Code: CodeMissingField, Field: f.prefix + name, Detail: "required field is missing"}
		}
		return nil, nil
	}
	if kindOf(raw) != kind {
		return nil, wrongType(f.prefix+name, want, raw)
	}
	return raw, nil
}

func (f fields) str(name string, required bool) (string, bool, *FrameError) {
	raw, ferr := f.value(name, required, '"', "string")
	if raw == nil {
		return "", false, ferr
	}
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1 : len(raw)-1]), true, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false, &FrameError{Code: CodeInvalidJSON, Detail: err.Error()}
	}
	return s, true, nil
}

// status is the result's status. Each of the four a result may have is
// returned as its constant (one string made for every result was one of
// the sidecar's few allocations a job); any other text as str reads it.
func (f fields) status() (string, *FrameError) {
	raw, ferr := f.value("status", true, '"', "string")
	if raw == nil {
		return "", ferr
	}
	switch string(raw[1 : len(raw)-1]) {
	case string(StatusDone):
		return string(StatusDone), nil
	case string(StatusFailed):
		return string(StatusFailed), nil
	case string(StatusSnooze):
		return string(StatusSnooze), nil
	case string(StatusCancelled):
		return string(StatusCancelled), nil
	}
	s, _, ferr := f.str("status", true)
	return s, ferr
}

func (f fields) nonEmpty(name string) (string, *FrameError) {
	s, _, ferr := f.str(name, true)
	if ferr == nil && s == "" {
		ferr = &FrameError{Code: CodeInvalidValue, Field: f.prefix + name, Detail: "must not be empty"}
	}
	return s, ferr
}

func (f fields) optString(name string) (*string, *FrameError) {
	s, ok, ferr := f.str(name, false)
	if !ok {
		return nil, ferr
	}
	return &s, nil
}

func (f fields) optNonEmpty(name string) (*string, *FrameError) {
	s, ferr := f.optString(name)
	if ferr == nil && s != nil && *s == "" {
		return nil, &FrameError{Code: CodeInvalidValue, Field: f.prefix + name, Detail: "must not be empty"}
	}
	return s, ferr
}

func (f fields) optInt(name string, min int64) (*int64, *FrameError) {
	n, ok, ferr := f.integer(name, false, min)
	if !ok {
		return nil, ferr
	}
	return &n, nil
}

func (f fields) optBool(name string) (*bool, *FrameError) {
	b, ok, ferr := f.boolean(name, false)
	if !ok {
		return nil, ferr
	}
	return &b, nil
}

// optTime reads an optional epoch-milliseconds int (any sign).
func (f fields) optTime(name string) (*int64, *FrameError) {
	n, ok, ferr := f.integer(name, false, -maxSafeInt)
	if !ok {
		return nil, ferr
	}
	return &n, nil
}

func (f fields) boolean(name string, required bool) (bool, bool, *FrameError) {
	raw, ferr := f.value(name, required, 't', "bool")
	if raw == nil {
		return false, false, ferr
	}
	return raw[0] == 't', true, nil
}

// integer reads an int: a number without fraction or exponent within ±(2^53−1), and ≥ min.
func (f fields) integer(name string, required bool, min int64) (int64, bool, *FrameError) {
	raw, ferr := f.value(name, required, '0', "int")
	if raw == nil {
		return 0, false, ferr
	}
	if bytes.ContainsAny(raw, ".eE") {
		return 0, false, wrongType(f.prefix+name, "int", raw)
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil || n > maxSafeInt || n < -maxSafeInt {
		return 0, false, &FrameError{Code: CodeInvalidValue, Field: f.prefix + name,
			Detail: string(raw) + " is outside ±(2^53−1)"}
	}
	if n < min {
		return 0, false, &FrameError{Code: CodeInvalidValue, Field: f.prefix + name,
			Detail: "must be ≥ " + strconv.FormatInt(min, 10) + ", got " + string(raw)}
	}
	return n, true, nil
}

// seconds reads the snooze result's required seconds: a finite number ≥ 0.
func (f fields) seconds() (float64, *FrameError) {
	raw, ferr := f.value("seconds", true, '0', "number")
	if ferr != nil {
		return 0, ferr
	}
	return nonNegative("seconds", raw)
}

// nonNegative reads a number field's raw value: finite and ≥ 0.
func nonNegative(field string, raw json.RawMessage) (float64, *FrameError) {
	s, err := strconv.ParseFloat(string(raw), 64)
	if err != nil || math.IsInf(s, 0) {
		return 0, &FrameError{Code: CodeInvalidValue, Field: field, Detail: string(raw) + " is out of range"}
	}
	if s < 0 {
		return 0, &FrameError{Code: CodeInvalidValue, Field: field, Detail: "must be ≥ 0, got " + string(raw)}
	}
	return s, nil
}

// kindOf classifies a raw JSON value by its first byte: '"' string, '{' object, '['
// array, 't' bool, 'n' null, '0' number.
func kindOf(raw json.RawMessage) byte {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if len(raw) == 0 {
		return 0
	}
	switch c := raw[0]; c {
	case '"', '{', '[', 'n':
		return c
	case 't', 'f':
		return 't'
	}
	return '0'
}

var kindNames = map[byte]string{'"': "string", '{': "object", '[': "array", 't': "bool", 'n': "null", '0': "number"}

func wrongType(field, want string, raw json.RawMessage) *FrameError {
	got := kindNames[kindOf(raw)]
	if got == "number" || got == "bool" {
		got += " " + string(raw)
	}
	return &FrameError{Code: CodeWrongType, Field: field, Detail: "want " + want + ", got " + got}
}
