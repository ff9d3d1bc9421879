package integration

// A simulated pod: the handler runs as its own process (its own process
// group, started by the test, not by the sidecar) serving a socket with
// --listen, and the sidecar attaches to it from a manifest with `attach:`.
// Every pod sequence of docs/shutdown.md ("Two containers") is driven with
// real signals; assertions on rows, frames, logs and exit codes.

import (
	"bufio"
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// podSDKs are the SDKs whose test handlers run in attach mode (--listen).
var podSDKs = []sdk{
	{name: "python", transport: "attach", command: pythonCommand, env: pythonEnv},
	{name: "node", transport: "attach", command: nodeCommand, env: nodeEnv},
}

func forEachPodSDK(t *testing.T, f func(t *testing.T, s sdk)) {
	for _, s := range podSDKs {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			f(t, s)
		})
	}
}

// pod is a world whose handler container is simulated by a process the
// test starts.
type pod struct {
	*world
	sock     string
	env      map[string]string // the handler's environment (record files, concurrency)
	cred     *syscall.Credential
	manifest string // the attach manifest naming sock
}

// newPod writes an attach manifest for the test handlers on a socket in a
// directory of its own (the emptyDir).
func newPod(t *testing.T, s sdk, o manifestOpts) *pod {
	t.Helper()
	w := newWorld(t, s, o)
	if o.concurrency == 0 {
		o.concurrency = 8
	}
	if o.syncConcurrency == 0 {
		o.syncConcurrency = min(4, o.concurrency)
	}
	// Short: a socket path must stay below 108 bytes.
	dir, err := os.MkdirTemp("", "soniq-pod-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	p := &pod{world: w, sock: filepath.Join(dir, "handler.sock")}
	p.cred = p.handlerUser(t, dir)
	p.env = s.env(w.root)
	p.env["TEST_RECORD"] = w.record
	p.env["TEST_FRAMES"] = w.frames
	p.env["HANDLER_TRACE_FRAMES"] = w.frames
	p.env["TEST_CONCURRENCY"] = fmt.Sprint(o.concurrency)
	p.env["TEST_SYNC_CONCURRENCY"] = fmt.Sprint(o.syncConcurrency)
	p.writeManifest(t, filepath.Join(w.dir, "attach.yaml"), o)
	w.manifest = p.manifest
	return p
}

// writeManifest writes the attach manifest naming p.sock at path.
func (p *pod) writeManifest(t *testing.T, path string, o manifestOpts) {
	t.Helper()
	s := p.sdk
	if o.concurrency == 0 {
		o.concurrency = 8
	}
	if o.syncConcurrency == 0 {
		o.syncConcurrency = min(4, o.concurrency)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "version: 1\nhandlers:\n  - name: %s-tests\n", s.name)
	fmt.Fprintf(&b, "    attach: %s\n    concurrency: %d\n    sync_concurrency: %d\n    startup_timeout: 20s\n    jobs:\n",
		p.sock, o.concurrency, o.syncConcurrency)
	for _, j := range testJobs {
		fmt.Fprintf(&b, "      - name: %s\n        cancellable: %t\n", j.name, j.cancellable)
	}
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o644))
	p.manifest = path
}

