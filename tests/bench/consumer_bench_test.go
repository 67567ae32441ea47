package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/broker"
	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/classify"
	"exacto.dev/pkg/config"
	"exacto.dev/pkg/consumer"
	"exacto.dev/pkg/contacts"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/ingest"
	"exacto.dev/pkg/platform/accounts"
	"exacto.dev/pkg/platform/hubspot"
	"exacto.dev/pkg/platform/sandbox"
	"exacto.dev/pkg/ratelimit"
	"exacto.dev/pkg/stream"
	"exacto.dev/pkg/suppression"
	classifier "exacto.dev/services/classifier/handler"
	crmwriter "exacto.dev/services/crmwriter/handler"
	stopper "exacto.dev/services/stopper/handler"
	suppressor "exacto.dev/services/suppressor/handler"
)

// publishEvents stores n replies and n unsubscribes of n leads of one Instantly
// campaign, as the gateway would.
func publishEvents(b *testing.B, conn *broker.Conn, n int) {
	for i := range n {
		contact := &envelope.Contact{Email: fmt.Sprintf("lead%d@example.com", i)}
		campaign := &envelope.Campaign{ID: "3c6e0b8a-9c0b-4f1e-8b2a-7d5e4f3a2b1c"}
		for _, env := range []envelope.Envelope{
			{SpecVersion: "1.0", ID: envelope.ID("bench", "instantly", fmt.Sprint("reply-", i)), Type: envelope.TypeReplyReceived,
				Tenant: "bench", Provider: "instantly", Endpoint: "ep", Time: time.Now(),
				Data: envelope.Data{ProviderType: "reply_received", Contact: contact, Campaign: campaign,
					Message: &envelope.Message{Text: "Thanks, this looks interesting. Could you send pricing?"}}},
			{SpecVersion: "1.0", ID: envelope.ID("bench", "instantly", fmt.Sprint("unsub-", i)), Type: envelope.TypeLeadUnsubscribed,
				Tenant: "bench", Provider: "instantly", Endpoint: "ep", Time: time.Now(),
				Data: envelope.Data{ProviderType: "lead_unsubscribed", Contact: contact, Campaign: campaign}},
		} {
			data, _ := json.Marshal(env)
			msg := &nats.Msg{Subject: env.StreamSubject(), Data: data, Header: nats.Header{}}
			msg.Header.Set(jetstream.MsgIDHeader, env.ID)
			if _, err := conn.JS.PublishMsgAsync(msg); err != nil {
				b.Fatal(err)
			}
		}
	}
	<-conn.JS.PublishAsyncComplete()
}

// bindAndPublish makes subs' consumers, their state checkpointed as exacto up keeps it,
// then stores n leads' events (publishEvents): each event is then new to each consumer,
// as in a running exacto up (its first attempt reads its guard, guard.BeginNew), where
// a consumer made again at a restart claims each event of its backlog (guard.Begin).
func bindAndPublish(b *testing.B, conn *broker.Conn, n int, subs ...stream.Subscription) {
	ctx := context.Background()
	checkpoints, err := conn.JS.KeyValue(ctx, stream.ConsumerCheckpoints)
	if err != nil {
		b.Fatal(err)
	}
	for _, sub := range subs {
		if _, err := consumer.Bind(ctx, conn.JS, stream.Events, sub.ConsumerConfig(), checkpoints); err != nil {
			b.Fatal(err)
		}
	}
	publishEvents(b, conn, n)
}

// consumerRow is how long one path took for its events, how many messages its
// connection sent to the server (requests, publishes, acks) and how many allocations
// the process made meanwhile (client and embedded server).
type consumerRow struct {
	name string
	drained
}

// drained is a drain's measure over its events: from the start for the bare
// consume; for the framework from when its runner works as it does once started
// (steady), the events handled before that told apart.
type drained struct {
	events        int
	took          time.Duration
	cpu           time.Duration // the process's (consumer, server, sandbox), over took
	sent, mallocs uint64
	calls         int // requests the platform sandbox served
	// startup is how long the framework's runner took to be steady, and before how
	// many events it completed meanwhile.
	startup time.Duration
	before  int
}

func (r consumerRow) per(n uint64) float64 { return float64(n) / float64(r.events) }

// cpuPerEvent is the row's process CPU per event, in µs.
func (r consumerRow) cpuPerEvent() float64 { return r.per(uint64(r.cpu.Nanoseconds())) / 1000 }

