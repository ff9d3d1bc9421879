package proc

import (
	"context"
	"os"
	"path/filepath"
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
