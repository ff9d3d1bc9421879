// Package otlptest is an OTLP/HTTP receiver for tests: it decodes what an
// OpenTelemetry exporter pushes (metrics and traces, protobuf) and keeps it.
package otlptest

import (
	"io"
	"net/http"
	"strconv"
	"sync"

	collmetric "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	colltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Collector is an http.Handler serving /v1/metrics and /v1/traces.
type Collector struct {
	mu      sync.Mutex
	metrics []*collmetric.ExportMetricsServiceRequest
	traces  []*colltrace.ExportTraceServiceRequest
	paths   []string
}

func (c *Collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil || r.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.paths = append(c.paths, r.URL.Path)
	var resp proto.Message
	switch r.URL.Path {
	case "/v1/metrics":
		var m collmetric.ExportMetricsServiceRequest
		if proto.Unmarshal(body, &m) != nil {
			http.Error(w, "bad metrics", http.StatusBadRequest)
			return
		}
		c.metrics = append(c.metrics, &m)
		resp = &collmetric.ExportMetricsServiceResponse{}
	case "/v1/traces":
		var m colltrace.ExportTraceServiceRequest
		if proto.Unmarshal(body, &m) != nil {
			http.Error(w, "bad traces", http.StatusBadRequest)
			return
		}
		c.traces = append(c.traces, &m)
		resp = &colltrace.ExportTraceServiceResponse{}
	default:
		http.NotFound(w, r)
		return
	}
	b, _ := proto.Marshal(resp)
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(b)
}

// Paths lists the request paths received, in order.
func (c *Collector) Paths() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.paths...)
}

// Metrics returns the metric export requests received.
func (c *Collector) Metrics() []*collmetric.ExportMetricsServiceRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*collmetric.ExportMetricsServiceRequest(nil), c.metrics...)
}

// Traces returns the trace export requests received.
func (c *Collector) Traces() []*colltrace.ExportTraceServiceRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*colltrace.ExportTraceServiceRequest(nil), c.traces...)
}

// Spans flattens every span received.
func (c *Collector) Spans() []*tracepb.Span {
	var out []*tracepb.Span
	for _, req := range c.Traces() {
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				out = append(out, ss.Spans...)
			}
		}
	}
	return out
}

// MetricNames lists the names of every metric received.
func (c *Collector) MetricNames() map[string]bool {
	out := map[string]bool{}
	for _, req := range c.Metrics() {
		for _, rm := range req.ResourceMetrics {
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					out[m.Name] = true
				}
			}
		}
	}
	return out
}

// Attrs turns OTLP key-values into a map of their string forms.
func Attrs(kvs []*commonpb.KeyValue) map[string]string {
	out := map[string]string{}
	for _, kv := range kvs {
		switch v := kv.Value.Value.(type) {
		case *commonpb.AnyValue_StringValue:
			out[kv.Key] = v.StringValue
		case *commonpb.AnyValue_IntValue:
			out[kv.Key] = strconv.FormatInt(v.IntValue, 10)
		case *commonpb.AnyValue_BoolValue:
			if v.BoolValue {
				out[kv.Key] = "true"
			} else {
				out[kv.Key] = "false"
			}
		default:
			out[kv.Key] = kv.Value.String()
		}
	}
	return out
}