// drain runs the framework with handle until n events of sub have completed, and
// times it.
func drain(b *testing.B, conn *broker.Conn, sb *sandbox.Server, sub stream.Subscription, n int, o consumer.Options) drained {
	return drainWith(b, conn, sub, n, o, true, sb.TotalRequests)
}

// drainWith is drain, with the consumer's state in the server's memory and its ack floor
// checkpointed (one embedded node, as exacto up runs it) or, without checkpoints, on
// disk as the server keeps it (a cluster).
//
// The measure starts once the runner is steady: bound, and (unless the subscription
// is idempotent) working alone, its contacts' leases in memory. Until its solo
// protocol has decided, a few hundred milliseconds after it starts, it takes a lease
// per contact in the bucket (docs/architecture.md): a cost paid once per process,
// which in a drain of a few thousand events would be most of what is measured. The
// events completed before are counted apart (the row's note gives them).
//
// calls, when set, counts the requests the platforms' sandbox served so far.
func drainWith(b *testing.B, conn *broker.Conn, sub stream.Subscription, n int, o consumer.Options, checkpointed bool, calls func() int) drained {
	if calls == nil {
		calls = func() int { return 0 }
	}
	var done atomic.Int64
	nc, err := conn.Dial("bench")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	// As exacto up runs it on one embedded node: the consumer's state in the server's
	// memory, its ack floor checkpointed.
	var checkpoints jetstream.KeyValue
	if checkpointed {
		if checkpoints, err = conn.JS.KeyValue(context.Background(), stream.ConsumerCheckpoints); err != nil {
			b.Fatal(err)
		}
	}
	var ready atomic.Bool
	solo := &consumer.Solo{}
	steady := func() bool { return ready.Load() && (sub.Idempotent || solo.Alone()) }
	began := time.Now()
	go func() {
		defer close(stopped)
		handle := o.Handle
		o.NC, o.Sub, o.Checkpoints, o.Solo = nc, sub, checkpoints, solo
		o.Workers = cmp.Or(o.Workers, 8)
		o.Ready = func() { ready.Store(true) }
		o.Handle = func(ctx context.Context, ev consumer.Event) error {
			// Only completions count: a classification that overtakes its reply's
			// note is retried, as it would be in production.
			err := handle(ctx, ev)
			if err == nil {
				done.Add(1)
			}
			return err
		}
		consumer.Run(ctx, o)
	}()
	for !steady() && done.Load() < int64(n) {
		time.Sleep(time.Millisecond)
	}
	before := int(done.Load())
	if before > n/2 {
		b.Fatalf("%s: %d of %d events completed before the runner was steady (%v): raise EXACTO_BENCH_CONSUMER_LEADS", sub.Durable, before, n, time.Since(began))
	}
	startup := time.Since(began)
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	sent0, calls0 := nc.Stats().OutMsgs, calls()
	endHeap := func() {}
	if dir := os.Getenv("EXACTO_BENCH_CONSUMER_PROFILE"); dir != "" { // a CPU profile per row
		f, err := os.Create(filepath.Join(dir, sub.Durable+".pprof"))
		if err != nil {
			b.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			b.Fatal(err)
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
		// And the allocations the row made: its heap profile's difference from this one
		// (go tool pprof -sample_index=alloc_objects -diff_base <row>.start.heap <row>.heap).
		writeHeap(b, filepath.Join(dir, sub.Durable+".start.heap"))
		endHeap = func() { writeHeap(b, filepath.Join(dir, sub.Durable+".heap")) }
	}
	start, cpu := time.Now(), processCPU()
	for done.Load() < int64(n) {
		time.Sleep(5 * time.Millisecond)
	}
	elapsed, cpu := time.Since(start), processCPU()-cpu
	events := int(done.Load()) - before
	runtime.ReadMemStats(&m1)
	sent, called := nc.Stats().OutMsgs-sent0, calls()-calls0
	endHeap() // before the runner's shutdown
	cancel()
	<-stopped // every settled event acked
	return drained{events: events, took: elapsed, cpu: cpu, sent: sent, mallocs: m1.Mallocs - m0.Mallocs, calls: called, startup: startup, before: before}
}

// writeHeap writes the process's heap profile (allocations since it started) to path,
// after a collection: the profile counts an allocation at the cycle after it.
func writeHeap(b *testing.B, path string) {
	runtime.GC()
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		b.Fatal(err)
	}
}