// handlerUser: in a pod the handler container runs as another user sharing
// a group (fsGroup) with the sidecar. As root the test tries that: uid and
// gid 65534 with the socket directory group-owned and setgid. It runs the
// handler as the test's own user when that user cannot run the SDK's
// interpreter (a virtualenv under a private home), and says so.
func (p *pod) handlerUser(t *testing.T, dir string) *syscall.Credential {
	if os.Geteuid() != 0 {
		return nil
	}
	const id = 65534
	cred := &syscall.Credential{Uid: id, Gid: id}
	argv := p.sdk.command(p.root)
	probe := exec.Command(argv[0], "-c", "pass")
	if p.sdk.name != "python" {
		probe = exec.Command(argv[0], "-e", "0")
	}
	probe.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	probe.Env = []string{"PATH=" + os.Getenv("PATH")}
	if out, err := probe.CombinedOutput(); err != nil {
		t.Logf("handler runs as the test's own user: uid %d cannot run %s (%v: %s)", id, argv[0], err, strings.TrimSpace(string(out)))
		return nil
	}
	require.NoError(t, os.Chown(dir, 0, id))
	require.NoError(t, os.Chmod(dir, 0o2770))
	// The record files the test handlers write live in the world's
	// directory (t.TempDir: its parent is private too).
	require.NoError(t, os.Chmod(filepath.Dir(p.dir), 0o755))
	require.NoError(t, os.Chmod(p.dir, 0o777))
	t.Logf("handler runs as uid %d gid %d; the socket directory is group %d, setgid, 2770", id, id, id)
	return cred
}

// podHandler is the handler container's process.
type podHandler struct {
	stderrLog
	cmd    *exec.Cmd
	exited chan struct{}
	code   int
}

// startHandler starts the test handler with --listen on the pod's socket,
// in its own process group, and waits until it listens.
func (p *pod) startHandler(t *testing.T) *podHandler {
	t.Helper()
	argv := append(p.sdk.command(p.root), "--listen", p.sock)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir()}
	for k, v := range p.env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: p.cred}
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	h := &podHandler{stderrLog: stderrLog{t: t}, cmd: cmd, exited: make(chan struct{})}
	go func() { // owned by h: ends at the pipe's EOF, then reaps the process
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			h.add(sc.Text())
		}
		_ = cmd.Wait()
		h.code = cmd.ProcessState.ExitCode()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			h.code = -int(ws.Signal())
		}
		close(h.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-h.exited:
		default:
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-h.exited
		}
		if t.Failed() {
			t.Logf("handler stderr:\n%s", strings.Join(h.stderr(), "\n"))
		}
	})
	h.waitStderr(20*time.Second, "listening on")
	st, err := os.Stat(p.sock)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o660), st.Mode().Perm(), "socket mode")
	return h
}

// signal signals the handler's process group, as a container runtime
// signals a container's processes.
func (h *podHandler) signal(sig syscall.Signal) {
	h.t.Helper()
	require.NoError(h.t, syscall.Kill(-h.cmd.Process.Pid, sig))
}

func (h *podHandler) wait(timeout time.Duration) int {
	h.t.Helper()
	select {
	case <-h.exited:
		return h.code
	case <-time.After(timeout):
		h.t.Fatalf("handler still running after %s", timeout)
		return 0
	}
}

func (h *podHandler) running() bool {
	select {
	case <-h.exited:
		return false
	default:
		return true
	}
}

// attachedTo waits until the sidecar has a session with the handler.
func attachedTo(t *testing.T, sc *sidecar) {
	t.Helper()
	sc.waitLog(30*time.Second, "handler process ready", nil)
}

// started returns how many times the handler started job id.
func (w *world) started(id string) int {
	return countEvents(w.recorded(), "start", id) + countEvents(w.recorded(), "run", id)
}

// eventTime is when the handler recorded event for id (by the order of the
// record file: the index of its line).
func (w *world) eventIndex(event, id string) int {
	for i, r := range w.recorded() {
		if r[0] == event && r[1] == id {
			return i
		}
	}
	return -1
}

