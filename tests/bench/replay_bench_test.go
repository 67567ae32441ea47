package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/broker"
	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/contacts"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/projection"
	"exacto.dev/pkg/stream"
)

// storeHistory stores n events of a campaign's leads (sent, delivered, opened, and a
// reply from every third), as the gateway would.
func storeHistory(b *testing.B, conn *broker.Conn, n int) {
	at := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	types := []string{envelope.TypeEmailSent, envelope.TypeEmailDelivered, envelope.TypeEmailOpened, envelope.TypeReplyReceived}
	for i := range n {
		lead, typ := i/4, types[i%4]
		env := envelope.Envelope{SpecVersion: "1.0", ID: envelope.ID("bench", "instantly", strconv.Itoa(i)), Type: typ,
			Tenant: "bench", Provider: "instantly", Endpoint: "ep", Time: at.Add(time.Duration(i) * time.Second),
			Data: envelope.Data{ProviderType: typ, Contact: &envelope.Contact{Email: fmt.Sprintf("lead%d@example.com", lead)},
				Campaign: &envelope.Campaign{ID: fmt.Sprint("camp-", lead%20)}, Message: &envelope.Message{ID: strconv.Itoa(i), Text: "ok"}}}
		msg, err := stream.EventMessage(context.Background(), env)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := conn.JS.PublishMsgAsync(msg); err != nil {
			b.Fatal(err)
		}
		if i%2000 == 1999 {
			<-conn.JS.PublishAsyncComplete()
		}
	}
	<-conn.JS.PublishAsyncComplete()
}

// rawRead is the baseline: the same stream read with nats.go, doing nothing.
func rawRead(b *testing.B, js jetstream.JetStream, n int) time.Duration {
	ctx := context.Background()
	c, err := js.OrderedConsumer(ctx, stream.Events, jetstream.OrderedConsumerConfig{})
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	for got := 0; got < n; {
		batch, err := c.FetchNoWait(500)
		if err != nil {
			b.Fatal(err)
		}
		for range batch.Messages() {
			got++
		}
	}
	return time.Since(start)
}

// BenchmarkReplay rebuilds every projection from the stream (as `exacto replay` does,
// into memory, contacts named through the directory) beside a bare read of the same
// stream. EXACTO_BENCH_REPLAY_EVENTS sets the size (default 50,000).
func BenchmarkReplay(b *testing.B) {
	n := envInt("EXACTO_BENCH_REPLAY_EVENTS", 50000)
	ctx := context.Background()
	conn := brokertest.Start(b, "")
	storeHistory(b, conn, n)
	dir, err := contacts.Open(ctx, conn.JS)
	if err != nil {
		b.Fatal(err)
	}
	// The live projector has named every contact in the directory before anyone replays:
	// so has an untimed first replay here.
	if _, err := projection.Replay(ctx, conn.JS, projection.Memories(), projection.ReplayOptions{Dir: dir}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	// The raw read is short (a third of a second) and moves with the machine: the
	// median of three.
	var raws, rawCPUs []time.Duration
	for range 3 {
		cpu := processCPU()
		raws = append(raws, rawRead(b, conn.JS, n))
		rawCPUs = append(rawCPUs, processCPU()-cpu)
	}
	slices.Sort(raws)
	slices.Sort(rawCPUs)
	raw, rawCPU := raws[1], rawCPUs[1]
	if f := os.Getenv("EXACTO_BENCH_REPLAY_PROFILE"); f != "" { // a CPU profile of the rebuild alone
		out, err := os.Create(f)
		if err != nil {
			b.Fatal(err)
		}
		if err := pprof.StartCPUProfile(out); err != nil {
			b.Fatal(err)
		}
		defer func() { pprof.StopCPUProfile(); out.Close() }()
	}
	var m0, m1 runtime.MemStats
	runtime.GC() // the raw reads' garbage is not the rebuild's
	runtime.ReadMemStats(&m0)
	resetPeakRSS(b)
	rssBefore := vmKiB(b, os.Getpid(), "VmRSS")
	start, cpu, gc := time.Now(), processCPU(), collectorCPU()
	p, err := projection.Replay(ctx, conn.JS, projection.Memories(), projection.ReplayOptions{Dir: dir})
	if err != nil {
		b.Fatal(err)
	}
	rebuild, rebuildCPU, rebuildGC := time.Since(start), processCPU()-cpu, collectorCPU()-gc
	runtime.ReadMemStats(&m1)
	peak := vmKiB(b, os.Getpid(), "VmHWM")
	b.StopTimer()
	if p.Done != uint64(n) {
		b.Fatalf("replayed %d of %d events", p.Done, n)
	}
	rate := func(d time.Duration) float64 { return float64(n) / d.Seconds() }
	b.ReportMetric(rate(raw), "raw_events/s")
	b.ReportMetric(rate(rebuild), "rebuild_events/s")
	rateRow("replay", "projector rebuild events/s", rate(rebuild), rate(raw),
		fmt.Sprintf("%d events, %d contacts; baseline: raw stream read with nats.go (median of 3); a million events in %v at that rate",
			n, (n+3)/4, (time.Duration(1e6/rate(rebuild))*time.Second).Round(time.Second)))
	// CPU time moves less with the machine's speed than wall time does: the count to
	// compare two builds by.
	perEvent := func(d time.Duration) time.Duration { return d / time.Duration(n) }
	b.ReportMetric(float64(perEvent(rebuildCPU).Nanoseconds()), "rebuild_cpu_ns/event")
	us := func(d time.Duration) string { return fmt.Sprintf("%.1f µs", float64(d.Nanoseconds())/1000) }
	row("replay", "CPU per event, rebuild vs raw read", us(perEvent(rebuildCPU)), us(perEvent(rawCPU)), float64(rebuildCPU)/float64(rawCPU),
		fmt.Sprintf("process CPU (user and system: reader, projector and server in one process); baseline: the raw read's, median of 3; during the rebuild the process (its server too) allocated %d times and %.1f KB per event, %d garbage collections (%s of CPU per event), the process's resident set %d MiB at its peak (%d MiB before it, %d MiB of live heap)",
			(m1.Mallocs-m0.Mallocs)/uint64(n), float64(m1.TotalAlloc-m0.TotalAlloc)/float64(n)/1000, m1.NumGC-m0.NumGC, us(perEvent(rebuildGC)), peak>>10, rssBefore>>10, m0.HeapAlloc>>20))
}

// collectorCPU is the CPU the garbage collector has taken in this process, as the
// runtime estimates it.
func collectorCPU() time.Duration {
	s := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}}
	metrics.Read(s)
	return time.Duration(s[0].Value.Float64() * float64(time.Second))
}
