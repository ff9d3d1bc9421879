package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// worker is one process the driver started (a sidecar or a Soniq worker).
type worker struct {
	cmd  *exec.Cmd
	pid  int
	log  string
	done chan struct{} // closed at exit
	err  error         // exit status, valid after done
	exit time.Time     // when Wait returned
}

var (
	liveMu sync.Mutex
	live   = map[*worker]bool{}
)

// start runs argv with env in its own process group, stdout and stderr to
// logPath (a file, so Wait returns at the exit itself and not after a pipe
// drains).
func start(argv, env []string, dir, logPath string) (*worker, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env, cmd.Dir, cmd.Stdout, cmd.Stderr = env, dir, f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", strings.Join(argv, " "), err)
	}
	w := &worker{cmd: cmd, pid: cmd.Process.Pid, log: logPath, done: make(chan struct{})}
	liveMu.Lock()
	live[w] = true
	liveMu.Unlock()
	go func() {
		w.err = cmd.Wait()
		w.exit = time.Now()
		liveMu.Lock()
		delete(live, w)
		liveMu.Unlock()
		close(w.done)
	}()
	return w, nil
}

// startPiped is start for a process the driver talks to: its stdin and
// stdout are pipes (the returned writer and reader; the reader ends when the
// process and its children have closed their end), its stderr goes to
// logPath.
func startPiped(argv, env []string, dir, logPath string) (*worker, io.WriteCloser, io.ReadCloser, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, nil, nil, err
	}
	defer f.Close()
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, nil, nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, nil, nil, err
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
	w := &worker{cmd: cmd, pid: cmd.Process.Pid, log: logPath, done: make(chan struct{})}
	liveMu.Lock()
	live[w] = true
	liveMu.Unlock()
	go func() {
		w.err = cmd.Wait()
		w.exit = time.Now()
		liveMu.Lock()
		delete(live, w)
		liveMu.Unlock()
		close(w.done)
	}()
	return w, inW, outR, nil
}

func (w *worker) signal(s syscall.Signal) {
	if !w.exited() {
		_ = syscall.Kill(w.pid, s)
	}
}

// stop sends SIGTERM and waits up to grace, then kills the process group.
func (w *worker) stop(grace time.Duration) error {
	w.signal(syscall.SIGTERM)
	select {
	case <-w.done:
		return nil
	case <-time.After(grace):
		_ = syscall.Kill(-w.pid, syscall.SIGKILL)
		<-w.done
		return fmt.Errorf("pid %d did not exit within %s of SIGTERM; killed (log %s)", w.pid, grace, w.log)
	}
}

func (w *worker) exited() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// killAll ends every process the driver started and still runs (on an
// interrupt or a failure), with the process groups they lead.
func killAll() {
	liveMu.Lock()
	ws := make([]*worker, 0, len(live))
	for w := range live {
		ws = append(ws, w)
	}
	liveMu.Unlock()
	for _, w := range ws {
		_ = syscall.Kill(-w.pid, syscall.SIGKILL)
		_ = syscall.Kill(w.pid, syscall.SIGKILL)
	}
}

// tail returns the last n bytes of a log, for error messages.
func tail(path string, n int64) string {
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

// waitLog waits until the log holds want lines containing needle.
func waitLog(ctx context.Context, w *worker, needle string, want int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if n := countLines(w.log, needle); n >= want {
			return nil
		}
		if w.exited() {
			return fmt.Errorf("pid %d exited before it was ready (%v); log tail:\n%s", w.pid, w.err, tail(w.log, 3000))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pid %d not ready within %s; log tail:\n%s", w.pid, timeout, tail(w.log, 3000))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func countLines(path, needle string) int {
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

// ---- /proc accounting ----

var clkTck = 100.0 // USER_HZ; 100 on every Linux this runs on

// procStat is what the driver reads from /proc/PID/stat.
type procStat struct {
	ppid int
	cpu  float64 // utime + stime, seconds
}

func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procStat{}, errors.New("bad stat")
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); ppid is field 4, utime 14, stime 15.
	if len(f) < 13 {
		return procStat{}, errors.New("short stat")
	}
	ppid, _ := strconv.Atoi(f[1])
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return procStat{ppid: ppid, cpu: (ut + st) / clkTck}, nil
}

func cpuOf(pid int) float64 {
	st, err := readStat(pid)
	if err != nil {
		return 0
	}
	return st.cpu
}

// childrenOf lists the direct children of pid.
func childrenOf(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := readStat(n); err == nil && st.ppid == pid {
			out = append(out, n)
		}
	}
	return out
}

// treeCPU is the CPU seconds of pid and its direct children.
func treeCPU(pid int) (own, children float64) {
	own = cpuOf(pid)
	for _, c := range childrenOf(pid) {
		children += cpuOf(c)
	}
	return own, children
}

// statusKB reads a "Vm…:  N kB" line of /proc/PID/status.
func statusKB(pid int, key string) int {
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

// machine describes the host for the report.
func machine() map[string]string {
	m := map[string]string{}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				m["cpu"] = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	m["cores"] = strconv.Itoa(numCPU())
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				kb, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
				m["memory"] = fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
			}
		}
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		f := strings.Fields(string(b))
		if len(f) >= 3 {
			m["loadavg"] = strings.Join(f[:3], " ")
		}
	}
	m["kernel"] = output("", "uname", "-srm")
	return m
}

// output runs a command and returns its trimmed stdout (or "unknown").
func output(dir string, argv ...string) string {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	b, err := cmd.Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}

func abs(p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	return a
}