func TestAttachPodNormalRun(t *testing.T) {
	t.Parallel()
	forEachPodSDK(t, func(t *testing.T, s sdk) {
		p := newPod(t, s, manifestOpts{})
		// The sidecar first: it waits for the endpoint, not ready, naming it.
		sc := p.startSidecar(nil, "--metrics-addr", "127.0.0.1:0")
		addr := sc.httpAddr(t)
		eventually(t, 10*time.Second, "/readyz 503 naming the missing endpoint", func() bool {
			c, body := httpGet("http://" + addr + "/readyz")
			return c == 503 && strings.Contains(body, "no attached endpoint") && strings.Contains(body, p.sock)
		})
		h := p.startHandler(t)
		attachedTo(t, sc)
		eventually(t, 10*time.Second, "/readyz 200", func() bool {
			c, _ := httpGet("http://" + addr + "/readyz")
			return c == 200
		})
		a := p.enqueue("t.sleep_async", `{"seconds":0.2}`, 0)
		b := p.enqueue("t.sleep_sync", `{"seconds":0.2}`, 0)
		c := p.enqueue("t.record", `{}`, 0)
		f := p.enqueue("t.fail", `{}`, 1)
		p.waitDone(t, sc, 30*time.Second, a, b, c)
		eventually(t, 20*time.Second, "the failing job dead-lettered", func() bool {
			_, err := p.backend.Get(context.Background(), f)
			return err != nil
		})
		_, metrics := httpGet("http://" + addr + "/metrics")
		assert.Contains(t, metrics, `soniq_attach_endpoints{handler="`+s.name+`-tests"`)
		assert.Empty(t, sc.logs("signalling it"), "an attached process is never signalled")

		// The sidecar alone stops: its session ends, the handler lives on.
		sc.signal(syscall.SIGTERM)
		code, _ := sc.wait(20 * time.Second)
		assert.Equal(t, 0, code)
		require.True(t, h.running(), "the handler outlives the sidecar's session")
		h.signal(syscall.SIGTERM)
		assert.Equal(t, 0, h.wait(10*time.Second))
		_, err := os.Stat(p.sock)
		assert.True(t, os.IsNotExist(err), "the socket is removed on a clean exit")
	})
}

// Ordinary pod termination: both containers get SIGTERM at once; every
// path of the shutdown diagram.
func TestAttachPodBothSignalled(t *testing.T) {
	// Serial: it bounds the exit past shutdown_timeout to exitTolerance (1 s), which
	// other tests' load on the machine would stretch.
	forEachPodSDK(t, func(t *testing.T, s sdk) {
		t.Run("drain completes", func(t *testing.T) {
			t.Parallel()
			p := newPod(t, s, manifestOpts{})
			h := p.startHandler(t)
			sc := p.startSidecar(map[string]string{"SONIQ_SHUTDOWN_TIMEOUT": "10"})
			attachedTo(t, sc)
			a := p.enqueue("t.sleep_async", `{"seconds":1.5}`, 0)
			b := p.enqueue("t.sleep_sync", `{"seconds":1.5}`, 0)
			p.waitStarted(t, a, b)
			sent := sc.signal(syscall.SIGTERM)
			h.signal(syscall.SIGTERM)
			code, at := sc.wait(15 * time.Second)
			require.Equal(t, 0, code)
			assert.Less(t, at.Sub(sent), 10*time.Second, "drain must not wait for shutdown_timeout")
			for _, id := range []string{a, b} {
				assert.Equal(t, backends.StatusDone, p.job(id).Status, id)
				assert.Empty(t, cancelFrames(p.framesSent(), id), "no cancel while draining")
			}
			assert.Equal(t, 0, h.wait(10*time.Second), "the handler exits 0 once it holds no job")
			sc.waitLog(time.Second, "state transition", map[string]any{"state": "STOPPED", "from": "DRAINING"})
		})
		t.Run("async forced", func(t *testing.T) {
			t.Parallel()
			p := newPod(t, s, manifestOpts{})
			h := p.startHandler(t)
			sc := p.startSidecar(map[string]string{"SONIQ_SHUTDOWN_TIMEOUT": "1.5"})
			attachedTo(t, sc)
			id := p.enqueue("t.sleep_async", `{"seconds":60}`, 5)
			p.waitStarted(t, id)
			before := p.job(id)
			sent := sc.signal(syscall.SIGTERM)
			h.signal(syscall.SIGTERM)
			code, at := sc.wait(20 * time.Second)
			elapsed := at.Sub(sent)
			t.Logf("%s attached: SIGTERM → exit %s (shutdown_timeout 1.5s)", s.name, elapsed)
			require.Equal(t, 0, code)
			assert.GreaterOrEqual(t, elapsed, 1500*time.Millisecond, "the async job gets the whole shutdown_timeout")
			assert.Less(t, elapsed, 1500*time.Millisecond+exitTolerance, "exit is bounded by shutdown_timeout")
			j := p.job(id)
			assert.Equal(t, backends.StatusQueued, j.Status)
			assert.Equal(t, before.Attempts, j.Attempts, "attempts preserved")
			assert.Equal(t, []string{"shutdown_timeout"}, cancelFrames(p.framesSent(), id))
			sc.waitLog(time.Second, "shutdown_nack", map[string]any{"job_id": id, "reason": "shutdown_timeout"})
			assert.Equal(t, 0, h.wait(10*time.Second), "the handler exits 0 once the cancelled job ended")
		})
		t.Run("sync beyond grace", func(t *testing.T) {
			t.Parallel()
			p := newPod(t, s, manifestOpts{})
			h := p.startHandler(t)
			sc := p.startSidecar(map[string]string{"SONIQ_SHUTDOWN_TIMEOUT": "1", "SONIQ_SYNC_HANDLER_GRACE_SECONDS": "1"})
			attachedTo(t, sc)
			id := p.enqueue("t.sleep_sync", `{"seconds":4}`, 0)
			p.waitStarted(t, id)
			sc.signal(syscall.SIGTERM)
			h.signal(syscall.SIGTERM)
			sc.waitLog(10*time.Second, "state transition", map[string]any{"state": "WAIT_FOR_THREAD"})
			require.True(t, h.running(), "the handler keeps its sync job")
			assert.Equal(t, backends.StatusProcessing, p.job(id).Status, "no NACK on the sync branch")
			code, _ := sc.wait(20 * time.Second)
			require.Equal(t, 0, code)
			assert.Equal(t, backends.StatusDone, p.job(id).Status)
			assert.Empty(t, cancelFrames(p.framesSent(), id))
			assert.Equal(t, 0, h.wait(10*time.Second))
		})
	})
}

