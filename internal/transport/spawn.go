package transport

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/soniq-dev/soniq-sidecar/config"
	"github.com/soniq-dev/soniq-sidecar/protocol"
)

// spawnRequest asks the spawner to run a function that forks a child.
type spawnRequest struct {
	fork  func() error
	reply chan error
}

// Spawner starts every child from one goroutine locked to its OS thread.
// Linux delivers the parent-death signal when the *thread* that forked the
// child exits, not the process; Go may retire idle threads, so children
// forked from arbitrary goroutines could be killed at random. The spawner's
// thread lives exactly as long as the Spawner (StartSpawner to Stop), so its
// children are killed if the sidecar dies and never before.
type Spawner struct {
	reqs chan spawnRequest
	stop chan struct{}
	done chan struct{}
}

// StartSpawner starts the spawner's goroutine; Stop ends it.
func StartSpawner() *Spawner {
	s := &Spawner{reqs: make(chan spawnRequest), stop: make(chan struct{}), done: make(chan struct{})}
	go s.run()
	return s
}

// Stop ends the spawner's goroutine (and its thread) and waits for it. A
// child it forked gets the parent-death signal then: stop the spawner once
// its children are gone.
func (s *Spawner) Stop() {
	close(s.stop)
	<-s.done
}

// run serves spawn requests until stop is closed. It deliberately never
// unlocks the thread: when run returns, the thread exits with it.
func (s *Spawner) run() {
	defer close(s.done)
	runtime.LockOSThread()
	for {
		select {
		case r := <-s.reqs:
			r.reply <- r.fork()
		case <-s.stop:
			return
		}
	}
}

// start starts cmd on the spawner's thread.
func (s *Spawner) start(cmd *exec.Cmd) error { return s.do(cmd.Start) }

// do runs fork, which starts a child process (e.g. a go-plugin client's
// Start), on the spawner's thread.
func (s *Spawner) do(fork func() error) error {
	reply := make(chan error, 1)
	select {
	case s.reqs <- spawnRequest{fork: fork, reply: reply}:
	case <-s.done:
		return errors.New("spawner stopped")
	}
	return <-reply
}

// childEnv is the child's whole environment: the manifest's env, the
// variables it names in env_from, and the protocol variables. Nothing else
// of the sidecar's environment (notably the database URL) reaches the handler.
func childEnv(h *config.Handler, maxFrame int) []string {
	env := make([]string, 0, len(h.Env)+len(h.EnvFrom)+4)
	for _, k := range h.EnvFrom {
		if _, set := h.Env[k]; set {
			continue
		}
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	for k, v := range h.Env {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	return append(env,
		"SONIQ_PROTOCOL_VERSIONS="+strconv.Itoa(protocol.Version),
		"SONIQ_TRANSPORT="+string(h.Transport),
		"SONIQ_HANDLER="+h.Name,
		"SONIQ_MAX_FRAME_BYTES="+strconv.Itoa(maxFrame),
		"SONIQ_FEATURES="+strings.Join(Features(), ","),
	)
}

// handlerCommand builds (does not start) the command of a handler: its own
// process group, the parent-death signal, the restricted environment, the
// manifest's working directory. Both transports start children from it.
func handlerCommand(h *config.Handler, maxFrame int) (*exec.Cmd, error) {
	path, err := resolveCommand(h)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, h.Command[1:]...)
	cmd.Dir = h.Workdir
	cmd.Env = childEnv(h, maxFrame)
	cmd.SysProcAttr = childSysProcAttr()
	return cmd, nil
}

// resolveCommand returns the path a handler's command starts from.
func resolveCommand(h *config.Handler) (string, error) {
	path := h.Command[0]
	if strings.Contains(path, "/") {
		return path, nil
	}
	// Resolve with the sidecar's PATH: the child's environment is the
	// manifest's alone and may not have one. The child is started by the
	// resolved path, argv[0] included: an interpreter finds its virtualenv
	// (pyvenv.cfg beside it) or its nvm/pyenv install from its own path,
	// and with a bare name and no PATH it would run as the base
	// interpreter without the venv's packages.
	lp, err := exec.LookPath(path)
	if err != nil {
		return "", err
	}
	return filepath.Abs(lp)
}

// CheckCommand reports why a spawned handler's command could never start
// (its working directory or its executable missing, or not executable),
// without starting anything; nil when it can start (or the handler is
// attached: it has no command).
func CheckCommand(h *config.Handler) error {
	if len(h.Attach) > 0 || len(h.Command) == 0 {
		return nil
	}
	if h.Workdir != "" {
		st, err := os.Stat(h.Workdir)
		if err != nil {
			return fmt.Errorf("workdir: %w", err)
		}
		if !st.IsDir() {
			return fmt.Errorf("workdir %s: %w", h.Workdir, syscall.ENOTDIR)
		}
	}
	path, err := resolveCommand(h)
	if err != nil {
		return err
	}
	if !filepath.IsAbs(path) && h.Workdir != "" {
		path = filepath.Join(h.Workdir, path) // as exec resolves it against the child's Dir
	}
	st, err := os.Stat(path)
	switch {
	case err != nil:
		return err
	case st.IsDir() || st.Mode()&0o111 == 0:
		return fmt.Errorf("%s: %w", path, fs.ErrPermission)
	}
	return nil
}

// startChild starts a stdio handler child through the spawner.
func startChild(sp *Spawner, h *config.Handler, maxFrame int) (*exec.Cmd, childPipes, error) {
	cmd, err := handlerCommand(h, maxFrame)
	if err != nil {
		return nil, childPipes{}, err
	}
	pp, child, err := attachPipes(cmd, true)
	if err != nil {
		return nil, pp, fmt.Errorf("handler %s: %w", h.Name, err)
	}
	err = sp.start(cmd)
	for _, f := range child {
		_ = f.Close() // the child has its copies; ours would hide its EOF
	}
	if err != nil {
		pp.close()
		return nil, childPipes{}, fmt.Errorf("handler %s: starting %s: %w", h.Name, strings.Join(h.Command, " "), err)
	}
	return cmd, pp, nil
}
