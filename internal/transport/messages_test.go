package transport

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/soniq-dev/soniq-sidecar/internal/session"
	"github.com/soniq-dev/soniq-sidecar/protocol"
)

// What a session receives is reported as the transport's types, and what
// the queue carries is sent as the session's; the protocol's own messages
// pass through as they are.
func TestSessionMessagesAreTranslated(t *testing.T) {
	result := &protocol.Result{ID: "j", Status: protocol.StatusDone}
	ping := &protocol.Ping{Seq: 1}
	tests := []struct {
		name     string
		in, want protocol.Message
		conv     func(protocol.Message) protocol.Message
	}{
		{"draining received", &session.Draining{}, &Draining{}, fromSession},
		{"result received", result, result, fromSession},
		{"ack sent", &Ack{IDs: []string{"a", "b"}}, &session.Ack{IDs: []string{"a", "b"}}, toSession},
		{"empty ack sent", &Ack{}, &session.Ack{}, toSession},
		{"ping sent", ping, ping, toSession},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.conv(tt.in))
		})
	}
	assert.Equal(t, session.TypeDraining, (&Draining{}).Type())
	assert.Equal(t, session.TypeAck, (&Ack{}).Type())
}

func TestSessionHello(t *testing.T) {
	in := &session.Hello{
		Hello:   protocol.Hello{Protocol: 1, SDK: "python", PID: 7, Concurrency: 2},
		Running: []session.RunningJob{{ID: "r1", Name: "a"}, {ID: "r2", Name: "b"}},
		Kept:    []string{"k1"},
		Acks:    true,
		Batches: true,
	}
	got := sessionHello(in)
	assert.Equal(t, &SessionHello{
		Hello:   in.Hello,
		Running: []RunningJob{{ID: "r1", Name: "a"}, {ID: "r2", Name: "b"}},
		Kept:    []string{"k1"},
		Acks:    true,
	}, got)
	assert.Equal(t, protocol.TypeHello, got.Type())
	assert.Empty(t, sessionHello(&session.Hello{}).Running)
}
