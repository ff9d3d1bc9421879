package transport

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/soniq-dev/soniq-sidecar/protocol"
)

// startStdio starts a handler process speaking NDJSON over its stdin and
// stdout: a writer goroutine encodes l.out to stdin, a reader goroutine
// decodes stdout into reports, another logs stderr, and a reaper reports
// the exit as soon as the process has exited, whoever still holds its
// pipes.
func startStdio(l *link) (Conn, error) {
	te := l.env
	cmd, pp, err := startChild(te.Spawner, l.h, te.MaxFrameBytes)
	if err != nil {
		return nil, err
	}
	l.pid = cmd.Process.Pid
	exited := make(chan struct{})
	stdoutDone, stderrDone := make(chan struct{}), make(chan struct{})
	te.WG.Add(4)
	go func() { defer te.WG.Done(); writeFrames(l, pp.stdin) }()
	go func() {
		defer te.WG.Done()
		defer close(stdoutDone)
		readFrames(l, pp.stdout, exited)
	}()
	go func() { defer te.WG.Done(); defer close(stderrDone); readStderr(l, pp.stderr) }()
	go func() {
		defer te.WG.Done()
		err := reapChild(cmd)
		close(exited)
		// Nothing reads the stdin of a dead process: a blocked write ends.
		_ = pp.stdin.Close()
		// Frames and stderr lines written before the exit go first.
		drainPipes(exitDrain, []*os.File{pp.stdout, pp.stderr}, stdoutDone, stderrDone)
		l.ev.Exited(err)
	}()
	return spawnedConn{groupPID: l.pid, stderr: l.stderr}, nil
}

// writeFrames is a process's writer goroutine: it encodes queued frames to
// stdin until the queue is closed, then closes stdin. A frame that cannot
// be encoded, or a job the handler could not read, is reported
// (Unsendable) and skipped: the stream goes on. A failed write (the child
// closed its stdin or died) is logged once and reported (WriteFailed); the
// frames after it cannot be delivered and are drained, so senders never
// block.
func writeFrames(l *link, stdin io.WriteCloser) {
	w := bufio.NewWriterSize(stdin, 64<<10)
	var buf []byte
	var failed error
	for m := range l.out {
		if failed != nil {
			continue
		}
		jobs, isBatch := m.(*Jobs)
		if !isBatch {
			buf = appendFrame(l, buf[:0], m)
		} else {
			// One write for the whole batch: the frames go to the buffer
			// together and are flushed once.
			buf = buf[:0]
			for _, j := range jobs.Jobs {
				buf = appendFrame(l, buf, j)
			}
		}
		if len(buf) == 0 {
			continue
		}
		// Flush when nothing else is queued: batches frames under load, no
		// latency when idle.
		if _, err := w.Write(buf); err != nil {
			failed = err
		} else if len(l.out) == 0 {
			failed = w.Flush()
		}
		if cap(buf) > 1<<20 {
			buf = nil // do not pin a huge frame's memory
		}
		switch {
		case failed == nil:
		case errors.Is(failed, os.ErrClosed):
			// The reaper closed stdin: the process has exited, and its exit
			// report tells the rest.
			l.env.Log.Debug("the handler exited before this frame was written", "handler", l.h.Name, "pid", l.pid, "frame", string(m.Type()))
		case m.Type() == protocol.TypeShutdown:
			// The process is being stopped and is already gone or has
			// closed its stdin: its exit tells the rest.
			l.env.Log.Debug("the handler's stdin closed before the shutdown frame", "handler", l.h.Name, "pid", l.pid, "err", failed)
		default:
			l.env.Log.Error("writing to the handler's stdin failed; frames for it are dropped until it is replaced",
				"handler", l.h.Name, "pid", l.pid, "frame", string(m.Type()), "err", failed)
			l.ev.WriteFailed(failed)
		}
	}
	_ = stdin.Close()
}

// appendFrame appends m's frame and its newline to buf. A frame that cannot
// be encoded, or a job the handler could not read, is reported
// (Unsendable) and leaves buf as it was.
func appendFrame(l *link, buf []byte, m protocol.Message) []byte {
	var err error
	if j, ok := m.(*protocol.Job); ok {
		err = jobUnsendable(j, l.env.MaxFrameBytes)
	}
	var out []byte
	if err == nil {
		out, err = protocol.Append(buf, m)
	}
	if err != nil {
		l.ev.Unsendable(m, err)
		return buf
	}
	return append(out, '\n')
}

// readStderr is a process's stderr goroutine: it logs each line and keeps
// the last ones for last_error, until EOF or the read end is closed.
func readStderr(l *link, stderr io.Reader) {
	lines := &stderrLines{log: l.env.Log, handler: l.h.Name, pid: func() int { return l.pid }, tail: l.stderr}
	_, _ = io.Copy(lines, stderr)
	lines.flush()
}

// maxFrameBatch bounds the frames reported in one batch.
const maxFrameBatch = 64

// readFrames is a process's stdout goroutine: it decodes frames into
// reports until EOF or the read end is closed (after the exit, by
// drainPipes). EOF while the process still runs is reported as
// StdoutClosed: no result can come back from it.
func readFrames(l *link, stdout io.Reader, exited <-chan struct{}) {
	dec := protocol.NewDecoder(stdout)
	dec.SetMaxFrameBytes(l.env.MaxFrameBytes)
	broken := false
	// Frames already read come in a batch (FrameBatcher), reported before
	// anything that follows them.
	fb, _ := l.ev.(FrameBatcher)
	var batch []protocol.Message
	flush := func() {
		switch {
		case len(batch) == 1:
			l.ev.Frame(batch[0])
		case len(batch) > 1:
			fb.Frames(batch)
		}
		batch = nil
	}
	for {
		m, err := dec.Decode()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			flush()
			var fe *protocol.FrameError
			if !errors.As(err, &fe) {
				return // the pipe itself failed or was closed; the exit tells the rest
			}
			if !broken {
				broken = true
				l.ev.ProtocolError(err)
			}
			continue // keep draining so the child never blocks on stdout
		}
		if broken {
			continue
		}
		if !m.Type().FromHandler() {
			flush()
			broken = true
			l.ev.ProtocolError(fmt.Errorf("protocol: a %q frame travels from the sidecar to the handler, not back", m.Type()))
			continue
		}
		batch = append(batch, m)
		if fb == nil || len(batch) == maxFrameBatch || !dec.Buffered() {
			flush()
		}
	}
	flush()
	if broken {
		return // already being killed
	}
	grace := time.NewTimer(stdoutEOFGrace)
	defer grace.Stop()
	select {
	case <-exited:
	case <-grace.C:
		l.ev.StdoutClosed()
	}
}
