package protocol

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

type vectorFile struct {
	Protocol int      `json:"protocol"`
	Vectors  []vector `json:"vectors"`
}

type vector struct {
	Name          string          `json:"name"`
	Frame         *string         `json:"frame"`
	FrameB64      *string         `json:"frame_b64"`
	MaxFrameBytes int             `json:"max_frame_bytes"`
	Valid         bool            `json:"valid"`
	Decoded       json.RawMessage `json:"decoded"`
	Encoded       *string         `json:"encoded"`
	Error         *struct {
		Code  string `json:"code"`
		Field string `json:"field"`
	} `json:"error"`
}

func (v vector) frame(t testing.TB) []byte {
	t.Helper()
	switch {
	case v.Frame != nil && v.FrameB64 == nil:
		return []byte(*v.Frame)
	case v.FrameB64 != nil && v.Frame == nil:
		b, err := base64.StdEncoding.DecodeString(*v.FrameB64)
		require.NoError(t, err)
		return b
	}
	t.Fatalf("vector %q: exactly one of frame and frame_b64 must be present", v.Name)
	return nil
}

func (v vector) limit() int {
	if v.MaxFrameBytes > 0 {
		return v.MaxFrameBytes
	}
	return DefaultMaxFrameBytes
}

func loadVectors(t testing.TB) []vector {
	t.Helper()
	data, err := os.ReadFile("testdata/vectors.json")
	require.NoError(t, err)
	var f vectorFile
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&f))
	require.Equal(t, Version, f.Protocol)
	return f.Vectors
}

func TestVectorsFile(t *testing.T) {
	vs := loadVectors(t)
	require.GreaterOrEqual(t, len(vs), 60)
	names := map[string]bool{}
	codes := map[string]int{}
	types := map[string]int{}
	for _, v := range vs {
		require.False(t, names[v.Name], "duplicate vector name %q", v.Name)
		names[v.Name] = true
		v.frame(t)
		if v.Valid {
			require.NotNil(t, v.Decoded, v.Name)
			require.Nil(t, v.Error, v.Name)
			var d struct{ Type string }
			require.NoError(t, json.Unmarshal(v.Decoded, &d))
			types[d.Type]++
		} else {
			require.NotNil(t, v.Error, v.Name)
			require.Nil(t, v.Decoded, v.Name)
			codes[v.Error.Code]++
			hasField := v.Error.Field != ""
			wantField := v.Error.Code == "missing_field" || v.Error.Code == "wrong_type" || v.Error.Code == "invalid_value"
			require.Equal(t, wantField, hasField, "%s: field present iff the code names one", v.Name)
		}
	}
	for _, c := range []Code{CodeOversize, CodeInvalidUTF8, CodeInvalidJSON, CodeNotObject, CodeUnknownType,
		CodeMissingField, CodeWrongType, CodeInvalidValue} {
		require.Positive(t, codes[string(c)], "no invalid vector with code %s", c)
	}
	for _, typ := range []Type{TypeHello, TypeJob, TypeResult, TypeCancel, TypePing, TypePong, TypeShutdown,
		TypeEnqueue, TypeEnqueued} {
		require.Positive(t, types[string(typ)], "no valid vector of type %s", typ)
	}
}

func TestVectorsDecode(t *testing.T) {
	for _, v := range loadVectors(t) {
		t.Run(v.Name, func(t *testing.T) {
			frame := v.frame(t)
			for _, via := range []string{"Decode", "Decoder"} {
				var m Message
				var err error
				if via == "Decode" {
					m, err = DecodeLimit(frame, v.limit())
				} else {
					d := NewDecoder(bytes.NewReader(append(append([]byte(nil), frame...), '\n')))
					d.SetMaxFrameBytes(v.limit())
					m, err = d.Decode()
				}
				if v.Valid {
					require.NoError(t, err, via)
					requireJSONEqual(t, v.Decoded, canonical(t, m), via)
					continue
				}
				var fe *FrameError
				require.True(t, errors.As(err, &fe), "%s: want *FrameError, got %v", via, err)
				require.Equal(t, v.Error.Code, string(fe.Code), "%s: %v", via, fe)
				require.Equal(t, v.Error.Field, fe.Field, "%s: %v", via, fe)
				require.LessOrEqual(t, len(fe.Quote), QuoteBytes)
				if fe.Field != "" {
					require.Contains(t, fe.Error(), fe.Field)
				}
			}
		})
	}
}

