package supervisor

import (
	"os"
)

// startStdio starts a handler process speaking NDJSON over its stdin and
// stdout: a writer goroutine encodes p.out to stdin, a reader goroutine
// decodes stdout into events, another logs stderr, and a reaper reports the
// exit as soon as the process has exited, whoever still holds its pipes.
func startStdio(te transportEnv, p *process) error {
	cmd, pp, err := startChild(te.sp, p.pool.h, te.maxFrame)
	if err != nil {
		return err
	}
	p.pid = cmd.Process.Pid
	p.conn = spawnedConn{groupPID: p.pid}
	exited := make(chan struct{})
	stdoutDone, stderrDone := make(chan struct{}), make(chan struct{})
	te.wg.Add(4)
	go func() { defer te.wg.Done(); writeFrames(p, pp.stdin, te) }()
	go func() {
		defer te.wg.Done()
		defer close(stdoutDone)
		readFrames(p, pp.stdout, exited, te.maxFrame, te.emit)
	}()
	go func() { defer te.wg.Done(); defer close(stderrDone); readStderr(p, pp.stderr, te.log) }()
	go func() {
		defer te.wg.Done()
		err := reapChild(cmd)
		close(exited)
		// Nothing reads the stdin of a dead process: a blocked write ends.
		_ = pp.stdin.Close()
		// Frames and stderr lines written before the exit go first.
		drainPipes(exitDrain, []*os.File{pp.stdout, pp.stderr}, stdoutDone, stderrDone)
		te.emit(exitEvent{proc: p, err: err})
	}()
	return nil
}
