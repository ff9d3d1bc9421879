// Package proc starts and watches the real processes that the benchmarks and
// the chaos run drive (sidecars, handler processes, Soniq workers), and reads
// what Linux's /proc says about them (CPU time, memory, children).
//
// A Group owns the processes it started: KillAll ends every one still
// running, with the process group it leads, so a driver that fails or is
// interrupted leaves nothing behind.
package proc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Group is the set of processes a driver started and that still run.
type Group struct {
	mu   sync.Mutex
	live map[*Proc]struct{}
}

// NewGroup returns an empty group.
func NewGroup() *Group { return &Group{live: map[*Proc]struct{}{}} }

// Proc is one started process.
type Proc struct {
	PID int
	Log string // the file its stdout and stderr go to

	cmd    *exec.Cmd
	done   chan struct{} // closed at exit
	err    error         // exit status, valid after done
	exitAt time.Time     // when Wait returned
}

// Start runs argv with env (the whole environment) in dir, in a process
// group of its own, its stdout and stderr written to logPath (created or
// truncated; a file, so the exit is seen when it happens and not after a
// pipe drains).
func (g *Group) Start(argv, env []string, dir, logPath string) (*Proc, error) {
	if len(argv) == 0 {
		return nil, errors.New("start: empty command")
	}
	f, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	defer f.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env, cmd.Dir, cmd.Stdout, cmd.Stderr = env, dir, f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", strings.Join(argv, " "), err)
	}
	return g.watch(cmd, logPath), nil
}

// StartPiped is Start for a process the driver talks to: its stdin and
// stdout are pipes (the returned writer and reader; the reader reaches EOF
// once the process and any child holding it have closed their end), its
// stderr goes to logPath. The caller closes both.
func (g *Group) StartPiped(argv, env []string, dir, logPath string) (*Proc, io.WriteCloser, io.ReadCloser, error) {
	if len(argv) == 0 {
		return nil, nil, nil, errors.New("start: empty command")
	}
	f, err := os.Create(logPath)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	defer f.Close()
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, nil, nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	// The child holds its ends; the driver keeps only its own.
	defer inR.Close()
	defer outW.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env, cmd.Dir, cmd.Stdin, cmd.Stdout, cmd.Stderr = env, dir, inR, outW, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		inW.Close()
		outR.Close()
		return nil, nil, nil, fmt.Errorf("start %s: %w", strings.Join(argv, " "), err)
	}
	return g.watch(cmd, logPath), inW, outR, nil
}

// watch registers a started command in the group and reaps it.
func (g *Group) watch(cmd *exec.Cmd, logPath string) *Proc {
	p := &Proc{cmd: cmd, PID: cmd.Process.Pid, Log: logPath, done: make(chan struct{})}
	g.mu.Lock()
	g.live[p] = struct{}{}
	g.mu.Unlock()
	go func() { // owned by p: ends when the process exits
		p.err = cmd.Wait()
		p.exitAt = time.Now()
		g.mu.Lock()
		delete(g.live, p)
		g.mu.Unlock()
		close(p.done)
	}()
	return p
}

// KillAll sends SIGKILL to every process of the group still running and to
// the process group each one leads.
func (g *Group) KillAll() {
	g.mu.Lock()
	ps := make([]*Proc, 0, len(g.live))
	for p := range g.live {
		ps = append(ps, p)
	}
	g.mu.Unlock()
	for _, p := range ps {
		_ = syscall.Kill(-p.PID, syscall.SIGKILL)
		_ = syscall.Kill(p.PID, syscall.SIGKILL)
	}
}

// Done is closed when the process has exited and been reaped.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited says whether the process has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Err is the exit status (nil for exit 0); valid once Done is closed.
func (p *Proc) Err() error {
	<-p.done
	return p.err
}

// ExitedAt is when the process was reaped; valid once Done is closed.
func (p *Proc) ExitedAt() time.Time {
	<-p.done
	return p.exitAt
}

// ExitCode is the exit code, or minus the signal number that ended the
// process; valid once Done is closed.
func (p *Proc) ExitCode() int {
	<-p.done
	st := p.cmd.ProcessState
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return -int(ws.Signal())
	}
	return st.ExitCode()
}

// Signal sends sig to the process (not its group) while it runs.
func (p *Proc) Signal(sig syscall.Signal) error {
	if p.Exited() {
		return fmt.Errorf("pid %d: already exited", p.PID)
	}
	if err := syscall.Kill(p.PID, sig); err != nil {
		return fmt.Errorf("signal %v to pid %d: %w", sig, p.PID, err)
	}
	return nil
}

