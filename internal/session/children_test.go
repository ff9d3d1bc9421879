package session

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/protocol"
	"github.com/soniq-dev/soniq-sidecar/protocol/handlerpb"
)

// TestSessionChildJobs: the Features message goes first after the hello, and
// only to a handler that reads it; an Enqueue arrives as the enqueue frame
// it stands for, an Enqueued leaves as its message.
func TestSessionChildJobs(t *testing.T) {
	const child = "3f2b8c1e-9d4a-4e6b-a1c7-5e2f0b9d8a34"
	for _, reads := range []bool{true, false} {
		t.Run(map[bool]string{true: "hello reads features", false: "an older hello"}[reads], func(t *testing.T) {
			got := make(chan *handlerpb.SidecarMessage, 8)
			path := serve(t, func(s stream) error {
				hello := goodHello()
				hello.GetHello().Features = reads
				hello.GetHello().Batches = true
				if err := s.Send(hello); err != nil {
					return err
				}
				if err := s.Send(&handlerpb.HandlerMessage{Message: &handlerpb.HandlerMessage_Enqueue{Enqueue: &handlerpb.Enqueue{
					Parent: "j0", Id: child, Name: "kid", ArgsJson: `{"n": 1}`, Immediate: ptr(true)}}}); err != nil {
					return err
				}
				for {
					m, err := s.Recv()
					if err != nil {
						return nil
					}
					got <- m
				}
			})
			s := open(t, path, Options{Features: []string{"enqueue"}})
			m, err := s.Recv()
			require.NoError(t, err)
			e, ok := m.(*protocol.Enqueue)
			require.True(t, ok, "got %T", m)
			assert.Equal(t, child, e.ID)
			assert.Equal(t, `{"n":1}`, string(e.Args))
			assert.True(t, e.IsImmediate())

			job := "j9"
			require.NoError(t, s.Send(&protocol.Enqueued{ID: child, JobID: &job}))
			var kinds []string
			want := 2
			if reads {
				want = 3
			}
			for len(kinds) < want {
				select {
				case m := <-got:
					switch {
					case m.GetFeatures() != nil:
						assert.Equal(t, []string{"enqueue"}, m.GetFeatures().GetNames())
						kinds = append(kinds, "features")
					case m.GetJobs() != nil:
						kinds = append(kinds, "jobs")
					case m.GetEnqueued() != nil:
						assert.Equal(t, child, m.GetEnqueued().GetId())
						assert.Equal(t, job, m.GetEnqueued().GetJobId())
						kinds = append(kinds, "enqueued")
					case m.GetAck() != nil:
					}
				case <-time.After(5 * time.Second):
					t.Fatalf("messages so far: %v", kinds)
				}
			}
			if reads {
				assert.Equal(t, []string{"features", "jobs", "enqueued"}, kinds, "features first, before anything else")
			} else {
				assert.Equal(t, []string{"jobs", "enqueued"}, kinds, "no Features to a handler that does not read it")
			}
		})
	}
}

func TestSessionRefusesABadEnqueue(t *testing.T) {
	path := serve(t, sendAfterHello(&handlerpb.HandlerMessage{Message: &handlerpb.HandlerMessage_Enqueue{Enqueue: &handlerpb.Enqueue{
		Parent: "j0", Id: "not-a-uuid", Name: "kid", ArgsJson: `{}`}}}))
	s := open(t, path, Options{})
	_, err := s.Recv()
	require.ErrorIs(t, err, ErrProtocol)
	assert.Contains(t, err.Error(), "id")
}
