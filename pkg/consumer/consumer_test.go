package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sony/gobreaker/v2"
	"go.opentelemetry.io/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"exacto.dev/pkg/broker"
	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/guard"
	"exacto.dev/pkg/privacy"
	"exacto.dev/pkg/retry"
	"exacto.dev/pkg/stream"
)

var sub = stream.Subscription{
	Durable:       "testworker",
	Subjects:      []string{"events.*.*.reply.received"},
	AckWait:       5 * time.Second,
	MaxDeliver:    3,
	BackoffBase:   10 * time.Millisecond,
	BackoffMax:    50 * time.Millisecond,
	MaxAckPending: 1000,
}

// publish stores n reply events as the gateway would, returning their ids.
func publish(t *testing.T, conn *broker.Conn, n int) []string {
	return publishFor(t, conn, n, func(int) string { return "" })
}

// publishFor stores n reply events, the i-th from contact(i) ("" for none).
func publishFor(t *testing.T, conn *broker.Conn, n int, contact func(i int) string) []string {
	return publishEvents(t, conn, 0, n, contact)
}

// publishFrom stores n reply events numbered from the from-th on.
func publishFrom(t *testing.T, conn *broker.Conn, from, n int) []string {
	return publishEvents(t, conn, from, n, func(int) string { return "" })
}

func publishEvents(t *testing.T, conn *broker.Conn, from, n int, contact func(i int) string) []string {
	t.Helper()
	var ids []string
	for i := from; i < from+n; i++ {
		env := envelope.Envelope{SpecVersion: "1.0", ID: envelope.ID("acme", "instantly", fmt.Sprint(i)), Type: envelope.TypeReplyReceived,
			Tenant: "acme", Provider: "instantly", Endpoint: "ep", Time: time.Now()}
		if c := contact(i); c != "" {
			env.Data.Contact = &envelope.Contact{Email: c}
		}
		data, _ := json.Marshal(env)
		msg := &nats.Msg{Subject: env.StreamSubject(), Data: data, Header: nats.Header{}}
		msg.Header.Set(jetstream.MsgIDHeader, env.ID)
		if _, err := conn.JS.PublishMsg(context.Background(), msg); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, env.ID)
	}
	return ids
}

// run starts a runner on its own connection; it stops when the test ends, or before
// when the returned func is called.
func run(t *testing.T, conn *broker.Conn, h Handler, tune ...func(*Options)) (stop func()) {
	t.Helper()
	nc, err := nats.Connect(conn.Embedded.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		o := Options{NC: nc, Sub: sub, Workers: 2, Handle: h, Owner: func(tenant, typ string) string { return "ops@" + tenant }}
		for _, f := range tune {
			f(&o)
		}
		// Stopped while it was still binding (the test was done at once), Run returns
		// its context's error: not a failure.
		if err := Run(ctx, o); err != nil && ctx.Err() == nil {
			t.Error(err)
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done; nc.Close() }) }
	t.Cleanup(stop)
	return stop
}

// effects counts handler calls per event.
type effects struct {
	mu sync.Mutex
	n  map[string]int
}

func (e *effects) add(id string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.n == nil {
		e.n = map[string]int{}
	}
	e.n[id]++
	return e.n[id]
}

func (e *effects) get(id string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n[id]
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

func status(t *testing.T, conn *broker.Conn, id string) guard.Record {
	kv, _ := conn.JS.KeyValue(context.Background(), stream.Guards)
	rec, _, err := guard.Status(context.Background(), kv, sub.Durable, id)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// Two replicas share the durable consumer: every event is handled exactly once.
func TestTwoReplicasHandleEachEventOnce(t *testing.T) {
	conn := brokertest.Start(t, "")
	var fx effects
	var byReplica [2]atomic.Int64
	for i := range byReplica {
		run(t, conn, func(ctx context.Context, ev Event) error {
			byReplica[i].Add(1)
			fx.add(ev.Envelope.ID)
			time.Sleep(time.Millisecond) // long enough that one replica cannot take everything
			return nil
		})
	}
	ids := publish(t, conn, 200)
	waitFor(t, "every event completed", func() bool {
		for _, id := range ids {
			if status(t, conn, id).Status != guard.Completed {
				return false
			}
		}
		return true
	})
	for _, id := range ids {
		if n := fx.get(id); n != 1 {
			t.Fatalf("%s handled %d times", id, n)
		}
	}
	if n := brokertest.Count(t, conn, stream.DLQ); n != 0 {
		t.Fatalf("%d dead letters", n)
	}
	// Each event's one attempt reported once, completed.
	waitFor(t, "the outcomes", func() bool { return brokertest.Count(t, conn, stream.Outcomes) == uint64(len(ids)) })
	// They split the work on the one durable: each took some, and the server delivered
	// each event once (no copy for the guard to hide).
	if a, b := byReplica[0].Load(), byReplica[1].Load(); a == 0 || b == 0 || a+b != int64(len(ids)) {
		t.Fatalf("replicas handled %d and %d of %d", a, b, len(ids))
	}
	c, err := conn.JS.Consumer(context.Background(), stream.Events, sub.Durable)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := c.Info(context.Background()); err != nil || info.Delivered.Consumer != uint64(len(ids)) {
		t.Fatalf("consumer delivered %+v (%v), want each of %d once", info.Delivered, err, len(ids))
	}
}

// A 429's Retry-After pauses its dependency for every consumer sharing the pacer (the
// process's: service.Env.Pacer), not only the one that received it.
func TestRetryAfterPausesEveryConsumerOfTheProcess(t *testing.T) {
	conn := brokertest.Start(t, "")
	pacer := retry.NewPacer()
	var mu sync.Mutex
	var limitedAt time.Time
	var others []time.Time
	var limited atomic.Bool
	limiting := make(chan struct{})
	var paused sync.Once
	run(t, conn, func(ctx context.Context, ev Event) error {
		return ev.Call(ctx, "instantly", func(context.Context) error {
			if limited.CompareAndSwap(false, true) {
				mu.Lock()
				limitedAt = time.Now()
				mu.Unlock()
				close(limiting)
				return &retry.Error{Class: retry.Transient, Dependency: "instantly", Status: 429, RetryAfter: 2 * time.Second, Err: errors.New("rate limited")}
			}
			return nil
		})
	}, func(o *Options) { o.Pacer = pacer; o.Dependencies = On("instantly") })
	other := sub
	other.Durable = "otherworker"
	var fx effects
	run(t, conn, func(ctx context.Context, ev Event) error {
		<-limiting         // the first consumer has had its 429 before this one calls…
		paused.Do(func() { // …and its Event.Call has paused the dependency (once: it ends)
			for pacer.Remaining("instantly") == 0 {
				time.Sleep(time.Millisecond)
			}
		})
		return ev.Call(ctx, "instantly", func(context.Context) error {
			mu.Lock()
			others = append(others, time.Now())
			mu.Unlock()
			fx.add(ev.Envelope.ID)
			return nil
		})
	}, func(o *Options) { o.Pacer = pacer; o.Sub = other; o.Dependencies = On("instantly") })
	ids := publish(t, conn, 3)
	waitFor(t, "the other consumer's calls", func() bool {
		for _, id := range ids {
			if fx.get(id) != 1 {
				return false
			}
		}
		return true
	})
	mu.Lock()
	defer mu.Unlock()
	for _, at := range others {
		if d := at.Sub(limitedAt); d < 2*time.Second {
			t.Fatalf("the other consumer called %v after the 429, inside its Retry-After", d)
		}
	}
}

func TestTransientRetriedThenCompleted(t *testing.T) {
	conn := brokertest.Start(t, "")
	var fx effects
	run(t, conn, func(ctx context.Context, ev Event) error {
		if fx.add(ev.Envelope.ID) < 3 {
			return retry.Transiently("hubspot", errors.New("503"))
		}
		return nil
	})
	id := publish(t, conn, 1)[0]
	waitFor(t, "completion after two transient failures", func() bool { return status(t, conn, id).Status == guard.Completed })
	if rec := status(t, conn, id); rec.Attempts != 3 || fx.get(id) != 3 {
		t.Fatalf("attempts %d, calls %d", rec.Attempts, fx.get(id))
	}
	if n := brokertest.Count(t, conn, stream.DLQ); n != 0 {
		t.Fatalf("%d dead letters", n)
	}
}

// metricsReader reads the package's metrics: the global meter provider hands the
// package's instruments to the first provider set, so every test shares one.
var metricsReader = sync.OnceValue(func() *sdkmetric.ManualReader {
	reader := sdkmetric.NewManualReader()
	otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	return reader
})

// metricSum is the sum of counter name's data points read now, of consumer's alone
// unless consumer is "".
func metricSum[N int64 | float64](t *testing.T, reader *sdkmetric.ManualReader, name, consumer string) N {
	t.Helper()
	total, _ := metricValue[N](t, reader, name, consumer)
	return total
}

// metricGauge is the sum of gauge name's data points read now, of consumer's alone, and
// whether it had any.
func metricGauge(t *testing.T, reader *sdkmetric.ManualReader, name, consumer string) (int64, bool) {
	t.Helper()
	return metricValue[int64](t, reader, name, consumer)
}

// metricValue sums the data points of counter or gauge name read now, of consumer's
// alone unless consumer is "", and says whether it found any.
func metricValue[N int64 | float64](t *testing.T, reader *sdkmetric.ManualReader, name, consumer string) (total N, found bool) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			var points []metricdata.DataPoint[N]
			switch d := m.Data.(type) {
			case metricdata.Sum[N]:
				points = d.DataPoints
			case metricdata.Gauge[N]:
				points = d.DataPoints
			}
			for _, dp := range points {
				if v, _ := dp.Attributes.Value("consumer"); consumer == "" || v.AsString() == consumer {
					total, found = total+dp.Value, true
				}
			}
		}
	}
	return total, found
}

