package session

import (
	"fmt"
	"strconv"

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
// JSON object, not UTF-8, over the frame limit): sent, it would end the
// session with a protocol error instead of failing the one job. It returns
// the size of the job's frame.
func checkJob(j *protocol.Job, maxFrame int) (int, error) {
	frame, err := protocol.Marshal(j)
	if err != nil {
		return 0, err
	}
	if _, err := protocol.DecodeLimit(frame, maxFrame); err != nil {
		return 0, err
	}
	return len(frame), nil
}
