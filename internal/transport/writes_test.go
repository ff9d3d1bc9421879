package transport

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"

	"github.com/soniq-dev/soniq-sidecar/internal/config"
	"github.com/soniq-dev/soniq-sidecar/protocol"
)

// countingWriter records each Write it is given.
type countingWriter struct {
	bytes.Buffer
	writes int
}

func (w *countingWriter) Write(b []byte) (int, error) {
	w.writes++
	return w.Buffer.Write(b)
}

func (w *countingWriter) Close() error { return nil }

// The jobs a claim hands to one stdio process reach its stdin in one
// write; a job among them the handler could not read is reported alone
// and the others go.
func TestStdioWriterWritesAClaimsJobsAtOnce(t *testing.T) {
	out := make(chan protocol.Message, 4)
	ev := make(recorder, 16)
	l := &link{env: Env{MaxFrameBytes: protocol.DefaultMaxFrameBytes, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), WG: &sync.WaitGroup{}},
		h: &config.Handler{Name: "h"}, out: out, ev: ev, stderr: &stderrTail{}}
	batch := &Jobs{}
	for i := range 8 {
		args := json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))
		if i == 3 {
			args = json.RawMessage(`[3]`)
		}
		batch.Jobs = append(batch.Jobs, &protocol.Job{ID: fmt.Sprint("j", i), Name: "x", Args: args, Attempt: 1, MaxAttempts: 3, Queue: "q"})
	}
	out <- batch
	close(out)
	w := &countingWriter{}
	writeFrames(l, w)
	if w.writes != 1 {
		t.Fatalf("%d writes for one claim's jobs, want 1", w.writes)
	}
	dec := protocol.NewDecoder(&w.Buffer)
	var ids []string
	for {
		m, err := dec.Decode()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, m.(*protocol.Job).ID)
	}
	if fmt.Sprint(ids) != "[j0 j1 j2 j4 j5 j6 j7]" {
		t.Fatalf("frames written: %v", ids)
	}
	if len(ev) != 1 {
		t.Fatalf("%d reports, want the one unsendable job", len(ev))
	}
	if e, ok := (<-ev).(unsendableEvent); !ok || e.msg.(*protocol.Job).ID != "j3" {
		t.Fatalf("report %#v, want j3 unsendable", e)
	}
}
