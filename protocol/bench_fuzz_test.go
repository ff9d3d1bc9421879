package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"testing"

	"github.com/stretchr/testify/require"
)

var (
	benchTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	benchDeadline    = int64(1767225600000)
	benchJob         = &Job{
		ID: "0193a6f2-7c1e-7d3a-9a4b-2f1e8c3d5b6a", Name: "billing.invoices.send.v2",
		Args:    json.RawMessage(`{"invoice_id":"INV-2024-000123","customer":{"id":98765,"email":"ana@example.com","locale":"pt-BR"},"items":[{"sku":"X-1","qty":2,"price":9.5},{"sku":"Y-2","qty":1,"price":120}],"notify":true}`),
		Attempt: 1, MaxAttempts: 5, Queue: "billing", Deadline: &benchDeadline, Traceparent: &benchTraceparent,
	}
	benchResult = &Result{ID: "0193a6f2-7c1e-7d3a-9a4b-2f1e8c3d5b6a", Status: StatusDone,
		Result: json.RawMessage(`{"sent":true,"message_id":"<20240101.123@mail.example.com>","pages":3}`)}
)

func benchmarkEncode(b *testing.B, m Message) {
	e := NewEncoder(io.Discard)
	b.ReportAllocs()
	for b.Loop() {
		if err := e.Encode(m); err != nil {
			b.Fatal(err)
		}
	}
}

func benchmarkDecode(b *testing.B, m Message) {
	frame, err := Marshal(m)
	require.NoError(b, err)
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(frame); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeJob(b *testing.B)    { benchmarkEncode(b, benchJob) }
func BenchmarkEncodeResult(b *testing.B) { benchmarkEncode(b, benchResult) }
func BenchmarkDecodeJob(b *testing.B)    { benchmarkDecode(b, benchJob) }
func BenchmarkDecodeResult(b *testing.B) { benchmarkDecode(b, benchResult) }

// BenchmarkDecoderResult measures the stream path the supervisor uses for handler stdout.
func BenchmarkDecoderResult(b *testing.B) {
	frame, err := Marshal(benchResult)
	require.NoError(b, err)
	frame = append(frame, '\n')
	stream := bytes.Repeat(frame, 1024)
	r := bytes.NewReader(stream)
	d := NewDecoder(r)
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := d.Decode(); err != nil {
			if !errors.Is(err, io.EOF) {
				b.Fatal(err)
			}
			r.Reset(stream)
		}
	}
}

// FuzzDecode: decoding never panics, and a frame that decodes re-encodes to a frame that
// decodes to the same message.
func FuzzDecode(f *testing.F) {
	for _, v := range loadVectors(f) {
		f.Add(v.frame(f))
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		m, err := Decode(frame)
		if err != nil {
			var fe *FrameError
			if !errors.As(err, &fe) {
				t.Fatalf("error is not a *FrameError: %v", err)
			}
			if len(fe.Quote) > QuoteBytes {
				t.Fatalf("quote of %d bytes", len(fe.Quote))
			}
			return
		}
		enc, err := Marshal(m)
		if err != nil {
			t.Fatalf("decoded %q but cannot encode it: %v", frame, err)
		}
		m2, err := Decode(enc)
		if err != nil {
			t.Fatalf("re-encoded frame does not decode: %q -> %q: %v", frame, enc, err)
		}
		requireJSONEqual(t, canonical(t, m), canonical(t, m2), string(frame))
	})
}