// A permanent error is dead-lettered after one attempt, with its reason and owner.
func TestPermanentDeadLetteredAtOnce(t *testing.T) {
	reader := metricsReader()
	conn := brokertest.Start(t, "")
	var fx effects
	run(t, conn, func(ctx context.Context, ev Event) error {
		fx.add(ev.Envelope.ID)
		return retry.Permanently("hubspot", errors.New("400 property exacto_event_id does not exist"))
	})
	id := publish(t, conn, 1)[0]
	waitFor(t, "the dead letter", func() bool { return brokertest.Count(t, conn, stream.DLQ) == 1 })
	dl := lastDeadLetter(t, conn)
	if dl.EventID != id || dl.Class != "permanent" || dl.Attempts != 1 || dl.Owner != "ops@acme" || dl.Consumer != sub.Durable ||
		dl.Error == "" || dl.FirstAttempt.IsZero() || len(dl.Event) == 0 {
		t.Fatalf("dead letter: %+v", dl)
	}
	time.Sleep(200 * time.Millisecond) // no redelivery follows
	if fx.get(id) != 1 || status(t, conn, id).Status != guard.DeadLetter {
		t.Fatalf("calls %d, status %s", fx.get(id), status(t, conn, id).Status)
	}
	// The alert metric counted it.
	if counted := metricSum[int64](t, reader, "exacto_dead_letters", ""); counted != 1 {
		t.Fatalf("exacto_dead_letters counted %d", counted)
	}
}

func TestOutOfAttemptsDeadLettered(t *testing.T) {
	conn := brokertest.Start(t, "")
	var fx effects
	run(t, conn, func(ctx context.Context, ev Event) error {
		fx.add(ev.Envelope.ID)
		return errors.New("connection reset") // unclassified: transient
	})
	id := publish(t, conn, 1)[0]
	waitFor(t, "the dead letter", func() bool { return brokertest.Count(t, conn, stream.DLQ) == 1 })
	if dl := lastDeadLetter(t, conn); dl.Class != "transient" || dl.Attempts != sub.MaxDeliver {
		t.Fatalf("dead letter: %+v", dl)
	}
	if fx.get(id) != sub.MaxDeliver {
		t.Fatalf("calls %d, want %d", fx.get(id), sub.MaxDeliver)
	}
}

func lastDeadLetter(t *testing.T, conn *broker.Conn) DeadLetter {
	t.Helper()
	s, _ := conn.JS.Stream(context.Background(), stream.DLQ)
	m, err := s.GetLastMsgForSubject(context.Background(), "dlq.>")
	if err != nil {
		t.Fatal(err)
	}
	var dl DeadLetter
	if err := json.Unmarshal(m.Data, &dl); err != nil {
		t.Fatal(err)
	}
	return dl
}

// Two replicas with two workers each: events of one contact never overlap, while
// different contacts do run at once.
func TestPerContactOrdering(t *testing.T) {
	conn := brokertest.Start(t, "")
	var mu sync.Mutex
	inFlight := map[string]int{}
	overlap, maxTotal, total := false, 0, 0
	var fx effects
	h := func(ctx context.Context, ev Event) error {
		c := ev.Envelope.ContactKey()
		mu.Lock()
		inFlight[c]++
		total++
		if inFlight[c] > 1 {
			overlap = true
		}
		maxTotal = max(maxTotal, total)
		mu.Unlock()
		// Stay in the handler until another contact's event joins (or 300ms pass):
		// parallelism is then seen whenever the runner allows it, on a slow disk too.
		for deadline := time.Now().Add(300 * time.Millisecond); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			mu.Lock()
			seen := maxTotal >= 2
			mu.Unlock()
			if seen {
				break
			}
		}
		time.Sleep(5 * time.Millisecond)
		mu.Lock()
		inFlight[c]--
		total--
		mu.Unlock()
		fx.add(ev.Envelope.ID)
		return nil
	}
	run(t, conn, h)
	run(t, conn, h)
	// Contact A has 20 events; B, C and D 5 each. Case differs: still one contact.
	ids := publishFor(t, conn, 35, func(i int) string {
		if i < 20 {
			return []string{"Ana@Example.com", "ana@example.com"}[i%2]
		}
		return fmt.Sprintf("lead%d@example.com", i%3)
	})
	waitFor(t, "every event handled", func() bool {
		for _, id := range ids {
			if fx.get(id) == 0 {
				return false
			}
		}
		return true
	})
	mu.Lock()
	defer mu.Unlock()
	if overlap {
		t.Fatal("two events of one contact ran at once")
	}
	if maxTotal < 2 {
		t.Fatal("different contacts never ran in parallel")
	}
	for _, id := range ids {
		if fx.get(id) != 1 {
			t.Fatalf("%s handled %d times", id, fx.get(id))
		}
	}
	mu.Unlock()
	// An event whose contact was busy went back with its claim given back: one attempt
	// counted per event, however often it met a busy contact.
	waitFor(t, "every guard completed", func() bool {
		for _, id := range ids {
			if status(t, conn, id).Status != guard.Completed {
				return false
			}
		}
		return true
	})
	mu.Lock()
	for _, id := range ids {
		if rec := status(t, conn, id); rec.Attempts != 1 {
			t.Fatalf("%s: %d attempts counted, want 1: %+v", id, rec.Attempts, rec)
		}
	}
}

