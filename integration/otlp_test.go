package integration

import (
	"encoding/hex"
	"net/http/httptest"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/internal/otlptest"
)

// With OTEL_EXPORTER_OTLP_ENDPOINT set, the real binary exports one span per
// job execution (OTel messaging attributes) and its metrics to an OTLP
// receiver, and the handler receives the span's W3C traceparent.
func TestOTLPExportsTheJobSpanAndMetrics(t *testing.T) {
	t.Parallel()
	forEachSDK(t, func(t *testing.T, s sdk) {
		col := &otlptest.Collector{}
		srv := httptest.NewServer(col)
		t.Cleanup(srv.Close)

		w := newWorld(t, s, manifestOpts{})
		id := w.enqueue("t.trace", `{}`, 0)
		sc := w.startSidecar(map[string]string{
			"OTEL_EXPORTER_OTLP_ENDPOINT": srv.URL,
			"OTEL_METRIC_EXPORT_INTERVAL": "500",
		})
		eventually(t, 30*time.Second, "the job done", func() bool { return w.job(id).Status == backends.StatusDone })
		sc.signal(syscall.SIGTERM)
		code, _ := sc.wait(30 * time.Second)
		require.Equal(t, 0, code)

		var span map[string]string
		var traceID, spanID string
		for _, sp := range col.Spans() {
			a := otlptest.Attrs(sp.Attributes)
			if a["messaging.message.id"] == id {
				span, traceID, spanID = a, hex.EncodeToString(sp.TraceId), hex.EncodeToString(sp.SpanId)
				assert.Equal(t, "process t.trace", sp.Name)
			}
		}
		require.NotNil(t, span, "a span for job %s reached the receiver (paths %v)", id, col.Paths())
		assert.Equal(t, "soniq", span["messaging.system"])
		assert.Equal(t, "process", span["messaging.operation.type"])
		assert.Equal(t, "default", span["messaging.destination.name"])
		assert.Equal(t, "t.trace", span["soniq.job.name"])
		assert.Equal(t, "done", span["soniq.outcome"])

		b, err := os.ReadFile(w.record + ".traceparent")
		require.NoError(t, err, "the handler recorded its traceparent")
		got := strings.Fields(strings.TrimSpace(string(b)))
		require.Len(t, got, 2)
		assert.Equal(t, id, got[0])
		assert.Equal(t, "00-"+traceID+"-"+spanID+"-01", got[1], "the handler got the job span's traceparent")

		names := col.MetricNames()
		for _, m := range []string{"soniq_jobs_started", "soniq_jobs_completed", "soniq_job_duration", "soniq_handler_processes"} {
			assert.True(t, names[m], "metric %s exported over OTLP (got %v)", m, names)
		}
	})
}