// rawDrains is the baseline, the median of three rawDrain runs (each a durable of its
// own, named from name): one takes a tenth of a second, short enough for the machine's
// noise to move it by a third.
func rawDrains(b *testing.B, conn *broker.Conn, name string, n int) drained {
	runs := make([]drained, 3)
	for i := range runs {
		runs[i] = rawDrain(b, conn, fmt.Sprint(name, i), n)
	}
	slices.SortFunc(runs, func(a, b drained) int { return cmp.Compare(a.took, b.took) })
	return runs[1]
}

// rawDrain is a bare JetStream consumer acking each event.
func rawDrain(b *testing.B, conn *broker.Conn, durable string, n int) drained {
	ctx := context.Background()
	nc, err := conn.Dial("bench")
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	c, err := js.CreateOrUpdateConsumer(ctx, stream.Events, jetstream.ConsumerConfig{Durable: durable, AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: "events.>"})
	if err != nil {
		b.Fatal(err)
	}
	var done atomic.Int64
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	start, cpu := time.Now(), processCPU()
	cc, err := c.Consume(func(m jetstream.Msg) { m.DoubleAck(ctx); done.Add(1) })
	if err != nil {
		b.Fatal(err)
	}
	for done.Load() < int64(n) {
		time.Sleep(5 * time.Millisecond)
	}
	elapsed, cpu := time.Since(start), processCPU()-cpu
	cc.Stop()
	runtime.ReadMemStats(&m1)
	return drained{events: n, took: elapsed, cpu: cpu, sent: nc.Stats().OutMsgs, mallocs: m1.Mallocs - m0.Mallocs}
}

// BenchmarkConsumers drains the same stored events through a bare JetStream consumer
// (baseline), the framework with a handler that does nothing, and each consumer
// service with the platform sandbox answering at once, in one process. The stopper,
// crmwriter and suppressor each take 2n events: the stopper n replies and n
// unsubscribes, the crmwriter n replies and their n classifications, the suppressor n
// unsubscribes and the n classifications. Derived events are stored as exacto up's
// services store them. Each framework row is timed once its runner is steady (drainWith).
// EXACTO_BENCH_CONSUMER_LEADS sets n (default 10000: the no-op runner's start-up takes a
// few thousand of its events).
func BenchmarkConsumers(b *testing.B) {
	n := envInt("EXACTO_BENCH_CONSUMER_LEADS", 10000)
	ctx := context.Background()
	conn := brokertest.Start(b, "")
	sb := sandbox.StartWith(b, sandbox.Options{AutoEnroll: true})
	cfg := consumersConfig(b)
	platforms := accounts.New(cfg, sb.URL, accounts.Pacing{})
	of := func(name string) stream.Subscription { s, _ := stream.SubscriptionOf(name); return s }
	// The consumers exist before the events are stored, as in a running exacto up.
	bindAndPublish(b, conn, n, noopSub, of(stream.Classifier), of(stream.Stopper), of(stream.CRMWriter), of(stream.Suppressor))
	d, err := consumer.NewDeriver(ctx, conn.JS)
	if err != nil {
		b.Fatal(err)
	}
	// Derived events as exacto up's services store them on its one node
	// (service.Env.Deriver): each on its own, synced by the checkpoint that passes its
	// cause.
	d = d.Via(ingest.PublishOne(conn.JS))
	dir, err := contacts.Open(ctx, conn.JS)
	if err != nil {
		b.Fatal(err)
	}
	kv, err := conn.JS.KeyValue(ctx, stream.Suppression)
	if err != nil {
		b.Fatal(err)
	}
	crm := crmwriterOptions(b, cfg, platforms, dir, d)
	b.ResetTimer()
	// Each row beside a bare consume measured right before it: the machine's speed moves
	// by a quarter within a run, and a baseline taken once at the start put the later
	// rows on either side of their targets by that alone.
	var rows, bases []consumerRow
	add := func(name string, measure func() drained) {
		bases = append(bases, consumerRow{"bare JetStream consume + double ack, right before", rawDrains(b, conn, fmt.Sprint("raw", len(rows), "-"), 2*n)})
		rows = append(rows, consumerRow{name, measure()})
	}
	add("framework, no-op handler", func() drained {
		return drain(b, conn, sb, noopSub, n, consumer.Options{Handle: func(context.Context, consumer.Event) error { return nil }})
	})
	add("classifier (classify + publish)", func() drained {
		return drain(b, conn, sb, of(stream.Classifier), n, consumer.Options{Handle: classifier.New(d, classify.New())})
	})
	add("stopper (check, stop, confirm, publish)", func() drained {
		return drain(b, conn, sb, of(stream.Stopper), 2*n, consumer.Options{Dependencies: stopper.Dependencies, Handle: stopper.New(d, platforms.For, dir, nil)})
	})
	add("crmwriter (contact, note, classification)", func() drained {
		return drain(b, conn, sb, of(stream.CRMWriter), 2*n, crm)
	})
	add("suppressor (list, tell platforms)", func() drained {
		return drain(b, conn, sb, of(stream.Suppressor), 2*n, consumer.Options{Handle: suppressor.New(suppression.New(kv), platforms.For, dir)})
	})
	b.StopTimer()
	rate := func(r consumerRow) float64 { return float64(r.events) / r.took.Seconds() }
	for i, r := range rows {
		base := bases[i]
		note := fmt.Sprintf("%d events, 8 workers, timed once steady (after %v and %d events); baseline: %s (%.0f events/s)", r.events, r.startup.Round(time.Millisecond), r.before, base.name, rate(base))
		rateRow("consumers", r.name+" events/s", rate(r), rate(base), note)
		row("consumers", r.name+": messages sent to the server per event", fmt.Sprintf("%.1f", r.per(r.sent)), fmt.Sprintf("%.1f", base.per(base.sent)), r.per(r.sent)/base.per(base.sent), note)
		row("consumers", r.name+": allocations per event (client and server)", fmt.Sprintf("%.0f", r.per(r.mallocs)), fmt.Sprintf("%.0f", base.per(base.mallocs)), r.per(r.mallocs)/base.per(base.mallocs), note)
		// Steadier than events/s when the machine's speed moves: a faster machine speeds
		// the bare consume more than a consumer bound by HTTP round trips.
		if r.calls > 0 {
			row("consumers", r.name+": platform API calls per event (HTTP round trips)", fmt.Sprintf("%.2f", r.per(uint64(r.calls))), "0", 0, note)
		}
		row("consumers", r.name+": CPU per event (the process: consumer, server, sandbox)", fmt.Sprintf("%.1f µs", r.cpuPerEvent()), fmt.Sprintf("%.1f µs", base.cpuPerEvent()), r.cpuPerEvent()/base.cpuPerEvent(), note)
		b.ReportMetric(rate(r), strings.TrimSuffix(strings.Fields(r.name)[0], ",")+"_events/s")
	}
}

