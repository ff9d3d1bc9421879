//go:build podman

package integration

// The images and pod specs in a real container engine (make test-pod): podman runs
// deploy/kubernetes/attach.yaml and deployment.yaml, through the overlay of podspec_test.go,
// with the images `make images` built, against the test's Postgres. Build tag podman: `go test
// ./...` does not build this file; make test-pod does, through scripts/podman-env.sh, and a
// missing podman, configuration or image fails it.
//
// The pods reach Postgres, which listens on loopback only (.ci/pg.sh), through a forwarder
// the test runs on the podman bridge's gateway address: nothing else is exposed, and the pods
// run on the bridge with addresses of their own, as in a cluster. The test reaches them there:
// it runs the YAML's probes as the kubelet does (httpGet from outside the pod, exec inside the
// container) and scrapes /metrics as Prometheus would.

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/backends/postgres"
	"github.com/soniq-dev/soniq-sidecar/backends/postgres/pgtest"
)

// podImages are the images make images builds, by the tag SONIQ_IMAGE_TAG (default dev).
func podImages(t *testing.T) map[string]string {
	t.Helper()
	if _, err := exec.LookPath("podman"); err != nil {
		t.Fatal("podman is not installed: make test-pod runs the pod specs in it (apt-get install podman buildah runc catatonit mmdebstrap)")
	}
	if os.Getenv("CONTAINERS_CONF") == "" {
		t.Fatal("CONTAINERS_CONF is not set: run this test with make test-pod (scripts/podman-env.sh exec sets podman up)")
	}
	tag := os.Getenv("SONIQ_IMAGE_TAG")
	if tag == "" {
		tag = "dev"
	}
	images := map[string]string{
		"ghcr.io/soniq-dev/soniq-sidecar": "localhost/soniq-sidecar:" + tag,
		"registry.example.com/billing":    "localhost/soniq-python-examples:" + tag,
		"registry.example.com/myapp":      "localhost/soniq-python-app:" + tag,
	}
	for _, image := range append(mapValues(images), nodeWorkerImage()) {
		if _, err := podman(t, "image", "exists", image); err != nil {
			t.Fatalf("image %s is missing: run make images first (make test-pod does)", image)
		}
	}
	return images
}

// nodeWorkerImage is the Node examples' worker image, which stands in for attach.yaml's
// worker in the Node run.
func nodeWorkerImage() string {
	tag := os.Getenv("SONIQ_IMAGE_TAG")
	if tag == "" {
		tag = "dev"
	}
	return "localhost/soniq-node-examples:" + tag
}

func mapValues(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// podman runs podman and returns its trimmed output.
func podman(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "podman", args...).CombinedOutput()
	s := strings.TrimSpace(string(out))
	if err != nil {
		return s, fmt.Errorf("podman %s: %v: %s", strings.Join(args, " "), err, s)
	}
	return s, nil
}

func mustPodman(t *testing.T, args ...string) string {
	t.Helper()
	out, err := podman(t, args...)
	require.NoError(t, err)
	return out
}

