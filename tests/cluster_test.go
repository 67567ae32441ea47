package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/broker"
	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/config"
	"exacto.dev/pkg/stream"
	"exacto.dev/services/gateway/server"
)

// Issue 6, the cluster scenario: a 3-node JetStream cluster with replicas 3, the real
// gateway connected to it, 16 senders posting distinct signed Stripe events; the
// EXACTO_EVENTS leader is killed mid-load and brought back. Every event answered 200 is
// in the stream exactly once, and the restarted node catches up.
func TestClusterLeaderKilledUnderLoad(t *testing.T) {
	c := brokertest.StartCluster(t, 3)
	c.Ensure(t, stream.Options{Replicas: 3, DuplicateWindow: 2 * time.Minute, DedupTTL: 7 * 24 * time.Hour})
	conn := c.Conn(t)
	url := startGateway(t, conn.JS, gatewayTimeout, 3)

	l := newLoad(url)
	stop := l.run(t, 16, 6*time.Second, 3000, 400)
	time.Sleep(2 * time.Second)
	leader := c.StreamLeader(t, stream.Events)
	gwNode := conn.NC.ConnectedServerName()
	killedAt := time.Now()
	c.Kill(leader)
	next := c.StreamLeader(t, stream.Events)
	t.Logf("killed the %s leader %s at %v (the gateway was connected to %s); %s leads after %v",
		stream.Events, c.Name(leader), killedAt.Sub(l.began).Round(time.Millisecond), gwNode, c.Name(next), time.Since(killedAt).Round(time.Millisecond))
	time.Sleep(time.Until(killedAt.Add(2 * time.Second)))
	c.Restart(t, leader)
	t.Logf("restarted %s at %v", c.Name(leader), time.Since(l.began).Round(time.Millisecond))
	stop()
	l.retry(t)

	c.WaitHealthy(t)
	ids := storedIDs(t, conn.JS)
	l.check(t, "cluster: stream leader killed", ids, killedAt)
	// The restarted node holds every event in its own store.
	st := c.State(leader, stream.Events)
	if st == nil || st.Msgs != uint64(len(ids)) {
		t.Fatalf("restarted %s holds %v messages, the stream %d", c.Name(leader), st, len(ids))
	}
	if !c.Current(leader, stream.Events) {
		t.Fatalf("restarted %s: replica not current", c.Name(leader))
	}
}

