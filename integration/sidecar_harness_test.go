package integration

// The black-box harness: build the real binary once, give each test a fresh
// Postgres database, write a manifest for the Python or the Node SDK, run
// `soniq-sidecar run` as a child, send it signals, read its JSON logs and
// the rows it wrote.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/backends/postgres"
	"github.com/soniq-dev/soniq-sidecar/backends/postgres/pgtest"
)

// repoRoot is the repository's root directory: the parent of integration/, where go test
// runs this package's tests. Not found from this file's path, which -trimpath (make test-pod)
// leaves relative to the module.
func repoRoot(t testing.TB) string {
	t.Helper()
	wd, err := os.Getwd()
	require.NoError(t, err)
	return filepath.Dir(wd)
}

// buildSidecar builds the binary once per test process. -race makes the
// black-box runs catch data races in the supervisor too.
var buildSidecar = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "soniq-sidecar-bin-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "soniq-sidecar")
	_, file, _, _ := runtime.Caller(0)
	cmd := exec.Command("go", "build", "-race", "-o", bin, "./cmd/soniq-sidecar")
	cmd.Dir = filepath.Dir(filepath.Dir(file))
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building soniq-sidecar: %v\n%s", err, out)
	}
	return bin, nil
})

func sidecarBinary(t testing.TB) string {
	t.Helper()
	bin, err := buildSidecar()
	require.NoError(t, err)
	return bin
}

// sdk is one handler SDK, over one transport, the black-box tests run against.
type sdk struct {
	name      string // the language: python or node
	transport string // the manifest's transport: stdio or unix
	command   func(root string) []string
	env       func(root string) map[string]string
}

var (
	pythonCommand = func(root string) []string {
		return []string{"python3", "-u", filepath.Join(root, "integration/testdata/handlers/test_handlers.py")}
	}
	pythonEnv = func(root string) map[string]string {
		return map[string]string{"PYTHONPATH": filepath.Join(root, "sdk/python")}
	}
	nodeCommand = func(root string) []string {
		return []string{"node", filepath.Join(root, "integration/testdata/handlers/test_handlers.js")}
	}
	nodeEnv = func(root string) map[string]string {
		return map[string]string{"TEST_NODE_SDK": filepath.Join(root, "sdk/node")}
	}
)

// sdks: every SDK over every transport (the unix one needs the SDKs' gRPC
// packages: the Python SDK's unix extra, which make test-go's python3 (.venv)
// has; npm ci in sdk/node).
var sdks = []sdk{
	{name: "python", transport: "stdio", command: pythonCommand, env: pythonEnv},
	{name: "python", transport: "unix", command: pythonCommand, env: pythonEnv},
	{name: "node", transport: "stdio", command: nodeCommand, env: nodeEnv},
	{name: "node", transport: "unix", command: nodeCommand, env: nodeEnv},
}

// testJobs are the jobs of the test handlers and their branch.
var testJobs = []struct {
	name        string
	cancellable bool
}{
	{"t.noop", true}, {"t.record", true}, {"t.sleep_async", true}, {"t.sleep_sync", false},
	{"t.stubborn", true}, {"t.fail", false}, {"t.snooze", true}, {"t.trace", true},
	{"t.crash", true}, {"t.await_cancel", true}, {"t.children", true},
}

// manifestOpts shapes a generated manifest.
type manifestOpts struct {
	processes, concurrency, syncConcurrency int
	recordFrames                            bool
	jobTimeout                              map[string]string // job name → timeout
	extraHandlers                           string            // raw YAML appended under handlers:
	limits                                  map[string]string // job name → its limit: mapping, as YAML
}

// env is a test's world: a database, a work directory, files the handlers write.
type world struct {
	t        *testing.T
	sdk      sdk
	root     string
	dir      string
	dbURL    string
	backend  *postgres.Backend
	db       *pgxpool.Pool // raw SQL for what the Backend interface does not expose
	record   string        // TEST_RECORD
	frames   string        // TEST_FRAMES
	manifest string
	sidecars int // started so far (each is another instance unless told: see launchSidecar)
}

func newWorld(t *testing.T, s sdk, o manifestOpts) *world {
	t.Helper()
	root := repoRoot(t)
	w := &world{t: t, sdk: s, root: root, dir: t.TempDir()}
	w.dbURL = pgtest.NewDatabase(t)
	w.record = filepath.Join(w.dir, "record.txt")
	w.frames = filepath.Join(w.dir, "frames.txt")
	ctx := context.Background()
	b, err := postgres.Open(ctx, w.dbURL)
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	require.NoError(t, b.Migrate(ctx))
	// As `soniq-sidecar migrate` sets a database up by default.
	require.NoError(t, b.CreateClaimIndex(ctx))
	w.backend = b
	w.db, err = pgxpool.New(ctx, w.dbURL)
	require.NoError(t, err)
	t.Cleanup(w.db.Close)
	w.manifest = w.writeManifest(o)
	return w
}

