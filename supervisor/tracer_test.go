package supervisor

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/soniq-dev/soniq-sidecar/internal/memory"
)

// A noop.Tracer turns the per-job spans off; without a Tracer the loop
// starts them on the global provider's tracer, as before.
func TestNoopTracerStartsNoSpans(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   func(*Config)
		spans bool
	}{
		{"default: the global provider's tracer", func(*Config) {}, true},
		{"noop tracer", func(c *Config) { c.Tracer = noop.Tracer{} }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Manifest: examplesManifest(t), Settings: fakeSettings(30*time.Second, time.Minute), Backend: memory.New()}
			tc.cfg(&cfg)
			sup, err := New(cfg)
			require.NoError(t, err)
			assert.Equal(t, tc.spans, newLoop(sup, nil, nil, &sync.WaitGroup{}).spans)
		})
	}
}