// A draining handler exits only once its last result is written: the
// sidecar ends the session of an idle draining handler after acknowledging
// its results, not before (the handler would exit with a result it cannot
// know was written). The database answers slowly here, so the write takes
// far longer than the session's end would.
func TestAttachPodHandlerSIGTERMWaitsForTheWrite(t *testing.T) {
	t.Parallel()
	forEachPodSDK(t, func(t *testing.T, s sdk) {
		p := newPod(t, s, manifestOpts{})
		u, err := url.Parse(p.dbURL)
		require.NoError(t, err)
		proxy := newSlowProxy(t, u.Host, 150*time.Millisecond)
		u.Host = proxy.ln.Addr().String()
		h := p.startHandler(t)
		sc := p.startSidecar(map[string]string{"SONIQ_DATABASE_URL": u.String()})
		attachedTo(t, sc)
		a := p.enqueue("t.sleep_sync", `{"seconds":1}`, 0)
		p.waitStarted(t, a)
		h.signal(syscall.SIGTERM)
		assert.Equal(t, 0, h.wait(20*time.Second), "the handler exits 0 once its job ended")
		assert.Equal(t, backends.StatusDone, p.job(a).Status, "its result was written before the handler left")
		assert.NotContains(t, strings.Join(h.stderr(), "\n"), "undelivered")
	})
}

