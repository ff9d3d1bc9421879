package backends

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestArgsHashMatchesSoniq(t *testing.T) {
	// Expected digests are soniq.utils.hashing.compute_args_hash of the
	// same JSON, computed with CPython 3.11.
	tests := []struct{ args, want string }{
		{`{}`, "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"},
		{`{"b":2,"a":1}`, "43258cff783fe7036d8a43033f830adfc60ec037382473548ac742b888292777"},
		{`{"s":"héllo ☃ 😀","ctl":"\u0001\u007f\t\n"}`, "faf6b9c3713cfc2736292546fa8a4d29043048b8abb667407e5a276939f9487e"},
		{`{"f":1.0,"g":1e16,"h":1.5e-7,"i":0.0001,"j":123456789012345678901234567890,"k":-0,"l":1e22,"m":2.5,"n":100.0,"o":1E2}`,
			"1070909793445da97713e0bf7501b64cebf5d27f9493dd4c87c1d7d96d6eb0cf"},
		{`{ "a" : 1, "b" : 2 }`, "43258cff783fe7036d8a43033f830adfc60ec037382473548ac742b888292777"},
		{`{"s":"é€😀","t":"<&>"}`, "747318680f31648fbe3f7c2f8b9d82a2ec73982e075d2f4dd05022f7e55df884"},
		{`{"n":[1,2.5,null,true],"o":{"z":1,"y":"x"}}`, "eda17d69a9715d00adfb9df79fd704aa15563ec9e819167d25e4a83fb041c9e9"},
		{`{"nested":{"z":[1,{"y":null,"x":true}],"a":false}}`, "3432b65fa11165ae3b8a0840ea54c701c46544ce799f8612457b67fe9f8bd93f"},
	}
	for _, tc := range tests {
		t.Run(tc.args, func(t *testing.T) {
			got, err := ArgsHash(json.RawMessage(tc.args))
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
	for _, bad := range []string{`[1]`, `"x"`, `{`, `{} {}`, `{"a":`} {
		_, err := ArgsHash(json.RawMessage(bad))
		assert.Error(t, err, "args %s", bad)
	}
}

func TestPythonFloatRepr(t *testing.T) {
	tests := map[float64]string{
		1.0: "1.0", 1e16: "1e+16", 1.5e-7: "1.5e-07", 0.0001: "0.0001", 1e22: "1e+22", 2.5: "2.5",
		100.0: "100.0", 123.456: "123.456", 1e-5: "1e-05", 0.1: "0.1", 1234567890123456.0: "1234567890123456.0",
		12345678901234567.0: "1.2345678901234568e+16", 5e-324: "5e-324", -2.5: "-2.5",
	}
	for f, want := range tests {
		assert.Equal(t, want, pythonFloatRepr(f), "repr(%v)", f)
	}
}

func TestTruncateError(t *testing.T) {
	tests := []struct {
		name, in string
		wantLen  int
	}{
		{"short", "boom", 4},
		{"exact", strings.Repeat("a", MaxErrorBytes), MaxErrorBytes},
		{"ascii over", strings.Repeat("a", MaxErrorBytes+10), MaxErrorBytes},
		// 3-byte runes: 8192 is not a multiple of 3, so the cut backs off.
		{"splits a 2-byte rune", "a" + strings.Repeat("é", MaxErrorBytes/2), MaxErrorBytes - 1},
		{"splits a 4-byte rune", "ab" + strings.Repeat("😀", MaxErrorBytes/4), MaxErrorBytes - 2},
		{"multibyte over", strings.Repeat("☃", MaxErrorBytes), MaxErrorBytes - MaxErrorBytes%3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := TruncateError(tc.in)
			assert.Len(t, got, tc.wantLen)
			assert.True(t, utf8.ValidString(got))
		})
	}
	assert.Equal(t, "a\uFFFDb\uFFFD", TruncateError("a\x00b\xff"), "NUL and invalid UTF-8 are made storable")
}

func TestStatsCountKeepsTotalTheSum(t *testing.T) {
	var s Stats
	for status, n := range map[string]int64{"queued": 3, "processing": 1, "done": 5, "cancelled": 2, "dead_letter": 4, "failed": 9} {
		s.Count(status, n)
	}
	assert.Equal(t, Stats{Total: 15, Queued: 3, Processing: 1, Done: 5, DeadLetter: 4, Cancelled: 2}, s, "an unknown status (the old 'failed') counts nowhere")
}