// podDatabase creates a test database and returns its URL for the test and the URL a pod
// reaches it by: a forwarder on the podman network's gateway to the server's loopback port.
func podDatabase(t *testing.T, sidecarImage string) (hostURL, podURL string) {
	t.Helper()
	hostURL = pgtest.NewDatabase(t)
	u, err := url.Parse(hostURL)
	require.NoError(t, err)
	gw := mustPodman(t, "network", "inspect", "podman", "--format", "{{range .Subnets}}{{.Gateway}}{{end}}")
	require.NotEmpty(t, gw, "the podman network has no gateway")
	ln, err := net.Listen("tcp", net.JoinHostPort(gw, "0"))
	if err != nil {
		// The bridge exists once a container has used it.
		mustPodman(t, "run", "--rm", "--pull=never", sidecarImage, "version")
		ln, err = net.Listen("tcp", net.JoinHostPort(gw, "0"))
	}
	require.NoError(t, err, "listening on the podman bridge's gateway %s", gw)
	var mu sync.Mutex
	var conns []net.Conn
	go func() { // ends when the listener is closed
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", u.Host)
			if err != nil {
				_ = c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, s)
			mu.Unlock()
			go func() { _, _ = io.Copy(s, c); _ = s.Close() }()
			go func() { _, _ = io.Copy(c, s); _ = c.Close() }()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	pu := *u
	pu.Host = ln.Addr().String()
	return hostURL, pu.String()
}

// kubePod is one pod podman runs from a deploy/kubernetes file.
type kubePod struct {
	t    *testing.T
	name string         // the pod's name (and hostname)
	spec map[string]any // the overlaid pod spec: containers, probes
	ip   string
	db   backends.Backend
}

// playPod runs file (under deploy/kubernetes) with overlay o, and waits until every probe
// of every container passes.
func playPod(t *testing.T, file string, o podOverlay, hostURL string) *kubePod {
	t.Helper()
	var suffix [3]byte
	_, _ = rand.Read(suffix[:])
	o.suffix = "-t" + hex.EncodeToString(suffix[:])
	o.volume = func(name string, fsGroup int) (string, error) {
		// What the kubelet makes of an emptyDir (medium Memory) with fsGroup.
		vol := "soniq-test-" + name + o.suffix
		if _, err := podman(t, "volume", "create", "--opt", "type=tmpfs", "--opt", "device=tmpfs",
			"--opt", fmt.Sprintf("o=mode=2777,gid=%d", fsGroup), vol); err != nil {
			return "", err
		}
		t.Cleanup(func() { _, _ = podman(t, "volume", "rm", "-f", vol) })
		return vol, nil
	}
	src, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy/kubernetes", file))
	require.NoError(t, err)
	res, err := o.apply(src)
	require.NoError(t, err, "overlay of %s", file)
	path := filepath.Join(t.TempDir(), file)
	require.NoError(t, os.WriteFile(path, res.yaml, 0o644))
	p := &kubePod{t: t, name: res.deployment + "-pod-0", spec: res.podSpec}
	for _, cm := range res.configMaps {
		t.Cleanup(func() { _, _ = podman(t, "volume", "rm", "-f", cm) })
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, c := range p.containers() {
				logs, err := podman(t, "logs", "-t", p.container(c))
				t.Logf("container %s (%v):\n%s", c, err, logs)
			}
		}
		_, _ = podman(t, "pod", "rm", "-f", "-t", "0", p.name)
	})
	// Podman logs healthcheck timers it cannot make without systemd: harmless here, the
	// test runs the probes itself.
	p.verifyRunAsNonRoot()
	// On the podman network, whose gateway the database forwarder listens on.
	_, err = podman(t, "kube", "play", "--network", "podman", path)
	require.NoError(t, err)
	infra := mustPodman(t, "pod", "inspect", p.name, "--format", "{{.InfraContainerID}}")
	p.ip = mustPodman(t, "inspect", infra, "--format", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}")
	require.NotEmpty(t, p.ip, "the pod's address")
	t.Logf("pod %s at %s", p.name, p.ip)
	for _, c := range p.containers() {
		for _, kind := range []string{"startupProbe", "livenessProbe", "readinessProbe"} {
			p.waitProbe(c, kind, true, 60*time.Second, "")
		}
	}
	p.checkUsers()
	// The kubelet kills an exec probe at its timeoutSeconds (default 1): a probe that passes
	// only sometimes within it fails a pod on a busy node. Several runs, each within it.
	for _, c := range p.containers() {
		for _, kind := range []string{"startupProbe", "livenessProbe", "readinessProbe"} {
			if e, _ := p.containerSpec(c)[kind].(map[string]any); e != nil && e["exec"] != nil {
				for i := 0; i < 3; i++ {
					ok, detail := p.probe(c, kind)
					require.True(t, ok, "%s of %s, run %d: %s", kind, c, i+1, detail)
				}
			}
		}
	}
	b, err := postgres.Open(context.Background(), hostURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	p.db = b
	return p
}

