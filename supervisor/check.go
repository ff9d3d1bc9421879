package supervisor

import (
	"context"
	"log/slog"

	"github.com/soniq-dev/soniq-sidecar/config"
	"github.com/soniq-dev/soniq-sidecar/internal/transport"
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
// Starting and stopping is the transport's (transport.Probe, the transport
// `run` uses); the comparison is the loop's own (checkHello).
func CheckHandlers(ctx context.Context, m *config.Manifest, log *slog.Logger) []CheckReport {
	sp := transport.StartSpawner()
	defer sp.Stop()
	var out []CheckReport
	for i := range m.Handlers {
		h := &m.Handlers[i]
		r := transport.Probe(ctx, sp, h, log, func(hello *protocol.Hello) error { return checkHello(h, hello) })
		out = append(out, CheckReport{Handler: h.Name, PID: r.PID, SDK: r.SDK, Err: r.Err})
	}
	return out
}

// CheckCommands reports the first spawned handler whose command could never
// start (its executable or working directory missing, or not executable)
// as a *StartError, without starting anything or touching a database.
func CheckCommands(m *config.Manifest) error {
	for i := range m.Handlers {
		h := &m.Handlers[i]
		if err := transport.CheckCommand(h); err != nil {
			return &StartError{Handler: h.Name, Command: h.Command, Err: err}
		}
	}
	return nil
}