// A paused consumer holds its events in the stream; on resume they are all handled.
func TestPauseHoldsEventsUntilResume(t *testing.T) {
	conn := brokertest.Start(t, "")
	var fx effects
	run(t, conn, func(ctx context.Context, ev Event) error { fx.add(ev.Envelope.ID); return nil })
	waitFor(t, "the consumer bound", func() bool {
		_, err := conn.JS.Consumer(context.Background(), stream.Events, sub.Durable)
		return err == nil
	})
	ctx := context.Background()
	// The service's consumer of replayed dead letters pauses and resumes with it.
	rs := sub.Replays()
	if _, err := conn.JS.CreateOrUpdateConsumer(ctx, rs.StreamName(), rs.ConsumerConfig()); err != nil {
		t.Fatal(err)
	}
	replaysPaused := func() bool {
		c, err := conn.JS.Consumer(ctx, rs.StreamName(), rs.Durable)
		if err != nil {
			t.Fatal(err)
		}
		info, err := c.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.Paused
	}
	if err := Pause(ctx, conn.JS, sub.Durable, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if !replaysPaused() {
		t.Fatal("the replays consumer was not paused")
	}
	ids := publish(t, conn, 20)
	time.Sleep(500 * time.Millisecond)
	for _, id := range ids {
		if fx.get(id) != 0 {
			t.Fatal("a paused consumer handled an event")
		}
	}
	if err := Resume(ctx, conn.JS, sub.Durable); err != nil {
		t.Fatal(err)
	}
	if replaysPaused() {
		t.Fatal("the replays consumer was not resumed")
	}
	waitFor(t, "the held events", func() bool {
		for _, id := range ids {
			if fx.get(id) != 1 {
				return false
			}
		}
		return true
	})
	if err := Pause(ctx, conn.JS, "no-such-consumer", time.Now().Add(time.Hour)); err == nil {
		t.Fatal("paused a consumer that does not exist")
	}
}

// While the dependency is down the breaker opens: the handler is hardly called, no
// event is dead-lettered, and all complete once it is back. The events waiting for it
// are reported parked, each holding one of the consumer's delivery slots.
func TestBreakerHoldsEventsWhileDependencyIsDown(t *testing.T) {
	reader := metricsReader()
	conn := brokertest.Start(t, "")
	var down atomic.Bool
	down.Store(true)
	var calls atomic.Int64
	var fx effects
	breakers := NewBreakers(300*time.Millisecond, 3)
	run(t, conn, func(ctx context.Context, ev Event) error {
		return ev.Call(ctx, "hubspot", func(context.Context) error {
			calls.Add(1)
			if down.Load() {
				return retry.Transiently("hubspot", errors.New("503 service unavailable"))
			}
			fx.add(ev.Envelope.ID)
			return nil
		})
	}, func(o *Options) {
		o.Dependencies, o.Breakers = On("hubspot"), breakers
		o.Sub.MaxDeliver = 10
	})
	ids := publish(t, conn, 30)
	time.Sleep(1500 * time.Millisecond)
	during := calls.Load()
	// 3 failures trip it; then one probe per 300 ms opening. Without a breaker, every
	// event would be tried until its attempts ran out (30 × 10).
	if during > 12 {
		t.Fatalf("%d calls to a dependency that is down", during)
	}
	parkedDuring, _ := metricGauge(t, reader, "exacto_consumer_parked", sub.Durable)
	if parkedDuring < 10 {
		t.Errorf("%d events reported parked at the open breaker, of 30", parkedDuring)
	}
	if n, ok := metricGauge(t, reader, "exacto_consumer_max_ack_pending", sub.Durable); !ok || n != int64(sub.MaxAckPending) {
		t.Errorf("delivery slots reported %d (%v), the consumer has %d", n, ok, sub.MaxAckPending)
	}
	down.Store(false)
	waitFor(t, "every event completed after recovery", func() bool {
		for _, id := range ids {
			if fx.get(id) != 1 {
				return false
			}
		}
		return true
	})
	if n, ok := metricGauge(t, reader, "exacto_consumer_parked", sub.Durable); !ok || n != 0 {
		t.Errorf("%d events (%v) reported parked once the dependency was back", n, ok)
	}
	if n := brokertest.Count(t, conn, stream.DLQ); n != 0 {
		t.Fatalf("%d dead letters while the dependency was down", n)
	}
	t.Logf("calls while down: %d; total: %d; parked while down: %d", during, calls.Load(), parkedDuring)
}

// A 429 with Retry-After pauses the dependency for every event, not just the one.
func TestRetryAfterPausesTheDependency(t *testing.T) {
	conn := brokertest.Start(t, "")
	var mu sync.Mutex
	var callTimes []time.Time
	var limited atomic.Bool
	var fx effects
	run(t, conn, func(ctx context.Context, ev Event) error {
		return ev.Call(ctx, "hubspot", func(context.Context) error {
			mu.Lock()
			callTimes = append(callTimes, time.Now())
			mu.Unlock()
			if limited.CompareAndSwap(false, true) {
				return &retry.Error{Class: retry.Transient, Dependency: "hubspot", Status: 429, RetryAfter: time.Second, Err: errors.New("rate limited")}
			}
			fx.add(ev.Envelope.ID)
			return nil
		})
	}, func(o *Options) { o.Dependencies = On("hubspot") })
	ids := publish(t, conn, 10)
	waitFor(t, "every event completed", func() bool {
		for _, id := range ids {
			if fx.get(id) != 1 {
				return false
			}
		}
		return true
	})
	mu.Lock()
	defer mu.Unlock()
	first := callTimes[0]
	for _, c := range callTimes[1:] {
		// Calls already under way when the 429 came back may finish; none may start
		// inside the second.
		if d := c.Sub(first); d > 50*time.Millisecond && d < time.Second {
			t.Fatalf("a call %v after the 429, inside its Retry-After", d)
		}
	}
	if n := brokertest.Count(t, conn, stream.DLQ); n != 0 {
		t.Fatalf("%d dead letters", n)
	}
}

// While the DLQ cannot be written, a permanently failing event is not marked dead: it
// stays in the stream, retryable, and lands in the DLQ once it can.
func TestDeadLetterNotLostWhenTheDLQIsAway(t *testing.T) {
	conn := brokertest.Start(t, "")
	ctx := context.Background()
	if err := conn.JS.DeleteStream(ctx, stream.DLQ); err != nil {
		t.Fatal(err)
	}
	var fx effects
	run(t, conn, func(ctx context.Context, ev Event) error {
		fx.add(ev.Envelope.ID)
		return retry.Permanently("hubspot", errors.New("400 invalid"))
	}, func(o *Options) { o.Sub.MaxDeliver = 100 })
	id := publish(t, conn, 1)[0]
	waitFor(t, "two attempts", func() bool { return fx.get(id) >= 2 })
	if s := status(t, conn, id).Status; s == guard.DeadLetter || s == guard.Completed {
		t.Fatalf("marked %s while its dead letter could not be stored", s)
	}
	if err := stream.Ensure(ctx, conn.JS, brokertest.Topology); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the dead letter once the DLQ is back", func() bool { return status(t, conn, id).Status == guard.DeadLetter })
	if n := brokertest.Count(t, conn, stream.DLQ); n != 1 {
		t.Fatalf("%d dead letters", n)
	}
}

// A handler that panics fails its event permanently: dead-lettered with the panic and
// its stack, attempted once, and the runner (the process) goes on with the next event.
func TestPanicIsADeadLetter(t *testing.T) {
	conn := brokertest.Start(t, "")
	var fx effects
	ids := publish(t, conn, 2)
	run(t, conn, func(ctx context.Context, ev Event) error {
		fx.add(ev.Envelope.ID)
		if ev.Envelope.ID == ids[0] {
			var leads []string
			_ = leads[len(ev.Envelope.ID)] // out of range: the kind of bug a handler ships with
		}
		return nil
	})
	waitFor(t, "the dead letter and the next event", func() bool {
		return status(t, conn, ids[0]).Status == guard.DeadLetter && status(t, conn, ids[1]).Status == guard.Completed
	})
	dl := lastDeadLetter(t, conn)
	if dl.EventID != ids[0] || dl.Class != "permanent" || !strings.Contains(dl.Error, "handler panicked: runtime error: index out of range") ||
		!strings.Contains(dl.Error, "consumer_test.go") {
		t.Fatalf("dead letter: %+v", dl)
	}
	time.Sleep(200 * time.Millisecond)
	if fx.get(ids[0]) != 1 {
		t.Fatalf("the panicking event was attempted %d times", fx.get(ids[0]))
	}
}

// A dead letter stored while its guard record cannot be written is not acked: the
// event comes back, is resumed once the lease runs out, and ends dead-lettered in the
// guard too, with its one letter — never left "processing" for ever.
func TestDeadLetterWhoseGuardWriteFailsComesBack(t *testing.T) {
	conn := brokertest.Start(t, "")
	kv := guards(t, conn)
	var fx effects
	run(t, conn, func(ctx context.Context, ev Event) error {
		if fx.add(ev.Envelope.ID) == 1 {
			// The attempt's write after the letter loses its compare-and-set.
			if err := leaseRunOut(ctx, kv, ev.Envelope.ID); err != nil {
				return err
			}
		}
		return retry.Permanently("hubspot", errors.New("400 invalid"))
	})
	id := publish(t, conn, 1)[0]
	waitFor(t, "the guard's dead letter", func() bool { return status(t, conn, id).Status == guard.DeadLetter })
	if n := fx.get(id); n != 2 {
		t.Fatalf("%d attempts, want the one whose guard write failed and its resumption", n)
	}
	if n := brokertest.Count(t, conn, stream.DLQ); n != 1 {
		t.Fatalf("%d dead letters, want 1", n)
	}
}

// An attempt whose effect is made but whose guard cannot be completed is not acked: it
// comes back, and the next attempt (whose handler finds the effect made) completes it.
// Acked, the event would be done with its record saying processing for ever.
func TestCompletionWhoseGuardWriteFailsComesBack(t *testing.T) {
	conn := brokertest.Start(t, "")
	kv := guards(t, conn)
	var fx effects
	h := func(ctx context.Context, ev Event) error {
		if fx.add(ev.Envelope.ID) == 1 {
			// The attempt's completion loses its compare-and-set.
			return leaseRunOut(ctx, kv, ev.Envelope.ID)
		}
		return nil
	}
	// Two processes on the consumer: the attempt claims its record (a New one, alone,
	// would write it whatever it holds).
	runTwo(t, conn, h)
	id := publish(t, conn, 1)[0]
	waitFor(t, "the guard completed", func() bool { return status(t, conn, id).Status == guard.Completed })
	waitAcked(t, conn)
	if n := fx.get(id); n != 2 {
		t.Fatalf("%d attempts, want the one whose completion failed and the next", n)
	}
}

// What a handler leaves for its event's completion (Event.Completed) runs once per
// event: not for an attempt whose completion failed (the event comes back and its next
// attempt is the one completed), nor for one dead-lettered; outside a runner, at once.
func TestCompletedRunsOncePerCompletedEvent(t *testing.T) {
	conn := brokertest.Start(t, "")
	kv := guards(t, conn)
	var attempts, completions effects
	failing := envelope.ID("acme", "instantly", "1") // the second event: its handler fails for good
	h := func(ctx context.Context, ev Event) error {
		id := ev.Envelope.ID
		n := attempts.add(id)
		ev.Completed(ctx, func(context.Context) { completions.add(id) })
		switch {
		case id == failing:
			return retry.Permanently("hubspot", errors.New("400 invalid"))
		case n == 1:
			return leaseRunOut(ctx, kv, id) // its completion loses its compare-and-set
		}
		return nil
	}
	runTwo(t, conn, h) // the attempt claims its record (as in the test above)
	ids := publish(t, conn, 2)
	if ids[1] != failing {
		t.Fatalf("published %v, want the second to be %s", ids, failing)
	}
	for _, id := range ids {
		waitFor(t, "the event settled", func() bool {
			s := status(t, conn, id).Status
			return s == guard.Completed || s == guard.DeadLetter
		})
	}
	waitAcked(t, conn)
	if a, c := attempts.get(ids[0]), completions.get(ids[0]); a != 2 || c != 1 {
		t.Errorf("%d attempts and %d completions run, want 2 attempts (the first one's completion failed) and 1", a, c)
	}
	if c := completions.get(ids[1]); c != 0 {
		t.Errorf("a dead-lettered event ran %d completions", c)
	}
	ran := false
	Event{}.Completed(context.Background(), func(context.Context) { ran = true })
	if !ran {
		t.Error("outside a runner, a completion did not run at once")
	}
}

// waitAcked waits until the consumer has acked every event stored, none pending.
func waitAcked(t *testing.T, conn *broker.Conn) {
	t.Helper()
	c, err := conn.JS.Consumer(context.Background(), stream.Events, sub.Durable)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every event acked", func() bool {
		info, err := c.Info(context.Background())
		return err == nil && info.NumAckPending == 0 && info.NumPending == 0
	})
}

