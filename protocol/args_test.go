package protocol

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
)

// argsCases are args as a producer may have stored them, and what the claim
// check says: "" = sent, else a part of the refusal. What is refused is what
// the Python and Node SDKs refuse in a job frame (they exit with status 4,
// taking every job of the process with them) or what the encoder cannot
// write; what they accept, even if a value is rounded on the way (integers
// beyond 2^53 in JavaScript, 1e-400 to 0), is sent.
var argsCases = []struct {
	name, args, want string
}{
	{"typical", `{"user_id":12345,"email":"someone@example.com","amount":19.99,"tags":["a","b"],"ok":true,"x":null}`, ""},
	{"empty", `{}`, ""},
	{"whitespace everywhere", " \t\n{ \"a\" : [ 1 , { } , [ ] , \"\" ] , \"b\" : false }\r\n", ""},
	{"precision loss is accepted", `{"n":9007199254740993,"m":12345678901234567890}`, ""},
	{"underflow is accepted", `{"n":1e-400,"m":-1E-99999999999999999999}`, ""},
	{"largest double", `{"n":1.7976931348623157e308,"m":-1.7976931348623157E+308}`, ""},
	{"1e308 written long", `{"n":10e307,"m":0.001e311}`, ""},
	{"zero with a huge exponent", `{"n":0e99999,"m":0.000e400}`, ""},
	{"escapes", `{"s":"\"\\\/\b\f\n\r\t\u00e9\u0000\uFFFF"}`, ""},
	{"surrogate pair", `{"s":"\ud83d\ude00","\uD83D\uDE00":1}`, ""},
	{"non-ASCII UTF-8", "{\"s\":\"caf\u00e9 \u2028 \U0001F600\"}", ""},
	{"duplicate keys", `{"a":1,"a":2}`, ""},

	{"1e400", `{"big":1e400}`, "args.big: number 1e400 is out of range for a 64-bit float"},
	{"-2e308", `{"a":{"b":[0,-2e308]}}`, "args.a.b[1]: number -2e308 is out of range"},
	{"rounds up to infinity", `{"n":1.7976931348623159e308}`, "args.n: number 1.7976931348623159e308 is out of range"},
	{"huge exponent", `{"n":1e99999999999999999999}`, "number 1e99999999999999999999 is out of range"},
	{"fraction times a big exponent", `{"n":0.1e310}`, "number 0.1e310 is out of range"},
	{"401 digits (Postgres's 1e400)", `{"n":1` + strings.Repeat("0", 400) + `}`, "args.n: number 100000000000000000000000… (401 characters, about 1e+400) is out of range"},
	{"odd key in the path", `{"a b":{"\u00e9":[1e999]}}`, `args["a b"]["é"][0]: number 1e999`},
	{"lone high surrogate", `{"s":"\ud800"}`, `args.s: unpaired UTF-16 surrogate escape \ud800 at byte 6`},
	{"lone low surrogate", `{"s":["x","\uDC00"]}`, `args.s[1]: unpaired UTF-16 surrogate escape \uDC00`},
	{"pair in the wrong order", `{"s":"\udc00\ud800"}`, `unpaired UTF-16 surrogate escape \udc00`},
	{"high then not low", `{"s":"\ud800\u0041"}`, `unpaired UTF-16 surrogate escape \ud800`},
	{"surrogate in a key", `{"ok":1,"\ud800":1}`, `args (in a key): unpaired UTF-16 surrogate escape \ud800`},
	{"NaN", `{"x":NaN}`, "args.x: NaN and Infinity are not JSON (NaN at byte 5)"},
	{"Infinity", `{"x":[Infinity]}`, "args.x[0]: NaN and Infinity are not JSON"},
	{"-Infinity", `{"x":-Infinity}`, "args.x: NaN and Infinity are not JSON (-Infinity at byte 5)"},
	{"invalid UTF-8", "{\"s\":\"caf\xe9\"}", "args.s: invalid UTF-8 byte 0xe9 at byte 9"},
	{"UTF-8 encoded surrogate", "{\"s\":\"\xed\xa0\x80\"}", "args.s: invalid UTF-8 byte 0xed"},
	{"overlong UTF-8", "{\"s\":\"\xc0\xaf\"}", "args.s: invalid UTF-8 byte 0xc0"},
	{"not JSON", `{not json`, "args are not valid JSON: invalid character 'n' at byte 1, looking for an object key"},
	{"single quotes", `{'a':1}`, "invalid character '\\'' at byte 1, looking for an object key"},
	{"trailing comma", `{"a":1,}`, "invalid character '}' at byte 7, looking for an object key"},
	{"missing colon", `{"a" 1}`, "invalid character '1' at byte 5, looking for ':' after an object key"},
	{"missing comma", `{"a":[1 2]}`, "invalid character '2' at byte 8, looking for ',' or ']' after an array element (in args.a[0])"},
	{"leading zero", `{"a":01}`, "invalid character '1' at byte 6, looking for ',' or '}' after an object member (in args.a)"},
	{"bare fraction", `{"a":.5}`, "invalid character '.' at byte 5, looking for a value (in args.a)"},
	{"no fraction digits", `{"a":1.}`, "invalid character '}' at byte 7, looking for a digit after '.'"},
	{"no exponent digits", `{"a":1e+}`, "invalid character '}' at byte 8, looking for a digit in the exponent"},
	{"minus alone", `{"a":-}`, "invalid character '}' at byte 6, looking for a digit"},
	{"bad literal", `{"a":tru}`, "invalid character '}' at byte 8, looking for a value"},
	{"bad escape", `{"a":"\x"}`, `invalid character 'x' at byte 7, looking for an escape character after '\'`},
	{"bad hex", `{"a":"\u12G4"}`, `invalid character 'G' at byte 10, looking for 4 hex digits after \u`},
	{"raw newline in a string", "{\"a\":\"x\ny\"}", "raw control character byte 0x0a in a string at byte 7, which must be escaped (in args.a)"},
	{"truncated string", `{"a":"abc`, "args are not valid JSON: unexpected end at byte 9 (in args.a)"},
	{"truncated array", `{"a":[1,2`, "unexpected end at byte 9 (in args.a[1])"},
	{"truncated after key", `{"a"`, "unexpected end at byte 4"},
	{"truncated escape", `{"a":"\u12`, "unexpected end at byte 10"},
	{"data after the object", `{"a":1} x`, `data after the top-level value at byte 8: "x"`},
	{"two objects", `{"a":1}{"b":2}`, `data after the top-level value at byte 7: "{\"b\":2}"`},
}

