package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/soniq-dev/soniq-sidecar/protocol"
)

// CheckReport is what CheckHandlers saw of one handler.
type CheckReport struct {
	Handler string
	PID     int
	SDK     string
	Err     error
}

// CheckHandlers starts one process of every handler in the manifest, waits
// for its hello within startup_timeout, compares it with the declaration
// (same job names, same cancellable), and stops it. It returns one report
// per handler; any report with an Err means the manifest must not be run.
func CheckHandlers(ctx context.Context, m *Manifest, log *slog.Logger) []CheckReport {
	sp := newSpawner()
	stop := make(chan struct{})
	go sp.run(stop)
	defer func() { close(stop); <-sp.done }()
	var out []CheckReport
	for i := range m.Handlers {
		out = append(out, checkHandler(ctx, sp, &m.Handlers[i], log))
	}
	return out
}

func checkHandler(ctx context.Context, sp *spawner, h *Handler, log *slog.Logger) CheckReport {
	if h.Attached() {
		return checkAttachHandler(ctx, h)
	}
	if h.Transport == TransportUnix {
		return checkUnixHandler(ctx, sp, h, log)
	}
	rep := CheckReport{Handler: h.Name}
	cmd, pp, err := startChild(sp, h, protocol.DefaultMaxFrameBytes)
	if err != nil {
		rep.Err = err
		return rep
	}
	rep.PID = cmd.Process.Pid
	tail := &stderrTail{}
	stderrDone := make(chan struct{})
	go func() {
		defer close(stderrDone)
		buf := make([]byte, 32<<10)
		var pending string
		for {
			n, err := pp.stderr.Read(buf)
			pending += string(buf[:n])
			for {
				line, rest, ok := strings.Cut(pending, "\n")
				if !ok {
					break
				}
				tail.add(line)
				log.Info(line, "handler", h.Name, "pid", rep.PID, "stream", "stderr")
				pending = rest
			}
			if err != nil {
				if pending != "" {
					tail.add(pending)
				}
				return
			}
		}
	}()
	type helloOrErr struct {
		hello *protocol.Hello
		err   error
	}
	got := make(chan helloOrErr, 1)
	stdoutDone := make(chan struct{})
	go func() {
		defer close(stdoutDone)
		dec := protocol.NewDecoder(pp.stdout)
		m, err := dec.Decode()
		switch {
		case err != nil && errors.Is(err, io.EOF):
			got <- helloOrErr{err: errors.New("the process closed its stdout without a hello")}
		case err != nil:
			got <- helloOrErr{err: fmt.Errorf("reading its first frame: %w", err)}
		default:
			if hello, ok := m.(*protocol.Hello); ok {
				got <- helloOrErr{hello: hello}
			} else {
				got <- helloOrErr{err: fmt.Errorf("its first frame is %q, not hello", m.Type())}
			}
		}
		_, _ = io.Copy(io.Discard, pp.stdout)
	}()
	timer := time.NewTimer(h.StartupTimeout)
	defer timer.Stop()
	select {
	case r := <-got:
		if r.err != nil {
			rep.Err = fmt.Errorf("handler %s: %w", h.Name, r.err)
		} else {
			rep.SDK = r.hello.SDK
			rep.Err = checkHello(h, r.hello)
		}
	case <-timer.C:
		rep.Err = fmt.Errorf("handler %s: no hello within startup_timeout %s", h.Name, h.StartupTimeout)
	case <-ctx.Done():
		rep.Err = ctx.Err()
	}
	// Stop it: shutdown frame and EOF, then signals.
	enc := protocol.NewEncoder(pp.stdin)
	_ = enc.Encode(&protocol.Shutdown{})
	_ = pp.stdin.Close()
	exited := make(chan error, 1)
	go func() {
		// The exit, not EOF on the pipes, which a descendant may hold.
		err := reapChild(cmd)
		drainPipes(exitDrain, []*os.File{pp.stdout, pp.stderr}, stdoutDone, stderrDone)
		exited <- err
	}()
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-rep.PID, syscall.SIGKILL)
		<-exited
	}
	if rep.Err != nil {
		if t := tail.String(); t != "" {
			rep.Err = fmt.Errorf("%w\nstderr (last lines):\n%s", rep.Err, t)
		}
	}
	return rep
}

// checkUnixHandler is checkHandler for the unix transport: the transport
// itself starts the process (handshake, health check, Session hello) and reports
// the hello as an event; the process is then stopped the way the supervisor
// stops an idle one.
func checkUnixHandler(ctx context.Context, sp *spawner, h *Handler, log *slog.Logger) CheckReport {
	rep := CheckReport{Handler: h.Name}
	events := make(chan event, 64)
	emit := func(e event) bool {
		select {
		case events <- e:
		default: // only the first hello, error and the exit matter
		}
		return true
	}
	p := &process{pool: &pool{h: h}, out: make(chan protocol.Message, 4), tasks: map[string]*task{}, stderr: &stderrTail{}}
	var wg sync.WaitGroup
	defer wg.Wait()
	te := transportEnv{sp: sp, maxFrame: protocol.DefaultMaxFrameBytes, log: log, emit: emit, wg: &wg}
	if err := startUnix(te, p); err != nil {
		rep.Err = err
		return rep
	}
	rep.PID = p.pid
	timer := time.NewTimer(h.StartupTimeout)
	defer timer.Stop()
	exited := false
wait:
	for {
		select {
		case e := <-events:
			switch e.kind {
			case evFrame:
				if hello, ok := e.msg.(*protocol.Hello); ok {
					rep.SDK = hello.SDK
					rep.Err = checkHello(h, hello)
					break wait
				}
			case evProtocolError:
				rep.Err = fmt.Errorf("handler %s: %w", h.Name, e.err)
				break wait
			case evExit:
				rep.Err = fmt.Errorf("handler %s: the process %s without a hello", h.Name, exitDescription(e.err))
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
	// Stop it: shutdown (go-plugin's graceful stop), then signals.
	p.closeInput()
	if rep.Err != nil && !exited {
		p.signalGroup(syscall.SIGKILL)
	}
	kill := time.After(5 * time.Second)
	for !exited {
		select {
		case e := <-events:
			exited = e.kind == evExit
		case <-kill:
			p.signalGroup(syscall.SIGKILL)
		}
	}
	if rep.Err != nil {
		if t := p.stderr.String(); t != "" {
			rep.Err = fmt.Errorf("%w\nstderr (last lines):\n%s", rep.Err, t)
		}
	}
	return rep
}