// runTwo runs h in two processes on the consumer (each runner with a Solo of its own)
// and returns once the first, which worked alone, has seen the second and shares: from
// then on no attempt is New.
func runTwo(t *testing.T, conn *broker.Conn, h Handler) (first, second *Solo) {
	t.Helper()
	first, second = &Solo{}, &Solo{}
	run(t, conn, h, func(o *Options) { o.Solo = first })
	waitFor(t, "the first process to work alone", first.Alone)
	run(t, conn, h, func(o *Options) { o.Solo = second })
	waitFor(t, "the first process to see the second and share", func() bool { return !first.Alone() })
	return first, second
}

// guards is the guards bucket of conn's server.
func guards(t *testing.T, conn *broker.Conn) jetstream.KeyValue {
	t.Helper()
	kv, err := conn.JS.KeyValue(context.Background(), stream.Guards)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// leaseRunOut moves event id's guard record under the attempt holding it, as another
// worker would once its lease ran out: the attempt's next write to it loses its
// compare-and-set.
func leaseRunOut(ctx context.Context, kv jetstream.KeyValue, id string) error {
	key := guard.Key(sub.Durable, id)
	e, err := kv.Get(ctx, key)
	if err != nil {
		return err
	}
	var rec guard.Record
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return err
	}
	rec.LeaseUntil = time.Now().Add(-time.Second)
	data, _ := json.Marshal(rec)
	_, err = kv.Put(ctx, key, data)
	return err
}

// Stopping a runner while events are still arriving neither panics (watermill-nats'
// send on a closed channel) nor loses an event: what was not completed is handled by
// the next runner.
func TestShutdownUnderLoad(t *testing.T) {
	conn := brokertest.Start(t, "")
	var fx effects
	var handled atomic.Int64
	h := func(ctx context.Context, ev Event) error {
		fx.add(ev.Envelope.ID)
		handled.Add(1)
		return nil
	}
	ids := publish(t, conn, 400)
	for round := range 5 {
		nc, err := nats.Connect(conn.Embedded.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- Run(ctx, Options{NC: nc, Sub: sub, Workers: 4, Handle: h}) }()
		target := handled.Load() + 30
		waitFor(t, fmt.Sprint("round ", round, " handling events"), func() bool { return handled.Load() >= target || handled.Load() >= int64(len(ids)) })
		cancel() // mid-flow: deliveries are still arriving
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("round %d: Run did not return after its context ended", round)
		}
		nc.Close()
	}
	run(t, conn, h)
	waitFor(t, "every event handled", func() bool {
		for _, id := range ids {
			if fx.get(id) == 0 {
				return false
			}
		}
		return true
	})
	for _, id := range ids {
		if n := fx.get(id); n != 1 {
			t.Fatalf("%s handled %d times", id, n)
		}
	}
}

