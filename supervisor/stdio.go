package supervisor

import (
	"log/slog"
	"sync"
)

// transportEnv is what a transport needs from the loop to run one process.
type transportEnv struct {
	sp       *spawner
	maxFrame int
	log      *slog.Logger
	emit     func(event) bool
	wg       *sync.WaitGroup // the transport's goroutines join it
}

// startStdio starts a handler process speaking NDJSON over its stdin and
// stdout: a writer goroutine encodes p.out to stdin, a reader goroutine
// decodes stdout into events and finally reports the exit.
func startStdio(te transportEnv, p *process) error {
	cmd, pp, err := startChild(te.sp, p.pool.h, te.maxFrame)
	if err != nil {
		return err
	}
	p.cmd, p.pid = cmd, cmd.Process.Pid
	te.wg.Add(2)
	go func() { defer te.wg.Done(); writeFrames(p, pp.stdin, te) }()
	go func() { defer te.wg.Done(); readFrames(p, pp, te.maxFrame, te.log, te.emit) }()
	return nil
}
