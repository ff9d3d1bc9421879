package protocol

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/require"
)

// step is what one Decoder.Decode call must return: a message (as its canonical JSON), a
// frame error code, or a plain error.
type step struct {
	msg  string
	code Code
	err  error
}

func TestDecoderStream(t *testing.T) {
	ping := func(n string) string { return `{"type":"ping","seq":` + n + `}` }
	big := `{"type":"result","id":"j1","status":"done","result":"` + strings.Repeat("x", 200_000) + `"}`
	tests := []struct {
		name  string
		input string
		limit int
		steps []step
	}{
		{"empty input", "", 0, []step{{err: io.EOF}}},
		{"multiple frames", ping("1") + "\n" + ping("2") + "\n" + `{"type":"shutdown"}` + "\n", 0,
			[]step{{msg: ping("1")}, {msg: ping("2")}, {msg: `{"type":"shutdown"}`}, {err: io.EOF}}},
		{"CRLF line endings", ping("1") + "\r\n" + ping("2") + "\r\n", 0,
			[]step{{msg: ping("1")}, {msg: ping("2")}, {err: io.EOF}}},
		{"empty lines are skipped", "\n\n" + ping("1") + "\n\r\n\n" + ping("2") + "\n\n", 0,
			[]step{{msg: ping("1")}, {msg: ping("2")}, {err: io.EOF}}},
		{"a bad frame does not stop the stream", "print output\n" + ping("1") + "\n", 0,
			[]step{{code: CodeInvalidJSON}, {msg: ping("1")}, {err: io.EOF}}},
		{"oversize then recovery", ping("123456789") + "\n" + ping("2") + "\n", 23,
			[]step{{code: CodeOversize}, {msg: ping("2")}, {err: io.EOF}}},
		{"oversize far beyond the read buffer then recovery", big + "\n" + ping("3") + "\n", 1000,
			[]step{{code: CodeOversize}, {msg: ping("3")}, {err: io.EOF}}},
		{"large frame under the limit spanning buffers", big + "\n", 0,
			[]step{{msg: big}, {err: io.EOF}}},
		{"frame exactly at the limit with CRLF", ping("1") + "\r\n", 23,
			[]step{{msg: ping("1")}, {err: io.EOF}}},
		{"frame one over the limit with CRLF", ping("12") + "\r\n", 23,
			[]step{{code: CodeOversize}, {err: io.EOF}}},
		{"EOF mid-frame", ping("1") + "\n" + `{"type":"pi`, 0,
			[]step{{msg: ping("1")}, {code: CodeTruncated}, {err: io.EOF}}},
		{"last frame without newline is truncated", ping("1"), 0,
			[]step{{code: CodeTruncated}, {err: io.EOF}}},
		{"EOF mid-frame over the limit", strings.Repeat("x", 100), 10,
			[]step{{code: CodeOversize}, {err: io.EOF}}},
	}
	for _, tt := range tests {
		for _, reader := range []struct {
			name string
			wrap func(io.Reader) io.Reader
		}{
			{"whole", func(r io.Reader) io.Reader { return r }},
			{"one byte at a time", iotest.OneByteReader},
		} {
			t.Run(tt.name+"/"+reader.name, func(t *testing.T) {
				d := NewDecoder(reader.wrap(strings.NewReader(tt.input)))
				if tt.limit > 0 {
					d.SetMaxFrameBytes(tt.limit)
				}
				for i, want := range tt.steps {
					m, err := d.Decode()
					switch {
					case want.msg != "":
						require.NoError(t, err, "step %d", i)
						got, merr := Marshal(m)
						require.NoError(t, merr)
						require.Equal(t, want.msg, string(got), "step %d", i)
					case want.code != "":
						var fe *FrameError
						require.ErrorAs(t, err, &fe, "step %d", i)
						require.Equal(t, want.code, fe.Code, "step %d: %v", i, err)
						require.LessOrEqual(t, len(fe.Quote), QuoteBytes)
						if want.code == CodeOversize {
							require.Equal(t, d.max, fe.Limit)
							require.Greater(t, fe.Size, fe.Limit)
						}
						if want.code == CodeTruncated {
							require.ErrorIs(t, err, io.ErrUnexpectedEOF)
						}
					default:
						require.ErrorIs(t, err, want.err, "step %d", i)
					}
				}
			})
		}
	}
}