func TestVectorsEncode(t *testing.T) {
	for _, v := range loadVectors(t) {
		if !v.Valid || v.Encoded == nil {
			continue
		}
		t.Run(v.Name, func(t *testing.T) {
			m := fromDecoded(t, v.Decoded)
			got, err := Marshal(m)
			require.NoError(t, err)
			require.Equal(t, *v.Encoded, string(got))

			var buf bytes.Buffer
			require.NoError(t, NewEncoder(&buf).Encode(m))
			require.Equal(t, *v.Encoded+"\n", buf.String())
		})
	}
}

// fromDecoded builds the message a vector's `decoded` describes, without the decoder:
// `decoded` uses the wire field names, with nulls for absent fields.
func fromDecoded(t *testing.T, decoded json.RawMessage) Message {
	t.Helper()
	var d struct {
		Type          Type
		Protocol, PID int
		SDK           string
		Jobs          []struct {
			Name        string
			Cancellable bool
		}
		Concurrency     int
		SyncConcurrency *int `json:"sync_concurrency"`
		ID, Name, Queue string
		Args            json.RawMessage
		Attempt         int
		MaxAttempts     int `json:"max_attempts"`
		Deadline        *int64
		Traceparent     *string
		WorkerID        *string `json:"worker_id"`
		ScheduledAt     *int64  `json:"scheduled_at"`
		CreatedAt       *int64  `json:"created_at"`
		Status          Status
		Result          json.RawMessage
		Error           *struct {
			Type, Message string
			Traceback     *string
			Retryable     bool
			Reason        *string
		}
		Seconds *float64
		Reason  *string
		Seq     int64
	}
	switch typ := peekType(t, decoded); typ {
	case TypeEnqueue, TypeEnqueued:
		return fromDecodedEnqueue(t, typ, decoded)
	}
	require.NoError(t, json.Unmarshal(decoded, &d))
	switch d.Type {
	case TypeHello:
		h := &Hello{Protocol: d.Protocol, SDK: d.SDK, PID: d.PID, Concurrency: d.Concurrency}
		for _, j := range d.Jobs {
			h.Jobs = append(h.Jobs, HelloJob{Name: j.Name, Cancellable: j.Cancellable})
		}
		if d.SyncConcurrency != nil {
			h.SyncConcurrency = *d.SyncConcurrency
		}
		return h
	case TypeJob:
		return &Job{ID: d.ID, Name: d.Name, Args: d.Args, Attempt: d.Attempt, MaxAttempts: d.MaxAttempts,
			Queue: d.Queue, Deadline: d.Deadline, Traceparent: d.Traceparent,
			WorkerID: d.WorkerID, ScheduledAt: d.ScheduledAt, CreatedAt: d.CreatedAt}
	case TypeResult:
		r := &Result{ID: d.ID, Status: d.Status, Result: d.Result, Reason: d.Reason}
		if d.Error != nil {
			r.Error = &ResultError{Type: d.Error.Type, Message: d.Error.Message, Traceback: d.Error.Traceback,
				Retryable: d.Error.Retryable}
			if d.Error.Reason != nil {
				r.Error.Reason = ErrorReason(*d.Error.Reason)
			}
		}
		if d.Seconds != nil {
			r.Seconds = *d.Seconds
		}
		return r
	case TypeCancel:
		require.NotNil(t, d.Reason)
		return &Cancel{ID: d.ID, Reason: CancelReason(*d.Reason)}
	case TypePing:
		return &Ping{Seq: d.Seq}
	case TypePong:
		return &Pong{Seq: d.Seq}
	case TypeShutdown:
		return &Shutdown{}
	}
	t.Fatalf("decoded of unknown type %q", d.Type)
	return nil
}

