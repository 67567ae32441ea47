package bench

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// requestKind names what a message a client sent the server asks for, by its subject
// ("" for what the server sends: deliveries, replies, advisories; and for stream and
// consumer info, which the bench itself polls while it waits): "get BUCKET" (a KV
// direct get), "put BUCKET", "ack CONSUMER", "pull CONSUMER", "publish" (an event),
// "outcome", "api VERB".
func requestKind(subject, reply string) string {
	p := strings.Split(subject, ".")
	switch {
	case strings.HasPrefix(reply, "$JS.ACK."), strings.HasPrefix(subject, "_INBOX."), strings.HasPrefix(subject, "$JS.EVENT."):
		return "" // a delivery to a consumer, a reply, an advisory
	case strings.HasPrefix(subject, "$JS.API.DIRECT.GET.") && len(p) > 4:
		return "get " + strings.TrimPrefix(p[4], "KV_")
	case p[0] == "$KV" && len(p) > 1:
		return "put " + p[1]
	case strings.HasPrefix(subject, "$JS.ACK.") && len(p) > 3:
		return "ack " + p[3]
	case strings.HasPrefix(subject, "$JS.API.CONSUMER.MSG.NEXT.") && len(p) > 6:
		return "pull " + p[6]
	case p[0] == "events":
		return "publish"
	case p[0] == "outcomes":
		return "outcome"
	case strings.HasPrefix(subject, "$JS.API.STREAM.INFO."), strings.HasPrefix(subject, "$JS.API.CONSUMER.INFO."):
		return "" // reads of state: the bench's own polling while it waits for a drain
	case strings.HasPrefix(subject, "$JS.API.") && len(p) > 3:
		return "api " + p[2] + "." + p[3]
	}
	return "other " + p[0]
}

// requestCounter counts, by requestKind, every message clients send the server.
type requestCounter struct {
	mu     sync.Mutex
	counts map[string]int
}

func (c *requestCounter) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.counts
	c.counts = map[string]int{}
	return out
}

// BenchmarkUpRequests counts what `exacto up` (the built-in demo config, every
// consumer) asks of its NATS server per webhook: KV reads and writes, publishes, acks,
// pulls — each a round trip or a message the server handles, which cost more CPU per
// reply than anything else in a profile. A subscriber to every subject on the server
// sees them (it sees no $SYS traffic, which is the server's own). Windows, as
// BenchmarkUpFsyncs: idle (subtracted at its rate); baseline: the consumers paused, the
// gateway and its index writer alone; load: the consumers resumed and drained, then as
// many new replies from 32 senders until every consumer acked all.
// EXACTO_BENCH_REQUESTS_N sets the replies of each window (500).
func BenchmarkUpRequests(b *testing.B) {
	n := envInt("EXACTO_BENCH_REQUESTS_N", 500)
	u := startUp(b, nil)
	js := u.js(b)
	ctx := context.Background()
	nc, err := nats.Connect("nats://" + u.addr(2))
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	c := &requestCounter{counts: map[string]int{}}
	sub, err := nc.Subscribe(">", func(m *nats.Msg) {
		if k := requestKind(m.Subject, m.Reply); k != "" {
			c.mu.Lock()
			c.counts[k]++
			c.mu.Unlock()
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Unsubscribe()
	sub.SetPendingLimits(-1, -1) // counted, not dropped
	url := "http://" + u.addr(0) + "/hooks/instantly/demo-instantly-token"
	header := http.Header{"Content-Type": {"application/json"}, "X-Exacto-Secret": {"demo-instantly-secret"}}
	services := consumerServices()
	pause := func(until time.Time) { pauseConsumers(b, ctx, js, services, until) }
	next := 0
	// settled waits until the subscriber has counted everything the server sent it so far.
	settled := func() {
		nc.Flush()
		for n, _, _ := sub.Pending(); n > 0; n, _, _ = sub.Pending() {
			time.Sleep(10 * time.Millisecond)
		}
	}
	window := func(run func() int64) (map[string]int, time.Duration, int64) {
		settled()
		c.take()
		from := time.Now()
		ok := run()
		settled()
		return c.take(), time.Since(from), ok
	}
	send := func(senders int, wait func()) func() int64 {
		return func() int64 {
			bodies := fsyncBodies(b, u.addr(3), next, n)
			next += n
			ok := sendAll(url, header, bodies, senders)
			wait()
			return ok
		}
	}
	idle, idleFor, _ := window(func() int64 { time.Sleep(3 * time.Second); return 0 })
	pause(time.Now().Add(time.Hour))
	base, baseFor, okBase := window(send(32, func() { waitIndexed(b, ctx, js) }))
	pause(time.Time{})
	waitDrained(b, ctx, js, services, next)
	load, loadFor, okLoad := window(send(32, func() { waitDrained(b, ctx, js, services, next) }))
	if okBase+okLoad != int64(next) {
		b.Errorf("%d of %d webhooks answered 200", okBase+okLoad, next)
	}
	per := func(counts map[string]int, took time.Duration, ok int64) (float64, map[string]float64) {
		total, by := 0.0, map[string]float64{}
		for k, v := range counts {
			x := max(float64(v)-float64(idle[k])*took.Seconds()/idleFor.Seconds(), 0) / float64(max(ok, 1))
			by[k] = x
			total += x
		}
		return total, by
	}
	tLoad, byLoad := per(load, loadFor, okLoad)
	tBase, byBase := per(base, baseFor, okBase)
	row("requests", "messages clients send the server per webhook at load (every consumer)", fmt.Sprintf("%.1f", tLoad), fmt.Sprintf("%.1f", tBase), tLoad/tBase,
		fmt.Sprintf("%d replies from 32 senders in %s until every consumer acked all; baseline: the gateway alone (consumers paused), %d replies in %s; idle subtracted; most: %s; baseline's: %s",
			okLoad, loadFor.Round(100*time.Millisecond), okBase, baseFor.Round(100*time.Millisecond), top(byLoad, 12, "%s %.1f"), top(byBase, 4, "%s %.1f")))
	b.ReportMetric(tLoad, "requests/webhook")
}
