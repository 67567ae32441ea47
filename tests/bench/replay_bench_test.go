package bench

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/broker"
	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/contacts"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/memlimit"
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

// history starts a server of its own holding n events (storeHistory) and the contact
// directory that names them. The live projector has named every contact in the
// directory before anyone replays: so has an untimed first replay here.
func history(b *testing.B, n int) (*broker.Conn, *contacts.Directory) {
	ctx := context.Background()
	conn := brokertest.Start(b, "")
	storeHistory(b, conn, n)
	dir, err := contacts.Open(ctx, conn.JS)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := projection.Replay(ctx, conn.JS, projection.Memories(), projection.ReplayOptions{Dir: dir}); err != nil {
		b.Fatal(err)
	}
	return conn, dir
}

// rawRead is the baseline: the same stream read with nats.go, doing nothing.
func rawRead(b *testing.B, js jetstream.JetStream, n int) time.Duration {
	took, err := readRaw(js, n)
	if err != nil {
		b.Fatal(err)
	}
	return took
}

// readRaw reads the stream's first n events with an ordered consumer, doing nothing
// with them, and says how long it took.
func readRaw(js jetstream.JetStream, n int) (time.Duration, error) {
	ctx := context.Background()
	c, err := js.OrderedConsumer(ctx, stream.Events, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return 0, err
	}
	start := time.Now()
	for got := 0; got < n; {
		batch, err := c.FetchNoWait(500)
		if err != nil {
			return 0, err
		}
		for range batch.Messages() {
			got++
		}
	}
	return time.Since(start), nil
}

// rawReaderEnv, set to "URL N", makes this test binary a raw reader of its own
// (TestMain): it reads the first N events of the server at URL (readRaw) and prints
// how long that took, the baseline `exacto replay` run as its own process is set
// beside.
const rawReaderEnv = "EXACTO_BENCH_RAW_READER"

func TestMain(m *testing.M) {
	if spec := os.Getenv(rawReaderEnv); spec != "" {
		os.Exit(rawReader(spec))
	}
	os.Exit(m.Run())
}

func rawReader(spec string) int {
	url, count, _ := strings.Cut(spec, " ")
	n, err := strconv.Atoi(count)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s=%q: want URL N\n", rawReaderEnv, spec)
		return 2
	}
	nc, err := nats.Connect(url)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	took, err := readRaw(js, n)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("read %d events in %s\n", n, took)
	return 0
}