// The single node of `exacto up` (SyncAlways) stopped under load and started again on
// the same store and port: the gateway's connection reconnects, the providers retry
// what was not answered 200, and no acknowledged event is lost or stored twice.
func TestEmbeddedRestartUnderLoad(t *testing.T) {
	opts := broker.Options{Listen: fmt.Sprintf("127.0.0.1:%d", brokertest.FreePorts(t, 1)[0]), DataDir: t.TempDir(), Sync: "always"}
	srv, err := broker.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	conn, err := broker.Open("nats://"+opts.Listen, broker.Options{}, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := stream.Ensure(ctx, conn.JS, brokertest.Topology); err != nil {
		t.Fatal(err)
	}
	url := startGateway(t, conn.JS, gatewayTimeout, 1)

	l := newLoad(url)
	stop := l.run(t, 16, 4*time.Second, 3000, 400)
	time.Sleep(1500 * time.Millisecond)
	killedAt := time.Now()
	srv.Shutdown()
	srv.WaitForShutdown()
	time.Sleep(500 * time.Millisecond)
	if srv, err = broker.Start(opts); err != nil {
		t.Fatalf("restart on the same store and port: %v", err)
	}
	t.Logf("stopped at %v, started again at %v", killedAt.Sub(l.began).Round(time.Millisecond), time.Since(l.began).Round(time.Millisecond))
	stop()
	l.retry(t)
	l.check(t, "embedded server restarted", storedIDs(t, conn.JS), killedAt)
}

// gatewayTimeout bounds the gateway's wait for PubAcks (default 10s).
var gatewayTimeout = 10 * time.Second

// startGateway serves the real gateway (and its indexer) for one Stripe endpoint on js.
func startGateway(t *testing.T, js jetstream.JetStream, publishTimeout time.Duration, replicas int) string {
	t.Helper()
	// The deployment's replicas decide the gateway's group commit (off by default on a
	// replicated stream, whose Raft log commits in groups).
	yaml := stripeConfig + fmt.Sprintf("gateway:\n  publish_timeout: %s\nnats:\n  replicas: %d\n", publishTimeout, replicas)
	cfg, err := config.Parse([]byte(yaml), "test", func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	gw, err := server.New(ctx, server.Options{Config: cfg, JS: js})
	if err != nil {
		t.Fatal(err)
	}
	idx, err := server.NewIndexer(ctx, js, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	idxCtx, stopIdx := context.WithCancel(context.Background())
	idxDone := make(chan struct{})
	go func() { defer close(idxDone); idx.Run(idxCtx) }()
	srv := httptest.NewServer(gw.Handler())
	t.Cleanup(func() { srv.Close(); gw.Close(); stopIdx(); <-idxDone })
	return srv.URL + "/hooks/pay/tok-0123456789abcdef"
}

// load is a provider's view of a burst: what was answered 200 (with the stored id),
// what was not, and how long the 200s took.
type load struct {
	url    string
	client *http.Client
	began  time.Time

	mu      sync.Mutex
	sent    int
	acked   map[int]string // event -> envelope id, from its first 200
	pending map[int]bool   // events answered anything but 200, not yet retried to a 200
	retried int            // events that needed a redelivery
	codes   map[int]int    // status -> answers (0: no answer)
	lat     []time.Duration
	oks     []time.Duration // when each 200 was answered, since began
	ended   time.Duration   // when the senders stopped (before any retry), since began
	fails   []time.Duration // when each other answer came, since began
}

func newLoad(url string) *load {
	// A provider gives up on a slow answer and retries later; 3s keeps the senders
	// going while the gateway waits (up to its publish timeout) for a PubAck.
	return &load{url: url, client: &http.Client{Timeout: 3 * time.Second}, acked: map[int]string{}, pending: map[int]bool{}, codes: map[int]int{}}
}

// deliver posts event i once and records the answer; true on 200.
func (l *load) deliver(t *testing.T, i int) bool {
	start := time.Now()
	resp, err := l.client.Do(stripeDelivery(t, l.url, i, start))
	code := 0
	var ans struct {
		IDs []string `json:"ids"`
	}
	if err == nil {
		code = resp.StatusCode
		if code == http.StatusOK {
			json.NewDecoder(resp.Body).Decode(&ans)
		}
		resp.Body.Close()
	}
	took := time.Since(start)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.codes[code]++
	if code != http.StatusOK || len(ans.IDs) != 1 {
		l.pending[i] = true
		l.fails = append(l.fails, time.Since(l.began))
		return false
	}
	if _, ok := l.acked[i]; !ok {
		l.acked[i] = ans.IDs[0]
	}
	delete(l.pending, i)
	l.lat = append(l.lat, took)
	l.oks = append(l.oks, time.Since(l.began))
	return true
}

// run starts senders posting distinct events, each at most rate per second in all,
// until d has passed or max events were sent; the returned func waits for them.
func (l *load) run(t *testing.T, senders int, d time.Duration, max, rate int) (wait func()) {
	l.began = time.Now()
	var wg sync.WaitGroup
	gap := time.Duration(senders) * time.Second / time.Duration(rate)
	for range senders {
		wg.Go(func() {
			for next := time.Now(); time.Since(l.began) < d; next = next.Add(gap) {
				time.Sleep(time.Until(next))
				l.mu.Lock()
				if l.sent == max {
					l.mu.Unlock()
					return
				}
				l.sent++
				i := l.sent
				l.mu.Unlock()
				l.deliver(t, i)
			}
		})
	}
	return func() {
		wg.Wait()
		l.mu.Lock()
		l.ended = time.Since(l.began)
		l.mu.Unlock()
	}
}

// retry redelivers, as the provider would, every event not answered 200 until it is.
func (l *load) retry(t *testing.T) {
	l.mu.Lock()
	todo := make([]int, 0, len(l.pending))
	for i := range l.pending {
		todo = append(todo, i)
	}
	l.retried = len(todo)
	l.mu.Unlock()
	var wg sync.WaitGroup
	work := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range work {
				for attempt := 0; !l.deliver(t, i); attempt++ {
					if attempt == 60 {
						t.Errorf("event %d: still not answered 200 after %d redeliveries", i, attempt)
						break
					}
					time.Sleep(250 * time.Millisecond)
				}
			}
		})
	}
	for _, i := range todo {
		work <- i
	}
	close(work)
	wg.Wait()
}