// verifyRunAsNonRoot is the kubelet's check before it starts a container whose effective
// securityContext says runAsNonRoot (podman does not check it): the user must be known to be
// non-root, from runAsUser or else from the image's USER, which must then be numeric.
func (p *kubePod) verifyRunAsNonRoot() {
	t := p.t
	t.Helper()
	podSC, _ := p.spec["securityContext"].(map[string]any)
	for _, c := range append(list(p.spec["initContainers"]), list(p.spec["containers"])...) {
		cm := c.(map[string]any)
		sc, _ := cm["securityContext"].(map[string]any)
		pick := func(k string) any {
			if v, ok := sc[k]; ok {
				return v
			}
			return podSC[k]
		}
		if pick("runAsNonRoot") != true {
			continue
		}
		if uid, ok := pick("runAsUser").(int); ok {
			assert.NotZero(t, uid, "container %s: runAsNonRoot with runAsUser 0", cm["name"])
			continue
		}
		image := cm["image"].(string)
		user := mustPodman(t, "image", "inspect", image, "--format", "{{.Config.User}}")
		name, _, _ := strings.Cut(user, ":")
		uid, err := strconv.Atoi(name)
		if err != nil {
			t.Errorf("container %s: the kubelet refuses to start it: runAsNonRoot and image %s has non-numeric user (%s), cannot verify user is non-root", cm["name"], image, name)
			continue
		}
		assert.NotZero(t, uid, "container %s: runAsNonRoot and image %s runs as root", cm["name"], image)
	}
}

// checkUsers checks that pid 1 of every container runs as the user its securityContext (or
// else its image) says, with the pod's fsGroup among its groups.
func (p *kubePod) checkUsers() {
	t := p.t
	t.Helper()
	podSC, _ := p.spec["securityContext"].(map[string]any)
	for _, c := range list(p.spec["containers"]) {
		cm := c.(map[string]any)
		name := cm["name"].(string)
		sc, _ := cm["securityContext"].(map[string]any)
		want := ""
		if u, ok := sc["runAsUser"].(int); ok {
			want = strconv.Itoa(u)
		} else if u, ok := podSC["runAsUser"].(int); ok {
			want = strconv.Itoa(u)
		} else {
			user := mustPodman(t, "image", "inspect", cm["image"].(string), "--format", "{{.Config.User}}")
			want, _, _ = strings.Cut(user, ":")
		}
		status, err := os.ReadFile("/proc/" + p.inspect(name, "{{.State.Pid}}") + "/status")
		require.NoError(t, err)
		var uid, groups string
		for _, l := range strings.Split(string(status), "\n") {
			if f := strings.Fields(l); len(f) > 1 && f[0] == "Uid:" {
				uid = f[1]
			} else if len(f) > 0 && f[0] == "Groups:" {
				groups = " " + strings.Join(f[1:], " ") + " "
			}
		}
		assert.Equal(t, want, uid, "container %s: pid 1's user", name)
		if g, ok := podSC["fsGroup"].(int); ok {
			assert.Contains(t, groups, fmt.Sprintf(" %d ", g), "container %s: fsGroup among pid 1's groups", name)
		}
	}
}

func (p *kubePod) containers() []string {
	var out []string
	for _, c := range list(p.spec["containers"]) {
		out = append(out, c.(map[string]any)["name"].(string))
	}
	return out
}

func (p *kubePod) container(name string) string { return p.name + "-" + name }

func (p *kubePod) containerNames() []string {
	var out []string
	for _, c := range p.containers() {
		out = append(out, p.container(c))
	}
	return out
}

func (p *kubePod) containerSpec(name string) map[string]any {
	for _, c := range list(p.spec["containers"]) {
		if c.(map[string]any)["name"] == name {
			return c.(map[string]any)
		}
	}
	p.t.Fatalf("no container %s", name)
	return nil
}

