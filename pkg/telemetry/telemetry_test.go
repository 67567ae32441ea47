package telemetry

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// A log line written with a traced context carries its trace and span ids.
func TestLoggerAddsTraceIDs(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	ctx, span := tp.Tracer("t").Start(context.Background(), "op")
	defer span.End()
	var buf bytes.Buffer
	log := Logger(&buf, false, 0).With("component", "x")
	log.InfoContext(ctx, "traced")
	log.Info("untraced")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 lines, got %q", buf.String())
	}
	var traced, untraced map[string]any
	json.Unmarshal([]byte(lines[0]), &traced)
	json.Unmarshal([]byte(lines[1]), &untraced)
	if traced["trace_id"] != span.SpanContext().TraceID().String() || traced["span_id"] != span.SpanContext().SpanID().String() || traced["component"] != "x" {
		t.Fatalf("traced line: %v", traced)
	}
	if _, ok := untraced["trace_id"]; ok {
		t.Fatalf("untraced line has a trace id: %v", untraced)
	}
}

// Setup serves metrics at its handler and, with EXACTO_TRACE_FILE, writes every span
// to the file as one JSON line; Shutdown flushes it.
func TestSetupMetricsAndTraceFile(t *testing.T) {
	prevT, prevM := otel.GetTracerProvider(), otel.GetMeterProvider()
	t.Cleanup(func() { otel.SetTracerProvider(prevT); otel.SetMeterProvider(prevM) })
	file := filepath.Join(t.TempDir(), "spans.jsonl")
	env := map[string]string{EnvTraceFile: file}
	p, err := Setup(context.Background(), "exacto-test", func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	c, _ := otel.Meter("t").Int64Counter("exacto_test_things", metric.WithDescription("things"))
	c.Add(context.Background(), 3)
	ctx, parent := Tracer("test").Start(context.Background(), "parent")
	_, child := Tracer("test").Start(ctx, "child")
	child.End()
	parent.End()

	rec := httptest.NewRecorder()
	p.Metrics.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if !regexp.MustCompile(`(?m)^exacto_test_things_total\{.*\} 3$`).MatchString(rec.Body.String()) {
		t.Fatalf("metric missing from /metrics:\n%s", rec.Body.String())
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	spans := map[string]map[string]any{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var s map[string]any
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			t.Fatalf("not a JSON line: %q", sc.Text())
		}
		spans[s["Name"].(string)] = s
	}
	if len(spans) != 2 {
		t.Fatalf("want 2 spans, got %v", spans)
	}
	pc := spans["parent"]["SpanContext"].(map[string]any)
	par := spans["child"]["Parent"].(map[string]any)
	if par["SpanID"] != pc["SpanID"] || par["TraceID"] != pc["TraceID"] {
		t.Fatalf("child's parent %v is not the parent span %v", par, pc)
	}
	res, _ := json.Marshal(spans["parent"]["Resource"])
	if !strings.Contains(string(res), "exacto-test") {
		t.Fatalf("service name missing from the resource: %s", res)
	}
}

// A trace file that cannot be opened refuses to start, naming the file.
func TestSetupRefusesAnUnwritableTraceFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "no", "such", "dir", "spans.jsonl")
	_, err := Setup(context.Background(), "exacto-test", func(k string) string {
		if k == EnvTraceFile {
			return file
		}
		return ""
	})
	if err == nil || !strings.Contains(err.Error(), file) {
		t.Fatalf("want an error naming %s, got %v", file, err)
	}
}

// With an OTLP endpoint set, spans and metrics are pushed to it over OTLP/HTTP.
func TestSetupExportsOverOTLP(t *testing.T) {
	prevT, prevM := otel.GetTracerProvider(), otel.GetMeterProvider()
	t.Cleanup(func() { otel.SetTracerProvider(prevT); otel.SetMeterProvider(prevM) })
	var mu sync.Mutex
	got := map[string]int{}
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		if r.Method == http.MethodPost && r.Header.Get("Content-Type") == "application/x-protobuf" && len(body) > 0 {
			got[r.URL.Path]++
		}
		mu.Unlock()
	}))
	defer collector.Close()
	t.Setenv(EnvOTLPEndpoint, collector.URL)
	p, err := Setup(context.Background(), "exacto-test", os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := otel.Meter("t").Int64Counter("exacto_test_pushed")
	c.Add(context.Background(), 1)
	_, s := Tracer("test").Start(context.Background(), "pushed")
	s.End()
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if got["/v1/traces"] == 0 || got["/v1/metrics"] == 0 {
		t.Fatalf("the collector received %v, want traces and metrics", got)
	}
}