func (w *world) writeManifest(o manifestOpts) string {
	if o.processes == 0 {
		o.processes = 1
	}
	if o.concurrency == 0 {
		o.concurrency = 8
	}
	if o.syncConcurrency == 0 {
		o.syncConcurrency = min(4, o.concurrency)
	}
	cmd := w.sdk.command(w.root)
	env := w.sdk.env(w.root)
	if o.recordFrames {
		if w.sdk.transport == "unix" {
			// No frame stream to tap: the SDKs write each message they get
			// as the stdio frame it stands for, in the recorder's format.
			env["HANDLER_TRACE_FRAMES"] = w.frames
		} else {
			cmd = append([]string{"python3", "-u", filepath.Join(w.root, "integration/testdata/frame_recorder.py")}, cmd...)
		}
	}
	env["TEST_RECORD"] = w.record
	env["TEST_FRAMES"] = w.frames
	env["TEST_CONCURRENCY"] = fmt.Sprint(o.concurrency)
	env["TEST_SYNC_CONCURRENCY"] = fmt.Sprint(o.syncConcurrency)
	var b strings.Builder
	fmt.Fprintf(&b, "version: 1\nhandlers:\n  - name: %s-tests\n", w.sdk.name)
	cj, _ := json.Marshal(cmd)
	fmt.Fprintf(&b, "    command: %s\n    transport: %s\n    processes: %d\n    concurrency: %d\n    sync_concurrency: %d\n    startup_timeout: 20s\n",
		cj, w.sdk.transport, o.processes, o.concurrency, o.syncConcurrency)
	ej, _ := json.Marshal(env)
	fmt.Fprintf(&b, "    env: %s\n    jobs:\n", ej)
	for _, j := range testJobs {
		fmt.Fprintf(&b, "      - name: %s\n        cancellable: %t\n", j.name, j.cancellable)
		if to, ok := o.jobTimeout[j.name]; ok {
			fmt.Fprintf(&b, "        timeout: %s\n", to)
		}
		if l, ok := o.limits[j.name]; ok {
			fmt.Fprintf(&b, "        limit: %s\n", l)
		}
	}
	b.WriteString(o.extraHandlers)
	path := filepath.Join(w.dir, "manifest.yaml")
	require.NoError(w.t, os.WriteFile(path, []byte(b.String()), 0o644))
	return path
}

// enqueue adds a job through the backend (as a Soniq producer would).
func (w *world) enqueue(name string, args string, maxAttempts int) string {
	w.t.Helper()
	p := backends.EnqueueParams{Name: name, Args: json.RawMessage(args)}
	if maxAttempts > 0 {
		p.MaxAttempts = &maxAttempts
	}
	j, err := w.backend.Enqueue(context.Background(), p)
	require.NoError(w.t, err)
	return j.ID
}

func (w *world) job(id string) backends.Job {
	w.t.Helper()
	j, err := w.backend.Get(context.Background(), id)
	require.NoError(w.t, err, "reading job %s", id)
	return j
}

func (w *world) stats() backends.Stats {
	w.t.Helper()
	s, err := w.backend.Stats(context.Background())
	require.NoError(w.t, err)
	return s
}

// recorded returns the handler's record file lines as [event, id, pid, attempt].
func (w *world) recorded() [][]string {
	b, err := os.ReadFile(w.record)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(w.t, err)
	var out [][]string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if line != "" {
			out = append(out, strings.Fields(line))
		}
	}
	return out
}

// framesSent returns the frames the sidecar sent (recordFrames manifests).
func (w *world) framesSent() []map[string]any {
	b, err := os.ReadFile(w.frames)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(w.t, err)
	var out []map[string]any
	for _, line := range strings.Split(string(b), "\n") {
		if frame, ok := strings.CutPrefix(line, "> "); ok {
			var m map[string]any
			require.NoError(w.t, json.Unmarshal([]byte(frame), &m), "frame %q", frame)
			out = append(out, m)
		}
	}
	return out
}

// sidecar is one running `soniq-sidecar run`.
type sidecar struct {
	t   *testing.T
	cmd *exec.Cmd
	// pid is the sidecar's own process, which signals go to: cmd's, or,
	// in a pod's namespaces, the child of the unshare wrapper.
	pid     int
	mu      sync.Mutex
	lines   []map[string]any
	raw     bytes.Buffer
	done    chan struct{}
	exit    int
	exitAt  time.Time
	started time.Time
}

