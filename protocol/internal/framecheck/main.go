// Command framecheck reads a handler's stdout (NDJSON frames) on stdin and
// decodes it with the sidecar's own stream decoder, the one the stdio
// transport reads handlers with, under the frame limit given by
// -max-frame-bytes. For each frame it writes one JSON line to stdout: what
// the sidecar got from it, or why it refused it. The SDKs' property tests
// pipe the real handler process into it, so "a frame the sidecar accepts" is
// decided by the sidecar's code rather than by a copy of its rules. A
// result's value is given as its JSON text, so that a verdict line stays
// shallow however deep the value nests.
//
//	{"ok":true,"type":"result","id":"j1","status":"done","result":"{\"a\":1}"}
//	{"ok":true,"type":"result","id":"j2","status":"failed","error":{"type":"TypeError","message":"…","retryable":false}}
//	{"ok":true,"type":"pong","seq":3}
//	{"ok":false,"code":"invalid_json","error":"protocol: invalid_json: …"}
//
// After an oversize frame the decoder goes on with the next line, as it
// does in the sidecar; any other refusal would end the sidecar's reading
// of that process, and ends this command too (status 1). A clean end of
// input exits 0.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/soniq-dev/soniq-sidecar/protocol"
)

type verdict struct {
	OK     bool    `json:"ok"`
	Code   string  `json:"code,omitempty"`
	Error  any     `json:"error,omitempty"`
	Type   string  `json:"type,omitempty"`
	ID     string  `json:"id,omitempty"`
	Status string  `json:"status,omitempty"`
	Result *string `json:"result,omitempty"` // done: the value's JSON text; absent for null
	// Seconds is a snooze's; Seq a pong's.
	Seconds *float64 `json:"seconds,omitempty"`
	Reason  *string  `json:"reason,omitempty"`
	Seq     *int64   `json:"seq,omitempty"`
}

type resultError struct {
	Type      string  `json:"type"`
	Message   string  `json:"message"`
	Traceback *string `json:"traceback,omitempty"`
	Retryable bool    `json:"retryable"`
	Reason    string  `json:"reason,omitempty"`
}

func main() {
	maxFrame := flag.Int("max-frame-bytes", protocol.DefaultMaxFrameBytes, "the frame size limit")
	flag.Parse()
	os.Exit(run(os.Stdin, os.Stdout, *maxFrame))
}

func run(in io.Reader, out io.Writer, maxFrame int) int {
	dec := protocol.NewDecoder(in)
	dec.SetMaxFrameBytes(maxFrame)
	w := bufio.NewWriter(out)
	enc := json.NewEncoder(w)
	for {
		m, err := dec.Decode()
		if errors.Is(err, io.EOF) {
			_ = w.Flush()
			return 0
		}
		v := describe(m, err)
		if encErr := enc.Encode(v); encErr != nil {
			fmt.Fprintln(os.Stderr, "framecheck:", encErr)
			return 2
		}
		// One verdict per frame, as it comes: the test waits for each.
		if flushErr := w.Flush(); flushErr != nil {
			return 2
		}
		var ferr *protocol.FrameError
		if err != nil && (!errors.As(err, &ferr) || ferr.Code != protocol.CodeOversize) {
			return 1
		}
	}
}

func describe(m protocol.Message, err error) verdict {
	if err != nil {
		v := verdict{Error: err.Error()}
		var ferr *protocol.FrameError
		if errors.As(err, &ferr) {
			v.Code = string(ferr.Code)
		}
		return v
	}
	v := verdict{OK: true, Type: string(m.Type())}
	switch m := m.(type) {
	case *protocol.Result:
		v.ID, v.Status = m.ID, string(m.Status)
		if m.Result != nil {
			text := string(m.Result)
			v.Result = &text
		}
		if m.Error != nil {
			v.Error = resultError{Type: m.Error.Type, Message: m.Error.Message, Traceback: m.Error.Traceback,
				Retryable: m.Error.Retryable, Reason: string(m.Error.Reason)}
		}
		if m.Status == protocol.StatusSnooze {
			v.Seconds, v.Reason = &m.Seconds, m.Reason
		}
	case *protocol.Pong:
		v.Seq = &m.Seq
	}
	return v
}