func TestArgsUnsendableRefusesWhatHandlersCannotRead(t *testing.T) {
	for _, tc := range argsCases {
		t.Run(tc.name, func(t *testing.T) {
			got := ArgsUnsendable(json.RawMessage(tc.args), DefaultMaxFrameBytes)
			if tc.want == "" {
				assert.Empty(t, got)
				return
			}
			assert.Contains(t, got, tc.want)
			assert.True(t, utf8.ValidString(got), "the message is storable text: %q", got)
		})
	}
}

// jobFrame wraps args in a job frame as the encoder would write it.
func jobFrame(args []byte) []byte {
	return []byte(`{"type":"job","id":"j","name":"n","args":` + string(args) + `,"attempt":1,"max_attempts":1,"queue":"q"}`)
}

// FuzzArgsUnsendableAgreesWithTheDecoder checks the claim check against the
// protocol decoder, which applies the rules of the handlers' decoders (the
// conformance vectors hold all three to them): a value the check passes
// decodes inside a job frame, and a valid JSON value it refuses does not.
//
//	go test -run '^$' -fuzz FuzzArgsUnsendable ./protocol/
func FuzzArgsUnsendableAgreesWithTheDecoder(f *testing.F) {
	for _, tc := range argsCases {
		f.Add(tc.args)
	}
	f.Add(`[1,"a",{"b":null}]`)
	f.Add(`"\ud800"`)
	f.Add(`-0.0e-0`)
	f.Fuzz(func(t *testing.T, args string) {
		if strings.Count(args, "[")+strings.Count(args, "{") >= maxArgsDepth {
			return // the decoder has no depth limit of its own
		}
		f := scanJSON([]byte(args), maxArgsDepth, nil)
		if f.kind == argsOK {
			if !json.Valid([]byte(args)) || !utf8.ValidString(args) {
				t.Fatalf("passed %q, which is not valid JSON and UTF-8", args)
			}
		} else if !json.Valid([]byte(args)) || !utf8.ValidString(args) {
			return // refused, and the standard library agrees
		}
		// A valid JSON value: wrapping it cannot change the frame's shape.
		_, err := Decode(jobFrame([]byte(`{"v":` + args + `}`)))
		if f.kind == argsOK && err != nil {
			t.Fatalf("passed %q, which the decoder refuses: %v", args, err)
		}
		if f.kind != argsOK && err == nil {
			t.Fatalf("refused %q (%s), which the decoder accepts", args, f.message([]byte(args), "args", maxArgsDepth))
		}
	})
}

