package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"

	"github.com/soniq-dev/soniq-sidecar/internal/otlptest"
)

// testEnv is an env whose variables are vars only.
func testEnv(vars map[string]string) env {
	return env{stdout: io.Discard, stderr: io.Discard, lookupEnv: func(k string) (string, bool) {
		v, ok := vars[k]
		return v, ok
	}}
}

func scrape(t *testing.T, h http.Handler) string {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	return rec.Body.String()
}

// The Prometheus endpoint carries the resource (target_info) and names the
// series the way docs/operations.md lists them: "_total" on counters, "_seconds" on a
// histogram whose unit is "s". The instruments are recorded through the
// global meter provider setupTelemetry installs, which is also what any
// library using the OTel API gets.
func TestTelemetryPrometheus(t *testing.T) {
	m, shutdown, h, err := setupTelemetry(context.Background(), testEnv(nil), withWorkerID("w-1234"))
	require.NoError(t, err)
	require.NotNil(t, m)
	defer shutdown()

	meter := otel.GetMeterProvider().Meter(meterName)
	c, err := meter.Int64Counter("soniq_test_things")
	require.NoError(t, err)
	c.Add(context.Background(), 2, metric.WithAttributes())
	hist, err := meter.Float64Histogram("soniq_test_wait", metric.WithUnit("s"))
	require.NoError(t, err)
	hist.Record(context.Background(), 0.25)

	body := scrape(t, h)
	assert.Contains(t, body, "soniq_test_things_total 2")
	assert.Contains(t, body, "soniq_test_wait_seconds_bucket{")
	assert.Contains(t, body, "soniq_test_wait_seconds_count 1")
	assert.NotContains(t, body, "otel_scope_name", "scope labels are left out")
	var info string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "target_info{") {
			info = l
		}
	}
	require.NotEmpty(t, info, "target_info is exported:\n%s", body)
	assert.Contains(t, info, `service_name="soniq-sidecar"`)
	assert.Contains(t, info, `service_version="`+version+`"`)
	assert.Contains(t, info, `service_instance_id="w-1234"`)
}

// With OTEL_EXPORTER_OTLP_ENDPOINT set, metrics and spans are pushed over
// OTLP/HTTP with the sidecar's resource, the global tracer provider and the
// W3C propagator are installed, and the shutdown func flushes both.
func TestTelemetryOTLP(t *testing.T) {
	col := &otlptest.Collector{}
	srv := httptest.NewServer(col)
	defer srv.Close()
	// The exporters read the process environment themselves.
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=test")
	e := testEnv(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": srv.URL})
	var logs bytes.Buffer
	log, err := newLogger(&logs, "json")
	require.NoError(t, err)

	_, shutdown, h, err := setupTelemetry(context.Background(), e, withWorkerID("w-otlp"), withLogger(log))
	require.NoError(t, err)

	c, err := otel.GetMeterProvider().Meter(meterName).Int64Counter("soniq_test_pushed")
	require.NoError(t, err)
	c.Add(context.Background(), 3)

	ctx, span := otel.Tracer(tracerName).Start(context.Background(), "t.job process")
	carrier := propagation.MapCarrier{}
	otel.GetTextMapPropagator().Inject(ctx, carrier)
	span.End()
	tp := carrier.Get("traceparent")
	require.Regexp(t, `^00-[0-9a-f]{32}-[0-9a-f]{16}-01$`, tp, "W3C traceparent for the job frame")
	assert.Contains(t, tp, span.SpanContext().TraceID().String())

	assert.Contains(t, scrape(t, h), "soniq_test_pushed_total 3", "Prometheus keeps working next to OTLP")
	shutdown()
	assert.Empty(t, logs.String(), "no export errors")

	traces, metrics := col.Traces(), col.Metrics()
	require.NotEmpty(t, traces, "spans flushed at shutdown (paths %v)", col.Paths())
	rs := traces[0].ResourceSpans[0]
	res := otlptest.Attrs(rs.Resource.Attributes)
	assert.Equal(t, "soniq-sidecar", res["service.name"])
	assert.Equal(t, version, res["service.version"])
	assert.Equal(t, "w-otlp", res["service.instance.id"])
	assert.Equal(t, "test", res["deployment.environment.name"])
	require.NotEmpty(t, rs.ScopeSpans)
	assert.Equal(t, tracerName, rs.ScopeSpans[0].Scope.Name)
	assert.Equal(t, "t.job process", rs.ScopeSpans[0].Spans[0].Name)

	require.NotEmpty(t, metrics, "metrics flushed at shutdown (paths %v)", col.Paths())
	found := false
	for _, req := range metrics {
		for _, rm := range req.ResourceMetrics {
			assert.Equal(t, "w-otlp", otlptest.Attrs(rm.Resource.Attributes)["service.instance.id"])
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					if m.Name == "soniq_test_pushed" {
						found = true
						assert.Equal(t, int64(3), m.GetSum().DataPoints[0].GetAsInt())
					}
				}
			}
		}
	}
	assert.True(t, found, "the counter reached the collector under its OTel name")
}

// An unreachable collector is reported in the process log, as JSON, and
// does not fail or hang the shutdown beyond its bound.
func TestTelemetryOTLPUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens there now
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
	t.Setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "500")
	var logs syncBuffer
	log, err := newLogger(&logs, "json")
	require.NoError(t, err)
	_, shutdown, _, err := setupTelemetry(context.Background(),
		testEnv(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": url}), withLogger(log))
	require.NoError(t, err)
	_, span := otel.Tracer(tracerName).Start(context.Background(), "lost")
	span.End()
	shutdown()
	assert.Contains(t, logs.String(), `"msg":"telemetry flush failed"`)
}

// syncBuffer is a bytes.Buffer safe for the SDK's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestOTLPTargets(t *testing.T) {
	for _, tc := range []struct {
		name            string
		vars            map[string]string
		metrics, traces bool
		err             string
	}{
		{name: "nothing set", vars: nil},
		{name: "common endpoint", vars: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, metrics: true, traces: true},
		{name: "traces only", vars: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, traces: true},
		{name: "metrics only", vars: map[string]string{"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://c:4318/v1/metrics"}, metrics: true},
		{name: "traces exporter none", vars: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}, metrics: true},
		{name: "sdk disabled", vars: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}},
		{name: "http/protobuf", vars: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, metrics: true, traces: true},
		{name: "grpc refused", vars: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
			err: "OTEL_EXPORTER_OTLP_PROTOCOL=grpc is not supported"},
		{name: "grpc without an endpoint is ignored", vars: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, tr, err := otlpTargets(testEnv(tc.vars))
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				var ue usageError
				assert.ErrorAs(t, err, &ue, "a configuration error exits 2")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.metrics, m, "metrics")
			assert.Equal(t, tc.traces, tr, "traces")
		})
	}
}
