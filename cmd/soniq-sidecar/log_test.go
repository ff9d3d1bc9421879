package main

// The password in a database URL never appears in a log line or
// an error. These tests run the commands in-process through runMain, with
// the URL given by flag and by SONIQ_DATABASE_URL, against a port nothing
// listens on and against the real test server (its trust authentication
// accepts any password), and read every byte they wrote.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/backends/postgres"
	"github.com/soniq-dev/soniq-sidecar/backends/postgres/pgtest"
)

// secret is the password under test: distinctive, so any substring match
// is a leak, and URL-safe, so its encoded and decoded forms are the same.
const secret = "Pw7xQ2notForLogs"

// withPassword returns rawURL with its user's password set to secret.
func withPassword(t *testing.T, rawURL string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	require.NoError(t, err)
	user := "soniq"
	if u.User != nil && u.User.Username() != "" {
		user = u.User.Username()
	}
	u.User = url.UserPassword(user, secret)
	return u.String()
}

// refusingPort returns a loopback port that refuses connections for the
// whole test: a socket bound to it that never listens holds it, so nothing
// else can take it meanwhile (a port found free and released could be).
func refusingPort(t *testing.T) int {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	require.NoError(t, err, "socket")
	syscall.CloseOnExec(fd)
	t.Cleanup(func() { _ = syscall.Close(fd) })
	require.NoError(t, syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}), "bind")
	sa, err := syscall.Getsockname(fd)
	require.NoError(t, err, "getsockname")
	return sa.(*syscall.SockaddrInet4).Port
}

// invocation is one runMain call and everything it wrote.
type invocation struct {
	args   []string
	code   int
	stdout string
	stderr string
}

func (i invocation) String() string {
	return fmt.Sprintf("%v → exit %d\nstdout: %s\nstderr: %s", i.args, i.code, i.stdout, i.stderr)
}

// runCmd runs a command line in-process; vars is its whole environment.
func runCmd(ctx context.Context, vars map[string]string, args ...string) invocation {
	var errb syncBuffer
	return runCmdTo(ctx, &errb, vars, args...)
}

// runCmdTo is runCmd writing stderr to errb, which a test may read while
// the command runs.
func runCmdTo(ctx context.Context, errb *syncBuffer, vars map[string]string, args ...string) invocation {
	var out syncBuffer
	e := env{stdout: &out, stderr: errb, lookupEnv: func(k string) (string, bool) {
		v, ok := vars[k]
		return v, ok
	}}
	code := runMain(ctx, e, args)
	return invocation{args: args, code: code, stdout: out.String(), stderr: errb.String()}
}

