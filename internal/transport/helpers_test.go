package transport

import (
	"fmt"
	"slices"
	"strings"

	"github.com/soniq-dev/soniq-sidecar/internal/config"
	"github.com/soniq-dev/soniq-sidecar/protocol"
)

// event is one report of a connection, as the tests record it: one type
// per Events method.
type event any

type (
	frameEvent         struct{ msg protocol.Message }
	protocolErrorEvent struct{ err error }
	exitEvent          struct{ err error }
	stdoutClosedEvent  struct{}
	unsendableEvent    struct {
		msg protocol.Message
		err error
	}
	writeFailedEvent struct{ err error }
	refusedEvent     struct{ err error }
)

// recorder is the Events of one test connection: every report goes to the
// channel, in order.
type recorder chan event

func (r recorder) Frame(m protocol.Message)                 { r <- frameEvent{msg: m} }
func (r recorder) ProtocolError(err error)                  { r <- protocolErrorEvent{err: err} }
func (r recorder) Unsendable(m protocol.Message, err error) { r <- unsendableEvent{msg: m, err: err} }
func (r recorder) WriteFailed(err error)                    { r <- writeFailedEvent{err: err} }
func (r recorder) StdoutClosed()                            { r <- stdoutClosedEvent{} }
func (r recorder) Refused(err error)                        { r <- refusedEvent{err: err} }
func (r recorder) Exited(err error)                         { r <- exitEvent{err: err} }

// helloAgrees is what the supervisor checks of a hello (its protocol
// version, and the same job names with the same cancellable as the
// manifest), for tests that want a transport to deliver it intact.
func helloAgrees(h *config.Handler, hello *protocol.Hello) error {
	if hello.Protocol != protocol.Version {
		return fmt.Errorf("protocol %d, want %d", hello.Protocol, protocol.Version)
	}
	var want, got []string
	for _, j := range h.Jobs {
		want = append(want, fmt.Sprintf("%s cancellable=%t", j.Name, j.Cancellable))
	}
	for _, j := range hello.Jobs {
		got = append(got, fmt.Sprintf("%s cancellable=%t", j.Name, j.Cancellable))
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(want, got) {
		return fmt.Errorf("hello jobs %s, manifest %s", strings.Join(got, ", "), strings.Join(want, ", "))
	}
	return nil
}