// consumersConfig is the consumer rows' configuration: tenant bench, its replies routed to
// owner 101.
func consumersConfig(b *testing.B) *config.Config {
	cfg, err := config.Parse([]byte("tenants:\n  - id: bench\n    routing: [{owner: \"101\"}]\n    endpoints: [{id: ep, provider: instantly, path_token: tok-bench-0123456789}]\n"), "bench", func(string) string { return "" })
	if err != nil {
		b.Fatal(err)
	}
	return cfg
}

// BenchmarkCRMWriterPaced writes replies to a HubSpot portal paced as Exacto paces one
// (pkg/platform/accounts: HubSpot's 100 requests per 10 s, here ten times faster so that
// the run is short), by 8 workers, whose requests of a kind made while one is in flight
// share a batch request (hubspot/batch.go), beside 1 worker, whose every request goes
// alone: the replies a portal's rate lets through, with and without batching. Each on
// a server and a portal of its own. EXACTO_BENCH_PACED_REPLIES sets the replies
// (default 300), EXACTO_BENCH_PACED_WORKERS the workers of the batching run (default
// 8, the crmwriter's).
func BenchmarkCRMWriterPaced(b *testing.B) {
	n := envInt("EXACTO_BENCH_PACED_REPLIES", 300)
	workers := envInt("EXACTO_BENCH_PACED_WORKERS", 8)
	ctx := context.Background()
	cfg := consumersConfig(b)
	pace := map[string][]ratelimit.Rate{"hubspot": {{N: 100, Per: time.Second}}}
	run := func(workers int) drained {
		conn := brokertest.Start(b, "")
		sb := sandbox.StartWith(b, sandbox.Options{AutoEnroll: true})
		platforms := accounts.New(cfg, sb.URL, accounts.Pacing{Sandbox: pace})
		sub, _ := stream.SubscriptionOf(stream.CRMWriter)
		bindAndPublish(b, conn, n, sub)
		d, err := consumer.NewDeriver(ctx, conn.JS)
		if err != nil {
			b.Fatal(err)
		}
		dir, err := contacts.Open(ctx, conn.JS)
		if err != nil {
			b.Fatal(err)
		}
		o := crmwriterOptions(b, cfg, platforms, dir, d.Via(ingest.PublishOne(conn.JS)))
		o.Workers = workers
		return drain(b, conn, sb, sub, n, o)
	}
	b.ResetTimer()
	alone, batched := run(1), run(workers)
	b.StopTimer()
	rate := func(r drained) float64 { return float64(r.events) / r.took.Seconds() }
	calls := func(r drained) float64 { return float64(r.calls) / float64(r.events) }
	note := fmt.Sprintf("%d replies (a contact read, a contact create, a note create each), HubSpot paced at 100 requests/s; baseline: 1 worker, every request alone; "+
		"timed once steady (%d and %d replies before)", n, alone.before, batched.before)
	rateRow("consumers", fmt.Sprintf("crmwriter at a paced HubSpot, %d workers: replies/s", workers), rate(batched), rate(alone), note)
	row("consumers", fmt.Sprintf("crmwriter at a paced HubSpot, %d workers: HubSpot requests per reply", workers), fmt.Sprintf("%.2f", calls(batched)), fmt.Sprintf("%.2f", calls(alone)), calls(batched)/calls(alone), note)
}

