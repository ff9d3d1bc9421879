package proc

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"
)

func TestProcLifecycle(t *testing.T) {
	sh := "/bin/sh"
	cases := []struct {
		name   string
		script string
		act    func(t *testing.T, g *Group, p *Proc)
		code   int
	}{
		{"exit status", "echo ready; exit 3", func(t *testing.T, g *Group, p *Proc) {}, 3},
		{"SIGKILL", "echo ready; exec sleep 30", func(t *testing.T, g *Group, p *Proc) {
			if err := p.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		}, -int(syscall.SIGKILL)},
		{"Stop after SIGTERM", "echo ready; exec sleep 30", func(t *testing.T, g *Group, p *Proc) {
			if err := p.Stop(5 * time.Second); err != nil {
				t.Fatal(err)
			}
		}, -int(syscall.SIGTERM)},
		{"Stop kills what ignores SIGTERM", "trap '' TERM; echo ready; while :; do sleep 0.05; done", func(t *testing.T, g *Group, p *Proc) {
			if err := p.Stop(300 * time.Millisecond); err == nil {
				t.Fatal("Stop did not report the kill")
			}
		}, -int(syscall.SIGKILL)},
		{"KillAll", "echo ready; exec sleep 30", func(t *testing.T, g *Group, p *Proc) { g.KillAll() }, -int(syscall.SIGKILL)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewGroup()
			t.Cleanup(g.KillAll)
			log := filepath.Join(t.TempDir(), "p.log")
			p, err := g.Start([]string{sh, "-c", tc.script}, nil, "", log)
			if err != nil {
				t.Fatal(err)
			}
			// A script that exits at once may be gone before the poll
			// sees its line: the line is what counts.
			if err := WaitLog(context.Background(), p, "ready", 1, 5*time.Second); err != nil && CountLines(log, "ready") == 0 {
				t.Fatal(err)
			}
			tc.act(t, g, p)
			if !p.Wait(5 * time.Second) {
				t.Fatal("no exit")
			}
			if got := p.ExitCode(); got != tc.code {
				t.Fatalf("exit code %d, want %d", got, tc.code)
			}
			if CountLines(log, "ready") != 1 {
				t.Fatalf("log %q", Tail(log, 100))
			}
		})
	}
}

func TestReadStatAndStatus(t *testing.T) {
	st, err := ReadStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if st.PPID != os.Getppid() || st.State == 0 {
		t.Fatalf("stat %+v, parent %d", st, os.Getppid())
	}
	if kb := StatusKB(os.Getpid(), "VmRSS"); kb <= 0 {
		t.Fatalf("VmRSS %d", kb)
	}
	if kb := StatusKB(1<<30, "VmRSS"); kb != 0 {
		t.Fatalf("VmRSS of no process: %d", kb)
	}
	g := NewGroup()
	t.Cleanup(g.KillAll)
	p, err := g.Start([]string{"/bin/sh", "-c", "exec sleep 30"}, nil, "", filepath.Join(t.TempDir(), "s.log"))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for range 100 {
		for _, c := range Children(os.Getpid()) {
			found = found || c == p.PID
		}
		if found {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !found {
		t.Fatalf("pid %d not among the children", p.PID)
	}
}

// A piped process answers on its stdout, writes its stderr to the log, and
// ends when its stdin closes; its stdout then reaches EOF.
func TestStartPipedTalksAndEndsAtEOF(t *testing.T) {
	g := NewGroup()
	t.Cleanup(g.KillAll)
	log := filepath.Join(t.TempDir(), "p.log")
	script := `echo started >&2; while read -r line; do echo "got $line"; done; echo bye >&2`
	p, in, out, err := g.StartPiped([]string{"/bin/sh", "-c", script}, nil, "", log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = out.Close() })
	rd := bufio.NewReader(out)
	for _, word := range []string{"one", "two"} {
		if _, err := io.WriteString(in, word+"\n"); err != nil {
			t.Fatal(err)
		}
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if line != "got "+word+"\n" {
			t.Fatalf("read %q, want %q", line, "got "+word)
		}
	}
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	if rest, err := io.ReadAll(rd); err != nil || len(rest) != 0 {
		t.Fatalf("after stdin closed: %q, %v; want EOF", rest, err)
	}
	if !p.Wait(5*time.Second) || p.ExitCode() != 0 {
		t.Fatalf("exit: %v", p.Err())
	}
	if CountLines(log, "started") != 1 || CountLines(log, "bye") != 1 {
		t.Fatalf("stderr not in the log: %q", Tail(log, 200))
	}
}

// A child that ran and was waited for keeps counting in its parent's
// TreeCPU: a database connection that closed between two readings must not
// take its CPU out of the difference.
func TestTreeCPUCountsReapedChildren(t *testing.T) {
	_, before := TreeCPU(os.Getpid())
	// A shell busy loop: at least a few clock ticks of CPU, then exit.
	cmd := exec.Command("sh", "-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done")
	if err := cmd.Run(); err != nil {
		t.Fatalf("busy child: %v", err)
	}
	childCPU := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	if childCPU < 20*time.Millisecond {
		t.Fatalf("the busy child used only %v of CPU: too little to tell", childCPU)
	}
	_, after := TreeCPU(os.Getpid())
	if got := after - before; got < childCPU.Seconds()/2 {
		t.Fatalf("children CPU grew by %.2fs after a reaped child used %.2fs", got, childCPU.Seconds())
	}
}

// A grandchild is found through its parent, after it.
func TestDescendantsFindsGrandchildren(t *testing.T) {
	// sh starts sleep in the background and waits: sh is the child, sleep its child.
	cmd := exec.Command("sh", "-c", "sleep 30 & echo $!; wait")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var sleepPID int
	if _, err := fmt.Fscan(out, &sleepPID); err != nil {
		t.Fatalf("the grandchild's pid: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Kill(sleepPID, syscall.SIGKILL) })
	got := Descendants(os.Getpid())
	shAt, sleepAt := slices.Index(got, cmd.Process.Pid), slices.Index(got, sleepPID)
	if shAt < 0 || sleepAt < 0 || sleepAt < shAt {
		t.Fatalf("Descendants = %v; want sh %d, then its child sleep %d", got, cmd.Process.Pid, sleepPID)
	}
	if kids := Descendants(sleepPID); len(kids) != 0 {
		t.Fatalf("Descendants of a lone sleep = %v; want none", kids)
	}
}
