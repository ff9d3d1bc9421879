package transport

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/internal/config"
	"github.com/soniq-dev/soniq-sidecar/protocol"
)

// probeLog discards what the probed handlers log.
var probeLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// Probe starts a process through the handler's transport, hands its hello
// to check and stops the process; what went wrong is in Err, with the
// process's last stderr lines.
func TestProbe(t *testing.T) {
	sp := StartSpawner()
	t.Cleanup(sp.Stop)
	raw := func(script string) *config.Handler {
		return &config.Handler{Name: "raw", Command: []string{"sh", "-c", script}, Transport: config.TransportStdio,
			StartupTimeout: 20 * time.Second, Concurrency: 1, Processes: 1}
	}
	mismatch := errors.New("the hello disagrees")
	cases := []struct {
		name     string
		handler  func(t *testing.T) *config.Handler
		checkErr error
		want     []string // parts of Err; none = no error
	}{
		{"python/stdio", example("examples/python/manifest.yaml"), nil, nil},
		{"node/unix", example("examples/node/manifest-unix.yaml"), nil, nil},
		{"hello disagrees", example("examples/python/manifest.yaml"), mismatch, []string{"the hello disagrees"}},
		{"exits without a hello", func(*testing.T) *config.Handler { return raw("echo going away >&2; exit 3") }, nil,
			[]string{"handler raw: the process exited with status 3 without a hello", "stderr (last lines):\ngoing away"}},
		{"another frame first", func(*testing.T) *config.Handler {
			return raw(`printf '{"type":"pong","seq":1}\n'; exec sleep 30`)
		}, nil, []string{`handler raw: its first frame is "pong", not hello`}},
		{"not a frame", func(*testing.T) *config.Handler { return raw("echo hello there; exec sleep 30") }, nil,
			[]string{"handler raw: protocol"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := c.handler(t)
			var got *protocol.Hello
			started := time.Now()
			r := Probe(context.Background(), sp, h, probeLog, func(hello *protocol.Hello) error {
				got = hello
				return c.checkErr
			})
			// The process is stopped, or killed when it failed, well
			// within the 5 s before the probe escalates to SIGKILL.
			assert.Less(t, time.Since(started), 5*time.Second)
			if c.want == nil {
				require.NoError(t, r.Err)
				require.NotNil(t, got, "check was given the hello")
				assert.Positive(t, r.PID)
				assert.Equal(t, got.PID, r.PID)
				assert.Equal(t, got.SDK, r.SDK)
				assert.NotEmpty(t, r.SDK)
				return
			}
			require.Error(t, r.Err)
			if c.checkErr != nil {
				assert.ErrorIs(t, r.Err, c.checkErr)
			}
			for _, w := range c.want {
				assert.Contains(t, r.Err.Error(), w)
			}
		})
	}
}

// example is the first handler of an example manifest.
func example(manifest string) func(t *testing.T) *config.Handler {
	return func(t *testing.T) *config.Handler {
		m, err := config.LoadManifest(repoPath(t, manifest))
		require.NoError(t, err)
		h := &m.Handlers[0]
		if _, err := exec.LookPath(h.Command[0]); err != nil {
			t.Fatalf("%s is required for the %s example handlers (not skipped: install it): %v", h.Command[0], h.Name, err)
		}
		return h
	}
}

// Probe of an attach handler: a session with every endpoint its patterns
// match now, each hello checked; the handler is left running.
func TestProbeAttach(t *testing.T) {
	t.Parallel()
	sock := socketPath(t)
	ln := listen(t, listenSDKs[0], sock)
	ln.waitListening(t)
	pattern := filepath.Join(filepath.Dir(sock), "*.sock")
	h := &config.Handler{Name: "attached", Attach: []string{pattern}, StartupTimeout: 20 * time.Second}
	checked := 0
	r := Probe(context.Background(), nil, h, probeLog, func(*protocol.Hello) error { checked++; return nil })
	require.NoError(t, r.Err)
	assert.Equal(t, 1, checked)
	assert.Equal(t, ln.cmd.Process.Pid, r.PID)
	assert.NotEmpty(t, r.SDK)

	mismatch := errors.New("the hello disagrees")
	r = Probe(context.Background(), nil, h, probeLog, func(*protocol.Hello) error { return mismatch })
	require.ErrorIs(t, r.Err, mismatch)
	assert.Contains(t, r.Err.Error(), sock+": the hello disagrees")
	select {
	case <-ln.exited:
		t.Fatal("the probe stopped the handler")
	default:
	}

	h.Attach = []string{filepath.Join(filepath.Dir(sock), "*.none")}
	r = Probe(context.Background(), nil, h, probeLog, func(*protocol.Hello) error { return nil })
	assert.ErrorContains(t, r.Err, "handler attached: no endpoint matches")
}
