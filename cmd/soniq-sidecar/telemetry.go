package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/soniq-dev/soniq-sidecar/supervisor"
)

// meterName and tracerName are the supervisor's instrumentation scopes.
const (
	meterName  = supervisor.InstrumentationScope
	tracerName = supervisor.InstrumentationScope
)

// telemetryFlushTimeout bounds the final flush of OTLP metrics and spans at
// STOPPED, so an unreachable collector cannot hold the exit open.
const telemetryFlushTimeout = 5 * time.Second

// telemetryOptions are setupTelemetry's optional inputs.
type telemetryOptions struct {
	workerID  string
	logger    *slog.Logger
	readiness func(context.Context) bool
}

// telemetryOption sets one of setupTelemetry's optional inputs.
type telemetryOption func(*telemetryOptions)

// withWorkerID records the worker id (the soniq_workers row) on the
// telemetry resource as service.instance.id, so metrics and spans of one
// sidecar can be told from another's.
func withWorkerID(id string) telemetryOption {
	return func(o *telemetryOptions) { o.workerID = id }
}

// withLogger routes the OpenTelemetry SDK's own errors (an OTLP collector
// that cannot be reached, say) to the process logger instead of the SDK's
// default plain-text stderr logger.
func withLogger(l *slog.Logger) telemetryOption {
	return func(o *telemetryOptions) { o.logger = l }
}

// withReadiness exports ready, evaluated at each collection, as the gauge
// soniq_ready (1 ready, 0 not): what /readyz answers, for alerting.
func withReadiness(ready func(context.Context) bool) telemetryOption {
	return func(o *telemetryOptions) { o.readiness = ready }
}

// setupTelemetry configures the OpenTelemetry SDK (only here, in cmd):
//
//   - a meter provider whose instruments are always served by the returned
//     /metrics handler (Prometheus text format) and, when an OTLP endpoint
//     is configured, also pushed with OTLP/HTTP;
//   - when an OTLP endpoint is configured, a tracer provider exporting spans
//     with OTLP/HTTP, installed globally with the W3C TraceContext (and
//     Baggage) propagator, so supervisor code can use otel.Tracer and
//     otel.GetTextMapPropagator without knowing about the SDK.
//
// An OTLP endpoint is configured when OTEL_EXPORTER_OTLP_ENDPOINT (or the
// signal-specific OTEL_EXPORTER_OTLP_METRICS_ENDPOINT /
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set; every other standard
// OTEL_EXPORTER_OTLP_* variable (headers, timeout, compression, TLS
// certificates, temporality) is read by the exporters themselves, and
// OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES extend or override the
// resource. OTEL_SDK_DISABLED=true turns OTLP export off (the Prometheus
// endpoint stays).
//
// It returns the supervisor's instruments, a func that flushes and shuts the
// providers down (call it once, after the supervisor has stopped), and the
// /metrics handler.
func setupTelemetry(ctx context.Context, e env, opts ...telemetryOption) (*supervisor.Metrics, func(), http.Handler, error) {
	var o telemetryOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.logger != nil {
		log := o.logger
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
			log.Warn("telemetry export failed", "err", err)
		}))
	}

	res, err := telemetryResource(ctx, o.workerID)
	if err != nil {
		return nil, nil, nil, err
	}
	metricsOTLP, tracesOTLP, err := otlpTargets(e)
	if err != nil {
		return nil, nil, nil, err
	}

	reg := prometheus.NewRegistry()
	promExp, err := otelprom.New(
		otelprom.WithRegisterer(reg),
		otelprom.WithoutScopeInfo(),
		// Spelled out so an exporter upgrade cannot rename the series: "_total" on
		// counters, the unit as a suffix ("s" → "_seconds").
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes),
	)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("creating the Prometheus exporter: %w", err)
	}
	mopts := []sdkmetric.Option{sdkmetric.WithReader(promExp), sdkmetric.WithResource(res)}
	if metricsOTLP {
		mexp, err := otlpmetrichttp.New(ctx)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("creating the OTLP metric exporter: %w", err)
		}
		// The interval follows OTEL_METRIC_EXPORT_INTERVAL (default 60 s).
		mopts = append(mopts, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(mexp)))
	}
	mp := sdkmetric.NewMeterProvider(mopts...)
	otel.SetMeterProvider(mp)

	var tp *sdktrace.TracerProvider
	if tracesOTLP {
		texp, err := otlptracehttp.New(ctx)
		if err != nil {
			_ = mp.Shutdown(context.WithoutCancel(ctx))
			return nil, nil, nil, fmt.Errorf("creating the OTLP trace exporter: %w", err)
		}
		// The sampler follows OTEL_TRACES_SAMPLER (default: parent-based, always on).
		tp = sdktrace.NewTracerProvider(sdktrace.WithBatcher(texp), sdktrace.WithResource(res))
		otel.SetTracerProvider(tp)
	}
	// The propagator is installed even without an exporter: a traceparent
	// that arrives with a job is then still passed on to the handler.
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))

	m, err := supervisor.NewMetrics(mp.Meter(meterName))
	if err == nil && o.readiness != nil {
		err = registerReadiness(mp.Meter(meterName), o.readiness)
	}
	if err != nil {
		_ = mp.Shutdown(context.WithoutCancel(ctx))
		return nil, nil, nil, err
	}
	shutdown := func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), telemetryFlushTimeout)
		defer cancel()
		var errs []error
		if tp != nil {
			errs = append(errs, tp.Shutdown(ctx)) // ends the batcher: flushes pending spans
		}
		errs = append(errs, mp.Shutdown(ctx)) // a last collection and push
		if err := errors.Join(errs...); err != nil && o.logger != nil {
			o.logger.Warn("telemetry flush failed", "err", err)
		}
	}
	return m, shutdown, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), nil
}

