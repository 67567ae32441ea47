package tests

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/config"
	"exacto.dev/pkg/consumer"
	"exacto.dev/pkg/providers/instantly"
	"exacto.dev/pkg/stream"
	"exacto.dev/services/gateway/server"
)

// The trace of a webhook continues, through the NATS headers, into the consumer that
// handles its event: one trace, the consumer's span a child of the gateway's.
func TestTraceContextRidesFromGatewayToConsumer(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(prev) })

	conn := brokertest.Start(t, "")
	cfg, err := config.Parse([]byte(`
tenants:
  - id: acme
    endpoints:
      - {id: instantly, provider: instantly, path_token: tok-instantly-0123456789}
`), "test", func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	gw, err := server.New(context.Background(), server.Options{Config: cfg, JS: conn.JS})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gw.Handler())
	defer srv.Close()

	var mu sync.Mutex
	var seen trace.SpanContext
	nc, err := nats.Connect(conn.Embedded.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	sub, _ := stream.SubscriptionOf(stream.Stopper)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		consumer.Run(ctx, consumer.Options{NC: nc, Sub: sub, Handle: func(ctx context.Context, ev consumer.Event) error {
			mu.Lock()
			seen = trace.SpanContextFromContext(ctx)
			mu.Unlock()
			return nil
		}})
	}()
	defer func() { cancel(); <-done; nc.Close() }()

	body, _ := instantly.Sample("reply_received", time.Now())
	resp, err := http.Post(srv.URL+"/hooks/instantly/tok-instantly-0123456789", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("webhook: %d", resp.StatusCode)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		ok := seen.IsValid()
		mu.Unlock()
		if ok || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	var gwSpan sdktrace.ReadOnlySpan
	for _, s := range exp.GetSpans().Snapshots() {
		if s.Name() == "webhook instantly" {
			gwSpan = s
		}
	}
	if gwSpan == nil {
		t.Fatal("the gateway recorded no span")
	}
	mu.Lock()
	defer mu.Unlock()
	if !seen.IsValid() || seen.TraceID() != gwSpan.SpanContext().TraceID() {
		t.Fatalf("consumer trace %v, gateway trace %v", seen.TraceID(), gwSpan.SpanContext().TraceID())
	}
}