// typicalArgs is about 100 bytes, like most job args.
var typicalArgs = json.RawMessage(`{"user_id":12345,"email":"someone@example.com","amount":19.99,"currency":"EUR","tags":["a","b"],"ok":true}`)

// BenchmarkClaimArgsCheck is the claim check's cost per row.
//
//	go test -run '^$' -bench ClaimArgsCheck ./protocol/
func BenchmarkClaimArgsCheck(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(typicalArgs)))
	for b.Loop() {
		if !IsJSONObject(typicalArgs) || ArgsUnsendable(typicalArgs, DefaultMaxFrameBytes) != "" {
			b.Fatal("typical args refused")
		}
	}
}

func TestIsJSONObject(t *testing.T) {
	for in, want := range map[string]bool{`{}`: true, ` {"a":1}`: true, `[1]`: false, `"x"`: false, `null`: false, ``: false, "\n\t{": true} {
		assert.Equal(t, want, IsJSONObject([]byte(in)), "%q", in)
	}
}

func TestArgsUnsendable(t *testing.T) {
	deep := strings.Repeat(`{"a":`, maxArgsDepth+1) + "1" + strings.Repeat("}", maxArgsDepth+1)
	atLimit := strings.Repeat(`[`, maxArgsDepth) + strings.Repeat("]", maxArgsDepth)
	tests := []struct {
		name, args string
		max        int
		want       string
	}{
		{"small", `{"a":[1,{"b":2}]}`, 1 << 20, ""},
		{"brackets inside strings do not count", `{"s":"` + strings.Repeat("[{", 2000) + `\"]"}`, 1 << 20, ""},
		{"at the depth limit", atLimit, 1 << 20, ""},
		{"too deep", deep, 1 << 20, "nested deeper than 512 levels"},
		{"too large", `{"s":"` + strings.Repeat("x", 5000) + `"}`, 8192, "do not fit the protocol frame limit of 8192 bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := ArgsUnsendable([]byte(tc.args), tc.max)
			if tc.want == "" {
				assert.Empty(t, got)
			} else {
				assert.Contains(t, got, tc.want)
			}
		})
	}
}

// The decoder and the claim check are one rule: a value refused in args is
// refused in any frame, with the same words and the path to it.
func TestDecoderNamesTheFaultAsTheClaimCheckDoes(t *testing.T) {
	for _, tc := range []struct{ args, want string }{
		{`{"big":1e400}`, "frame.args.big: number 1e400 is out of range for a 64-bit float"},
		{`{"s":"\ud800x"}`, `frame.args.s: unpaired UTF-16 surrogate escape \ud800`},
	} {
		_, err := Decode(jobFrame([]byte(tc.args)))
		var fe *FrameError
		if assert.ErrorAs(t, err, &fe, tc.args) {
			assert.Equal(t, CodeInvalidJSON, fe.Code)
			assert.Contains(t, fe.Detail, tc.want)
		}
		assert.Contains(t, ArgsUnsendable([]byte(tc.args), DefaultMaxFrameBytes), strings.TrimPrefix(tc.want, "frame."))
	}
}
