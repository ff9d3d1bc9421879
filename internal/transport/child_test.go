package transport

import (
	"bufio"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/soniq-dev/soniq-sidecar/internal/config"
	"github.com/soniq-dev/soniq-sidecar/protocol"
)

// exitTolerance is the slack allowed on top of the sidecar's own bounds
// (exitDrain, stdoutEOFGrace) for scheduling on a loaded machine; the
// point is to stay far below the 30 s ping timeout that used to be the
// only way such a process was noticed.
const exitTolerance = 3 * time.Second

// rawProc is a non-SDK child started by a transport, its events and the
// file where its shell script writes the pid of the helper it leaves behind.
type rawProc struct {
	q       *Queue
	conn    Conn
	events  recorder
	wg      *sync.WaitGroup
	pidFile string
	exited  bool
}

func startRaw(t *testing.T, transport config.Transport, script string) *rawProc {
	t.Helper()
	dir := t.TempDir()
	rp := &rawProc{events: make(recorder, 64), wg: &sync.WaitGroup{}, pidFile: filepath.Join(dir, "helper.pid")}
	h := &config.Handler{Name: "raw", Command: []string{"sh", "-c", script}, Transport: transport, Workdir: dir,
		Env: map[string]string{"PIDFILE": rp.pidFile}, StartupTimeout: 20 * time.Second, Concurrency: 1, Processes: 1}
	sp := StartSpawner()
	rp.q = NewQueue(4)
	te := Env{Spawner: sp, MaxFrameBytes: protocol.DefaultMaxFrameBytes, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), WG: rp.wg}
	c, err := Start(te, Spec{Handler: h, Out: rp.q.Out(), Events: rp.events})
	if err != nil {
		t.Fatal(err)
	}
	rp.conn = c
	t.Cleanup(func() {
		if pid := rp.helperPID(); pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL) // the setsid helper is not the sidecar's to kill
		}
		if !rp.exited {
			rp.conn.Signal(syscall.SIGKILL)
		}
		if !rp.q.closed {
			rp.q.Close()
		}
		go func() {
			for range rp.events {
			}
		}()
		done := make(chan struct{})
		go func() { rp.wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Errorf("transport goroutines did not end")
		}
		sp.Stop()
	})
	return rp
}

// helperPID is the pid the script wrote to $PIDFILE, or 0.
func (rp *rawProc) helperPID() int {
	b, err := os.ReadFile(rp.pidFile)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

func (rp *rawProc) next(t *testing.T, timeout time.Duration) event {
	t.Helper()
	select {
	case e := <-rp.events:
		if _, ok := e.(exitEvent); ok {
			rp.exited = true
		}
		return e
	case <-time.After(timeout):
		t.Fatalf("no event within %s; stderr:\n%s", timeout, rp.conn.Stderr())
		return nil
	}
}

// alive reports whether pid runs (a zombie has exited).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}

// Shell snippets that leave a helper behind holding the script's stdout and
// stderr, its pid in $PIDFILE. The setsid one has left the process group
// before the script goes on (it writes its pid after setsid).
const (
	setsidHelper = `setsid sh -c 'echo $$ > "$PIDFILE"; exec sleep 300' & while [ ! -s "$PIDFILE" ]; do sleep 0.01; done`
	groupHelper  = `sleep 300 & echo $! > "$PIDFILE"`
)

// A handler process's exit is reported when it exits, whoever still holds
// its stdout and stderr: a helper in its process group (killed with the
// group) or one that left the group with setsid (not killed; its pipes are
// cut after a bounded drain). Output written before the exit comes first.
func TestTransportReportsExitDespiteHeldPipes(t *testing.T) {
	cases := []struct {
		name      string
		transport config.Transport
		script    string
		frame     bool // the script writes a pong frame before it exits (stdio)
		inGroup   bool // the helper stays in the process group
	}{
		{"stdio/setsid helper", config.TransportStdio, `printf '{"type":"pong","seq":1}\n'; echo bye >&2; ` + setsidHelper + `; exit 3`, true, false},
		{"stdio/helper in the group", config.TransportStdio, `printf '{"type":"pong","seq":1}\n'; echo bye >&2; ` + groupHelper + `; exit 3`, true, true},
		{"unix/setsid helper", config.TransportUnix, `echo bye >&2; ` + setsidHelper + `; exit 3`, false, false},
		{"unix/helper in the group", config.TransportUnix, `echo bye >&2; ` + groupHelper + `; exit 3`, false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			started := time.Now()
			rp := startRaw(t, c.transport, c.script)
			bound := exitDrain + exitTolerance
			e := rp.next(t, bound)
			if c.frame {
				if !isPong(e, 1) {
					t.Fatalf("first event %#v, want the pong written before the exit", e)
				}
				e = rp.next(t, bound)
			}
			took := time.Since(started)
			x, ok := e.(exitEvent)
			if !ok {
				t.Fatalf("event %#v, want the exit", e)
			}
			if d := ExitDescription(x.err); d != "exited with status 3" {
				t.Errorf("exit %q, want exited with status 3", d)
			}
			if !strings.Contains(rp.conn.Stderr(), "bye") {
				t.Errorf("stderr written before the exit is missing: %q", rp.conn.Stderr())
			}
			t.Logf("exit reported %s after the start (bound %s)", took.Round(time.Millisecond), bound)
			pid := rp.helperPID()
			if pid == 0 {
				t.Fatal("the script wrote no helper pid")
			}
			if c.inGroup {
				deadline := time.Now().Add(exitTolerance)
				for alive(pid) && time.Now().Before(deadline) {
					time.Sleep(10 * time.Millisecond)
				}
				if alive(pid) {
					t.Errorf("the helper %d left in the process group survived the exit", pid)
				}
			} else if !alive(pid) {
				t.Errorf("the setsid helper %d is gone: the test no longer holds the pipes", pid)
			}
		})
	}
}

