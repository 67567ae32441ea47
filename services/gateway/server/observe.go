package server

import (
	"context"
	"log/slog"
	"net/http"
	"runtime/debug"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/ingest"
)

// access is the one wide log line written per request.
type access struct {
	start                    time.Time
	method, endpoint, remote string // remote: forwarded.Trusted.Remote's
	tenant, provider, reason string
	message                  string // the refusal's, as the sender was answered
	status, bytes            int
	stored, duplicates       int
}

func (s *Server) logAccess(a *access) {
	level := slog.LevelInfo
	if a.status >= 500 {
		level = slog.LevelWarn
	}
	s.log.LogAttrs(context.Background(), level, "webhook",
		slog.String("method", a.method), slog.String("endpoint", a.endpoint),
		slog.String("tenant", a.tenant), slog.String("provider", a.provider),
		slog.Int("status", a.status), slog.String("reason", a.reason),
		slog.Int("bytes", a.bytes), slog.Int("stored", a.stored), slog.Int("duplicates", a.duplicates),
		slog.Duration("took", time.Since(a.start)), slog.String("remote", a.remote))
	if a.status >= 400 {
		s.rejections.record(a)
	}
}

// closeChunked closes the connection after answering a chunked request. Go's server
// reads a request with both Content-Length and Transfer-Encoding as chunked and drops
// the length, without a trace of it; RFC 9112 (6.3) asks the connection be closed after
// such a request, a request smuggling attempt or a confused proxy, so it is after any
// chunked one (providers send a Content-Length: keep-alive is theirs).
func closeChunked(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.TransferEncoding) > 0 {
			w.Header().Set("Connection", "close")
		}
		next.ServeHTTP(w, r)
	})
}

// recoverPanics turns a panic into a logged 500: no panic reaches the client.
func recoverPanics(log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				log.Error("panic in handler", "path", r.URL.Path, "panic", v, "stack", string(debug.Stack()))
				writeError(w, http.StatusInternalServerError, "internal", "internal error")
			}
		}()
		next.ServeHTTP(w, r)
	})
}

type metrics struct {
	events, duplicates, rejections, invalidSignatures metric.Int64Counter
	quarantine                                        metric.Int64Counter
	version                                           attribute.KeyValue // the workflow version label
}

func newMetrics(workflowVersion string, store *storeGuard) (*metrics, error) {
	m := otel.Meter("exacto/gateway")
	ms := metrics{version: attribute.String("workflow_version", workflowVersion)}
	var err error
	if ms.events, err = m.Int64Counter("exacto_gateway_events_received", metric.WithDescription("events in verified deliveries, duplicates included")); err != nil {
		return nil, err
	}
	if ms.duplicates, err = m.Int64Counter("exacto_gateway_duplicates", metric.WithDescription("events answered 200 without being stored again")); err != nil {
		return nil, err
	}
	if ms.rejections, err = m.Int64Counter("exacto_gateway_rejections", metric.WithDescription("deliveries refused, by reason")); err != nil {
		return nil, err
	}
	if ms.invalidSignatures, err = m.Int64Counter("exacto_gateway_invalid_signatures", metric.WithDescription("deliveries whose signature, secret or timestamp did not verify")); err != nil {
		return nil, err
	}
	if ms.quarantine, err = m.Int64Counter("exacto_gateway_quarantined", metric.WithDescription("verified deliveries the gateway could not turn into events, kept in the quarantine (a retry of one already kept is not counted)")); err != nil {
		return nil, err
	}
	// The store's room, as the guard last read it: an alert fires well before it
	// refuses (deployments/prometheus/alerts.yml).
	used, err := m.Int64ObservableGauge("exacto_store_used_bytes", metric.WithUnit("By"), metric.WithDescription("JetStream storage the account holds, at the gateway's last check"))
	if err != nil {
		return nil, err
	}
	limit, err := m.Int64ObservableGauge("exacto_store_limit_bytes", metric.WithUnit("By"), metric.WithDescription("gateway.store_limit (0: none)"))
	if err != nil {
		return nil, err
	}
	free, err := m.Int64ObservableGauge("exacto_store_free_disk_bytes", metric.WithUnit("By"), metric.WithDescription("free space of the embedded server's data dir, at the gateway's last check"))
	if err != nil {
		return nil, err
	}
	minFree, err := m.Int64ObservableGauge("exacto_store_min_free_disk_bytes", metric.WithUnit("By"), metric.WithDescription("gateway.min_free_disk"))
	if err != nil {
		return nil, err
	}
	_, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		at := metric.WithAttributes(ms.version)
		o.ObserveInt64(limit, store.limit, at)
		if u := store.used.Load(); u >= 0 {
			o.ObserveInt64(used, u, at)
		}
		if f := store.free.Load(); store.dir != "" && f >= 0 {
			o.ObserveInt64(free, f, at)
			o.ObserveInt64(minFree, store.minFree, at)
		}
		return nil
	}, used, limit, free, minFree)
	return &ms, err
}

func (m *metrics) received(ep *Endpoint, envs []envelope.Envelope, dups int) {
	ctx := context.Background()
	for _, e := range envs {
		m.events.Add(ctx, 1, metric.WithAttributes(attribute.String("tenant", ep.Tenant), attribute.String("provider", ep.Spec.Name), attribute.String("type", e.Type), m.version))
	}
	if dups > 0 {
		m.duplicates.Add(ctx, int64(dups), metric.WithAttributes(attribute.String("tenant", ep.Tenant), attribute.String("provider", ep.Spec.Name), m.version))
	}
}

func (m *metrics) invalidSignature(ep *Endpoint) {
	m.invalidSignatures.Add(context.Background(), 1, metric.WithAttributes(attribute.String("tenant", ep.Tenant), attribute.String("provider", ep.Spec.Name), m.version))
}

func (m *metrics) rejected(tenant, provider, reason string) {
	m.rejections.Add(context.Background(), 1, metric.WithAttributes(attribute.String("tenant", tenant), attribute.String("provider", provider), attribute.String("reason", reason), m.version))
}

func (m *metrics) quarantined(ep *ingest.Endpoint, reason string, n int64) {
	m.quarantine.Add(context.Background(), n, metric.WithAttributes(attribute.String("tenant", ep.Tenant), attribute.String("provider", ep.Spec.Name),
		attribute.String("endpoint", ep.ID), attribute.String("reason", reason), m.version))
}

// quarantineReasons are the reasons a verified delivery is quarantined.
var quarantineReasons = []string{ingest.BodyTooLarge, ingest.TooManyEvents, ingest.Malformed, ingest.EmptyBatch}

// zero shows an endpoint's duplicate, signature and quarantine counters at 0 from the
// start, so increase() sees their first delivery.
func (m *metrics) zero(ep *Endpoint) {
	at := metric.WithAttributes(attribute.String("tenant", ep.Tenant), attribute.String("provider", ep.Spec.Name), m.version)
	m.duplicates.Add(context.Background(), 0, at)
	m.invalidSignatures.Add(context.Background(), 0, at)
	for _, reason := range quarantineReasons {
		m.quarantined(ep.Endpoint, reason, 0)
	}
}