// The handler container alone is stopped (SIGTERM): it drains, the sidecar
// sends it nothing more, then a new handler container takes the socket.
func TestAttachPodHandlerSIGTERM(t *testing.T) {
	t.Parallel()
	forEachPodSDK(t, func(t *testing.T, s sdk) {
		p := newPod(t, s, manifestOpts{})
		h := p.startHandler(t)
		sc := p.startSidecar(nil, "--metrics-addr", "127.0.0.1:0")
		addr := sc.httpAddr(t)
		attachedTo(t, sc)
		a := p.enqueue("t.sleep_sync", `{"seconds":2}`, 0)
		p.waitStarted(t, a)
		h.signal(syscall.SIGTERM)
		sc.waitLog(10*time.Second, "attached handler is draining", nil)
		b := p.enqueue("t.record", `{}`, 0)
		assert.Equal(t, 0, h.wait(15*time.Second), "the handler exits 0 once its job ended")
		assert.Equal(t, backends.StatusDone, p.job(a).Status, "its job's result still arrived")
		assert.Equal(t, 0, p.started(b), "nothing was dispatched to a draining handler")
		eventually(t, 10*time.Second, "/readyz 503 while no endpoint is attached", func() bool {
			c, body := httpGet("http://" + addr + "/readyz")
			return c == 503 && strings.Contains(body, p.sock)
		})
		// The container restarts: same path, a fresh session.
		p.startHandler(t)
		p.waitDone(t, sc, 30*time.Second, b)
		eventually(t, 10*time.Second, "/readyz 200 again", func() bool {
			c, _ := httpGet("http://" + addr + "/readyz")
			return c == 200
		})
		sc.stop(t)
	})
}

// The handler container is killed (SIGKILL) while it runs a job: a crash
// of that process for its job, then a new handler on the same path.
func TestAttachPodHandlerSIGKILL(t *testing.T) {
	t.Parallel()
	forEachPodSDK(t, func(t *testing.T, s sdk) {
		p := newPod(t, s, manifestOpts{})
		h := p.startHandler(t)
		sc := p.startSidecar(nil, "--metrics-addr", "127.0.0.1:0")
		addr := sc.httpAddr(t)
		attachedTo(t, sc)
		id := p.enqueue("t.sleep_async", `{"seconds":1}`, 3)
		p.waitStarted(t, id)
		h.signal(syscall.SIGKILL)
		assert.Equal(t, -int(syscall.SIGKILL), h.wait(10*time.Second))
		var j backends.Job
		eventually(t, 10*time.Second, "the row released for a retry", func() bool {
			j = p.job(id)
			return j.Status != backends.StatusProcessing
		})
		require.NotNil(t, j.LastError)
		assert.Contains(t, *j.LastError, "the connection to the handler at "+p.sock+" was lost")
		assert.Equal(t, 1, j.Attempts)
		// A new container on the same path (the stale socket file is replaced).
		p.startHandler(t)
		p.waitDone(t, sc, 40*time.Second, id)
		assert.Equal(t, 2, p.job(id).Attempts)
		_, metrics := httpGet("http://" + addr + "/metrics")
		assert.Contains(t, metrics, `event="lost"`)
		assert.Contains(t, metrics, `reason="connection_lost"`)
		assert.Contains(t, metrics, `event="reconnected"`)
		sc.stop(t)
	})
}

// Two sidecars on one endpoint: the second is refused, with a clear error
// on both sides, and the first keeps working.
func TestAttachPodSecondSidecarRefused(t *testing.T) {
	t.Parallel()
	forEachPodSDK(t, func(t *testing.T, s sdk) {
		p := newPod(t, s, manifestOpts{})
		h := p.startHandler(t)
		first := p.startSidecar(nil)
		attachedTo(t, first)
		second := p.startSidecar(nil, "--metrics-addr", "127.0.0.1:0")
		addr := second.httpAddr(t)
		refused := second.waitLog(20*time.Second, "attach endpoint refused this sidecar's session", map[string]any{"level": "ERROR"})
		assert.Contains(t, refused["err"], "already open")
		h.waitStderr(10*time.Second, "refused")
		c, body := httpGet("http://" + addr + "/readyz")
		assert.Equal(t, 503, c, body)
		id := p.enqueue("t.record", `{}`, 0)
		p.waitDone(t, first, 30*time.Second, id)
		first.stop(t)
		second.stop(t)
	})
}