// BenchmarkReplay rebuilds every projection from the stream (as `exacto replay --into`
// does, into memory, contacts named through the directory) beside a bare read of the
// same stream, and runs `exacto replay --projection contacts` (no --into: the contacts
// alone) as a process of its own beside a raw reader of its own. EXACTO_BENCH_REPLAY_EVENTS sets the size (default 50,000), and
// EXACTO_BENCH_REPLAY_LARGE the size of a second, larger run (default 200,000).
func BenchmarkReplay(b *testing.B) {
	n := envInt("EXACTO_BENCH_REPLAY_EVENTS", 50000)
	ctx := context.Background()
	conn, dir := history(b, n)
	b.ResetTimer()
	// The machine's speed moves by a quarter from one second to the next: three pairs of
	// a raw read and a rebuild, each right after the other, and the pair of the median
	// ratio reported.
	var pairs []replayPair
	for i := range 3 {
		pairs = append(pairs, measurePair(b, ctx, conn.JS, dir, n, i == 0))
	}
	slices.SortFunc(pairs, func(x, y replayPair) int { return cmp.Compare(x.ratio(), y.ratio()) })
	pr, r := pairs[1], pairs[1].rebuild
	b.StopTimer()
	rate := func(d time.Duration) float64 { return float64(n) / d.Seconds() }
	b.ReportMetric(rate(pr.raw), "raw_events/s")
	b.ReportMetric(rate(r.wall), "rebuild_events/s")
	rateRow("replay", "projector rebuild events/s", rate(r.wall), rate(pr.raw),
		fmt.Sprintf("%d events, %d contacts; baseline: raw stream read with nats.go just before it; the median of three such pairs (ratios %.3f, %.3f, %.3f)",
			n, (n+3)/4, pairs[0].ratio(), pairs[1].ratio(), pairs[2].ratio()))
	// CPU time moves less with the machine's speed than wall time does: the count to
	// compare two builds by.
	perEvent := func(d time.Duration) time.Duration { return d / time.Duration(n) }
	b.ReportMetric(float64(perEvent(r.cpu).Nanoseconds()), "rebuild_cpu_ns/event")
	us := func(d time.Duration) string { return fmt.Sprintf("%.1f µs", float64(d.Nanoseconds())/1000) }
	row("replay", "CPU per event, rebuild vs raw read", us(perEvent(r.cpu)), us(perEvent(pr.rawCPU)), float64(r.cpu)/float64(pr.rawCPU),
		fmt.Sprintf("process CPU (user and system: reader, projector and server in one process), of the median pair; during the rebuild the process (its server too) allocated %d times and %.1f KB per event, %d garbage collections (%s of CPU per event), the process's resident set %d MiB at its peak (%d MiB before it, %d MiB of live heap)",
			r.mallocs/uint64(n), float64(r.bytes)/float64(n)/1000, r.gcs, us(perEvent(r.gcCPU)), r.peakRSS>>10, r.rssBefore>>10, r.liveHeap>>20))
	// What analysts run: `exacto replay` in a process of its own, beside a raw read in a
	// process of its own, both against the server in this one (idle meanwhile).
	bin, url := exactoBinary(b), conn.Embedded.ClientURL()
	var procs []processPair
	for range 3 {
		procs = append(procs, measureProcesses(b, bin, url, n))
	}
	slices.SortFunc(procs, func(x, y processPair) int { return cmp.Compare(x.ratio(), y.ratio()) })
	processRow(n, procs[1], fmt.Sprintf("the median of three such pairs (ratios %.3f, %.3f, %.3f)", procs[0].ratio(), procs[1].ratio(), procs[2].ratio()))
	// A rate measured at 50,000 events says little of a million: the projections held
	// in memory grow with the contacts, and so does what the collector marks. The same
	// at EXACTO_BENCH_REPLAY_LARGE events (default 200,000; 0 for none), one pair, on a
	// server of its own.
	if large := envInt("EXACTO_BENCH_REPLAY_LARGE", 200000); large > n {
		conn, dir := history(b, large)
		p := measurePair(b, ctx, conn.JS, dir, large, false)
		raw, rawCPU, r := p.raw, p.rawCPU, p.rebuild
		rate := func(d time.Duration) float64 { return float64(large) / d.Seconds() }
		rateRow("replay", fmt.Sprintf("projector rebuild events/s at %d events", large), rate(r.wall), rate(raw),
			fmt.Sprintf("%d events, %d contacts, one pair (raw read, then the rebuild); rebuilt in %v; CPU per event %s against %s; %d garbage collections (%s of CPU per event), the process's resident set %d MiB at its peak (%d MiB before it, %d MiB of live heap, its server's included)",
				large, (large+3)/4, r.wall.Round(100*time.Millisecond), us(r.cpu/time.Duration(large)), us(rawCPU/time.Duration(large)), r.gcs, us(r.gcCPU/time.Duration(large)), r.peakRSS>>10, r.rssBefore>>10, r.liveHeap>>20))
		processRow(large, measureProcesses(b, bin, conn.Embedded.ClientURL(), large), "one pair")
	}
}

// processPair is a raw read (rawReader) and `exacto replay` right after it, each a
// process of its own, timed as each times itself: from its first read to its last, so
// without its start-up and connection.
type processPair struct{ raw, rebuild processRun }

// processRun is what one process took: its timed part, and all its CPU (start-up
// included). Not its peak resident set: a child's counts its parent's, from before its
// exec (getrusage(2)).
type processRun struct{ took, cpu time.Duration }

func (p processPair) ratio() float64 { return p.raw.took.Seconds() / p.rebuild.took.Seconds() }

var (
	rawReadLine  = regexp.MustCompile(`read (\d+) events in (\S+)\n`)
	replayedLine = regexp.MustCompile(`replayed (\d+) events up to sequence \d+ in (\S+) \(`)
)

// measureProcesses runs a raw reader of the first n events of the server at url, then
// `exacto replay` (bin) of the whole stream, as an analyst would: no --into, and no
// wait for a live projector (none runs here).
func measureProcesses(b *testing.B, bin, url string, n int) processPair {
	self, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	raw := exec.Command(self)
	raw.Env = append(os.Environ(), rawReaderEnv+"="+url+" "+strconv.Itoa(n))
	rebuild := exec.Command(bin, "replay", "--projection", "contacts", "--nats-url", url, "--wait-live", "0s")
	var p processPair
	for _, run := range []struct {
		cmd  *exec.Cmd
		line *regexp.Regexp
		into *processRun
	}{{raw, rawReadLine, &p.raw}, {rebuild, replayedLine, &p.rebuild}} {
		out, err := run.cmd.Output()
		if err != nil {
			var stderr []byte
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = ee.Stderr
			}
			b.Fatalf("%s: %v\n%s%s", run.cmd, err, out, stderr)
		}
		m := run.line.FindSubmatch(out)
		if m == nil {
			b.Fatalf("%s said nothing of its events:\n%s", run.cmd, out)
		}
		if done, _ := strconv.Atoi(string(m[1])); done != n {
			b.Fatalf("%s: %d of %d events:\n%s", run.cmd, done, n, out)
		}
		took, err := time.ParseDuration(string(m[2]))
		if err != nil {
			b.Fatalf("%s: %v", run.cmd, err)
		}
		st := run.cmd.ProcessState
		*run.into = processRun{took: took, cpu: st.UserTime() + st.SystemTime()}
	}
	return p
}

