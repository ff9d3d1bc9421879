package supervisor

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"syscall"
	"time"

	"github.com/soniq-dev/soniq-sidecar/internal/config"
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
func CheckHandlers(ctx context.Context, m *config.Manifest, log *slog.Logger) []CheckReport {
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

// checkHandler starts one process of h through the transport `run` uses
// (transportFor), waits for the hello the transport reports as an event,
// compares it with the manifest, and stops the process the way the
// supervisor stops an idle one.
func checkHandler(ctx context.Context, sp *spawner, h *config.Handler, log *slog.Logger) CheckReport {
	if h.Attached() {
		return checkAttachHandler(ctx, h)
	}
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
	if err := transportFor(h).start(te, p); err != nil {
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
			switch e := e.(type) {
			case frameEvent:
				hello, ok := e.msg.(*protocol.Hello)
				if !ok {
					rep.Err = fmt.Errorf("handler %s: its first frame is %q, not hello", h.Name, e.msg.Type())
					break wait
				}
				rep.SDK = hello.SDK
				rep.Err = checkHello(h, hello)
				break wait
			case protocolErrorEvent:
				rep.Err = fmt.Errorf("handler %s: %w", h.Name, e.err)
				break wait
			case stdoutClosedEvent:
				rep.Err = fmt.Errorf("handler %s: the process closed its stdout without a hello", h.Name)
				break wait
			case exitEvent:
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
	// Stop it: shutdown (and EOF, or go-plugin's graceful stop), then signals.
	p.closeInput()
	if rep.Err != nil && !exited {
		p.signalGroup(syscall.SIGKILL)
	}
	kill := time.After(5 * time.Second)
	for !exited {
		select {
		case e := <-events:
			_, exited = e.(exitEvent)
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