// check compares what the provider was promised with the stream (envelope id ->
// copies) and logs the table.
func (l *load) check(t *testing.T, scenario string, ids map[string]int, faultAt time.Time) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	lost, dup := 0, 0
	for i, id := range l.acked {
		switch ids[id] {
		case 0:
			lost++
			t.Errorf("LOST: event %d (envelope %s) was answered 200 but is not in the stream", i, id)
		case 1:
		default:
			dup++
			t.Errorf("DUPLICATED: event %d (envelope %s) is in the stream %d times", i, id, ids[id])
		}
	}
	promised := map[string]bool{}
	for _, id := range l.acked {
		promised[id] = true
	}
	for id, n := range ids {
		if n > 1 && !promised[id] {
			dup++
			t.Errorf("DUPLICATED: envelope %s (never acknowledged) is in the stream %d times", id, n)
		}
	}
	if len(l.acked) != l.sent {
		t.Errorf("%d events sent, %d answered 200 in the end", l.sent, len(l.acked))
	}
	if len(ids) != l.sent {
		t.Errorf("the stream holds %d distinct events, %d were sent", len(ids), l.sent)
	}
	// The fault landed under load: 200s in the second before it, and the load itself
	// (not the redeliveries after it) went on to be served after it — a crashed leader's
	// followers wait out an election timeout of several seconds first.
	before, after := 0, 0
	at := faultAt.Sub(l.began)
	for _, ok := range l.oks {
		switch {
		case ok >= at-time.Second && ok < at:
			before++
		case ok >= at && ok <= l.ended:
			after++
		}
	}
	if before == 0 || after == 0 {
		t.Errorf("the fault did not land under load: %d 200s in the second before it, %d after it while the load ran", before, after)
	}
	lat := slices.Clone(l.lat)
	slices.Sort(lat)
	p := func(q float64) time.Duration { return lat[int(q*float64(len(lat)-1))].Round(time.Millisecond) }
	// The longest stretch without a 200 around the fault: the outage providers saw.
	oks := slices.Clone(l.oks)
	slices.Sort(oks)
	var outage time.Duration
	for k := 1; k < len(oks); k++ {
		if oks[k] >= at && oks[k]-oks[k-1] > outage {
			outage = oks[k] - oks[k-1]
		}
	}
	total := 0
	for _, n := range l.codes {
		total += n
	}
	t.Logf("\n"+
		"  events sent          %6d\n"+
		"  deliveries (total)   %6d\n"+
		"  answered 200         %6d\n"+
		"  answered 503         %6d\n"+
		"  other / no answer    %6d\n"+
		"  events retried       %6d\n"+
		"  lost (must be 0)     %6d\n"+
		"  duplicated (must be 0) %4d\n"+
		"  200 latency p50/p99/max %v / %v / %v\n"+
		"  longest gap between 200s after the fault %v",
		l.sent, total, l.codes[http.StatusOK], l.codes[http.StatusServiceUnavailable], total-l.codes[http.StatusOK]-l.codes[http.StatusServiceUnavailable],
		l.retried, lost, dup, p(0.5), p(0.99), lat[len(lat)-1].Round(time.Millisecond), outage.Round(time.Millisecond))
	t.Logf("per 500ms since the start, 200s: %v", buckets(l.oks))
	t.Logf("per 500ms since the start, others: %v", buckets(l.fails))
	row(t, scenario, total, l.sent, len(ids), lost, dup, lat[len(lat)*99/100])
}

// buckets counts instants per 500ms.
func buckets(at []time.Duration) []int {
	var out []int
	for _, a := range at {
		k := int(a / (500 * time.Millisecond))
		for len(out) <= k {
			out = append(out, 0)
		}
		out[k]++
	}
	return out
}
