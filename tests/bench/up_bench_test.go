package bench

import (
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"
)

// BenchmarkUpThroughput is the webhooks/s `exacto up` answers 200 while its pipeline
// runs — every consumer and the projector working on what it stores as it comes — with
// the built-in demo config as a user runs it (sync always), against the same with
// nats-server's own default fsync (EXACTO_NATS_SYNC=2m, which also turns group commit
// off: there is no fsync to share). Each round starts a fresh process of each mode in
// turn, tells its sandbox EXACTO_BENCH_UP_N (default 3,000) leads and their replies,
// sends those distinct Instantly replies from 32 senders and stops it, so neither works
// on a backlog of its own or of the other's during another's sending. Three rounds
// interleaved, the median kept.
func BenchmarkUpThroughput(b *testing.B) {
	n := envInt("EXACTO_BENCH_UP_N", 3000)
	const rounds = 3
	header := http.Header{"Content-Type": {"application/json"}, "X-Exacto-Secret": {"demo-instantly-secret"}}
	modes := []struct {
		name string
		env  []string
	}{{"sync always", nil}, {"sync 2m", []string{"EXACTO_NATS_SYNC=2m"}}}
	rates := make([][]float64, len(modes))
	for r := range rounds {
		for i, m := range modes {
			u := startUp(b, m.env)
			bodies := fsyncBodies(b, u.addr(3), 0, n)
			at := time.Now()
			ok := sendAll("http://"+u.addr(0)+"/hooks/instantly/demo-instantly-token", header, bodies, 32)
			took := time.Since(at)
			u.stop()
			if ok != int64(n) {
				b.Errorf("%s: %d of %d webhooks answered 200", m.name, ok, n)
			}
			rates[i] = append(rates[i], float64(ok)/took.Seconds())
			b.Logf("round %d, %s: %d answered 200 in %v", r+1, m.name, ok, took)
		}
	}
	median := func(rs []float64) float64 { rs = slices.Clone(rs); slices.Sort(rs); return rs[len(rs)/2] }
	always, lazy := median(rates[0]), median(rates[1])
	rateRow("e2e", "exacto up webhooks/s while its pipeline runs vs sync 2m", always, lazy,
		fmt.Sprintf("32 senders, n=%d distinct Instantly replies to a fresh process, every consumer working on them; median of %d rounds (sync always %.0f, 2m %.0f webhooks/s); baseline: the same with nats.sync 2m (group commit off); target >= 0.8",
			n, rounds, rates[0], rates[1]))
	b.ReportMetric(always, "webhooks/s_always")
	b.ReportMetric(lazy, "webhooks/s_2m")
}