// Wait waits up to timeout for the exit and says whether it came.
func (p *Proc) Wait(timeout time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// Stop sends SIGTERM and waits up to grace, then kills the process group
// and reports that it had to.
func (p *Proc) Stop(grace time.Duration) error {
	_ = p.Signal(syscall.SIGTERM)
	if p.Wait(grace) {
		return nil
	}
	_ = syscall.Kill(-p.PID, syscall.SIGKILL)
	<-p.done
	return fmt.Errorf("pid %d did not exit within %s of SIGTERM; killed (log %s)", p.PID, grace, p.Log)
}

// Tail returns the last n bytes of a file, for error messages.
func Tail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(st.Size()-n, 0)
	buf := make([]byte, st.Size()-off)
	_, _ = f.ReadAt(buf, off)
	return string(buf)
}

// WaitLog waits until p's log holds want lines containing needle, failing
// early when p exits.
func WaitLog(ctx context.Context, p *Proc, needle string, want int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if n := CountLines(p.Log, needle); n >= want {
			return nil
		}
		if p.Exited() {
			return fmt.Errorf("pid %d exited before it was ready (%v); log tail:\n%s", p.PID, p.err, Tail(p.Log, 3000))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pid %d not ready within %s; log tail:\n%s", p.PID, timeout, Tail(p.Log, 3000))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// CountLines counts the lines of a file that contain needle.
func CountLines(path, needle string) int {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		if strings.Contains(sc.Text(), needle) {
			n++
		}
	}
	return n
}

// ---- /proc ----

// clkTck is USER_HZ, 100 on every Linux this runs on.
const clkTck = 100.0

// Stat is what /proc/PID/stat says of a process.
type Stat struct {
	State byte    // R, S, D, T (stopped), Z, …
	PPID  int     // parent
	CPU   float64 // utime + stime, seconds
	// ReapedCPU is cutime + cstime: the CPU seconds of the children it
	// has waited for, which no longer have a /proc entry of their own.
	ReapedCPU float64
}

// ReadStat reads /proc/PID/stat.
func ReadStat(pid int) (Stat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return Stat{}, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return Stat{}, fmt.Errorf("/proc/%d/stat: no command field", pid)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); ppid is field 4, utime 14, stime 15,
	// cutime 16, cstime 17.
	if len(f) < 15 || len(f[0]) != 1 {
		return Stat{}, fmt.Errorf("/proc/%d/stat: short line", pid)
	}
	ppid, _ := strconv.Atoi(f[1])
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	cut, _ := strconv.ParseFloat(f[13], 64)
	cst, _ := strconv.ParseFloat(f[14], 64)
	return Stat{State: f[0][0], PPID: ppid, CPU: (ut + st) / clkTck, ReapedCPU: (cut + cst) / clkTck}, nil
}

// CPU is the CPU seconds of pid so far (0 when it is gone).
func CPU(pid int) float64 {
	st, err := ReadStat(pid)
	if err != nil {
		return 0
	}
	return st.CPU
}

// Children lists the direct children of pid.
func Children(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := ReadStat(n); err == nil && st.PPID == pid {
			out = append(out, n)
		}
	}
	return out
}

// Descendants lists pid's children, their children and so on, each after
// its parent, from one reading of /proc.
func Descendants(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	kids := map[int][]int{}
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := ReadStat(n); err == nil {
			kids[st.PPID] = append(kids[st.PPID], n)
		}
	}
	var out []int
	for next := kids[pid]; len(next) > 0; {
		out = append(out, next...)
		var below []int
		for _, p := range next {
			below = append(below, kids[p]...)
		}
		next = below
	}
	return out
}

// TreeCPU is the CPU seconds of pid and of its children: the live ones and
// those it has reaped. Counting the reaped ones keeps a difference of two
// readings right when a child exits between them (a database connection
// closed mid-run): its CPU moves from the live sum to the reaped one
// instead of vanishing.
func TreeCPU(pid int) (own, children float64) {
	st, err := ReadStat(pid)
	if err != nil {
		return 0, 0
	}
	own, children = st.CPU, st.ReapedCPU
	for _, c := range Children(pid) {
		children += CPU(c)
	}
	return own, children
}

// StatusKB reads a "Key:  N kB" line of /proc/PID/status (VmRSS, VmHWM…);
// 0 when the process or the line is gone.
func StatusKB(pid int, key string) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	return 0
}
