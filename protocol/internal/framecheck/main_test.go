package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func verdicts(t *testing.T, input string, maxFrame int) ([]map[string]any, int) {
	t.Helper()
	var out bytes.Buffer
	status := run(strings.NewReader(input), &out, maxFrame)
	var got []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if line == "" {
			continue
		}
		var v map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &v), line)
		got = append(got, v)
	}
	return got, status
}

func TestVerdicts(t *testing.T) {
	deep := `{"type":"result","id":"d","status":"done","result":` + strings.Repeat("[", 9999) + strings.Repeat("]", 9999) + "}\n"
	input := `{"type":"result","id":"a","status":"done","result":{"x":[1,2.5]}}` + "\n" +
		`{"type":"result","id":"b","status":"failed","error":{"type":"E","message":"m","retryable":false}}` + "\n" +
		`{"type":"pong","seq":7}` + "\n" +
		`{"type":"result","id":"big","status":"done","result":"` + strings.Repeat("x", 200) + `"}` + "\n" +
		deep +
		`{"type":"result","id":"c","status":"done","result":NaN}` + "\n" +
		`{"type":"pong","seq":8}` + "\n"
	got, status := verdicts(t, input, 1<<20)
	require.Equal(t, 1, status, "a refused frame ends the stream, as in the sidecar")
	require.Len(t, got, 6)
	require.Equal(t, map[string]any{"ok": true, "type": "result", "id": "a", "status": "done",
		"result": `{"x":[1,2.5]}`}, got[0])
	require.Equal(t, map[string]any{"type": "E", "message": "m", "retryable": false}, got[1]["error"])
	require.Equal(t, 7.0, got[2]["seq"])
	require.Equal(t, true, got[3]["ok"])
	require.Equal(t, true, got[4]["ok"], "a result nested to the frame's depth limit is accepted")
	require.Equal(t, false, got[5]["ok"])
	require.Equal(t, "invalid_json", got[5]["code"])

	// Over the limit: refused, and the next frame is read (the sidecar's decoder skips it).
	got, status = verdicts(t, `{"type":"result","id":"big","status":"done","result":"`+strings.Repeat("x", 200)+`"}`+"\n"+
		`{"type":"pong","seq":1}`+"\n", 100)
	require.Equal(t, 0, status)
	require.Len(t, got, 2)
	require.Equal(t, "oversize", got[0]["code"])
	require.Equal(t, true, got[1]["ok"])

	// One level deeper than the frame's limit is refused.
	got, _ = verdicts(t, `{"type":"result","id":"d","status":"done","result":`+strings.Repeat("[", 10000)+strings.Repeat("]", 10000)+"}\n", 1<<20)
	require.Equal(t, "invalid_json", got[0]["code"])
}