func TestDecoderOversizeKeepsMemoryBounded(t *testing.T) {
	// 64 MiB of one line, limit 1 KiB: the decoder must not keep more than the limit.
	const n = 64 << 20
	r := io.MultiReader(&repeatReader{b: 'x', n: n}, strings.NewReader("\n{\"type\":\"shutdown\"}\n"))
	d := NewDecoder(r)
	d.SetMaxFrameBytes(1024)
	_, err := d.Decode()
	var fe *FrameError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, CodeOversize, fe.Code)
	require.Equal(t, n, fe.Size)
	require.LessOrEqual(t, cap(d.line), 64<<10, "line buffer grew beyond the limit")
	m, err := d.Decode()
	require.NoError(t, err)
	require.IsType(t, &Shutdown{}, m)
}

type repeatReader struct {
	b byte
	n int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, io.EOF
	}
	k := min(len(p), r.n)
	for i := range p[:k] {
		p[i] = r.b
	}
	r.n -= k
	return k, nil
}

func TestDecoderReaderError(t *testing.T) {
	boom := errors.New("boom")
	d := NewDecoder(iotest.ErrReader(boom))
	_, err := d.Decode()
	require.ErrorIs(t, err, boom)
}

func TestEncoderRejectsUndecodableMessages(t *testing.T) {
	for name, m := range map[string]Message{
		"nil":                nil,
		"failed without err": &Result{ID: "j1", Status: StatusFailed},
		"args not an object": &Job{ID: "j1", Name: "n", Args: []byte(`[1]`), Attempt: 1, MaxAttempts: 1},
		"args invalid json":  &Job{ID: "j1", Name: "n", Args: []byte(`{"a":`), Attempt: 1, MaxAttempts: 1},
		"result invalid":     &Result{ID: "j1", Status: StatusDone, Result: []byte(`{`)},
	} {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			require.Error(t, NewEncoder(&buf).Encode(m))
			require.Zero(t, buf.Len(), "nothing written")
		})
	}
}

func TestEncoderDetails(t *testing.T) {
	tp := "00-abc-01"
	for _, tt := range []struct {
		m    Message
		want string
	}{
		{&Job{ID: "j1", Name: "n", Attempt: 1, MaxAttempts: 1, Queue: "q", Traceparent: &tp},
			`{"type":"job","id":"j1","name":"n","args":{},"attempt":1,"max_attempts":1,"queue":"q","traceparent":"00-abc-01"}`},
		{&Job{ID: "j1", Name: "n", Args: []byte(" {\n \"b\" : 1, \"a\" : [ 1 , 2 ] }\n"), Attempt: 1, MaxAttempts: 1, Queue: "q"},
			`{"type":"job","id":"j1","name":"n","args":{"b":1,"a":[1,2]},"attempt":1,"max_attempts":1,"queue":"q"}`},
		{&Result{ID: "j1", Status: StatusDone, Result: []byte(" null ")}, `{"type":"result","id":"j1","status":"done"}`},
		{&Result{ID: "j1", Status: StatusSnooze, Seconds: 1e-7}, `{"type":"result","id":"j1","status":"snooze","seconds":1e-7}`},
		{&Result{ID: "j1", Status: StatusSnooze, Seconds: 1e21}, `{"type":"result","id":"j1","status":"snooze","seconds":1e+21}`},
		{&Result{ID: "j1", Status: StatusCancelled, Error: &ResultError{Type: "E"}}, `{"type":"result","id":"j1","status":"cancelled"}`},
		{&Cancel{ID: "bad\xffutf8\x00\u2028", Reason: ReasonJobTimeout}, `{"type":"cancel","id":"bad\ufffdutf8\u0000` + "\u2028" + `","reason":"job_timeout"}`},
	} {
		got, err := Marshal(tt.m)
		require.NoError(t, err)
		require.Equal(t, tt.want, string(got))
		_, err = Decode(got)
		require.NoError(t, err, "encoded frame decodes")
	}
}

func TestTypeDirection(t *testing.T) {
	from := map[Type]bool{TypeHello: true, TypeResult: true, TypePong: true,
		TypeJob: false, TypeCancel: false, TypePing: false, TypeShutdown: false}
	for typ, want := range from {
		require.Equal(t, want, typ.FromHandler(), typ)
	}
}
