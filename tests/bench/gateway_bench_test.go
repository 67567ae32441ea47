package bench

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/broker"
	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/config"
	"exacto.dev/pkg/providers/meta"
	"exacto.dev/pkg/stream"
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
	cpu      time.Duration // the process's CPU time (user and system) during the load
}

// cpuPerWebhook is the process's CPU time per request of r: senders, gateway and
// server all run in this process.
func (r result) cpuPerWebhook() time.Duration { return r.cpu / time.Duration(max(r.n, 1)) }

// processCPU is this process's CPU time so far, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
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
	start, cpu := time.Now(), processCPU()
	for range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(reqs) {
					return
				}
				status, took, err := send(client, url, reqs[i].body, reqs[i].header)
				if err != nil {
					failed.Add(1)
					continue
				}
				if status != 200 {
					failed.Add(1)
				}
				lat[i] = took
			}
		}()
	}
	wg.Wait()
	r := result{n: len(reqs), elapsed: time.Since(start), failed: failed.Load(), cpu: processCPU() - cpu}
	r.p50, r.p99 = percentile(lat, 50), percentile(lat, 99)
	return r
}

// bare is the baseline: read the body, publish it with a Nats-Msg-Id, wait for the
// PubAck (and, where the process syncs the store, for its sync), answer 200. No
// verification, no parsing, no index.
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
		if err := stream.Durable(r.Context(), js, stream.Events); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(200)
	})
}