// startSidecar runs the binary with short production-shaped settings; env
// overrides them (SONIQ_* names, seconds).
func (w *world) startSidecar(env map[string]string, args ...string) *sidecar {
	w.t.Helper()
	return w.startSidecarGated(env, nil, args...)
}

// startSidecarGated is startSidecar, except that when gate is not nil the
// binary starts only once gate is closed: its pid is known before it
// registers (a shell waits for a line, then execs the binary in place).
func (w *world) startSidecarGated(env map[string]string, gate <-chan struct{}, args ...string) *sidecar {
	w.t.Helper()
	return w.launchSidecar(sidecarOpts{env: env, gate: gate, args: args})
}

// sidecarOpts say how launchSidecar runs the binary.
type sidecarOpts struct {
	env  map[string]string
	args []string
	gate <-chan struct{}
	// podHost, when set, runs the sidecar as a container runtime does:
	// pid 1 in a pid namespace of its own, on a hostname of its own (a UTS
	// namespace set to podHost), so a restart has the same hostname and
	// pid (podNamespaces).
	podHost string
}

// launchSidecar starts `soniq-sidecar run`. Every sidecar a test starts is
// another instance (SONIQ_INSTANCE soniq-sidecar-N from the second on), as
// the documentation asks of sidecars that share a hostname, unless the test
// names the instance itself: a restart of the same instance does.
func (w *world) launchSidecar(o sidecarOpts) *sidecar {
	w.t.Helper()
	env, args, gate := o.env, o.args, o.gate
	w.sidecars++
	full := map[string]string{
		"SONIQ_DATABASE_URL":       w.dbURL,
		"SONIQ_POLL_INTERVAL":      "0.2",
		"SONIQ_HEARTBEAT_INTERVAL": "0.5",
		"SONIQ_HEARTBEAT_TIMEOUT":  "30",
		// No Soniq worker shares a test database, and recovery tests need
		// timeouts of seconds, not Soniq's floor of a minute.
		"SONIQ_ALLOW_SHORT_HEARTBEAT_TIMEOUT": "true",
		"SONIQ_CLEANUP_INTERVAL":              "1",
		"SONIQ_SHUTDOWN_TIMEOUT":              "10",
		"PATH":                                os.Getenv("PATH"),
		"HOME":                                os.Getenv("HOME"),
		// The race runtime sleeps 1 s at exit by default; the exit-time
		// assertions measure the sidecar, not that.
		"GORACE": "atexit_sleep_ms=0",
	}
	if w.sidecars > 1 && !slices.Contains(args, "--instance") {
		full["SONIQ_INSTANCE"] = fmt.Sprintf("soniq-sidecar-%d", w.sidecars)
	}
	for k, v := range env {
		full[k] = v
	}
	cmdArgs := append([]string{"run", "--manifest", w.manifest, "--log-format", "json", "--metrics-addr", ""}, args...)
	cmd := exec.Command(sidecarBinary(w.t), cmdArgs...)
	if o.podHost != "" {
		ns := podNamespaces(w.t)
		cmd = exec.Command(ns[0], append(append(ns[1:], "--", "/bin/sh", "-c", `hostname "$0" && exec "$@"`, o.podHost, sidecarBinary(w.t)), cmdArgs...)...)
	}
	var release io.WriteCloser
	if gate != nil {
		cmd = exec.Command("/bin/sh", append([]string{"-c", `read _ && exec "$0" "$@"`, sidecarBinary(w.t)}, cmdArgs...)...)
		var err error
		release, err = cmd.StdinPipe()
		require.NoError(w.t, err)
	}
	cmd.Dir = w.dir
	for k, v := range full {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	stderr, err := cmd.StderrPipe()
	require.NoError(w.t, err)
	s := &sidecar{t: w.t, cmd: cmd, done: make(chan struct{}), started: time.Now()}
	require.NoError(w.t, cmd.Start())
	s.pid = cmd.Process.Pid
	if o.podHost != "" {
		s.pid = namespacedChild(w.t, cmd.Process.Pid)
	}
	if gate != nil {
		go func() {
			<-gate
			_, _ = io.WriteString(release, "go\n")
		}()
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
		for sc.Scan() {
			line := sc.Bytes()
			s.mu.Lock()
			s.raw.Write(line)
			s.raw.WriteByte('\n')
			var m map[string]any
			if json.Unmarshal(line, &m) == nil {
				s.lines = append(s.lines, m)
			}
			s.mu.Unlock()
		}
		err := cmd.Wait()
		s.mu.Lock()
		s.exitAt = time.Now()
		s.exit = cmd.ProcessState.ExitCode()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			s.exit = -int(ws.Signal())
		}
		_ = err
		s.mu.Unlock()
		close(s.done)
	}()
	w.t.Cleanup(func() {
		select {
		case <-s.done:
		default:
			_ = cmd.Process.Kill()
			<-s.done
		}
		// Whatever the scenario, the engine keeps to its own diagrams and
		// never panics.
		for _, bug := range []string{"impossible process state transition", "panic:"} {
			if strings.Contains(s.rawString(), bug) {
				w.t.Errorf("the sidecar logged %q", bug)
			}
		}
		if w.t.Failed() {
			s.mu.Lock()
			w.t.Logf("sidecar log:\n%s", s.raw.String())
			s.mu.Unlock()
		}
	})
	return s
}

