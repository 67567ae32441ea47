// Package bench measures the gateway on loopback against a baseline run in the same
// process: a bare handler that only publishes to JetStream and answers.
package bench

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/broker"
	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/config"
	"exacto.dev/pkg/providers/meta"
	"exacto.dev/services/gateway/server"
)

const senders = 64

const benchConfig = `
tenants:
  - id: bench
    endpoints:
      - {id: meta, provider: meta, path_token: tok-bench-0123456789, secrets: [bench-app-secret], verify_token: v}
`

// metaBody is a WhatsApp message with a unique wamid.
func metaBody(i int, now time.Time) []byte {
	return fmt.Appendf(nil, `{"object":"whatsapp_business_account","entry":[{"id":"102290129340398","changes":[{"field":"messages","value":{"messaging_product":"whatsapp","metadata":{"display_phone_number":"15550783881","phone_number_id":"106540352242922"},"contacts":[{"profile":{"name":"Sheena Nelson"},"wa_id":"16505551234"}],"messages":[{"from":"16505551234","id":"wamid.bench%09d","timestamp":"%d","text":{"body":"Yes, let's talk next week"},"type":"text"}]}}]}]}`, i, now.Unix())
}

type request struct {
	body   []byte
	header http.Header
}

func requests(b *testing.B, n int, url string) []request {
	now := time.Now()
	out := make([]request, n)
	for i := range out {
		body := metaBody(i, now)
		h, body, err := meta.Spec.Sign(http.MethodPost, url, body, "bench-app-secret", now)
		if err != nil {
			b.Fatal(err)
		}
		h.Set("Content-Type", "application/json")
		out[i] = request{body, h}
	}
	return out
}

type result struct {
	n        int
	elapsed  time.Duration
	p50, p99 time.Duration
	failed   int64
}

func (r result) rate() float64 { return float64(r.n) / r.elapsed.Seconds() }

// load sends every request once from 64 concurrent senders, with keep-alive.
func load(url string, reqs []request) result {
	var next atomic.Int64
	var failed atomic.Int64
	lat := make([]time.Duration, len(reqs))
	tr := &http.Transport{MaxIdleConnsPerHost: senders, MaxConnsPerHost: senders}
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	defer tr.CloseIdleConnections()
	var wg sync.WaitGroup
	start := time.Now()
	for range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(reqs) {
					return
				}
				req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(reqs[i].body))
				req.Header = reqs[i].header
				t0 := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					failed.Add(1)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					failed.Add(1)
				}
				lat[i] = time.Since(t0)
			}
		}()
	}
	wg.Wait()
	r := result{n: len(reqs), elapsed: time.Since(start), failed: failed.Load()}
	sort.Slice(lat, func(a, b int) bool { return lat[a] < lat[b] })
	r.p50, r.p99 = lat[len(lat)/2], lat[len(lat)*99/100]
	return r
}

// bare is the baseline: read the body, publish it with a Nats-Msg-Id, wait for the
// PubAck, answer 200. No verification, no parsing, no index.
func bare(js jetstream.JetStream) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		sum := sha256.Sum256(body)
		msg := &nats.Msg{Subject: "events.bench.bare.message.received", Data: body, Header: nats.Header{}}
		msg.Header.Set(jetstream.MsgIDHeader, hex.EncodeToString(sum[:16]))
		if _, err := js.PublishMsg(r.Context(), msg); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(200)
	})
}

func gateway(b *testing.B, conn *broker.Conn) http.Handler {
	cfg, err := config.Parse([]byte(benchConfig), "bench", func(string) string { return "" })
	if err != nil {
		b.Fatal(err)
	}
	gw, err := server.New(context.Background(), server.Options{Config: cfg, JS: conn.JS})
	if err != nil {
		b.Fatal(err)
	}
	// The index writer runs as in production: its KV writes share the disk.
	idx, err := server.NewIndexer(context.Background(), conn.JS, nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { idx.Run(ctx); close(done) }()
	b.Cleanup(func() { cancel(); <-done })
	return gw.Handler()
}

// BenchmarkGateway runs the verified gateway and the bare baseline with the same load
// in the same process, and reports both and their ratio. b.N scales the request count.
func BenchmarkGateway(b *testing.B) {
	n := max(b.N, 3000)
	conn := brokertest.Start(b, "")
	gwSrv := httptest.NewServer(gateway(b, conn))
	defer gwSrv.Close()
	bareSrv := httptest.NewServer(bare(conn.JS))
	defer bareSrv.Close()
	gwURL := gwSrv.URL + "/hooks/meta/tok-bench-0123456789"
	gwReqs := requests(b, n, gwURL)
	bareReqs := requests(b, n, bareSrv.URL)
	b.ResetTimer()
	g := load(gwURL, gwReqs)
	base := load(bareSrv.URL, bareReqs)
	b.StopTimer()
	if g.failed > 0 || base.failed > 0 {
		b.Fatalf("failures: gateway %d, bare %d", g.failed, base.failed)
	}
	b.ReportMetric(g.rate(), "gateway_req/s")
	b.ReportMetric(base.rate(), "bare_req/s")
	b.ReportMetric(g.rate()/base.rate(), "ratio")
	b.ReportMetric(float64(g.p99.Microseconds())/1000, "gateway_p99_ms")
	b.ReportMetric(float64(base.p99.Microseconds())/1000, "bare_p99_ms")
	fmt.Fprintf(os.Stderr, "\n%-28s %10s %10s %10s\n", fmt.Sprintf("gateway, %d senders, n=%d", senders, n), "req/s", "p50", "p99")
	fmt.Fprintf(os.Stderr, "%-28s %10.0f %10v %10v\n", "verified gateway", g.rate(), g.p50.Round(10*time.Microsecond), g.p99.Round(10*time.Microsecond))
	fmt.Fprintf(os.Stderr, "%-28s %10.0f %10v %10v\n", "bare publish (baseline)", base.rate(), base.p50.Round(10*time.Microsecond), base.p99.Round(10*time.Microsecond))
	fmt.Fprintf(os.Stderr, "%-28s %10.2f\n", "ratio gateway/bare", g.rate()/base.rate())
}
