package session

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/soniq-dev/soniq-sidecar/protocol"
	"github.com/soniq-dev/soniq-sidecar/protocol/handlerpb"
)

// Every message from the handler is converted to the stdio frame it stands
// for and decoded with the frame limit (handlerpb's conversions), so the
// stream accepts exactly what stdio accepts.

// convertHello checks a hello as its stdio frame, its running jobs and its
// kept results.
func convertHello(h *handlerpb.Hello, maxFrame int) (*Hello, error) {
	ph, err := h.ToProtocol(maxFrame)
	if err != nil {
		return nil, err
	}
	out := &Hello{Hello: *ph}
	seen := make(map[string]bool, len(h.GetRunning()))
	for i, r := range h.GetRunning() {
		field := "running[" + strconv.Itoa(i) + "]"
		switch {
		case r.GetId() == "":
			return nil, fmt.Errorf("hello: %s.id is empty", field)
		case r.GetName() == "":
			return nil, fmt.Errorf("hello: %s.name is empty", field)
		case seen[r.GetId()]:
			return nil, fmt.Errorf("hello: %s.id %q is listed twice", field, r.GetId())
		}
		seen[r.GetId()] = true
		out.Running = append(out.Running, RunningJob{ID: r.GetId(), Name: r.GetName()})
	}
	for i, id := range h.GetKept() {
		field := "kept[" + strconv.Itoa(i) + "]"
		switch {
		case id == "":
			return nil, fmt.Errorf("hello: %s is empty", field)
		case seen[id]:
			return nil, fmt.Errorf("hello: %s %q is listed twice (or is also running)", field, id)
		}
		seen[id] = true
		out.Kept = append(out.Kept, id)
	}
	out.Acks = h.GetAcks()
	out.Batches = h.GetBatches()
	out.Features = h.GetFeatures()
	return out, nil
}

// convert checks one message after the hello.
func convert(m *handlerpb.HandlerMessage, maxFrame int) (protocol.Message, error) {
	switch m := m.GetMessage().(type) {
	case *handlerpb.HandlerMessage_Result:
		// A result names its job itself: its id is checked as the frame's.
		return m.Result.ToProtocol(m.Result.GetId(), maxFrame)
	case *handlerpb.HandlerMessage_Pong:
		msg, err := viaFrame(&protocol.Pong{Seq: m.Pong.GetSeq()}, maxFrame)
		if err != nil {
			return nil, fmt.Errorf("pong: %w", err)
		}
		return msg, nil
	case *handlerpb.HandlerMessage_Draining:
		return &Draining{}, nil
	case *handlerpb.HandlerMessage_Enqueue:
		e, err := m.Enqueue.ToProtocol(maxFrame)
		if err != nil {
			return nil, err
		}
		return e, nil
	case *handlerpb.HandlerMessage_Hello:
		return nil, fmt.Errorf("a second hello")
	case *handlerpb.HandlerMessage_Results:
		return nil, fmt.Errorf("a Results message (handled by Recv)")
	}
	return nil, fmt.Errorf("a HandlerMessage with no message set")
}

// viaFrame encodes m to its frame and decodes it with the frame limit.
func viaFrame(m protocol.Message, maxFrame int) (protocol.Message, error) {
	frame, err := protocol.Marshal(m)
	if err != nil {
		return nil, err
	}
	return protocol.DecodeLimit(frame, maxFrame)
}

// checkJob refuses a job the handler's decoder would refuse (its args not a
// JSON object, not UTF-8, over the frame limit, a field out of range):
// sent, it would end the session with a protocol error instead of failing
// the one job. It returns the size of the job's frame.
//
// It applies the decoder's job rules to the job itself rather than decoding
// its frame again: that decode (encoding/json) was a fifth of the
// sidecar's CPU on this path. TestCheckJobAgreesWithTheDecoder holds the
// two together.
func checkJob(j *protocol.Job, maxFrame int) (int, error) {
	frame, err := protocol.Marshal(j) // refuses args that are not a JSON object
	if err != nil {
		return 0, err
	}
	field, why := "", ""
	switch {
	case len(frame) > maxFrame:
		why = fmt.Sprintf("the job's frame is %d bytes, over the limit of %d", len(frame), maxFrame)
	case !utf8.Valid(frame):
		why = "the job's frame is not valid UTF-8"
	case j.ID == "":
		field, why = "id", "must not be empty"
	case j.Name == "":
		field, why = "name", "must not be empty"
	case j.Attempt < 1 || j.Attempt > maxSafeInt:
		field, why = "attempt", fmt.Sprintf("must be in 1..2^53-1, got %d", j.Attempt)
	case j.MaxAttempts < 1 || j.MaxAttempts > maxSafeInt:
		field, why = "max_attempts", fmt.Sprintf("must be in 1..2^53-1, got %d", j.MaxAttempts)
	}
	for _, t := range []struct {
		name string
		v    *int64
	}{{"deadline", j.Deadline}, {"scheduled_at", j.ScheduledAt}, {"created_at", j.CreatedAt}} {
		if why == "" && t.v != nil && (*t.v > maxSafeInt || *t.v < -maxSafeInt) {
			field, why = t.name, fmt.Sprintf("%d is outside ±(2^53−1)", *t.v)
		}
	}
	if why == "" && j.Args != nil {
		// The value rules only: the size was checked on the frame itself.
		if w := protocol.ArgsUnsendable(j.Args, math.MaxInt32); w != "" {
			field, why = "args", w
		}
	}
	switch {
	case why == "":
		return len(frame), nil
	case field == "":
		return 0, errors.New(why)
	}
	return 0, fmt.Errorf("%s: %s", field, why)
}

const maxSafeInt = 1<<53 - 1