// `manifest check` attaches to each endpoint once, compares the hello and
// lets go: the handler keeps running and takes the next sidecar.
func TestAttachPodManifestCheck(t *testing.T) {
	t.Parallel()
	forEachPodSDK(t, func(t *testing.T, s sdk) {
		p := newPod(t, s, manifestOpts{})
		check := func() (int, string) {
			out, err := exec.Command(sidecarBinary(t), "manifest", "check", p.manifest).CombinedOutput()
			if ee, ok := err.(*exec.ExitError); ok {
				return ee.ExitCode(), string(out)
			}
			require.NoError(t, err)
			return 0, string(out)
		}
		code, out := check()
		assert.Equal(t, 2, code, out)
		assert.Contains(t, out, "attaching to "+p.sock)
		h := p.startHandler(t)
		code, out = check()
		require.Equal(t, 0, code, out)
		assert.Contains(t, out, "ok   handler "+s.name+"-tests")
		sc := p.startSidecar(nil)
		id := p.enqueue("t.record", `{}`, 0)
		p.waitDone(t, sc, 30*time.Second, id)
		require.True(t, h.running())
		sc.stop(t)
	})
}

// A hello that disagrees with the manifest stops the sidecar with exit 2 at
// first contact, as for a spawned process; the handler is left running.
func TestAttachPodHelloMismatch(t *testing.T) {
	t.Parallel()
	forEachPodSDK(t, func(t *testing.T, s sdk) {
		p := newPod(t, s, manifestOpts{})
		f, err := os.OpenFile(p.manifest, os.O_APPEND|os.O_WRONLY, 0)
		require.NoError(t, err)
		_, err = f.WriteString("      - name: t.not_registered\n        cancellable: true\n")
		require.NoError(t, err)
		require.NoError(t, f.Close())
		h := p.startHandler(t)
		sc := p.startSidecar(nil)
		code, _ := sc.wait(30 * time.Second)
		assert.Equal(t, 2, code)
		m := sc.waitLog(time.Second, "handler hello disagrees with the manifest", nil)
		assert.Contains(t, m["err"], "t.not_registered")
		require.True(t, h.running(), "the sidecar never stops an attached handler")
	})
}

// A glob names every endpoint it matches, found while the sidecar runs: two
// handler processes started after the sidecar, each attached.
func TestAttachPodGlob(t *testing.T) {
	t.Parallel()
	forEachPodSDK(t, func(t *testing.T, s sdk) {
		p := newPod(t, s, manifestOpts{})
		dir := filepath.Dir(p.sock)
		b, err := os.ReadFile(p.manifest)
		require.NoError(t, err)
		glob := strings.Replace(string(b), "attach: "+p.sock, "attach: "+filepath.Join(dir, "worker-*.sock"), 1)
		require.NotEqual(t, string(b), glob)
		require.NoError(t, os.WriteFile(p.manifest, []byte(glob), 0o644))
		sc := p.startSidecar(nil)
		sc.waitLog(20*time.Second, "worker registered", nil)
		var hs []*podHandler
		for _, name := range []string{"worker-1.sock", "worker-2.sock"} {
			p.sock = filepath.Join(dir, name)
			hs = append(hs, p.startHandler(t))
		}
		eventually(t, 20*time.Second, "both endpoints attached", func() bool {
			return len(sc.logs("handler process ready")) == 2
		})
		var ids []string
		for range 8 {
			ids = append(ids, p.enqueue("t.sleep_async", `{"seconds":0.5}`, 0))
		}
		p.waitDone(t, sc, 30*time.Second, ids...)
		pids := map[string]bool{}
		for _, r := range p.recorded() {
			pids[r[2]] = true
		}
		assert.Len(t, pids, 2, "both handler processes ran jobs")
		sc.stop(t)
		for _, h := range hs {
			require.True(t, h.running())
		}
	})
}