// A stdio process that closes its stdout and keeps running is reported
// (StdoutClosed) after stdoutEOFGrace; the loop then kills it.
func TestStdioStdoutClosedWhileRunning(t *testing.T) {
	t.Parallel()
	rp := startRaw(t, config.TransportStdio, `printf '{"type":"pong","seq":1}\n'; exec 1>&-; echo closed >&2; exec sleep 300`)
	if e := rp.next(t, 10*time.Second); frameMsg(e) == nil {
		t.Fatalf("first event %#v, want a frame", e)
	}
	closedAt := time.Now()
	e := rp.next(t, stdoutEOFGrace+exitTolerance)
	if _, ok := e.(stdoutClosedEvent); !ok {
		t.Fatalf("event %#v, want stdout closed", e)
	}
	if d := time.Since(closedAt); d < stdoutEOFGrace/2 {
		t.Errorf("reported after %s: the grace of %s was not given", d, stdoutEOFGrace)
	}
	// As the loop's breakProcess does.
	rp.q.Close()
	rp.conn.Signal(syscall.SIGKILL)
	e = rp.next(t, exitDrain+exitTolerance)
	if x, ok := e.(exitEvent); !ok || ExitDescription(x.err) != "killed by signal SIGKILL" {
		t.Fatalf("event %#v; want an exit killed by signal SIGKILL", e)
	}
}

// drainPipes lets the readers finish what was written, waits at most
// drain for a write end that stays open, and then unblocks them.
func TestDrainPipes(t *testing.T) {
	cases := []struct {
		name     string
		holdOpen bool // a descendant keeps the write end
	}{
		{"write end closed", false},
		{"write end held", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = w.Close() })
			if _, err := w.WriteString("one\ntwo\n"); err != nil {
				t.Fatal(err)
			}
			if !c.holdOpen {
				_ = w.Close()
			}
			var lines []string
			done := make(chan struct{})
			go func() {
				defer close(done)
				sc := bufio.NewScanner(r)
				for sc.Scan() {
					lines = append(lines, sc.Text())
				}
			}()
			const drain = 300 * time.Millisecond
			start := time.Now()
			drainPipes(drain, []*os.File{r}, done)
			took := time.Since(start)
			if strings.Join(lines, ",") != "one,two" {
				t.Errorf("lines %q, want one, two", lines)
			}
			switch {
			case c.holdOpen && (took < drain || took > drain+exitTolerance):
				t.Errorf("took %s, want the drain of %s", took, drain)
			case !c.holdOpen && took >= drain:
				t.Errorf("took %s: waited for the drain although the reader was done", took)
			}
			if _, err := w.WriteString("late\n"); c.holdOpen && err == nil {
				t.Error("the holder can still write after the drain: the read end is not closed")
			}
		})
	}
}
