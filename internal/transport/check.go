package transport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/soniq-dev/soniq-sidecar/config"
	"github.com/soniq-dev/soniq-sidecar/internal/session"
	"github.com/soniq-dev/soniq-sidecar/protocol"
)

// Probed is what Probe saw of a handler.
type Probed struct {
	PID int    // the process's (or the last endpoint's) pid; 0 when unknown
	SDK string // what its hello says
	Err error  // why the handler must not be run; nil when it is fine
}

// Probe is `manifest check`'s start of a handler. For a handler the
// sidecar spawns it starts one process through the transport `run` uses
// (Start), waits for its hello within startup_timeout, hands it to check
// (the comparison with the manifest), and stops the process the way the
// supervisor stops an idle one. For an attach handler it opens a session
// with each endpoint (the literal paths and what the globs match now),
// checks each hello and ends the session, which leaves the handler running
// and waiting for the sidecar.
func Probe(ctx context.Context, sp *Spawner, h *config.Handler, log *slog.Logger, check func(*protocol.Hello) error) Probed {
	if h.Attached() {
		return probeAttach(ctx, h, check)
	}
	var rep Probed
	ev := make(probeEvents, 64)
	out := NewQueue(4)
	var wg sync.WaitGroup
	defer wg.Wait()
	env := Env{Spawner: sp, MaxFrameBytes: protocol.DefaultMaxFrameBytes, Log: log, WG: &wg}
	c, err := Start(env, Spec{Handler: h, Out: out.Out(), Events: ev})
	if err != nil {
		rep.Err = err
		return rep
	}
	rep.PID = c.PID()
	timer := time.NewTimer(h.StartupTimeout)
	defer timer.Stop()
	exited := false
wait:
	for {
		select {
		case e := <-ev:
			switch e := e.(type) {
			case probeFrame:
				hello, ok := e.msg.(*protocol.Hello)
				if !ok {
					rep.Err = fmt.Errorf("handler %s: its first frame is %q, not hello", h.Name, e.msg.Type())
					break wait
				}
				rep.SDK = hello.SDK
				rep.Err = check(hello)
				break wait
			case probeProtocolError:
				rep.Err = fmt.Errorf("handler %s: %w", h.Name, e.err)
				break wait
			case probeStdoutClosed:
				rep.Err = fmt.Errorf("handler %s: the process closed its stdout without a hello", h.Name)
				break wait
			case probeExit:
				rep.Err = fmt.Errorf("handler %s: the process %s without a hello", h.Name, ExitDescription(e.err))
				exited = true
				break wait
			}
		case <-timer.C:
			rep.Err = fmt.Errorf("handler %s: no hello within startup_timeout %s", h.Name, h.StartupTimeout)
			break wait
		case <-ctx.Done():
			rep.Err = ctx.Err()
			break wait
		}
	}
	// Stop it: shutdown (and EOF, or go-plugin's graceful stop), then signals.
	out.Close()
	if rep.Err != nil && !exited {
		c.Signal(syscall.SIGKILL)
	}
	kill := time.After(5 * time.Second)
	for !exited {
		select {
		case e := <-ev:
			_, exited = e.(probeExit)
		case <-kill:
			c.Signal(syscall.SIGKILL)
		}
	}
	if rep.Err != nil {
		if t := c.Stderr(); t != "" {
			rep.Err = fmt.Errorf("%w\nstderr (last lines):\n%s", rep.Err, t)
		}
	}
	return rep
}

// probeEvents keeps what Probe waits for: the first hello, error and the
// exit; it drops what does not fit.
type probeEvents chan any

type (
	probeFrame         struct{ msg protocol.Message }
	probeProtocolError struct{ err error }
	probeStdoutClosed  struct{}
	probeExit          struct{ err error }
)

func (e probeEvents) put(v any) {
	select {
	case e <- v:
	default: // only the first hello, error and the exit matter
	}
}

func (e probeEvents) Frame(m protocol.Message)           { e.put(probeFrame{m}) }
func (e probeEvents) ProtocolError(err error)            { e.put(probeProtocolError{err}) }
func (e probeEvents) Unsendable(protocol.Message, error) {}
func (e probeEvents) WriteFailed(error)                  {}
func (e probeEvents) StdoutClosed()                      { e.put(probeStdoutClosed{}) }
func (e probeEvents) Refused(error)                      {}
func (e probeEvents) Exited(err error)                   { e.put(probeExit{err}) }

// probeAttach is Probe for an attach handler.
func probeAttach(ctx context.Context, h *config.Handler, check func(*protocol.Hello) error) Probed {
	var rep Probed
	var endpoints []string
	for _, p := range h.Attach {
		if !config.IsGlob(p) {
			endpoints = append(endpoints, p)
			continue
		}
		m, _ := filepath.Glob(p) // checked at load
		endpoints = append(endpoints, m...)
	}
	if len(endpoints) == 0 {
		rep.Err = fmt.Errorf("handler %s: no endpoint matches %v", h.Name, h.Attach)
		return rep
	}
	var errs []error
	for _, ep := range endpoints {
		s, err := session.Open(ctx, ep, session.Options{HelloTimeout: h.StartupTimeout, MaxFrameBytes: protocol.DefaultMaxFrameBytes,
			Features: Features()})
		if err != nil {
			errs = append(errs, fmt.Errorf("handler %s: attaching to %s: %w", h.Name, ep, err))
			continue
		}
		hello := s.Hello()
		_ = s.Close()
		if err := check(&hello.Hello); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", ep, err))
			continue
		}
		rep.SDK, rep.PID = hello.SDK, hello.PID
	}
	rep.Err = errors.Join(errs...)
	return rep
}