func peekType(t *testing.T, decoded json.RawMessage) Type {
	t.Helper()
	var d struct{ Type Type }
	require.NoError(t, json.Unmarshal(decoded, &d))
	return d.Type
}

// fromDecodedEnqueue is fromDecoded for the child-job messages, whose optional fields
// are pointers.
func fromDecodedEnqueue(t *testing.T, typ Type, decoded json.RawMessage) Message {
	t.Helper()
	var d struct {
		Parent, ID, Name string
		Args             json.RawMessage
		Queue            *string
		Priority         *int64
		MaxAttempts      *int64 `json:"max_attempts"`
		Delay            *float64
		DedupKey         *string `json:"dedup_key"`
		Unique           *bool
		Immediate        *bool
		JobID            *string `json:"job_id"`
		Error            *struct{ Code, Message string }
	}
	require.NoError(t, json.Unmarshal(decoded, &d))
	if typ == TypeEnqueued {
		e := &Enqueued{ID: d.ID, JobID: d.JobID}
		if d.Error != nil {
			e.Error = &EnqueuedError{Code: EnqueueErrorCode(d.Error.Code), Message: d.Error.Message}
		}
		return e
	}
	return &Enqueue{Parent: d.Parent, ID: d.ID, Name: d.Name, Args: d.Args, Queue: d.Queue, Priority: d.Priority,
		MaxAttempts: d.MaxAttempts, Delay: d.Delay, DedupKey: d.DedupKey, Unique: d.Unique, Immediate: d.Immediate}
}

// canonical renders m as the vectors' `decoded` form: every field of its type, nulls for
// absent ones.
func canonical(t testing.TB, m Message) []byte {
	t.Helper()
	raw := func(r json.RawMessage) any {
		if r == nil {
			return nil
		}
		return r
	}
	var v any
	switch m := m.(type) {
	case *Hello:
		jobs := []any{}
		for _, j := range m.Jobs {
			jobs = append(jobs, map[string]any{"name": j.Name, "cancellable": j.Cancellable})
		}
		var sc any
		if m.SyncConcurrency != 0 {
			sc = m.SyncConcurrency
		}
		v = map[string]any{"type": "hello", "protocol": m.Protocol, "sdk": m.SDK, "pid": m.PID, "jobs": jobs,
			"concurrency": m.Concurrency, "sync_concurrency": sc}
	case *Job:
		v = map[string]any{"type": "job", "id": m.ID, "name": m.Name, "args": raw(m.Args), "attempt": m.Attempt,
			"max_attempts": m.MaxAttempts, "queue": m.Queue, "deadline": m.Deadline, "traceparent": m.Traceparent,
			"worker_id": m.WorkerID, "scheduled_at": m.ScheduledAt, "created_at": m.CreatedAt}
	case *Result:
		r := map[string]any{"type": "result", "id": m.ID, "status": m.Status, "result": raw(m.Result),
			"error": nil, "seconds": nil, "reason": m.Reason}
		if m.Error != nil {
			r["error"] = map[string]any{"type": m.Error.Type, "message": m.Error.Message,
				"traceback": m.Error.Traceback, "retryable": m.Error.Retryable, "reason": nil}
			if m.Error.Reason != "" {
				r["error"].(map[string]any)["reason"] = m.Error.Reason
			}
		}
		if m.Status == StatusSnooze {
			r["seconds"] = m.Seconds
		}
		v = r
	case *Cancel:
		v = map[string]any{"type": "cancel", "id": m.ID, "reason": m.Reason}
	case *Ping:
		v = map[string]any{"type": "ping", "seq": m.Seq}
	case *Pong:
		v = map[string]any{"type": "pong", "seq": m.Seq}
	case *Shutdown:
		v = map[string]any{"type": "shutdown"}
	case *Enqueue:
		v = map[string]any{"type": "enqueue", "parent": m.Parent, "id": m.ID, "name": m.Name, "args": raw(m.Args),
			"queue": m.Queue, "priority": m.Priority, "max_attempts": m.MaxAttempts, "delay": m.Delay,
			"dedup_key": m.DedupKey, "unique": m.Unique, "immediate": m.Immediate}
	case *Enqueued:
		var e any
		if m.Error != nil {
			e = map[string]any{"code": m.Error.Code, "message": m.Error.Message}
		}
		v = map[string]any{"type": "enqueued", "id": m.ID, "job_id": m.JobID, "error": e}
	default:
		t.Fatalf("unexpected message %T", m)
	}
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

// requireJSONEqual compares two JSON texts by value: objects as sets of members, numbers
// by numeric value (1e3 equals 1000), strings after unescaping.
func requireJSONEqual(t testing.TB, want, got []byte, msgAndArgs ...any) {
	t.Helper()
	w, g := parseJSON(t, want), parseJSON(t, got)
	if path, ok := jsonEqual(w, g, "$"); !ok {
		require.Failf(t, "JSON differs", "at %s\nwant %s\n got %s\n%v", path, want, got, fmt.Sprint(msgAndArgs...))
	}
}

func parseJSON(t testing.TB, b []byte) any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	require.NoError(t, d.Decode(&v))
	return v
}