// jobTracer is the supervisor's tracer: the global provider's (nil) when
// traces are exported, else a no-op one, with which the supervisor starts
// no span at all (see supervisor.Config.Tracer).
func jobTracer(e env) trace.Tracer {
	if _, traces, err := otlpTargets(e); err == nil && !traces {
		return noop.Tracer{}
	}
	return nil
}

// registerReadiness adds the soniq_ready gauge, read from ready whenever
// the metrics are collected (a Prometheus scrape, an OTLP push).
func registerReadiness(m metric.Meter, ready func(context.Context) bool) error {
	g, err := m.Int64ObservableGauge("soniq_ready",
		metric.WithDescription("1 while /readyz answers 200 (database reachable, every handler with a ready process or attached endpoint, state RUNNING), else 0; evaluated at each collection."))
	if err != nil {
		return fmt.Errorf("creating the soniq_ready gauge: %w", err)
	}
	if _, err := m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		v := int64(0)
		if ready(ctx) {
			v = 1
		}
		o.ObserveInt64(g, v)
		return nil
	}, g); err != nil {
		return fmt.Errorf("registering the soniq_ready gauge: %w", err)
	}
	return nil
}

// telemetryResource describes this process to metric and trace backends:
// service.name soniq-sidecar, service.version, service.instance.id (the
// worker id, when known) and the SDK's own attributes. OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES take precedence, as the specification asks.
func telemetryResource(ctx context.Context, workerID string) (*resource.Resource, error) {
	opts := []resource.Option{
		resource.WithSchemaURL(semconv.SchemaURL),
		resource.WithTelemetrySDK(),
	}
	opts = append(opts, resource.WithAttributes(semconv.ServiceName("soniq-sidecar"), semconv.ServiceVersion(version)))
	if workerID != "" {
		opts = append(opts, resource.WithAttributes(semconv.ServiceInstanceID(workerID)))
	}
	opts = append(opts, resource.WithFromEnv()) // last: the environment wins
	res, err := resource.New(ctx, opts...)
	if err != nil {
		return nil, usageErrorf("OTEL_RESOURCE_ATTRIBUTES: %v", err)
	}
	return res, nil
}

// otlpTargets reports which signals go to an OTLP collector. Only the
// http/protobuf protocol is built in; asking for grpc is a configuration
// error rather than a silent fallback.
func otlpTargets(e env) (metrics, traces bool, err error) {
	get := func(k string) string {
		v, _ := e.lookupEnv(k)
		return strings.TrimSpace(v)
	}
	if strings.EqualFold(get("OTEL_SDK_DISABLED"), "true") {
		return false, false, nil
	}
	common := get("OTEL_EXPORTER_OTLP_ENDPOINT") != ""
	metrics = common || get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") != ""
	traces = common || get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	if strings.EqualFold(get("OTEL_METRICS_EXPORTER"), "none") {
		metrics = false
	}
	if strings.EqualFold(get("OTEL_TRACES_EXPORTER"), "none") {
		traces = false
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"} {
		if p := get(k); p != "" && p != "http/protobuf" && (metrics || traces) {
			return false, false, usageErrorf("%s=%s is not supported: soniq-sidecar exports OTLP over http/protobuf only", k, p)
		}
	}
	return metrics, traces, nil
}
