// Package telemetry sets up a process's logs, metrics and traces: log/slog (JSON in
// production, text on a terminal) with the trace and span ids of the context; OpenTelemetry
// metrics exported in Prometheus format at the admin address's /metrics and over OTLP
// when configured; traces over OTLP when configured and to a file when asked.
package telemetry

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// The environment variables Setup reads. The OTLP exporters also read the rest of the
// standard OTEL_EXPORTER_OTLP_* family (headers, timeouts, protocol details) themselves.
const (
	EnvOTLPEndpoint        = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvOTLPTracesEndpoint  = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	EnvOTLPMetricsEndpoint = "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"
	EnvServiceName         = "OTEL_SERVICE_NAME"
	// EnvTraceFile names a file that receives every finished span as one JSON line.
	EnvTraceFile = "EXACTO_TRACE_FILE"
	// EnvLogFormat is "json" or "text"; unset, a process logs JSON unless told otherwise.
	EnvLogFormat = "EXACTO_LOG_FORMAT"
)

// Logger returns a JSON logger, or a text one when text is true; either adds the trace
// and span ids of the context it is given (LogAttrs, InfoContext, …).
func Logger(w io.Writer, text bool, level slog.Level) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if text {
		return slog.New(traceIDs{slog.NewTextHandler(w, opts)})
	}
	return slog.New(traceIDs{slog.NewJSONHandler(w, opts)})
}

// traceIDs adds trace_id and span_id to records logged with a traced context.
type traceIDs struct{ slog.Handler }

func (h traceIDs) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h traceIDs) WithAttrs(as []slog.Attr) slog.Handler { return traceIDs{h.Handler.WithAttrs(as)} }
func (h traceIDs) WithGroup(name string) slog.Handler    { return traceIDs{h.Handler.WithGroup(name)} }

// Providers are the process's installed metric and trace providers.
type Providers struct {
	// Metrics serves the Prometheus exposition of every metric (the admin's /metrics).
	Metrics  http.Handler
	meters   *sdkmetric.MeterProvider
	tracers  *sdktrace.TracerProvider // nil when no trace exporter is configured
	closeOut func() error
}

// Setup installs the global OpenTelemetry providers of process service: metrics read
// by a Prometheus exporter on a registry of its own (and pushed over OTLP/HTTP when an
// OTLP endpoint is set); traces batched to OTLP/HTTP when an endpoint is set and to the
// EXACTO_TRACE_FILE file when it is set. Without either, spans are not recorded.
// Shutdown flushes what is buffered.
func Setup(ctx context.Context, service string, getenv func(string) string) (*Providers, error) {
	name := getenv(EnvServiceName)
	if name == "" {
		name = service
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attribute.String("service.name", name)))
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	prom, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, err
	}
	mopts := []sdkmetric.Option{sdkmetric.WithResource(res), sdkmetric.WithReader(prom)}
	if getenv(EnvOTLPEndpoint) != "" || getenv(EnvOTLPMetricsEndpoint) != "" {
		exp, err := otlpmetrichttp.New(ctx)
		if err != nil {
			return nil, err
		}
		mopts = append(mopts, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp)))
	}
	p := &Providers{Metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), meters: sdkmetric.NewMeterProvider(mopts...)}
	otel.SetMeterProvider(p.meters)

	var topts []sdktrace.TracerProviderOption
	if getenv(EnvOTLPEndpoint) != "" || getenv(EnvOTLPTracesEndpoint) != "" {
		exp, err := otlptracehttp.New(ctx)
		if err != nil {
			return nil, err
		}
		topts = append(topts, sdktrace.WithBatcher(exp))
	}
	if path := getenv(EnvTraceFile); path != "" {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, err
		}
		exp, err := stdouttrace.New(stdouttrace.WithWriter(f))
		if err != nil {
			f.Close()
			return nil, err
		}
		topts = append(topts, sdktrace.WithBatcher(exp))
		p.closeOut = f.Close
	}
	if len(topts) > 0 {
		// The sampler follows OTEL_TRACES_SAMPLER (default: the parent's decision, else always).
		p.tracers = sdktrace.NewTracerProvider(append(topts, sdktrace.WithResource(res))...)
		otel.SetTracerProvider(p.tracers)
	}
	return p, nil
}

// Shutdown flushes and stops the providers.
func (p *Providers) Shutdown(ctx context.Context) error {
	err := p.meters.Shutdown(ctx)
	if p.tracers != nil {
		err = errors.Join(err, p.tracers.Shutdown(ctx))
	}
	if p.closeOut != nil {
		err = errors.Join(err, p.closeOut())
	}
	return err
}

// propagator carries W3C trace context (traceparent, tracestate) in message headers.
var propagator = propagation.TraceContext{}

// Inject writes ctx's trace context into headers — a NATS message's, so the trace of a
// webhook continues in every consumer of its event, or an outgoing HTTP request's.
func Inject(ctx context.Context, h map[string][]string) {
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
// provider sends them (nowhere until Setup installs one).
func Tracer(component string) trace.Tracer { return otel.Tracer("exacto/" + component) }
