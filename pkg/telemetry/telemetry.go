// Package telemetry sets up logs and metrics for a service: log/slog (JSON in
// production, text on a terminal) and OpenTelemetry metrics exported in Prometheus
// format at the admin address's /metrics.
package telemetry

import (
	"context"
	"io"
	"log/slog"
	"net/http"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/trace"
)

// Logger returns a JSON logger, or a text one when text is true.
func Logger(w io.Writer, text bool, level slog.Level) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if text {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

// Metrics installs the global OpenTelemetry meter provider with a Prometheus exporter
// on its own registry, and returns the /metrics handler.
func Metrics() (http.Handler, error) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, err
	}
	otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp)))
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), nil
}

// propagator carries W3C trace context (traceparent, tracestate) in message headers.
var propagator = propagation.TraceContext{}

// Inject writes ctx's trace context into NATS headers, so the trace of a webhook
// continues in every consumer of its event.
func Inject(ctx context.Context, h nats.Header) {
	propagator.Inject(ctx, propagation.HeaderCarrier(h))
}

// Extract reads a trace context from headers (as a map of single values, which is
// how watermill keeps them) into ctx.
func Extract(ctx context.Context, get func(key string) string) context.Context {
	return propagator.Extract(ctx, funcCarrier(get))
}

type funcCarrier func(string) string

func (f funcCarrier) Get(key string) string { return f(key) }
func (f funcCarrier) Set(string, string)    {}
func (f funcCarrier) Keys() []string        { return []string{"traceparent", "tracestate"} }

// Tracer is the tracer of an Exacto component; spans go wherever the global tracer
// provider sends them (nowhere until one is installed).
func Tracer(component string) trace.Tracer { return otel.Tracer("exacto/" + component) }