// waitHTTPAddr waits for run's log line naming the address its HTTP server
// bound, failing early if run returned.
func waitHTTPAddr(t *testing.T, errb *syncBuffer, result chan invocation) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case inv := <-result:
			t.Fatalf("run returned before serving HTTP: %s", inv)
		default:
		}
		for _, line := range strings.Split(errb.String(), "\n") {
			var m struct{ Msg, Addr string }
			if json.Unmarshal([]byte(line), &m) == nil && m.Msg == "serving /metrics, /healthz and /readyz" {
				return m.Addr
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("run logged no HTTP address within 30s:\n%s", errb.String())
	return ""
}

// assertNoSecret checks an invocation's output for the password and for
// the host:port it should name instead.
func assertNoSecret(t *testing.T, inv invocation, hostPort string) {
	t.Helper()
	all := inv.stdout + inv.stderr
	assert.NotContains(t, all, secret, "password leaked:\n%s", inv)
	if hostPort != "" {
		assert.Contains(t, all, hostPort, "the output names the server:\n%s", inv)
	}
}

func exampleManifest() string {
	return filepath.Join("..", "..", "examples", "python", "manifest.yaml")
}

// Every data command, and run, against a server that is not there: exit 1,
// an error naming host:port, never the password.
func TestNoPasswordWhenUnreachable(t *testing.T) {
	hostPort := fmt.Sprintf("127.0.0.1:%d", refusingPort(t))
	dbURL := withPassword(t, "postgres://soniq@"+hostPort+"/app?sslmode=disable&connect_timeout=5")
	commands := [][]string{
		{"migrate"},
		{"status"},
		{"status", "--json"},
		{"enqueue", "examples.add", "--args", `{"a":1,"b":2}`},
		{"dead-letter", "list"},
		// run retries an unreachable database for --database-wait, then fails.
		{"run", "--manifest", exampleManifest(), "--metrics-addr", "", "--log-format", "json", "--database-wait", "1s"},
	}
	for _, cmd := range commands {
		t.Run(strings.Join(cmd, " ")+" by flag", func(t *testing.T) {
			inv := runCmd(context.Background(), nil, append(cmd, "--database-url", dbURL)...)
			assert.Equal(t, exitError, inv.code, "%s", inv)
			assertNoSecret(t, inv, hostPort)
		})
		t.Run(strings.Join(cmd, " ")+" by environment", func(t *testing.T) {
			inv := runCmd(context.Background(), map[string]string{"SONIQ_DATABASE_URL": dbURL}, cmd...)
			assert.Equal(t, exitError, inv.code, "%s", inv)
			assertNoSecret(t, inv, hostPort)
		})
	}
}

// URLs the driver cannot even parse are reported without the password too.
func TestNoPasswordInMalformedURL(t *testing.T) {
	for _, raw := range []string{
		"postgres://soniq:" + secret + "@127.0.0.1:notaport/app",
		"postgres://soniq:" + secret + "@127.0.0.1:5432/app?sslmode=bogus",
		"postgres://soniq@127.0.0.1:5432/app?password=" + secret + "&sslmode=bogus",
	} {
		inv := runCmd(context.Background(), nil, "status", "--database-url", raw)
		assert.NotEqual(t, exitOK, inv.code, "%s", inv)
		assertNoSecret(t, inv, "")
	}
}

// The same commands against the real server succeed, and a full run —
// handlers started, a job executed, SIGTERM, STOPPED — logs the server's
// host:port but not the password.
func TestNoPasswordAgainstServer(t *testing.T) {
	dbURL := withPassword(t, pgtest.NewDatabase(t))
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	hostPort := u.Host
	ctx := context.Background()

	inv := runCmd(ctx, nil, "migrate", "--database-url", dbURL)
	require.Equal(t, exitOK, inv.code, "%s", inv)
	assertNoSecret(t, inv, hostPort)

	inv = runCmd(ctx, map[string]string{"SONIQ_DATABASE_URL": dbURL}, "enqueue", "examples.add", "--args", `{"a":1,"b":2}`)
	require.Equal(t, exitOK, inv.code, "%s", inv)
	assertNoSecret(t, inv, "")
	id := strings.TrimSpace(inv.stdout)
	require.NotEmpty(t, id)

	inv = runCmd(ctx, nil, "enqueue", "examples.add", "--args", `{"a":1,"b":2}`, "--json", "--database-url", dbURL)
	require.Equal(t, exitOK, inv.code, "%s", inv)
	assertNoSecret(t, inv, "")

	for _, cmd := range [][]string{{"status"}, {"status", "--json"}, {"dead-letter", "list"}, {"dead-letter", "list", "--json"}} {
		inv = runCmd(ctx, nil, append(cmd, "--database-url", dbURL)...)
		require.Equal(t, exitOK, inv.code, "%s", inv)
		assertNoSecret(t, inv, "")
	}

	// A usage error after the URL was read still redacts it.
	inv = runCmd(ctx, nil, "dead-letter", "replay", "00000000-0000-4000-8000-000000000000", "--database-url", dbURL)
	assert.NotEqual(t, exitOK, inv.code, "%s", inv)
	assertNoSecret(t, inv, "")

	// run, by environment, with the HTTP server up so readiness can be seen.
	vars := map[string]string{
		"SONIQ_DATABASE_URL":       dbURL,
		"SONIQ_POLL_INTERVAL":      "0.2",
		"SONIQ_HEARTBEAT_INTERVAL": "0.5",
		"SONIQ_SHUTDOWN_TIMEOUT":   "5",
	}
	result := make(chan invocation, 1)
	var runErr syncBuffer
	go func() {
		result <- runCmdTo(ctx, &runErr, vars, "run", "--manifest", exampleManifest(), "--metrics-addr", "127.0.0.1:0", "--log-format", "json")
	}()
	httpAddr := waitHTTPAddr(t, &runErr, result)
	waitReady(t, "http://"+httpAddr+"/readyz", result)

	b, err := postgres.Open(ctx, dbURL)
	require.NoError(t, err)
	defer b.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		j, err := b.Get(ctx, id)
		require.NoError(t, err)
		if j.Status == backends.StatusDone {
			break
		}
		require.True(t, time.Now().Before(deadline), "job %s still %s", id, j.Status)
		time.Sleep(50 * time.Millisecond)
	}

	// The HTTP endpoints do not leak it either.
	for _, path := range []string{"/readyz", "/healthz", "/metrics"} {
		resp, err := http.Get("http://" + httpAddr + path)
		require.NoError(t, err)
		var sb strings.Builder
		_, _ = fmt.Fprint(&sb, resp.Header)
		buf := make([]byte, 1<<20)
		n, _ := resp.Body.Read(buf)
		resp.Body.Close()
		assert.NotContains(t, sb.String()+string(buf[:n]), secret, path)
	}

	// cmdRun has its own signal handler installed by now (readiness is
	// served from inside the run group), so this SIGTERM drains it.
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGTERM))
	select {
	case inv = <-result:
	case <-time.After(60 * time.Second):
		t.Fatal("run did not stop after SIGTERM")
	}
	require.Equal(t, exitOK, inv.code, "%s", inv)
	assertNoSecret(t, inv, hostPort)
	assert.Contains(t, inv.stderr, `"msg":"starting"`, "%s", inv)
	assert.Contains(t, inv.stderr, `"state":"STOPPED"`, "%s", inv)
	assert.Contains(t, inv.stderr, "postgres://soniq:xxxxx@"+hostPort, "the URL is logged redacted")
}

// waitReady polls a /readyz URL until it answers 200, failing early if run
// returned.
func waitReady(t *testing.T, readyz string, result chan invocation) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case inv := <-result:
			t.Fatalf("run returned before it was ready: %s", inv)
		default:
		}
		if resp, err := http.Get(readyz); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s never answered 200", readyz)
}