func jsonEqual(a, b any, path string) (string, bool) {
	switch a := a.(type) {
	case map[string]any:
		bm, ok := b.(map[string]any)
		if !ok || len(a) != len(bm) {
			return path, false
		}
		for k, av := range a {
			bv, ok := bm[k]
			if !ok {
				return path + "." + k, false
			}
			if p, ok := jsonEqual(av, bv, path+"."+k); !ok {
				return p, false
			}
		}
		return "", true
	case []any:
		bs, ok := b.([]any)
		if !ok || len(a) != len(bs) {
			return path, false
		}
		for i := range a {
			if p, ok := jsonEqual(a[i], bs[i], fmt.Sprintf("%s[%d]", path, i)); !ok {
				return p, false
			}
		}
		return "", true
	case json.Number:
		bn, ok := b.(json.Number)
		if !ok {
			return path, false
		}
		if a == bn {
			return "", true
		}
		// Different literals of one value ("1e3" and "1000"): compare as float64, which is
		// exact for every number the vectors use (big.Rat would hang on "1e999999999").
		af, err1 := strconv.ParseFloat(string(a), 64)
		bf, err2 := strconv.ParseFloat(string(bn), 64)
		return path, err1 == nil && err2 == nil && af == bf
	default:
		return path, a == b
	}
}

func TestFrameErrorMessage(t *testing.T) {
	long := `{"type":"result","id":"j1","status":"failed","error":{"type":"E","message":"` +
		strings.Repeat("x", 300) + `"},"retryable":"no"}`
	_, err := Decode([]byte(strings.Replace(long, `"type":"E",`, ``, 1)))
	var fe *FrameError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, CodeMissingField, fe.Code)
	require.Equal(t, "error.type", fe.Field)
	require.Len(t, fe.Quote, QuoteBytes)
	msg := fe.Error()
	require.Contains(t, msg, "missing_field at error.type")
	require.Contains(t, msg, `"{\"type\":\"result\"`)
	require.Contains(t, msg, "(first 200 of")
	require.NotContains(t, msg, strings.Repeat("x", 200), "quotes at most 200 bytes")

	_, err = DecodeLimit([]byte(`{"type":"ping","seq":123456789}`), 16)
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "protocol: oversize: frame of 31 bytes exceeds the limit of 16 bytes; frame "+
		`"{\"type\":\"ping\",\"seq\":123456789}"`, fe.Error())

	_, err = Decode([]byte(`{"type":"ping","seq":1.5}`))
	require.EqualError(t, err, `protocol: wrong_type at seq: want int, got number 1.5; frame "{\"type\":\"ping\",\"seq\":1.5}"`)
}
