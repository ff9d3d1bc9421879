package supervisor

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/internal/config"
	"github.com/soniq-dev/soniq-sidecar/internal/memory"
	"github.com/soniq-dev/soniq-sidecar/protocol"
)

func TestCheckHello(t *testing.T) {
	h := &config.Handler{Name: "h", Jobs: []config.JobSpec{{Name: "a", Cancellable: true, Line: 5}, {Name: "s", Cancellable: false, Line: 7}}}
	tests := []struct {
		name  string
		hello protocol.Hello
		want  string // substring of the error; "" = ok
	}{
		{"match", protocol.Hello{Protocol: 1, Jobs: []protocol.HelloJob{{Name: "a", Cancellable: true}, {Name: "s"}}}, ""},
		{"wrong version", protocol.Hello{Protocol: 2, Jobs: []protocol.HelloJob{{Name: "a", Cancellable: true}, {Name: "s"}}}, "protocol version 2"},
		{"missing job", protocol.Hello{Protocol: 1, Jobs: []protocol.HelloJob{{Name: "a", Cancellable: true}}}, "job s (manifest line 7) is declared in the manifest but the handler does not register it"},
		{"extra job", protocol.Hello{Protocol: 1, Jobs: []protocol.HelloJob{{Name: "a", Cancellable: true}, {Name: "s"}, {Name: "x"}}}, "job x is registered by the handler but not declared"},
		{"cancellable differs", protocol.Hello{Protocol: 1, Jobs: []protocol.HelloJob{{Name: "a"}, {Name: "s"}}}, "job a (manifest line 5): the manifest says cancellable: true, the handler says false"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := checkHello(h, &tc.hello)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			var hm *HelloMismatchError
			require.ErrorAs(t, err, &hm)
			assert.Equal(t, "h", hm.Handler)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestRestartDelay(t *testing.T) {
	tests := []struct {
		failures int
		want     time.Duration
	}{
		{1, 100 * time.Millisecond}, {2, 200 * time.Millisecond}, {3, 400 * time.Millisecond},
		{9, 25600 * time.Millisecond}, {10, 30 * time.Second}, {50, 30 * time.Second},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, restartDelay(tc.failures), "failures=%d", tc.failures)
	}
}

func examplesManifest(t *testing.T) *config.Manifest {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	m, err := config.LoadManifest(filepath.Join(filepath.Dir(file), "..", "examples", "python", "manifest.yaml"))
	require.NoError(t, err)
	return m
}

// Run end to end in-process: real Python handler processes, the memory
// backend, Shutdown → STOPPED, worker row stopped, every result written.
func TestRunServesJobsAndStopsCleanly(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	want := map[string]string{} // job id → expected result
	for i := range 20 {
		j, err := mem.Enqueue(ctx, backends.EnqueueParams{Name: "examples.add", Args: []byte(fmt.Sprintf(`{"a":%d,"b":2}`, i))})
		require.NoError(t, err)
		want[j.ID] = fmt.Sprintf(`{"sum":%d}`, i+2)
	}
	settings := config.DefaultSettings()
	settings.PollInterval = 50 * time.Millisecond
	sup, err := New(Config{Manifest: examplesManifest(t), Settings: settings, Backend: mem})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- sup.Run(ctx) }()
	require.Eventually(t, func() bool {
		st, err := mem.Stats(ctx)
		return err == nil && st.Done == 20
	}, 30*time.Second, 20*time.Millisecond)
	ok, why := sup.Ready()
	assert.True(t, ok, why)

	sup.Shutdown()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after Shutdown")
	}
	assert.Equal(t, StateStopped, sup.State())
	ok, _ = sup.Ready()
	assert.False(t, ok)
	for id, result := range want {
		j, err := mem.Get(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, backends.StatusDone, j.Status)
		assert.JSONEq(t, result, string(j.Result))
	}
}