func (s *sidecar) rawString() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.raw.String()
}

func (s *sidecar) signal(sig syscall.Signal) time.Time {
	s.t.Helper()
	require.NoError(s.t, syscall.Kill(s.pid, sig))
	return time.Now()
}

// wait waits for the process to exit and returns its exit code and time.
func (s *sidecar) wait(timeout time.Duration) (int, time.Time) {
	s.t.Helper()
	select {
	case <-s.done:
	case <-time.After(timeout):
		s.t.Fatalf("sidecar did not exit within %s", timeout)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exit, s.exitAt
}

func (s *sidecar) exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// logs returns the JSON log lines whose msg contains substr.
func (s *sidecar) logs(substr string) []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for _, m := range s.lines {
		if msg, _ := m["msg"].(string); strings.Contains(msg, substr) {
			out = append(out, m)
		}
	}
	return out
}

// waitLog waits for a log line whose msg contains substr and whose
// attributes include every key/value in attrs.
func (s *sidecar) waitLog(timeout time.Duration, substr string, attrs map[string]any) map[string]any {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		for _, m := range s.logs(substr) {
			if matches(m, attrs) {
				return m
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.t.Fatalf("no log line %q %v within %s", substr, attrs, timeout)
	return nil
}

func matches(m map[string]any, attrs map[string]any) bool {
	for k, v := range attrs {
		if fmt.Sprint(m[k]) != fmt.Sprint(v) {
			return false
		}
	}
	return true
}

// eventually polls cond until it holds or fails the test after timeout.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("timed out after %s waiting for: %s", timeout, what)
}

// forEachSDK runs a black-box test once per SDK and transport.
func forEachSDK(t *testing.T, f func(t *testing.T, s sdk)) {
	for _, s := range sdks {
		t.Run(s.name+"/"+s.transport, func(t *testing.T) {
			t.Parallel()
			f(t, s)
		})
	}
}

// podNamespaces is the command prefix that runs a process in new pid,
// mount (for its own /proc) and UTS namespaces, as a container runtime
// does: the process is pid 1 there, and is killed with the wrapper
// (--kill-child). As root that is plain unshare; otherwise a user namespace
// maps the caller to root first. The pod tests need it: they fail, never
// skip, where namespaces are not available.
var podNamespaces = func() func(t testing.TB) []string {
	probe := sync.OnceValues(func() ([]string, error) {
		base := []string{"unshare", "--pid", "--fork", "--mount-proc", "--uts", "--kill-child"}
		if os.Geteuid() != 0 {
			base = append([]string{"unshare", "--user", "--map-root-user"}, base[1:]...)
		}
		out, err := exec.Command(base[0], append(base[1:], "--", "/bin/sh", "-c", `hostname probe-pod && echo "$$ $(hostname)"`)...).CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "1 probe-pod" {
			return nil, fmt.Errorf("running a process as pid 1 in its own pid and UTS namespaces (%q) failed: %v: %s", base, err, out)
		}
		return base, nil
	})
	return func(t testing.TB) []string {
		t.Helper()
		ns, err := probe()
		require.NoError(t, err, "the pod tests need Linux namespaces (util-linux unshare, as root or with user namespaces)")
		return ns
	}
}()

// namespacedChild returns the host pid of the sidecar the unshare wrapper
// pid started (its child, once the shell has exec'ed the binary).
func namespacedChild(t testing.TB, pid int) int {
	t.Helper()
	var child int
	eventually(t.(*testing.T), 10*time.Second, "the sidecar running as pid 1 in its namespace", func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
		if err != nil {
			return false
		}
		f := strings.Fields(string(b))
		if len(f) != 1 {
			return false
		}
		if _, err := fmt.Sscan(f[0], &child); err != nil {
			return false
		}
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", child))
		return err == nil && strings.TrimSpace(string(comm)) == "soniq-sidecar"
	})
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", child))
	require.NoError(t, err)
	require.Regexp(t, `(?m)^NSpid:\s+\d+\s+1$`, string(status), "the sidecar is pid 1 in its pid namespace")
	return child
}