// probe runs container's probe of kind (startupProbe, livenessProbe, readinessProbe) once,
// as the kubelet does: httpGet from outside to the pod's address, exec in the container. No
// such probe passes.
func (p *kubePod) probe(container, kind string) (ok bool, detail string) {
	pr, _ := p.containerSpec(container)[kind].(map[string]any)
	if pr == nil {
		return true, "no " + kind
	}
	timeout := time.Second
	if s, ok := pr["timeoutSeconds"].(int); ok {
		timeout = time.Duration(s) * time.Second
	}
	if h, _ := pr["httpGet"].(map[string]any); h != nil {
		c := http.Client{Timeout: timeout}
		resp, err := c.Get(fmt.Sprintf("http://%s:%v%v", p.ip, h["port"], h["path"]))
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode >= 200 && resp.StatusCode < 400, fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	if e, _ := pr["exec"].(map[string]any); e != nil {
		// The timeout is enforced in the container (coreutils' timeout), as the runtime does
		// for the kubelet: podman exec's own start-up is not the probe's time.
		args := []string{"exec", p.container(container), "timeout", "-s", "KILL", fmt.Sprint(timeout.Seconds())}
		for _, a := range list(e["command"]) {
			args = append(args, fmt.Sprint(a))
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout+30*time.Second)
		defer cancel()
		start := time.Now()
		out, err := exec.CommandContext(ctx, "podman", args...).CombinedOutput()
		if err != nil {
			if ee := (*exec.ExitError)(nil); errors.As(err, &ee) && ee.ExitCode() == 137 {
				return false, fmt.Sprintf("timed out: the kubelet kills it at timeoutSeconds (%s)", timeout)
			}
			return false, fmt.Sprintf("%v after %s: %s", err, time.Since(start).Round(time.Millisecond), out)
		}
		return true, string(out)
	}
	p.t.Fatalf("%s of %s: neither httpGet nor exec", kind, container)
	return false, ""
}

// waitProbe waits until container's probe passes (want) or fails, with detail containing
// contains.
func (p *kubePod) waitProbe(container, kind string, want bool, timeout time.Duration, contains string) {
	p.t.Helper()
	var detail string
	deadline := time.Now().Add(timeout)
	for {
		var ok bool
		ok, detail = p.probe(container, kind)
		if ok == want && strings.Contains(detail, contains) {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%s of %s: want pass=%v (%q) within %s, last: %s", kind, container, want, contains, timeout, detail)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// metric returns the sum of the samples of name whose labels contain every labels
// fragment, from the pod's /metrics; ok false when it cannot be scraped.
func (p *kubePod) metric(name string, labels ...string) (float64, bool) {
	c := http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get("http://" + p.ip + ":9464/metrics")
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		match := true
		for _, l := range labels {
			match = match && strings.Contains(line, l)
		}
		if f := strings.Fields(line); match && len(f) >= 2 {
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err == nil {
				sum += v
			}
		}
	}
	return sum, resp.StatusCode == 200
}

func (p *kubePod) enqueue(name, args string) string {
	p.t.Helper()
	j, err := p.db.Enqueue(context.Background(), backends.EnqueueParams{Name: name, Args: json.RawMessage(args)})
	require.NoError(p.t, err)
	return j.ID
}

func (p *kubePod) job(id string) backends.Job {
	p.t.Helper()
	j, err := p.db.Get(context.Background(), id)
	require.NoError(p.t, err)
	return j
}

func (p *kubePod) waitStatus(timeout time.Duration, status string, ids ...string) {
	p.t.Helper()
	deadline := time.Now().Add(timeout)
	for _, id := range ids {
		for {
			j := p.job(id)
			if j.Status == status {
				break
			}
			if time.Now().After(deadline) {
				p.t.Fatalf("job %s (%s): %s, want %s within %s", id, j.Name, j.Status, status, timeout)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

func (p *kubePod) inspect(container, format string) string {
	p.t.Helper()
	return mustPodman(p.t, "inspect", p.container(container), "--format", format)
}

// logLines returns container's log lines with podman's timestamps.
func (p *kubePod) logLines(container string) []timedLine {
	p.t.Helper()
	out := mustPodman(p.t, "logs", "-t", p.container(container))
	var lines []timedLine
	for _, l := range strings.Split(out, "\n") {
		ts, text, ok := strings.Cut(l, " ")
		if !ok {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil {
			continue
		}
		lines = append(lines, timedLine{at, text})
	}
	return lines
}

type timedLine struct {
	at   time.Time
	text string
}

// firstLine is the first of lines after since matching re.
func firstLine(lines []timedLine, since time.Time, re string) (timedLine, bool) {
	r := regexp.MustCompile(re)
	for _, l := range lines {
		if !l.at.Before(since) && r.MatchString(l.text) {
			return l, true
		}
	}
	return timedLine{}, false
}

// scraper scrapes the pod's /metrics every half second, as Prometheus would, and keeps the
// highest soniq_shutdown_nack_total it saw.
type scraper struct {
	mu    sync.Mutex
	nacks float64
	stop  chan struct{}
	done  chan struct{}
}

func (p *kubePod) scrape() *scraper {
	s := &scraper{stop: make(chan struct{}), done: make(chan struct{})}
	go func() { // ends at s.stop
		defer close(s.done)
		for {
			if v, ok := p.metric("soniq_shutdown_nack_total"); ok {
				s.mu.Lock()
				s.nacks = max(s.nacks, v)
				s.mu.Unlock()
			}
			select {
			case <-s.stop:
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	return s
}

func (s *scraper) end() float64 {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nacks
}

// stopContract stops the pod as the kubelet terminates one (every container signalled at
// once, SIGKILL after the grace period) with an async job that outlives shutdown_timeout and
// a sync job that does not fit in it, and checks the shutdown contract.
func (p *kubePod) stopContract(sidecar string, shutdownTimeout time.Duration) {
	t := p.t
	t.Helper()
	async := p.enqueue("examples.sleep_async", `{"seconds": 300}`)
	sync := p.enqueue("examples.sleep_sync", `{"seconds": 8}`)
	p.waitStatus(20*time.Second, backends.StatusProcessing, async, sync)
	s := p.scrape()
	grace, _ := p.spec["terminationGracePeriodSeconds"].(int)
	require.Positive(t, grace)
	// As the kubelet terminates a pod: every container gets SIGTERM at once, SIGKILL when the
	// grace period ends, and the pod's network stays until they have all exited. Neither
	// `podman pod stop` nor `podman stop` does that in podman 4.3: pod stop takes the pod's
	// network down at once (the infra container stops with the others), and a container that
	// exits while another is "stopping" makes the pod's exit policy (stop, forced by kube
	// play) stop the pod again: a second SIGTERM (the sidecar's force path), the network
	// gone, SIGKILL after 10 s. `podman kill` signals without that.
	start := time.Now()
	mustPodman(t, append([]string{"kill", "--signal", "TERM"}, p.containerNames()...)...)
	// Draining: not ready, still alive.
	p.waitProbe(sidecar, "readinessProbe", false, 5*time.Second, "DRAINING")
	ok, detail := p.probe(sidecar, "livenessProbe")
	assert.True(t, ok, "liveness while draining: %s", detail)
	for _, c := range p.containers() {
		for {
			st := p.inspect(c, "{{.State.Status}}")
			if st == "exited" || st == "stopped" {
				break
			}
			if time.Since(start) > time.Duration(grace)*time.Second {
				t.Errorf("container %s still %s after the grace period (%d s): SIGKILL", c, st, grace)
				_, _ = podman(t, "kill", "--signal", "KILL", p.container(c))
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	took := time.Since(start)
	nacks := s.end()
	t.Logf("pod terminated in %s", took.Round(time.Millisecond))
	assert.Less(t, took, time.Duration(grace)*time.Second, "everything exited by itself, before SIGKILL")
	assert.GreaterOrEqual(t, took, shutdownTimeout, "the async job held the sidecar until shutdown_timeout")
	// Async: NACKed back to the queue at shutdown_timeout; sync: waited for.
	aj := p.job(async)
	assert.Equal(t, backends.StatusQueued, aj.Status, "the async job is NACKed")
	sj := p.job(sync)
	assert.Equal(t, backends.StatusDone, sj.Status, "the sync job is waited for")
	assert.JSONEq(t, `{"slept": 8}`, string(sj.Result))
	assert.GreaterOrEqual(t, nacks, 1.0, "soniq_shutdown_nack_total scraped from the pod before it exited")
	for _, c := range p.containers() {
		assert.Equal(t, "0", p.inspect(c, "{{.State.ExitCode}}"), "container %s's exit code", c)
	}
	logs := p.logLines(sidecar)
	sig, ok := firstLine(logs, start.Add(-time.Second), `"signal received".*"SIGTERM"|"signal":"terminated"`)
	require.True(t, ok, "the sidecar (pid 1) got SIGTERM")
	nack, ok := firstLine(logs, start, `"shutdown_nack"`)
	require.True(t, ok, "the sidecar logged the NACK")
	assert.InDelta(t, shutdownTimeout.Seconds(), nack.at.Sub(sig.at).Seconds(), 1.5, "NACKed at shutdown_timeout")
	p.signalledTogether(sig.at, start)
}

// signalledTogether checks that every other container got SIGTERM when the sidecar did (at):
// its first line after the stop began, for the containers that log one.
func (p *kubePod) signalledTogether(at, start time.Time) {
	for _, c := range p.containers() {
		var re string
		switch {
		case strings.Contains(p.inspect(c, "{{.ImageName}}"), "-examples"):
			re = `SIGTERM: draining` // both SDKs
		default:
			continue
		}
		l, ok := firstLine(p.logLines(c), start.Add(-time.Second), re)
		if assert.True(p.t, ok, "container %s logged its SIGTERM", c) {
			assert.InDelta(p.t, 0, l.at.Sub(at).Seconds(), 1.0, "container %s signalled with the sidecar", c)
		}
	}
}

// attach.yaml with the Python examples' image as the worker, as the file has it, and with the
// Node examples' image in its place (its probe program replaced). The example handlers stand
// in for the application's module.
func TestPodAttach(t *testing.T) {
	t.Parallel()
	const sock = "/run/soniq/billing.sock"
	for _, w := range []struct {
		sdk     string
		image   string // "": the file's worker image, mapped
		command []string
		probe   []string
	}{
		{sdk: "python", command: []string{"python", "-m", "soniq_handler_examples", "--listen", sock}},
		{sdk: "node", image: nodeWorkerImage(), command: []string{"node", "examples.js", "--listen", sock},
			probe: []string{"node", "node_modules/soniq-handler/probe.js"}},
	} {
		t.Run(w.sdk, func(t *testing.T) {
			t.Parallel()
			images := podImages(t)
			o := podOverlay{
				images:   map[string]string{},
				jobs:     exampleJobs(t, w.sdk),
				commands: map[string][]string{"worker": w.command},
			}
			for k, v := range images {
				o.images[k] = v
			}
			if w.image != "" {
				o.images["registry.example.com/billing"] = w.image
				o.probeCommands = map[string][]string{"worker": w.probe}
			}
			testPodAttach(t, o, sock)
		})
	}
}

func testPodAttach(t *testing.T, o podOverlay, sock string) {
	hostURL, podURL := podDatabase(t, o.images["ghcr.io/soniq-dev/soniq-sidecar"])
	shutdownTimeout := 4 * time.Second
	o.databaseURL = podURL
	o.env = map[string]map[string]string{"soniq-sidecar": {"SONIQ_SHUTDOWN_TIMEOUT": fmt.Sprint(shutdownTimeout.Seconds())}}
	p := playPod(t, "attach.yaml", o, hostURL)

	// The socket the worker made on the shared volume: group fsGroup, 0660.
	st := mustPodman(t, "exec", p.container("worker"), "stat", "-c", "%a %u %g", sock)
	assert.Equal(t, "660 10001 2000", st, "the socket: mode, owner, group")

	a := p.enqueue("examples.add", `{"a": 1, "b": 2}`)
	b := p.enqueue("examples.sleep_sync", `{"seconds": 0.2}`)
	c := p.enqueue("examples.sleep_async", `{"seconds": 0.2}`)
	p.waitStatus(30*time.Second, backends.StatusDone, a, b, c)
	assert.JSONEq(t, `{"sum": 3}`, string(p.job(a).Result))

	t.Run("worker restarted alone", func(t *testing.T) {
		p := *p
		p.t = t
		mustPodman(t, "stop", "-t", "10", p.container("worker"))
		assert.Equal(t, "0", p.inspect("worker", "{{.State.ExitCode}}"), "the idle worker exits 0 on SIGTERM")
		p.waitProbe("soniq-sidecar", "readinessProbe", false, 10*time.Second, "no attached endpoint")
		ok, detail := p.probe("soniq-sidecar", "livenessProbe")
		assert.True(t, ok, "liveness with the worker down: %s", detail)
		mustPodman(t, "start", p.container("worker"))
		p.waitProbe("worker", "startupProbe", true, 30*time.Second, "")
		p.waitProbe("soniq-sidecar", "readinessProbe", true, 30*time.Second, "")
		n, _ := p.metric("soniq_attach_connections_total", `event="reconnected"`)
		assert.GreaterOrEqual(t, n, 1.0, "the sidecar re-attached")
		d := p.enqueue("examples.add", `{"a": 2, "b": 2}`)
		p.waitStatus(30*time.Second, backends.StatusDone, d)
	})

	t.Run("sidecar killed mid-job", func(t *testing.T) {
		p := *p
		p.t = t
		syncJob := p.enqueue("examples.sleep_sync", `{"seconds": 6}`)
		asyncJob := p.enqueue("examples.sleep_async", `{"seconds": 6}`)
		p.waitStatus(20*time.Second, backends.StatusProcessing, syncJob, asyncJob)
		restarts := p.inspect("soniq-sidecar", "{{.RestartCount}}")
		pid, err := strconv.Atoi(p.inspect("soniq-sidecar", "{{.State.Pid}}"))
		require.NoError(t, err)
		killed := time.Now()
		// As the OOM killer would: the process, not an API call podman could remember.
		require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
		deadline := time.Now().Add(30 * time.Second)
		for p.inspect("soniq-sidecar", "{{.RestartCount}}") == restarts || p.inspect("soniq-sidecar", "{{.State.Status}}") != "running" {
			require.True(t, time.Now().Before(deadline), "the sidecar container was not restarted by the pod's restart policy")
			time.Sleep(200 * time.Millisecond)
		}
		p.waitProbe("soniq-sidecar", "readinessProbe", true, 30*time.Second, "")
		p.waitStatus(30*time.Second, backends.StatusDone, syncJob, asyncJob)
		for _, id := range []string{syncJob, asyncJob} {
			j := p.job(id)
			assert.Equal(t, 1, j.Attempts, "job %s (%s) ran once: never claimed again", id, j.Name)
			assert.JSONEq(t, `{"slept": 6}`, string(j.Result))
		}
		adopted := 0
		for _, l := range p.logLines("soniq-sidecar") {
			if l.at.After(killed) && strings.Contains(l.text, "the predecessor's job is reported by the attached handler") {
				adopted++
			}
		}
		assert.Equal(t, 2, adopted, "the new sidecar adopted both running jobs from the worker")
	})

	t.Run("pod stop", func(t *testing.T) {
		p := *p
		p.t = t
		p.stopContract("soniq-sidecar", shutdownTimeout)
	})
}

func TestPodSingleImage(t *testing.T) {
	t.Parallel()
	images := podImages(t)
	hostURL, podURL := podDatabase(t, images["ghcr.io/soniq-dev/soniq-sidecar"])
	shutdownTimeout := 4 * time.Second
	p := playPod(t, "deployment.yaml", podOverlay{
		images:      images,
		databaseURL: podURL,
		commands: map[string][]string{
			// A stand-in for the application's web server: HTTP on its port, exit on SIGTERM.
			"app": {"python", "-c", "import http.server, signal, sys\n" +
				"signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\n" +
				"http.server.ThreadingHTTPServer(('', 8000), http.server.SimpleHTTPRequestHandler).serve_forever()"},
		},
		env: map[string]map[string]string{"soniq-sidecar": {"SONIQ_SHUTDOWN_TIMEOUT": fmt.Sprint(shutdownTimeout.Seconds())}},
	}, hostURL)

	a := p.enqueue("examples.add", `{"a": 1, "b": 2}`)
	b := p.enqueue("examples.sleep_sync", `{"seconds": 0.2}`)
	p.waitStatus(30*time.Second, backends.StatusDone, a, b)
	assert.JSONEq(t, `{"sum": 3}`, string(p.job(a).Result))

	t.Run("pod stop", func(t *testing.T) {
		p := *p
		p.t = t
		p.stopContract("soniq-sidecar", shutdownTimeout)
	})
}
