package session

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/soniq-dev/soniq-sidecar/protocol"
)

// TestCheckJobAgreesWithTheDecoder: checkJob applies the decoder's job
// rules to the job itself; for every job here it must accept exactly what
// encoding the job and decoding its frame accepts.
func TestCheckJobAgreesWithTheDecoder(t *testing.T) {
	const limit = 512
	i64 := func(v int64) *int64 { return &v }
	str := func(v string) *string { return &v }
	base := func() *protocol.Job {
		return &protocol.Job{ID: "j1", Name: "a", Args: json.RawMessage(`{"x":1}`), Attempt: 1, MaxAttempts: 3, Queue: "q"}
	}
	cases := map[string]func(j *protocol.Job){
		"valid":       func(*protocol.Job) {},
		"no args":     func(j *protocol.Job) { j.Args = nil },
		"empty queue": func(j *protocol.Job) { j.Queue = "" },
		"every optional field": func(j *protocol.Job) {
			j.Deadline, j.ScheduledAt, j.CreatedAt, j.Traceparent, j.WorkerID = i64(1), i64(-5), i64(0), str("00-ab"), str("w")
		},
		"unicode everywhere": func(j *protocol.Job) {
			j.Name, j.Queue, j.Args = "é名", "🚀", json.RawMessage(`{"k":"é\u00e9😀"}`)
		},
		"empty id":              func(j *protocol.Job) { j.ID = "" },
		"empty name":            func(j *protocol.Job) { j.Name = "" },
		"attempt 0":             func(j *protocol.Job) { j.Attempt = 0 },
		"attempt -1":            func(j *protocol.Job) { j.Attempt = -1 },
		"attempt 2^53-1":        func(j *protocol.Job) { j.Attempt = 1<<53 - 1 },
		"attempt 2^53":          func(j *protocol.Job) { j.Attempt = 1 << 53 },
		"max_attempts 0":        func(j *protocol.Job) { j.MaxAttempts = 0 },
		"max_attempts 2^53":     func(j *protocol.Job) { j.MaxAttempts = 1 << 53 },
		"deadline 2^53-1":       func(j *protocol.Job) { j.Deadline = i64(1<<53 - 1) },
		"deadline 2^53":         func(j *protocol.Job) { j.Deadline = i64(1 << 53) },
		"scheduled_at -2^53":    func(j *protocol.Job) { j.ScheduledAt = i64(-(1 << 53)) },
		"created_at 2^60":       func(j *protocol.Job) { j.CreatedAt = i64(1 << 60) },
		"args an array":         func(j *protocol.Job) { j.Args = json.RawMessage(`[1]`) },
		"args a string":         func(j *protocol.Job) { j.Args = json.RawMessage(`"x"`) },
		"args 1e400":            func(j *protocol.Job) { j.Args = json.RawMessage(`{"n":1e400}`) },
		"args NaN":              func(j *protocol.Job) { j.Args = json.RawMessage(`{"n":NaN}`) },
		"args lone surrogate":   func(j *protocol.Job) { j.Args = json.RawMessage(`{"s":"\ud800"}`) },
		"args surrogate pair":   func(j *protocol.Job) { j.Args = json.RawMessage(`{"s":"\ud83d\ude00"}`) },
		"args trailing value":   func(j *protocol.Job) { j.Args = json.RawMessage(`{} {}`) },
		"args not UTF-8":        func(j *protocol.Job) { j.Args = json.RawMessage("{\"s\":\"\xff\"}") },
		"name not UTF-8":        func(j *protocol.Job) { j.Name = "a\xff" },
		"traceparent not UTF-8": func(j *protocol.Job) { j.Traceparent = str("\xc3") },
		"args deep": func(j *protocol.Job) {
			j.Args = json.RawMessage(`{"a":` + strings.Repeat("[", 200) + strings.Repeat("]", 200) + `}`)
		},
		"frame just within limit":   func(j *protocol.Job) { j.Args = padTo(j, limit) },
		"frame one byte over limit": func(j *protocol.Job) { j.Args = padTo(j, limit+1) },
		"args over the limit":       func(j *protocol.Job) { j.Args = json.RawMessage(`{"p":"` + strings.Repeat("x", 2*limit) + `"}`) },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			j := base()
			mutate(j)
			_, viaDecoder := viaFrame(j, limit)
			_, direct := checkJob(j, limit)
			if (viaDecoder == nil) != (direct == nil) {
				t.Fatalf("decoder says %v, checkJob says %v", viaDecoder, direct)
			}
		})
	}
}

// padTo returns args that make j's frame exactly n bytes.
func padTo(j *protocol.Job, n int) json.RawMessage {
	probe := *j
	probe.Args = json.RawMessage(`{"p":""}`)
	frame, err := protocol.Marshal(&probe)
	if err != nil {
		panic(err)
	}
	return json.RawMessage(`{"p":"` + strings.Repeat("x", n-len(frame)) + `"}`)
}
