package main

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"

	"github.com/soniq-dev/soniq-sidecar/supervisor"
)

// setupTelemetry configures the OpenTelemetry SDK (only here, in cmd): a
// meter provider exporting through Prometheus on /metrics. It returns the
// supervisor's instruments, a flush-and-shutdown func, and the /metrics handler.
func setupTelemetry(ctx context.Context, e env) (*supervisor.Metrics, func(), http.Handler, error) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, nil, nil, fmt.Errorf("creating the Prometheus exporter: %w", err)
	}
	res := resource.NewSchemaless(semconv.ServiceName("soniq-sidecar"), semconv.ServiceVersion(version))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp), sdkmetric.WithResource(res))
	m, err := supervisor.NewMetrics(mp.Meter("github.com/soniq-dev/soniq-sidecar/supervisor"))
	if err != nil {
		return nil, nil, nil, err
	}
	shutdown := func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = mp.Shutdown(ctx)
	}
	return m, shutdown, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), nil
}