// outcomesOf reads EXACTO_OUTCOMES and returns the outcomes of event id, in order.
func outcomesOf(t *testing.T, conn *broker.Conn, id string) []Outcome {
	t.Helper()
	ctx := context.Background()
	c, err := conn.JS.OrderedConsumer(ctx, stream.Outcomes, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var out []Outcome
	for {
		info, err := c.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.NumPending == 0 {
			return out
		}
		msg, err := c.Next(jetstream.FetchMaxWait(2 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		var o Outcome
		if err := json.Unmarshal(msg.Data(), &o); err != nil {
			t.Fatal(err)
		}
		if o.EventID == id {
			out = append(out, o)
		}
	}
}

// Every attempt's result is published (its start is not), with its attempt count, last
// error and, for a retry, when the redelivery is due (within the subscription's backoff).
func TestOutcomesTellEachAttempt(t *testing.T) {
	conn := brokertest.Start(t, "")
	var fx effects
	run(t, conn, func(ctx context.Context, ev Event) error {
		if ev.Envelope.ID == envelope.ID("acme", "instantly", "1") {
			return retry.Permanently("hubspot", errors.New("400 invalid property"))
		}
		if fx.add(ev.Envelope.ID) < 3 {
			return retry.Transiently("hubspot", errors.New("503 unavailable"))
		}
		return nil
	})
	ids := publish(t, conn, 2)
	waitFor(t, "both done", func() bool {
		return status(t, conn, ids[0]).Status == guard.Completed && status(t, conn, ids[1]).Status == guard.DeadLetter
	})
	want := map[string][]string{
		ids[0]: {guard.RetryableFailed, guard.RetryableFailed, guard.Completed},
		ids[1]: {guard.DeadLetter},
	}
	for _, id := range ids {
		var got []Outcome
		waitFor(t, "the outcomes of "+id, func() bool { got = outcomesOf(t, conn, id); return len(got) >= len(want[id]) })
		for i, o := range got {
			if i >= len(want[id]) || o.Status != want[id][i] {
				t.Fatalf("%s: outcome %d is %+v, want the statuses %v", id, i, o, want[id])
			}
			if o.Consumer != sub.Durable {
				t.Fatalf("outcome of consumer %q", o.Consumer)
			}
			switch o.Status {
			case guard.RetryableFailed:
				due := o.NextAttemptAt.Sub(o.At)
				if !strings.Contains(o.LastError, "503") || o.Attempts < 1 || due < -time.Second || due > sub.BackoffMax {
					t.Fatalf("retry outcome %+v: due in %v, backoff at most %v", o, due, sub.BackoffMax)
				}
			case guard.DeadLetter:
				if !strings.Contains(o.LastError, "400") || o.Attempts != 1 || !o.NextAttemptAt.IsZero() {
					t.Fatalf("dead-letter outcome %+v", o)
				}
			case guard.Completed:
				if o.Attempts != 3 || o.LastError != "" {
					t.Fatalf("completed outcome %+v", o)
				}
			}
		}
	}
}

// A handler that declares no dependency (the suppressor: its list write must not wait)
// and whose call the breaker refuses is retried past MaxDeliver without a dead letter:
// the dependency is down, the event is not at fault. It completes once the breaker lets
// calls through again.
func TestRefusedCallsSpendNoAttempts(t *testing.T) {
	conn := brokertest.Start(t, "")
	breakers := NewBreakers(2*time.Second, 1)
	var down atomic.Bool
	down.Store(true)
	var fx effects
	var attempts atomic.Int64
	run(t, conn, func(ctx context.Context, ev Event) error {
		attempts.Add(1)
		return ev.Call(ctx, "instantly", func(context.Context) error {
			if down.CompareAndSwap(true, false) { // one real failure opens the breaker
				return retry.Transiently("instantly", errors.New("503 unavailable"))
			}
			fx.add(ev.Envelope.ID)
			return nil
		})
	}, func(o *Options) { o.Breakers = breakers })
	id := publish(t, conn, 1)[0]
	waitFor(t, "completed after the breaker closed", func() bool { return status(t, conn, id).Status == guard.Completed })
	if n := attempts.Load(); n <= int64(sub.MaxDeliver) {
		t.Fatalf("%d attempts: the breaker was not refusing long enough to test anything", n)
	}
	if n := brokertest.Count(t, conn, stream.DLQ); n != 0 || fx.get(id) != 1 {
		t.Fatalf("%d dead letters, %d effects", n, fx.get(id))
	}
}

// Only a dependency that does not answer trips its breaker: permanent errors, 429s and
// calls that never left (their rate limit's wait ran out) leave it closed; timeouts and
// 5xx open it.
func TestBreakerTripsOnlyOnADependencyThatDoesNotAnswer(t *testing.T) {
	b := NewBreakers(time.Minute, 3)
	for _, err := range []error{
		retry.Permanently("hubspot", errors.New("400")),
		&retry.Error{Class: retry.Transient, Dependency: "hubspot", Status: 429},
		&retry.Error{Class: retry.Transient, Dependency: "hubspot", Unsent: true, Err: context.DeadlineExceeded},
	} {
		for range 5 {
			b.call("hubspot", func() error { return err })
		}
		if s := b.State("hubspot"); s != gobreaker.StateClosed {
			t.Fatalf("%v five times opened the breaker (%v)", err, s)
		}
	}
	for range 3 {
		b.call("hubspot", func() error { return &retry.Error{Class: retry.Transient, Dependency: "hubspot", Status: 503} })
	}
	if s := b.State("hubspot"); s != gobreaker.StateOpen {
		t.Fatalf("three 503s in a row left the breaker %v", s)
	}
}

// An attempt whose derived events are still being committed does not hold its worker,
// and is completed and acked only once they are stored; one that cannot be stored
// comes back.
func TestSettledOnlyOnceDerivedEventsAreStored(t *testing.T) {
	conn := brokertest.Start(t, "")
	ctx := context.Background()
	d, err := NewDeriver(ctx, conn.JS)
	if err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{})
	var failOnce sync.Map // derived ids whose first commit fails
	d.Via(func(ctx context.Context, msg *nats.Msg) (func() (bool, error), error) {
		id := msg.Header.Get(jetstream.MsgIDHeader)
		return func() (bool, error) {
			select {
			case <-gate:
			case <-ctx.Done():
				return false, ctx.Err()
			}
			if _, first := failOnce.LoadAndDelete(id); first {
				return false, errors.New("commit refused")
			}
			return false, nil
		}, nil
	})
	var fx effects
	run(t, conn, func(ctx context.Context, ev Event) error {
		fx.add(ev.Envelope.ID)
		return d.Publish(ctx, envelope.Derive(ev.Envelope, "testworker", envelope.TypeReplyClassified, envelope.Data{}, time.Now()))
	}, func(o *Options) { o.Workers = 1 })
	ids := publish(t, conn, 3)
	failOnce.Store(envelope.Derive(envelope.Envelope{ID: ids[0], Tenant: "acme"}, "testworker", envelope.TypeReplyClassified, envelope.Data{}, time.Now()).ID, true)
	waitFor(t, "one worker to take all three events while none is settled", func() bool {
		return fx.get(ids[0]) == 1 && fx.get(ids[1]) == 1 && fx.get(ids[2]) == 1
	})
	c, err := conn.JS.Consumer(ctx, stream.Events, sub.Durable)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids { // claimed (processing), or new to the consumer: no record yet
		if rec := status(t, conn, id); rec.Status == guard.Completed {
			t.Fatalf("%s is %q before its derived event is stored", id, rec.Status)
		}
	}
	if info, err := c.Info(ctx); err != nil || info.NumAckPending != 3 {
		t.Fatalf("acked before settled: %d pending acks (%v)", info.NumAckPending, err)
	}
	close(gate)
	waitFor(t, "every event completed, the first after a second attempt", func() bool {
		for _, id := range ids {
			if status(t, conn, id).Status != guard.Completed {
				return false
			}
		}
		return true
	})
	if fx.get(ids[0]) != 2 || fx.get(ids[1]) != 1 || fx.get(ids[2]) != 1 {
		t.Fatalf("handler calls %d %d %d, want 2 1 1", fx.get(ids[0]), fx.get(ids[1]), fx.get(ids[2]))
	}
	waitFor(t, "every ack sent", func() bool {
		info, err := c.Info(ctx)
		return err == nil && info.NumAckPending == 0 && info.NumPending == 0
	})
}

// On one embedded node the consumer's state is in the server's memory: after the server
// restarts, the consumer starts again after its checkpointed ack floor, and a consumer
// left on disk by an earlier version moves to memory after its ack floor.
func TestConsumerStartsAgainAfterItsCheckpoint(t *testing.T) {
	ctx := context.Background()
	for _, onDiskFirst := range []bool{false, true} {
		t.Run(fmt.Sprint("on disk first: ", onDiskFirst), func(t *testing.T) {
			dir := t.TempDir()
			conn := brokertest.Start(t, dir)
			withCheckpoints := func(conn *broker.Conn) func(*Options) {
				kv, err := conn.JS.KeyValue(ctx, stream.ConsumerCheckpoints)
				if err != nil {
					t.Fatal(err)
				}
				return func(o *Options) { o.Checkpoints = kv }
			}
			var fx effects
			h := func(ctx context.Context, ev Event) error { fx.add(ev.Envelope.ID); return nil }
			completed := func(conn *broker.Conn, ids []string) func() bool {
				return func() bool {
					for _, id := range ids {
						if status(t, conn, id).Status != guard.Completed {
							return false
						}
					}
					return true
				}
			}
			first := publish(t, conn, 5)
			tune := []func(*Options){}
			if !onDiskFirst {
				tune = append(tune, withCheckpoints(conn))
			}
			stop := run(t, conn, h, tune...)
			waitFor(t, "the first five completed", completed(conn, first))
			if !onDiskFirst {
				kv, _ := conn.JS.KeyValue(ctx, stream.ConsumerCheckpoints)
				waitFor(t, "the checkpoint at the fifth event", func() bool {
					seq, err := checkpointOf(ctx, kv, sub.Durable)
					return err == nil && seq == 5
				})
			} else {
				waitFor(t, "every ack sent", func() bool {
					c, err := conn.JS.Consumer(ctx, stream.Events, sub.Durable)
					return err == nil && c.CachedInfo().AckFloor.Stream == 5
				})
			}
			stop()
			c, err := conn.JS.Consumer(ctx, stream.Events, sub.Durable)
			if err != nil || c.CachedInfo().Config.MemoryStorage == onDiskFirst {
				t.Fatalf("consumer %+v, %v: want its state in memory %v", c, err, !onDiskFirst)
			}
			if !onDiskFirst { // the server restarts: a consumer in memory is gone
				conn.Close()
				conn = brokertest.Start(t, dir)
				if _, err := conn.JS.Consumer(ctx, stream.Events, sub.Durable); !errors.Is(err, jetstream.ErrConsumerNotFound) {
					t.Fatalf("consumer after the restart: %v", err)
				}
			}
			later := publishFrom(t, conn, 5, 3)
			run(t, conn, h, withCheckpoints(conn))
			waitFor(t, "the three later events completed", completed(conn, later))
			c, err = conn.JS.Consumer(ctx, stream.Events, sub.Durable)
			if err != nil {
				t.Fatal(err)
			}
			if cfg := c.CachedInfo().Config; !cfg.MemoryStorage || cfg.DeliverPolicy != jetstream.DeliverByStartSequencePolicy || cfg.OptStartSeq != 6 {
				t.Fatalf("consumer bound with memory %v, policy %v, start %d: want in memory from the 6th event", cfg.MemoryStorage, cfg.DeliverPolicy, cfg.OptStartSeq)
			}
			for _, id := range append(first, later...) {
				if fx.get(id) != 1 {
					t.Fatalf("%s handled %d times", id, fx.get(id))
				}
			}
		})
	}
}

// A consumer made again after a restart keeps the pause its replays consumer (on
// disk) kept, and never starts past the stream's last event (a lazy-sync cut can take
// the stream's tail and leave a checkpoint above it).
func TestRecreatedConsumerKeepsItsPauseAndStaysWithinTheStream(t *testing.T) {
	ctx := context.Background()
	conn := brokertest.Start(t, "")
	publish(t, conn, 3)
	kv, err := conn.JS.KeyValue(ctx, stream.ConsumerCheckpoints)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, sub.Durable, []byte("100")); err != nil {
		t.Fatal(err)
	}
	until := time.Now().Add(time.Hour).UTC()
	if _, err := conn.JS.CreateOrUpdateConsumer(ctx, stream.Replays, jetstream.ConsumerConfig{Durable: replays(sub.Durable), AckPolicy: jetstream.AckExplicitPolicy, PauseUntil: &until}); err != nil {
		t.Fatal(err)
	}
	c, err := Bind(ctx, conn.JS, stream.Events, sub.ConsumerConfig(), kv)
	if err != nil {
		t.Fatal(err)
	}
	info := c.CachedInfo()
	if !info.Config.MemoryStorage || info.Config.OptStartSeq != 4 {
		t.Errorf("made with memory %v from %d: want in memory from 4 (the stream ends at 3)", info.Config.MemoryStorage, info.Config.OptStartSeq)
	}
	if !info.Paused || info.Config.PauseUntil == nil || !info.Config.PauseUntil.Equal(until) {
		t.Errorf("paused %v until %v: want until %v, as its replays consumer", info.Paused, info.Config.PauseUntil, until)
	}
	if ran, err := Ran(ctx, conn.JS, sub.Durable); err != nil || !ran {
		t.Errorf("Ran: %v %v", ran, err)
	}
	if err := conn.JS.DeleteConsumer(ctx, stream.Events, sub.Durable); err != nil {
		t.Fatal(err)
	}
	if ran, err := Ran(ctx, conn.JS, "nobody"); err != nil || ran {
		t.Errorf("Ran of a consumer that never was: %v %v", ran, err)
	}
	if ran, err := Ran(ctx, conn.JS, sub.Durable); err != nil || !ran {
		t.Errorf("Ran of a consumer gone with its checkpoint kept: %v %v", ran, err)
	}
}

// An event stored after its consumer was made, on its first delivery to a runner alone
// on its consumer, cannot be attempted by anything else: its attempt reads its record
// (none) instead of claiming it, and writes one record, completed, when it ends. An
// event stored before the consumer was made (a backlog: a consumer made again after a
// restart) is claimed, as is every redelivery. A second copy of the new event (stored
// twice, past the duplicate window) waits while the first is under way, then finds it
// completed.
func TestFirstDeliveryOfANewEventClaimsNothing(t *testing.T) {
	conn := brokertest.Start(t, "")
	backlog := publishFrom(t, conn, 100, 1) // stored before the consumer exists
	entered := make(chan string, 8)
	gates := map[string]chan struct{}{}
	var mu sync.Mutex
	gate := func(id string) chan struct{} {
		mu.Lock()
		defer mu.Unlock()
		if gates[id] == nil {
			gates[id] = make(chan struct{})
		}
		return gates[id]
	}
	var fx effects
	sp := &Solo{}
	stop := run(t, conn, func(ctx context.Context, ev Event) error {
		fx.add(ev.Envelope.ID)
		entered <- ev.Envelope.ID
		select {
		case <-gate(ev.Envelope.ID):
		case <-ctx.Done():
		}
		return nil
	}, func(o *Options) { o.Workers, o.Solo = 2, sp })
	t.Cleanup(func() {
		mu.Lock()
		for _, g := range gates {
			select {
			case <-g:
			default:
				close(g)
			}
		}
		mu.Unlock()
		stop()
	})
	waitAlone(t, sp) // alone on its consumer: nothing else can attempt its events
	if id := <-entered; id != backlog[0] {
		t.Fatalf("first attempt at %s", id)
	}
	if rec := status(t, conn, backlog[0]); rec.Status != guard.Processing {
		t.Fatalf("an event of the backlog while it is attempted: %q, want claimed (processing)", rec.Status)
	}
	close(gate(backlog[0]))
	ids := publish(t, conn, 1) // stored after the consumer was made
	if id := <-entered; id != ids[0] {
		t.Fatalf("second attempt at %s", id)
	}
	if rec := status(t, conn, ids[0]); rec.Status != "" {
		t.Fatalf("a new event while it is attempted: %q, want no record", rec.Status)
	}
	// The same event stored again (another Nats-Msg-Id): it must not run beside the first.
	env := envelope.Envelope{SpecVersion: "1.0", ID: ids[0], Type: envelope.TypeReplyReceived, Tenant: "acme", Provider: "instantly", Endpoint: "ep", Time: time.Now()}
	data, _ := json.Marshal(env)
	msg := &nats.Msg{Subject: env.StreamSubject(), Data: data, Header: nats.Header{}}
	msg.Header.Set(jetstream.MsgIDHeader, ids[0]+"-again")
	if _, err := conn.JS.PublishMsg(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the copy is delivered to the second worker meanwhile
	if n := fx.get(ids[0]); n != 1 {
		t.Fatalf("the new event ran %d times while its first attempt was under way", n)
	}
	close(gate(ids[0]))
	waitFor(t, "both completed", func() bool {
		return status(t, conn, ids[0]).Status == guard.Completed && status(t, conn, backlog[0]).Status == guard.Completed
	})
	if rec := status(t, conn, ids[0]); rec.Attempts != 1 || rec.FirstAttempt.IsZero() {
		t.Fatalf("record of the new event: %+v", rec)
	}
	waitFor(t, "the copy acked", func() bool {
		c, err := conn.JS.Consumer(context.Background(), stream.Events, sub.Durable)
		return err == nil && c.CachedInfo().NumAckPending == 0 && c.CachedInfo().NumPending == 0
	})
	if n := fx.get(ids[0]); n != 1 {
		t.Fatalf("the new event ran %d times: its copy was not skipped", n)
	}
}

// An urgent consumer is behind when its events wait, undelivered at the server or
// delivered to this process and not yet taken by a worker (prefetched): the others then
// defer to it, and go on once that has been low for a while. Events its workers handle
// count too, but only while the process uses most of its cores: a slow platform, not
// the cores, is what holds them otherwise.
func TestPrecedenceCountsWhatWaitsInTheProcess(t *testing.T) {
	reader := metricsReader()
	deferredFor := func() float64 { return metricSum[float64](t, reader, "exacto_consumer_deferred_seconds", sub.Durable) }
	var waiting, handling atomic.Int64
	var used atomic.Uint64            // percent of the cores
	none := func() int64 { return 0 } // nothing held at a dependency's gate
	p, _ := watching(t, inHand{waiting.Load, handling.Load, none}, func() (float64, bool) { return float64(used.Load()) / 100, true })
	stillBehind := func(what string) {
		t.Helper()
		time.Sleep(caughtUpFor + 3*precedenceEvery)
		if !p.Behind() {
			t.Fatalf("caught up %s", what)
		}
	}
	caughtUp := func(what string) {
		t.Helper()
		calm := time.Now()
		waitFor(t, what, func() bool { return !p.Behind() })
		if d := time.Since(calm); d < caughtUpFor-2*precedenceEvery {
			t.Fatalf("%s %v after it calmed, want %v of calm first", what, d, caughtUpFor)
		}
	}

	used.Store(50)                  // the cores in use, not short
	waiting.Store(urgentBehind + 1) // nothing undelivered: all of it prefetched here
	waitFor(t, "behind", p.Behind)
	waiting.Store(urgentBehind / 2)
	stillBehind("with more than a few still waiting for a worker")
	waiting.Store(0)
	caughtUp("caught up once nothing waits")
	// The time the others deferred is told: behind for the wait above and a second of calm.
	held := deferredFor()
	if held < caughtUpFor.Seconds()+0.5 {
		t.Fatalf("exacto_consumer_deferred_seconds %.2f after more than %v behind", held, caughtUpFor+caughtUpFor/2)
	}

	// In its workers' hands, none waiting, the cores idle: a slow platform. No one defers.
	handling.Store(urgentBehind + 1)
	used.Store(10)
	time.Sleep(3 * precedenceEvery)
	if p.Behind() {
		t.Fatal("behind with its events in its workers' hands while the cores are idle")
	}
	if now := deferredFor(); now != held {
		t.Fatalf("exacto_consumer_deferred_seconds went from %.2f to %.2f while no one deferred", held, now)
	}
	// The same with the cores busy: behind, for as long as they are.
	used.Store(90)
	waitFor(t, "behind while the cores are busy", p.Behind)
	stillBehind("while the cores are busy and it holds many")
	// The cores no longer short (though not idle): what it holds is its platforms' wait.
	used.Store(60)
	caughtUp("caught up once the cores are no longer short")
	// Busy again, then its hands empty: caught up however busy the cores.
	used.Store(95)
	waitFor(t, "behind again", p.Behind)
	handling.Store(urgentCaughtUp - 1)
	caughtUp("caught up with little in hand")
}

// An urgent consumer whose events wait does not fall behind while the process leaves
// its cores idle (idle cores do not end a time behind: the deferral may idle them), and
// is not behind while most of what its workers hold waits at a dependency's gate (a
// platform down, its breaker open, a Retry-After).
func TestPrecedenceLeavesOutWhatDeferringCannotHelp(t *testing.T) {
	var waiting, handling, gated atomic.Int64
	var used atomic.Uint64 // percent of the cores
	p, _ := watching(t, inHand{waiting.Load, handling.Load, gated.Load}, func() (float64, bool) { return float64(used.Load()) / 100, true })
	steady := func(behind bool, what string) {
		t.Helper()
		for range 3 * int(caughtUpFor/precedenceEvery) / 2 {
			if p.Behind() != behind {
				t.Fatalf("behind %v %s", !behind, what)
			}
			time.Sleep(precedenceEvery)
		}
	}

	waiting.Store(urgentBehind + 1)
	handling.Store(urgentCaughtUp)
	used.Store(10)
	steady(false, "with its events waiting while the cores are idle")
	used.Store(50) // in use, not short: what waits is the cores' doing
	waitFor(t, "behind once the cores are in use", p.Behind)
	used.Store(10)
	steady(true, "once the cores went idle with the others deferred")

	used.Store(90)
	gated.Store(urgentCaughtUp / 2) // half of what it holds waits for its breaker
	held := time.Now()
	waitFor(t, "not behind once its dependencies hold it", func() bool { return !p.Behind() })
	if d := time.Since(held); d < 2*caughtUpFor-3*precedenceEvery {
		t.Fatalf("not behind %v after its dependencies held it, want a second held and a second more", d)
	}
	steady(false, "while its dependencies hold it, however busy the cores")
	gated.Store(urgentCaughtUp/2 - 1) // most of it held by the cores again
	waitFor(t, "behind again once the cores hold most of it", p.Behind)
	handling.Store(0) // nothing in hand: nothing held at a gate either
	steady(true, "with nothing in hand and more than a few waiting on busy cores")
}

// A platform down holds the urgent consumer's workers without using a core (each waits
// for the breaker with the event it took): the others go on at full speed meanwhile,
// not one event per deferredPace per worker for as long as the outage lasts — even with
// the cores busy (as the test has them), where only the breaker's wait tells it.
func TestAnUrgentConsumerHeldByItsPlatformHoldsNoOneBack(t *testing.T) {
	processShare = func() func() (float64, bool) { return func() (float64, bool) { return 0.9, true } }
	t.Cleanup(func() { processShare = coreShare })
	conn := brokertest.Start(t, "")
	urgent := sub
	urgent.Durable, urgent.Urgent, urgent.AckWait, urgent.MaxDeliver = "testurgent", true, 30*time.Second, 10
	var p Precedence
	const n = 5 * (1 + prefetch) * 4 // four urgent workers hold one event each, and their pulls more
	publish(t, conn, n)
	var calls atomic.Int64
	run(t, conn, func(ctx context.Context, ev Event) error {
		return ev.Call(ctx, "instantly", func(context.Context) error {
			calls.Add(1)
			return retry.Transiently("instantly", errors.New("503 service unavailable"))
		})
	}, func(o *Options) {
		o.Sub, o.Workers, o.Precedence = urgent, 4, &p
		o.Dependencies, o.Breakers = On("instantly"), NewBreakers(time.Minute, 3)
	})
	waitFor(t, "the breaker open", func() bool { return calls.Load() >= 3 })
	// Behind at first (its events wait on busy cores), then not once its workers have
	// waited for the breaker for a second and a second more; before the rule, for ever.
	waitFor(t, "behind with its events waiting on busy cores", p.Behind)
	waitFor(t, "not behind while its platform holds its workers", func() bool { return !p.Behind() })
	othersGoOn(t, conn, &p, n)
}

// othersGoOn runs another consumer of the n events on conn beside p's urgent one and
// wants them handled with p never behind meanwhile.
func othersGoOn(t *testing.T, conn *broker.Conn, p *Precedence, n int64) {
	t.Helper()
	var handled atomic.Int64
	var deferred atomic.Bool
	run(t, conn, func(ctx context.Context, ev Event) error {
		handled.Add(1)
		return nil
	}, func(o *Options) { o.Workers, o.Precedence = 2, p })
	// Deferred, its two workers would take one event each per deferredPace: minutes.
	waitFor(t, "the other consumer's events handled", func() bool {
		deferred.Store(deferred.Load() || p.Behind())
		return handled.Load() == n
	})
	if deferred.Load() {
		t.Fatal("the others deferred to an urgent consumer its platform holds")
	}
}

// A platform that answers slowly holds the urgent consumer's workers waiting for its
// answers, not on the cores: the others go on at full speed meanwhile, even with the
// cores busy (as the test has them), where only the answers' wait tells it.
func TestASlowPlatformHoldsOnlyItsUrgentConsumer(t *testing.T) {
	processShare = func() func() (float64, bool) { return func() (float64, bool) { return 0.9, true } }
	t.Cleanup(func() { processShare = coreShare })
	conn := brokertest.Start(t, "")
	platform := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select { // an answer a second later: a backlog of half a minute for four workers
		case <-time.After(time.Second):
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(platform.Close)
	urgent := sub
	urgent.Durable, urgent.Urgent, urgent.AckWait = "testurgent", true, 30*time.Second
	var p Precedence
	const n = 5 * (1 + prefetch) * 4 // four urgent workers hold one event each, and their pulls more
	publish(t, conn, n)
	run(t, conn, func(ctx context.Context, ev Event) error {
		return ev.Call(ctx, "instantly", func(ctx context.Context) error {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, platform.URL, nil)
			if err != nil {
				return err
			}
			resp, err := platform.Client().Do(req)
			if err != nil {
				return err
			}
			return resp.Body.Close()
		})
	}, func(o *Options) {
		o.Sub, o.Workers, o.Precedence = urgent, 4, &p
		o.Dependencies, o.Breakers = On("instantly"), NewBreakers(time.Minute, 3)
	})
	waitFor(t, "behind with its events waiting on busy cores", p.Behind)
	waitFor(t, "not behind while its platform's answers hold its workers", func() bool { return !p.Behind() })
	othersGoOn(t, conn, &p, n)
}

// A request counts as waiting for a slow platform once its answer has taken longer
// than slowCall, or at once when its dependency's last answer did; never for the time
// before it was sent (the account's rate limit, which the others' calls may spend).
func TestSlowRequestsCountFromWhenTheyAreSent(t *testing.T) {
	answerIn := make(chan time.Duration, 1)
	platform := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(<-answerIn):
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(platform.Close)
	calls := newCallsInFlight()
	call := func(before, answer time.Duration) (slowSeen int64) {
		ctx, end := calls.trace(context.Background(), "instantly")
		defer end()
		done := make(chan struct{})
		go func() {
			defer close(done)
			time.Sleep(before) // a wait before the request, as for a rate limit
			answerIn <- answer
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, platform.URL, nil)
			if resp, err := platform.Client().Do(req); err == nil {
				resp.Body.Close()
			}
		}()
		for {
			select {
			case <-done:
				return slowSeen
			case <-time.After(10 * time.Millisecond):
				slowSeen = max(slowSeen, calls.slow(slowCall))
			}
		}
	}
	if n := call(2*slowCall, 0); n != 0 {
		t.Fatalf("a call that waited %v before its request, answered at once, counted slow (%d)", 2*slowCall, n)
	}
	if n := call(0, 2*slowCall); n != 1 {
		t.Fatalf("a request answered in %v never counted slow (%d)", 2*slowCall, n)
	}
	waited := calls.await("instantly") // another worker's question, answered for both
	if n := calls.slow(slowCall); n != 1 {
		t.Fatalf("a wait for another worker's request to a slow dependency did not count (%d)", n)
	}
	waited()
	_, end := calls.trace(context.Background(), "instantly") // no request out yet
	if n := calls.slow(slowCall); n != 1 {
		t.Fatalf("a call to a dependency whose last answer was slow did not count before its request (%d)", n)
	}
	end()
	if n := call(0, slowCall/4); n != 1 {
		t.Fatalf("a request to a dependency whose last answer was slow did not count at once (%d)", n)
	}
	if n := call(0, slowCall/4); n != 0 {
		t.Fatalf("a request after a quick answer counted slow (%d)", n)
	}
	if n := calls.slow(0); n != 0 {
		t.Fatalf("%d requests still counted out after every call ended", n)
	}
	// A hook of net/http's that runs after its call ended (an HTTP/2 write cut short)
	// leaves nothing counted out.
	ctx, end := calls.trace(context.Background(), "instantly")
	end()
	httptrace.ContextClientTrace(ctx).GetConn("instantly.example:443")
	httptrace.ContextClientTrace(ctx).GotFirstResponseByte()
	if n := calls.slow(0); n != 0 {
		t.Fatalf("a request made after its call ended counted out (%d)", n)
	}
}

// A parked event is tried once its dependency's breaker is closed; of the events parked
// while it was open, one only probes it half-open (it takes one call: the others would
// be refused, each spending an attempt), and another only once it opened again and
// waited its time out.
func TestAHalfOpenBreakerLetsOneParkedEventThrough(t *testing.T) {
	b := NewBreakers(100*time.Millisecond, 1)
	down := retry.Transiently("instantly", errors.New("503 service unavailable"))
	if !b.mayTry("instantly") {
		t.Fatal("a closed breaker kept a parked event back")
	}
	_ = b.call("instantly", func() error { return down })
	if b.mayTry("instantly") {
		t.Fatal("an open breaker let a parked event through")
	}
	time.Sleep(150 * time.Millisecond) // half-open
	if !b.mayTry("instantly") || b.mayTry("instantly") {
		t.Fatal("a half-open breaker did not let exactly one parked event through")
	}
	_ = b.call("instantly", func() error { return down }) // the probe fails: open again
	time.Sleep(150 * time.Millisecond)
	if !b.mayTry("instantly") || b.mayTry("instantly") {
		t.Fatal("half-open again, the breaker did not let exactly one more probe through")
	}
	_ = b.call("instantly", func() error { return nil }) // the probe answers: closed
	if first, second := b.mayTry("instantly"), b.mayTry("instantly"); !first || !second {
		t.Fatal("a closed breaker kept parked events back")
	}
}

// watching binds sub's consumer on a server of its own and watches it for a Precedence
// of its own, held and share standing for the process, until the test ends.
func watching(t *testing.T, held inHand, share func() (float64, bool)) (*Precedence, *broker.Conn) {
	t.Helper()
	conn := brokertest.Start(t, "")
	ctx, cancel := context.WithCancel(context.Background())
	c, err := conn.JS.CreateOrUpdateConsumer(ctx, stream.Events, sub.ConsumerConfig())
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	p := &Precedence{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.watch(ctx, sub.Durable, func() jetstream.Consumer { return c }, held, share)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return p, conn
}

// A paused urgent consumer is not behind, however many of its events wait: they wait
// for the operator, and the others must not crawl for as long as the pause lasts.
func TestPrecedenceLeavesAPausedConsumerOut(t *testing.T) {
	none := func() int64 { return 0 }
	p, conn := watching(t, inHand{none, none, none}, func() (float64, bool) { return 0.5, true })
	publish(t, conn, urgentBehind+4) // undelivered: no runner takes them
	ctx := context.Background()
	waitFor(t, "behind with its events undelivered", p.Behind)
	if _, err := conn.JS.PauseConsumer(ctx, stream.Events, sub.Durable, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "not behind once paused", func() bool { return !p.Behind() })
	time.Sleep(3 * precedenceEvery)
	if p.Behind() {
		t.Fatal("behind again while paused")
	}
	if _, err := conn.JS.ResumeConsumer(ctx, stream.Events, sub.Durable); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "behind again once resumed", p.Behind)
}

// coreShare tells the share of the cores the process used since its last call: its CPU
// time over the wall time of all its cores.
func TestCoreShareFollowsTheProcess(t *testing.T) {
	if _, ok := processCPU(); !ok {
		t.Skip("the process's CPU time is not known on this system")
	}
	share := coreShare()
	cpu0, _ := processCPU()
	began := time.Now()
	for time.Since(began) < 300*time.Millisecond { // a core spinning, as far as the machine lets it
	}
	got, ok := share()
	cpu1, _ := processCPU()
	want := float64(cpu1-cpu0) / (float64(time.Since(began)) * float64(runtime.GOMAXPROCS(0)))
	if !ok || got <= 0 || math.Abs(got-want) > 0.1 {
		t.Fatalf("share %.3f (known %v), want about %.3f", got, ok, want)
	}
}

// An event an erasure made (about a forgotten person, or rewritten) is left alone by
// every consumer but one that takes them (the projector): it is completed without a
// call to the handler.
func TestErasedEventsAreLeftAlone(t *testing.T) {
	t.Parallel()
	conn := brokertest.Start(t, "")
	ids := publishFor(t, conn, 2, func(i int) string { return fmt.Sprintf("lead%d@example.com", i) })
	anon := "an_" + strings.Repeat("ab", 16)
	erased := envelope.Envelope{SpecVersion: "1.0", ID: envelope.ID("acme", "instantly", "erased"), Type: envelope.TypeReplyReceived,
		Tenant: "acme", Provider: "instantly", Endpoint: "ep", Time: time.Now(), Erasure: anon,
		Data: envelope.Data{Contact: &envelope.Contact{Anonymous: anon}}}
	msg, err := stream.EventMessage(context.Background(), erased)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := conn.JS.PublishMsg(context.Background(), msg)
	if err != nil {
		t.Fatal(err)
	}
	// A copy an erasure stored in place of an event: its guard record is the original's.
	erasedCopy := erased
	erasedCopy.ID = envelope.ID("acme", "instantly", "copy")
	msg, _ = stream.EventMessage(context.Background(), erasedCopy)
	msg.Header.Del(jetstream.MsgIDHeader)
	msg.Header.Set(privacy.ErasedFromHeader, "1")
	if _, err := conn.JS.PublishMsg(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
	for _, takes := range []bool{false, true} {
		var calls effects
		s := sub
		s.Durable, s.Forgotten = fmt.Sprint("erasure-", takes), takes
		run(t, conn, func(ctx context.Context, ev Event) error { calls.add(ev.Envelope.ID); return nil }, func(o *Options) { o.Sub = s })
		waitFor(t, "both events handled", func() bool { return calls.get(ids[0]) == 1 && calls.get(ids[1]) == 1 })
		kv, _ := conn.JS.KeyValue(context.Background(), stream.Guards)
		waitFor(t, "the erased event completed", func() bool {
			rec, _, err := NewStatuses(conn.JS, kv).OfEvent(context.Background(), s, erased, stored.Sequence)
			return err == nil && rec.Status == guard.Completed
		})
		if n := calls.get(erased.ID); (n == 1) != takes {
			t.Errorf("Forgotten %v: the erased event was handled %d times", takes, n)
		}
		if !takes {
			waitFor(t, "every event acked", func() bool {
				info, err := conn.JS.Consumer(context.Background(), stream.Events, s.Durable)
				if err != nil {
					return false
				}
				i, err := info.Info(context.Background())
				return err == nil && i.NumPending == 0 && i.NumAckPending == 0
			})
			if rec, _, err := guard.Status(context.Background(), kv, s.Durable, erasedCopy.ID); err != nil || rec.Status != "" || calls.get(erasedCopy.ID) != 0 {
				t.Errorf("the erased copy: guard record %+v (%v), handled %d times; want none", rec, err, calls.get(erasedCopy.ID))
			}
		}
	}
}

// An event waits for a worker only while every worker is busy: one slow attempt does
// not hold back the events its worker's pull fetched after it (prefetch at a time)
// while another worker is idle. With a platform that answers in 50 ms this took about
// 30% off the stops' p99 (docs/performance.md, "One queue per consumer"). The held
// attempt's 3 s stay under sub's ack wait, so no redelivery hides the wait.
func TestAnIdleWorkerTakesWhatABusyOneFetched(t *testing.T) {
	conn := brokertest.Start(t, "")
	ids := publish(t, conn, 1+4*prefetch)
	held := make(chan struct{}) // closed once every other event is handled
	var others, late atomic.Int64
	var firstEnded atomic.Bool
	run(t, conn, func(ctx context.Context, ev Event) error {
		if ev.Envelope.ID == ids[0] {
			select {
			case <-held:
			case <-time.After(3 * time.Second):
			}
			firstEnded.Store(true)
			return nil
		}
		if firstEnded.Load() {
			late.Add(1) // it waited for the slow attempt
		}
		if others.Add(1) == int64(len(ids)-1) {
			close(held)
		}
		return nil
	})
	waitFor(t, "every event handled", func() bool { return firstEnded.Load() && others.Load() == int64(len(ids)-1) })
	if n := late.Load(); n > 0 {
		t.Fatalf("%d events waited for the slow attempt while the other worker was idle", n)
	}
}
