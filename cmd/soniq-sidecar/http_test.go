package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends/postgres"
	"github.com/soniq-dev/soniq-sidecar/backends/postgres/pgtest"
	"github.com/soniq-dev/soniq-sidecar/internal/config"
	"github.com/soniq-dev/soniq-sidecar/internal/memory"
	"github.com/soniq-dev/soniq-sidecar/supervisor"
)

// exampleSupervisor is a supervisor for the example Python handlers on the
// memory backend; it is not running until the test calls Run.
func exampleSupervisor(t *testing.T, b *memory.Backend) *supervisor.Supervisor {
	t.Helper()
	m, err := config.LoadManifest(filepath.Join("..", "..", "examples", "python", "manifest.yaml"))
	require.NoError(t, err)
	settings, err := config.ResolveSettings(m, func(k string) (string, bool) {
		switch k {
		case "SONIQ_POLL_INTERVAL", "SONIQ_HEARTBEAT_INTERVAL":
			return "0.2", true
		case "SONIQ_SHUTDOWN_TIMEOUT":
			return "5", true
		}
		return "", false
	}, config.SettingOverrides{})
	require.NoError(t, err)
	sup, err := supervisor.New(supervisor.Config{Manifest: m, Settings: settings, Backend: b, Version: "test"})
	require.NoError(t, err)
	return sup
}

// failingPing is a fake: a database whose ping fails with an error that, as
// a driver's might, quotes the URL with its password. It stands in for a
// Postgres that went away, which the integration tests cover for real.
type failingPing struct{}

func (failingPing) Ping(context.Context) error {
	return errors.New("dial postgres://soniq:hunter2-http@db.internal:5432/app:\nconnection refused")
}

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String()
}

func TestHealthzAlwaysAlive(t *testing.T) {
	sup := exampleSupervisor(t, memory.New())
	// Alive even when the database is not: /healthz is the liveness probe
	// and restarting the container would not bring the database back.
	code, body := get(t, httpHandler(sup, failingPing{}, nil), "/healthz")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "ok RUNNING\n", body)
}

func TestReadyzDatabaseUnreachable(t *testing.T) {
	sup := exampleSupervisor(t, memory.New())
	code, body := get(t, httpHandler(sup, failingPing{}, nil), "/readyz")
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Contains(t, body, "not ready: database unreachable: ")
	assert.Contains(t, body, "db.internal:5432", "the reason names the server")
	assert.Contains(t, body, "connection refused")
	assert.NotContains(t, body, "hunter2-http", "the password is redacted")
	assert.Equal(t, 1, countLines(body), "the reason is one line: %q", body)
}

func TestReadyzHandlerStarting(t *testing.T) {
	b := memory.New()
	sup := exampleSupervisor(t, b)
	code, body := get(t, httpHandler(sup, b, nil), "/readyz")
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Equal(t, "not ready: handler python-examples: starting\n", body)
}

// A running supervisor whose handler processes said hello is ready; once it
// has stopped it is not, and says so.
func TestReadyzReadyThenStopped(t *testing.T) {
	b := memory.New()
	sup := exampleSupervisor(t, b)
	h := httpHandler(sup, b, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- sup.Run(ctx) }()

	var code int
	var body string
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if code, body = get(t, h, "/readyz"); code == http.StatusOK {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	require.Equal(t, http.StatusOK, code, "last body %q", body)
	assert.Equal(t, "ready\n", body)

	sup.Shutdown()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("supervisor did not stop")
	}
	code, body = get(t, h, "/readyz")
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Equal(t, "not ready: state STOPPED\n", body)
	code, body = get(t, h, "/healthz")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "ok STOPPED\n", body)
}

func TestMetricsRoute(t *testing.T) {
	b := memory.New()
	sup := exampleSupervisor(t, b)
	code, _ := get(t, httpHandler(sup, b, nil), "/metrics")
	assert.Equal(t, http.StatusNotFound, code, "no /metrics without a handler")

	_, shutdown, mh, err := setupTelemetry(context.Background(), testEnv(nil))
	require.NoError(t, err)
	defer shutdown()
	code, body := get(t, httpHandler(sup, b, mh), "/metrics")
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, "target_info{")
}

func countLines(s string) int {
	n := 0
	for _, r := range s {
		if r == '\n' {
			n++
		}
	}
	return n
}

// --metrics-addr with port 0 binds any free port and logs the one it got,
// which is how a caller (a test) finds the server without a port race.
func TestServeHTTPLogsTheBoundAddress(t *testing.T) {
	var logs syncBuffer
	log, err := newLogger(&logs, "json")
	require.NoError(t, err)
	serve, stop, err := listenHTTP("127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("here\n"))
	}), log)
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- serve() }()
	t.Cleanup(func() {
		stop()
		assert.NoError(t, <-served, "a server stopped on purpose returns no error")
	})
	var line struct{ Msg, Addr string }
	require.NoError(t, json.Unmarshal([]byte(logs.String()), &line), "log %q", logs.String())
	assert.Equal(t, "serving /metrics, /healthz and /readyz", line.Msg)
	host, port, err := net.SplitHostPort(line.Addr)
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1", host)
	assert.NotEqual(t, "0", port, "the bound port, not the one asked for")
	resp, err := http.Get("http://" + line.Addr + "/")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, "here\n", string(body))
}

// /readyz names an exhausted database pool (acquires that waited for a
// free connection since the previous probe, a quarter second or more in
// total), on a real Postgres pool of one connection held by the
// maintenance leader lock. A short wait, as when a burst of statements
// starts together, is not worth a warning.
func TestReadyzNamesAnExhaustedPool(t *testing.T) {
	url := pgtest.NewDatabase(t)
	b, err := postgres.Open(t.Context(), url+"&pool_max_conns=1") // the URL has ?sslmode=
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	h := &health{}
	assert.Empty(t, h.poolWarning(b), "idle pool")

	release, ok, err := b.TryLeader(t.Context()) // holds the only connection
	require.NoError(t, err)
	require.True(t, ok)
	// A statement that finds no free connection waits, and here gives up.
	waitFor := func(d time.Duration) {
		ctx, cancel := context.WithTimeout(t.Context(), d)
		defer cancel()
		require.Error(t, b.Ping(ctx), "ping with the only connection held")
	}
	waitFor(50 * time.Millisecond)
	assert.Empty(t, h.poolWarning(b), "one 50 ms wait")

	waitFor(150 * time.Millisecond)
	waitFor(150 * time.Millisecond)
	warn := h.poolWarning(b)
	assert.Contains(t, warn, "database pool exhausted since the last probe: 2 acquires waited ")
	assert.Contains(t, warn, " in total for a free connection (pool of 1, 1 in use now")
	release(t.Context())
	require.NoError(t, b.Ping(t.Context()))
	assert.Empty(t, h.poolWarning(b), "no new waits since the last probe")
}