// crmwriterOptions is the crmwriter as exacto up runs it (tenant bench's HubSpot at
// platforms, contacts named through dir, derived events through d), its note property
// made as its start makes it.
func crmwriterOptions(b *testing.B, cfg *config.Config, platforms *accounts.Set, dir *contacts.Directory, d *consumer.Deriver) consumer.Options {
	hs, _ := platforms.For("bench")
	if err := crmwriter.EnsureProperty(context.Background(), []string{"bench"}, func(string) *hubspot.Client { return hs.HubSpot }, nil); err != nil {
		b.Fatal(err)
	}
	return consumer.Options{Dependencies: consumer.On(crmwriter.Dependency),
		Handle: crmwriter.New(crmwriter.Options{HubSpot: func(t string) (*hubspot.Client, bool) { c, ok := platforms.For(t); return c.HubSpot, ok },
			Route: cfg.CRMOwner, Known: crmwriter.Known(dir), Linked: crmwriter.Linked(dir), Publish: d.Publish})}
}

// noopSub is the no-op rows' subscription: every reply, settled as a real consumer's.
var noopSub = stream.Subscription{Durable: "noop", Subjects: []string{"events.*.*.reply.received"}, AckWait: 30 * time.Second, MaxDeliver: 5, BackoffBase: time.Second, BackoffMax: time.Minute, MaxAckPending: 1000}

// BenchmarkConsumersCluster is BenchmarkConsumers' no-op row on a 3-node cluster (R3,
// sync always, in this process): the framework's cost where every write is a Raft round
// trip, beside a bare consume of the same stream. EXACTO_BENCH_CLUSTER_LEADS sets n
// (default 2000).
func BenchmarkConsumersCluster(b *testing.B) {
	n := envInt("EXACTO_BENCH_CLUSTER_LEADS", 2000)
	ctx := context.Background()
	c := brokertest.StartCluster(b, 3)
	c.Ensure(b, stream.Options{Replicas: 3, DuplicateWindow: 2 * time.Minute, DedupTTL: 7 * 24 * time.Hour})
	conn := c.Conn(b)
	if _, err := consumer.Bind(ctx, conn.JS, stream.Events, noopSub.ConsumerConfig(), nil); err != nil {
		b.Fatal(err)
	}
	publishEvents(b, conn, n)
	b.ResetTimer()
	base := consumerRow{"bare JetStream consume + double ack", rawDrains(b, conn, "raw", 2*n)}
	r := consumerRow{"framework, no-op handler", drainWith(b, conn, noopSub, n, consumer.Options{Handle: func(context.Context, consumer.Event) error { return nil }}, false, nil)}
	b.StopTimer()
	rate := func(r consumerRow) float64 { return float64(r.events) / r.took.Seconds() }
	note := fmt.Sprintf("%d events, 8 workers, 3-node cluster R3 (one process, one disk), timed once steady (after %v and %d events); baseline: %s", r.events, r.startup.Round(time.Millisecond), r.before, base.name)
	rateRow("consumers", "3-node R3: "+r.name+" events/s", rate(r), rate(base), note)
	row("consumers", "3-node R3: "+r.name+": messages sent to the server per event", fmt.Sprintf("%.1f", r.per(r.sent)), fmt.Sprintf("%.1f", base.per(base.sent)), r.per(r.sent)/base.per(base.sent), note)
}
