// Package telemetry sets up logs and metrics for a service: log/slog (JSON in
// production, text on a terminal) and OpenTelemetry metrics exported in Prometheus
// format at the admin address's /metrics.
package telemetry

import (
	"io"
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
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
