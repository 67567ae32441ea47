package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/contacts"
	"exacto.dev/pkg/privacy"
	"exacto.dev/pkg/projection"
)

// BenchmarkForget erases one lead (`exacto forget`'s work, the consumers' pause aside)
// from a history of EXACTO_BENCH_REPLAY_EVENTS events (default 50,000) whose live
// projections and directory are built, beside a bare read of the same stream: the
// erasure reads the history twice and writes every bucket anew, so its cost grows with
// the deployment, not with the person.
func BenchmarkForget(b *testing.B) {
	n := envInt("EXACTO_BENCH_REPLAY_EVENTS", 50000)
	ctx := context.Background()
	conn := brokertest.Start(b, "")
	storeHistory(b, conn, n)
	live, err := projection.Open(ctx, conn.JS, "", 1)
	if err != nil {
		b.Fatal(err)
	}
	dir, err := contacts.Open(ctx, conn.JS)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := projection.Replay(ctx, conn.JS, live, projection.ReplayOptions{Dir: dir}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	raw := rawRead(b, conn.JS, n)
	start := time.Now()
	p, _, err := privacy.Find(ctx, conn.JS, "bench", "lead7@example.com")
	if err != nil {
		b.Fatal(err)
	}
	if err := privacy.Remember(ctx, conn.JS, p); err != nil {
		b.Fatal(err)
	}
	r, err := privacy.Erase(ctx, conn.JS, p)
	if err != nil {
		b.Fatal(err)
	}
	took := time.Since(start)
	b.StopTimer()
	if r.About != 4 {
		b.Fatalf("the lead's 4 events, %d rewritten: %+v", r.About, r)
	}
	entries := 0
	for _, name := range r.Rewritten {
		kv, err := conn.JS.KeyValue(ctx, name)
		if err != nil {
			b.Fatal(err)
		}
		st, err := kv.Status(ctx)
		if err != nil {
			b.Fatal(err)
		}
		entries += int(st.Values())
	}
	rate := func(d time.Duration) float64 { return float64(n) / d.Seconds() }
	rateRow("privacy", "forget: history events/s", rate(took), rate(raw),
		fmt.Sprintf("one person erased from %d events (%d contacts) in %v: the history read twice and its events rewritten, %d buckets written anew (%d entries); baseline: a raw stream read with nats.go",
			n, (n+3)/4, took.Round(time.Millisecond), len(r.Rewritten), entries))
}