// processRow prints the row of `exacto replay` against the raw read, each its own process.
func processRow(n int, p processPair, pairs string) {
	rate := func(d time.Duration) float64 { return float64(n) / d.Seconds() }
	us := func(d time.Duration) string { return fmt.Sprintf("%.1f µs", float64(d.Nanoseconds())/1000/float64(n)) }
	rateRow("replay", fmt.Sprintf("`exacto replay` events/s, its own process, at %d events", n), rate(p.rebuild.took), rate(p.raw.took),
		fmt.Sprintf("baseline: a raw read with nats.go in a process of its own just before it; both against this process's server, idle meanwhile, each timed from its first read to its last; %s; "+
			"CPU per event %s against %s (whole processes, start-up included)", pairs, us(p.rebuild.cpu), us(p.raw.cpu)))
}

// measurePair reads the stream's n events raw, then rebuilds from them (rebuildOnce;
// profile: under EXACTO_BENCH_REPLAY_PROFILE).
func measurePair(b *testing.B, ctx context.Context, js jetstream.JetStream, dir *contacts.Directory, n int, profile bool) replayPair {
	cpu := processCPU()
	raw := rawRead(b, js, n)
	rawCPU := processCPU() - cpu
	return replayPair{raw: raw, rawCPU: rawCPU, rebuild: rebuildOnce(b, ctx, js, dir, n, profile)}
}

// replayPair is a raw read and the rebuild right after it.
type replayPair struct {
	raw, rawCPU time.Duration
	rebuild     rebuilt
}

func (p replayPair) ratio() float64 { return p.raw.Seconds() / p.rebuild.wall.Seconds() }

// rebuilt is what one timed rebuild took.
type rebuilt struct {
	wall, cpu, gcCPU   time.Duration
	mallocs, bytes     uint64
	gcs                uint32
	peakRSS, rssBefore int // KiB
	liveHeap           uint64
}

// rebuildOnce rebuilds every projection from the stream into memory, as `exacto replay
// --into` does, and measures it; profile: under EXACTO_BENCH_REPLAY_PROFILE's CPU profile.
func rebuildOnce(b *testing.B, ctx context.Context, js jetstream.JetStream, dir *contacts.Directory, n int, profile bool) rebuilt {
	if f := os.Getenv("EXACTO_BENCH_REPLAY_PROFILE"); f != "" && profile { // a CPU profile of a rebuild alone
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
	runtime.GC() // the raw read's garbage is not the rebuild's
	runtime.ReadMemStats(&m0)
	resetPeakRSS(b)
	rssBefore := vmKiB(b, os.Getpid(), "VmRSS")
	start, cpu, gc := time.Now(), processCPU(), collectorCPU()
	restoreGC := memlimit.Batch(memlimit.BatchHeap) // as `exacto replay` runs it
	p, err := projection.Replay(ctx, js, projection.Memories(), projection.ReplayOptions{Dir: dir})
	restoreGC()
	if err != nil {
		b.Fatal(err)
	}
	r := rebuilt{wall: time.Since(start), cpu: processCPU() - cpu, gcCPU: collectorCPU() - gc}
	runtime.ReadMemStats(&m1)
	r.peakRSS, r.rssBefore = vmKiB(b, os.Getpid(), "VmHWM"), rssBefore
	if p.Done != uint64(n) {
		b.Fatalf("replayed %d of %d events", p.Done, n)
	}
	r.mallocs, r.bytes, r.gcs, r.liveHeap = m1.Mallocs-m0.Mallocs, m1.TotalAlloc-m0.TotalAlloc, m1.NumGC-m0.NumGC, m0.HeapAlloc
	return r
}

// collectorCPU is the CPU the garbage collector has taken in this process, as the
// runtime estimates it.
func collectorCPU() time.Duration {
	s := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}}
	metrics.Read(s)
	return time.Duration(s[0].Value.Float64() * float64(time.Second))
}