// gateway is the verified gateway's handler, with the index writer running until ctx
// ends, as in production: its KV writes share the disk. extra is config YAML put
// before the endpoints (e.g. the gateway's group commit).
func gateway(ctx context.Context, b *testing.B, conn *broker.Conn, extra string) http.Handler {
	cfg, err := config.Parse([]byte(extra+benchConfig), "bench", func(string) string { return "" })
	if err != nil {
		b.Fatal(err)
	}
	// The gateway's throughput is measured, not its rate limits: each round sends
	// thousands a second to one endpoint.
	cfg.Gateway.RateLimit.Endpoint.Rate, cfg.Gateway.RateLimit.Tenant.Rate = 0, 0
	gw, err := server.New(ctx, server.Options{Config: cfg, JS: conn.JS})
	if err != nil {
		b.Fatal(err)
	}
	idx, err := server.NewIndexer(ctx, conn.JS, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() { idx.Run(ctx); close(done) }()
	b.Cleanup(func() { <-done; gw.Close() })
	return gw.Handler()
}

// indexed waits until the index writer on js has caught up. Loads measured side by side
// share this machine: the KV puts left from one load (an fsync each with sync always)
// would otherwise compete with the next one.
func indexed(ctx context.Context, b *testing.B, js jetstream.JetStream) {
	deadline := time.Now().Add(2 * time.Minute)
	for backlog(ctx, js, stream.IndexConsumer) > 0 {
		if time.Now().After(deadline) {
			b.Fatalf("the index writer is still behind after 2 minutes")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// nats-server's own default flush interval, which Exacto's `nats.sync` can be set to.
const defaultSync = "2m"

// serverSync is sync always with every fsync left to nats-server (one per stored
// message), not to the process (broker.Options.ServerSync).
const serverSync = "server"

// BenchmarkGateway runs the verified gateway and the bare baseline with the same load
// (EXACTO_BENCH_GATEWAY_REQUESTS each, default 5000, from 64 senders) on one server,
// twice: with sync always (Exacto's default: fsync before every acknowledgement) and
// with nats-server's default fsync (every 2 minutes), each on its own server. Both
// gateways publish one event at a time, as the bare handler does (group commit off:
// BenchmarkGroupCommit measures it).
func BenchmarkGateway(b *testing.B) {
	n := envInt("EXACTO_BENCH_GATEWAY_REQUESTS", 5000)
	for _, mode := range []struct{ name, sync, label string }{
		{"always", "always", "sync always"},
		{"default", defaultSync, "default fsync (2m)"},
	} {
		conn := startBroker(b, mode.sync)
		ctx, cancel := context.WithCancel(context.Background())
		gwSrv := httptest.NewServer(gateway(ctx, b, conn, perMessage))
		bareSrv := httptest.NewServer(bare(conn.JS))
		gwURL := gwSrv.URL + "/hooks/meta/tok-bench-0123456789"
		gwReqs := requests(b, n, gwURL)
		bareReqs := requests(b, n, bareSrv.URL)
		g := load(gwURL, gwReqs)
		indexed(ctx, b, conn.JS)
		base := load(bareSrv.URL, bareReqs)
		gwSrv.Close()
		bareSrv.Close()
		cancel()
		if g.failed > 0 || base.failed > 0 {
			b.Fatalf("%s: failures: gateway %d, bare %d", mode.label, g.failed, base.failed)
		}
		note := fmt.Sprintf("%d senders, n=%d", senders, n)
		rateRow("gateway", "verified webhooks/s, "+mode.label, g.rate(), base.rate(), note+"; baseline: bare handler that only publishes")
		latencyRow("gateway", "p50, "+mode.label, g.p50, base.p50, note)
		latencyRow("gateway", "p99, "+mode.label, g.p99, base.p99, note)
		b.ReportMetric(g.rate(), mode.name+"_gateway_req/s")
		b.ReportMetric(base.rate(), mode.name+"_bare_req/s")
	}
}

// perMessage turns the gateway's group commit off: one publish and fsync per event.
const perMessage = "gateway: {group_commit: {max_events: 1}}\n"

// BenchmarkGroupCommit (issues 8 and 15) runs the verified gateway five ways in one
// run, each on its own server, same load (EXACTO_BENCH_COMMIT_REQUESTS, default 4000,
// from 64 senders), EXACTO_BENCH_COMMIT_ROUNDS rounds (default 3) interleaved, median
// kept: group commit as Exacto runs it on one node (the default: the process syncs the
// store, every delivery waiting sharing one round of fdatasyncs), one publish and fsync
// per event by nats-server itself (its sync always), nats-server's atomic batches on
// such a server (the group commit Exacto uses where it does not sync the store itself),
// one publish per event with nats-server's lazy default fsync, and a 3-node cluster.
// Each load starts on a quiet machine (every index writer caught up), its own index
// writer running.
func BenchmarkGroupCommit(b *testing.B) {
	n := envInt("EXACTO_BENCH_COMMIT_REQUESTS", 4000)
	rounds := envInt("EXACTO_BENCH_COMMIT_ROUNDS", 3)
	modes := []struct {
		name, sync, config string
		cluster            bool
	}{
		{"group commit, sync always", "always", "", false},
		{"per-message, server sync always", serverSync, perMessage, false},
		{"per-message, lazy fsync (2m)", defaultSync, perMessage, false},
		// Three nodes on this one machine (one disk, two cores), R3, sync always: the
		// Raft log's own group commit (nats-server's sync-on-flush for replicated
		// streams); the gateway publishes one event at a time, as it does by default there.
		{"per-message, 3-node cluster R3, sync always", "always", perMessage, true},
		{"atomic batches, server sync always", serverSync, "", false},
	}
	type target struct {
		url  string
		reqs []request
		js   jetstream.JetStream
	}
	targets := make([]target, len(modes))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i, m := range modes {
		var conn *broker.Conn
		if m.cluster {
			c := brokertest.StartCluster(b, 3)
			c.Ensure(b, stream.Options{Replicas: 3, DuplicateWindow: 2 * time.Minute, DedupTTL: 7 * 24 * time.Hour})
			conn = c.Conn(b)
		} else {
			conn = startBroker(b, m.sync)
		}
		srv := httptest.NewServer(gateway(ctx, b, conn, m.config))
		b.Cleanup(srv.Close)
		url := srv.URL + "/hooks/meta/tok-bench-0123456789"
		targets[i] = target{url, requests(b, n*rounds, url), conn.JS}
	}
	results := make([][]result, len(modes))
	for r := range rounds {
		for i, t := range targets {
			for _, o := range targets {
				indexed(ctx, b, o.js)
			}
			res := load(t.url, t.reqs[r*n:(r+1)*n])
			if res.failed > 0 {
				b.Fatalf("%s: %d of %d webhooks not answered 200", modes[i].name, res.failed, n)
			}
			results[i] = append(results[i], res)
		}
	}
	median := make([]result, len(modes))
	for i, rs := range results {
		slices.SortFunc(rs, func(a, b result) int { return cmp.Compare(a.rate(), b.rate()) })
		median[i] = rs[len(rs)/2]
	}
	group, each, lazy, r3, atomic := median[0], median[1], median[2], median[3], median[4]
	note := fmt.Sprintf("%d senders, n=%d, median of %d rounds", senders, n, rounds)
	rateRow("commit", "group commit webhooks/s vs per-message sync always", group.rate(), each.rate(), note+"; target >= 4")
	rateRow("commit", "group commit webhooks/s vs per-message lazy fsync", group.rate(), lazy.rate(), note+"; target >= 0.8")
	latencyRow("commit", "group commit p50 vs per-message sync always", group.p50, each.p50, note)
	latencyRow("commit", "group commit p99 vs per-message sync always", group.p99, each.p99, note+"; target <= 1")
	latencyRow("commit", "lazy fsync p50 / p99 (for reference)", lazy.p50, lazy.p99, "figure p50, baseline p99")
	gc, lc := group.cpuPerWebhook(), lazy.cpuPerWebhook()
	row("commit", "CPU per webhook, group commit vs per-message lazy fsync", fmt.Sprintf("%d µs", gc.Microseconds()), fmt.Sprintf("%d µs", lc.Microseconds()),
		float64(gc)/float64(lc), note+"; senders, gateway and server in one process")
	rateRow("commit", "3-node R3 sync always webhooks/s vs per-message sync always", r3.rate(), each.rate(), note+"; three nodes share this machine's disk and cores")
	rateRow("commit", "3-node R3 sync always webhooks/s vs per-message lazy fsync", r3.rate(), lazy.rate(), note)
	latencyRow("commit", "3-node R3 p99 vs per-message sync always", r3.p99, each.p99, note)
	rateRow("commit", "nats-server atomic batches webhooks/s vs per-message lazy fsync", atomic.rate(), lazy.rate(), note+"; the group commit used where the process does not sync the store")
	for i, m := range modes {
		b.ReportMetric(median[i].rate(), strings.ReplaceAll(strings.ReplaceAll(m.name, " ", "_"), ",", "")+"_req/s")
	}
}
