package transport

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/soniq-dev/soniq-sidecar/internal/session"
)

// Attach mode: a handler whose processes run in a container of their own
// and serve the Handler service on a Unix socket (the SDKs' --listen). The
// sidecar spawns and signals nothing for it: each endpoint is one process,
// a Session stream (internal/session, a plain gRPC client: go-plugin's
// reattach expects a process it started) is its life, and the end of the
// connection is its exit. The caller treats it like any other process: the
// hello is checked against the manifest, pings and jobs go over the
// stream, a lost connection is a crash for the jobs it held, and a new
// connection (with backoff) is its restart.

// Backoff while an endpoint does not answer (its container is starting or
// restarting): quick at first, capped so a returning handler is found
// soon.
const (
	attachRetryFirst = 100 * time.Millisecond
	attachRetryMax   = 2 * time.Second
)

// ErrEndpointGone marks the end of an attached connection that was not the
// sidecar's doing: the handler ended the session or the connection broke.
var ErrEndpointGone = errors.New("connection lost")

// attachedConn is the handle on an attached process: the sidecar owns no
// process there, so it signals nothing; a SIGKILL (the caller giving up on
// a broken process) ends the connection instead.
type attachedConn struct {
	detach func()
}

func (c attachedConn) PID() int { return 0 }
func (c attachedConn) Signal(sig syscall.Signal) {
	if sig == syscall.SIGKILL {
		c.detach()
	}
}
func (c attachedConn) Stderr() string { return "" } // its stderr is its own container's

// attachProc is the transport of one attach endpoint.
type attachProc struct {
	l      *link
	path   string
	ctx    context.Context
	cancel context.CancelFunc // detaches: ends the connection attempt or the session
}

// startAttach starts connecting to endpoint; the hello (or a protocol
// error) and the end of the connection are reported.
func startAttach(l *link, endpoint string) Conn {
	a := &attachProc{l: l, path: endpoint}
	a.ctx, a.cancel = context.WithCancel(context.Background())
	l.env.WG.Add(1)
	go a.run()
	return attachedConn{detach: a.cancel}
}

func (a *attachProc) run() {
	defer a.l.env.WG.Done()
	defer a.cancel()
	s, gaveUp := a.connect()
	if s == nil {
		if !gaveUp {
			// A protocol error or a refusal was reported: the caller
			// closes l.out as for a broken process; then this "process"
			// has exited.
			for range a.l.out {
			}
			a.l.ev.Exited(fmt.Errorf("no session with the handler at %s", a.path))
		}
		return
	}
	// The hello with its running jobs: the caller checks it as a spawned
	// process's.
	a.l.ev.Frame(sessionHello(s.Hello()))
	recvDone := make(chan struct{})
	var endErr error
	sc := &streamConn{l: a.l, s: s, recvDone: recvDone,
		ended:         func(err error) { endErr = err },
		protocolError: a.l.ev.ProtocolError}
	exitDone := make(chan struct{})
	go func() {
		// The end of the stream is the process's exit for the caller; it
		// closes l.out when it handles it, which ends the sender. run
		// waits for this goroutine.
		defer close(exitDone)
		<-recvDone
		err := a.endError(sc, endErr)
		_ = s.Close()
		a.l.ev.Exited(err)
	}()
	sc.run()
	<-exitDone
}

// endError says how a session ended: nil for a clean end after the
// sidecar's `shutdown`, else the lost connection.
func (a *attachProc) endError(sc *streamConn, err error) error {
	switch {
	case a.ctx.Err() != nil:
		return fmt.Errorf("the connection to the handler at %s was closed by the sidecar", a.path)
	case err == nil && sc.shutdownSent.Load():
		return nil
	case err == nil:
		return fmt.Errorf("the connection to the handler at %s was lost: the handler ended the session: %w", a.path, ErrEndpointGone)
	}
	return fmt.Errorf("the connection to the handler at %s was lost: %w: %w", a.path, ErrEndpointGone, err)
}

// connect opens a session, retrying with backoff while the endpoint does
// not answer. It returns nil when it gave up: the caller closed l.out (an
// exit was reported) or a protocol error or refusal was reported (gaveUp
// false).
func (a *attachProc) connect() (*session.Session, bool) {
	h := a.l.h
	delay := attachRetryFirst
	waitingSince := time.Now()
	warned := false
	for {
		s, err := session.Open(a.ctx, a.path, session.Options{HelloTimeout: h.StartupTimeout, MaxFrameBytes: a.l.env.MaxFrameBytes,
			Features: Features()})
		switch {
		case err == nil:
			return s, false
		case errors.Is(err, session.ErrProtocol):
			a.l.ev.ProtocolError(err)
			return nil, false
		case errors.Is(err, session.ErrRefused):
			// Another sidecar holds the endpoint: a deployment error
			// (two sidecars for one handler container), not a crash.
			a.l.ev.Refused(err)
			return nil, false
		}
		if !warned && time.Since(waitingSince) >= h.StartupTimeout {
			warned = true
			a.l.env.Log.Warn("attach endpoint does not answer yet; still trying", "handler", h.Name, "endpoint", a.path,
				"waiting", time.Since(waitingSince).Round(time.Millisecond), "err", err)
		}
		timer := time.NewTimer(delay)
		select {
		case _, open := <-a.l.out:
			timer.Stop()
			if !open {
				// The caller stopped waiting for it (shutdown).
				a.l.ev.Exited(fmt.Errorf("never attached to %s: %w", a.path, err))
				return nil, true
			}
		case <-a.ctx.Done():
			timer.Stop()
			a.l.ev.Exited(fmt.Errorf("never attached to %s: %w", a.path, err))
			for range a.l.out {
			}
			return nil, true
		case <-timer.C:
		}
		delay = min(2*delay, attachRetryMax)
	}
}
