package protocol

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
	"unsafe"
)

// FuzzSplitObjectAgreesWithUnmarshal: whenever the decoder splits a frame in
// place, it finds the members encoding/json finds (the last of repeated keys
// counting), and the frame decodes to the same message or the same error
// either way.
func FuzzSplitObjectAgreesWithUnmarshal(f *testing.F) {
	for _, v := range loadVectors(f) {
		f.Add(v.frame(f))
	}
	for _, s := range []string{
		`{}`, ` { } `, `{"a":1,"a":2}`, `{"type":"result","id":"x","status":"done","result":{"a":[1,"]}",{"b":"\"}"}]}}`,
		`{"type" : "ping" , "seq" : 3 }`, `{"a\"b":1}`, `{"a":"\u00e9\\"}`, `[{"type":"ping"}]`, `{"x":-1.5e3,"y":true,"z":null}`,
		`{"type":"result","id":"i","status":"failed","error":{"type":"E","message":"m","retryable":false}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		if !utf8.Valid(frame) || scanJSON(frame, maxFrameDepth, nil).kind != argsOK {
			return
		}
		members, ok := splitObject(frame, nil)
		if !ok {
			return
		}
		var top map[string]json.RawMessage
		if err := json.Unmarshal(frame, &top); err != nil {
			t.Fatalf("split %q, but encoding/json refuses it: %v", frame, err)
		}
		split := fields{kv: members}
		keys := map[string]bool{}
		for _, m := range members {
			keys[string(m.key)] = true
		}
		if len(keys) != len(top) {
			t.Fatalf("%q: %d distinct keys split, encoding/json finds %d", frame, len(keys), len(top))
		}
		for k, want := range top {
			got, ok := split.get(k)
			if !ok || string(got) != string(want) {
				t.Fatalf("%q: member %q is %q, encoding/json has %q", frame, k, got, want)
			}
		}
		m1, e1 := decodeFields(split)
		m2, e2 := decodeFields(fields{m: top})
		if !reflect.DeepEqual(m1, m2) || !reflect.DeepEqual(e1, e2) {
			t.Fatalf("%q: split decodes to %#v, %v; the map to %#v, %v", frame, m1, e1, m2, e2)
		}
	})
}

// The decoder's result and args outlive the frame: they must not alias its
// buffer, which the stream decoder reuses for the next line.
func TestDecodedRawValuesDoNotAliasTheFrame(t *testing.T) {
	for _, frame := range []string{
		`{"type":"result","id":"a","status":"done","result":{"k":1}}`,
		`{"type":"job","id":"a","name":"n","args":{"k":1},"attempt":1,"max_attempts":3,"queue":"q"}`,
	} {
		buf := []byte(frame)
		m, err := Decode(buf)
		if err != nil {
			t.Fatal(err)
		}
		for i := range buf {
			buf[i] = ' '
		}
		var raw json.RawMessage
		switch m := m.(type) {
		case *Result:
			raw = m.Result
		case *Job:
			raw = m.Args
		}
		if string(raw) != `{"k":1}` {
			t.Fatalf("%s: raw value changed with the frame's buffer: %q", frame, raw)
		}
	}
}

// A result's status is one of four words, decoded for every result the
// sidecar reads: it is the constant itself, not a string made for each
// frame. The escaped spelling of a word is the word too.
func TestResultStatusesAreTheirConstants(t *testing.T) {
	for _, tt := range []struct {
		frame string
		want  Status
	}{
		{`{"type":"result","id":"a","status":"done"}`, StatusDone},
		{`{"type":"result","id":"a","status":"failed","error":{"type":"E","message":"m"}}`, StatusFailed},
		{`{"type":"result","id":"a","status":"snooze","seconds":1}`, StatusSnooze},
		{`{"type":"result","id":"a","status":"cancelled"}`, StatusCancelled},
		{`{"type":"result","id":"a","status":"d\u006fne"}`, StatusDone},
	} {
		m, err := Decode([]byte(tt.frame))
		if err != nil {
			t.Fatalf("%s: %v", tt.frame, err)
		}
		got := m.(*Result).Status
		if got != tt.want {
			t.Fatalf("%s: status %q, want %q", tt.frame, got, tt.want)
		}
		if !strings.Contains(tt.frame, `\u`) && unsafe.StringData(string(got)) != unsafe.StringData(string(tt.want)) {
			t.Errorf("%s: the status is a string of its own, not the constant", tt.frame)
		}
	}
}

// FuzzAppendCompactAgreesWithCompact: for every value scanJSON accepts, the
// encoder's own compaction writes what json.Compact writes.
func FuzzAppendCompactAgreesWithCompact(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"a": 1, "b": [1, 2, {"c": "x y"}]}`, " {\n\t\"k\" : \"v \\\" \\\\ \" ,\r\n \"n\" : -1.5e+3 } ",
		`[true, false, null]`, `"plain"`, `{"a": "\u00e9\ud83d\ude00 ", "b": {}}`, `  12  `,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if scanJSON(raw, maxFrameDepth, nil).kind != argsOK {
			return
		}
		var want bytes.Buffer
		if err := json.Compact(&want, raw); err != nil {
			t.Fatalf("scanJSON accepts %q, json.Compact refuses it: %v", raw, err)
		}
		if got := appendCompact([]byte("x"), raw); string(got[1:]) != want.String() {
			t.Fatalf("%q: compacted to %q, json.Compact gives %q", raw, got[1:], want.String())
		}
	})
}
