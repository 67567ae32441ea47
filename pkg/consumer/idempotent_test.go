package consumer

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"

	"exacto.dev/pkg/broker"
	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/guard"
	"exacto.dev/pkg/privacy"
	"exacto.dev/pkg/retry"
	"exacto.dev/pkg/stream"
)

// An idempotent subscription claims nothing and records only what is not plain
// success: a first success writes no guard record, no contact lease and no outcome,
// and is completed in consumer.Status once the ack floor passes it; a failure is
// recorded, and so is the success after it; a dead letter is recorded as one.
func TestIdempotentSubscriptionRecordsOnlyWhatIsNotPlainSuccess(t *testing.T) {
	conn := brokertest.Start(t, "")
	ctx := context.Background()
	isub := sub
	isub.Durable, isub.Idempotent = "idempotent", true
	ids := publishFor(t, conn, 3, func(int) string { return "lead@example.com" })
	plain, flaky, broken := ids[0], ids[1], ids[2]
	var fx effects
	run(t, conn, func(ctx context.Context, ev Event) error {
		n := fx.add(ev.Envelope.ID)
		switch {
		case ev.Envelope.ID == flaky && n < 2:
			return retry.Transiently("hubspot", errors.New("503"))
		case ev.Envelope.ID == broken:
			return retry.Permanently("hubspot", errors.New("400"))
		}
		return nil
	}, func(o *Options) { o.Sub = isub })
	guards, err := conn.JS.KeyValue(ctx, stream.Guards)
	if err != nil {
		t.Fatal(err)
	}
	statusOf := func(id string, seq uint64) (guard.Record, bool) {
		rec, ok, err := Status(ctx, conn.JS, guards, isub, "acme", id, seq)
		if err != nil {
			t.Fatal(err)
		}
		return rec, ok
	}
	waitFor(t, "every event settled", func() bool {
		rec, _ := statusOf(broken, 3)
		c, err := conn.JS.Consumer(ctx, stream.Events, isub.Durable)
		return err == nil && rec.Status == guard.DeadLetter && c.CachedInfo().AckFloor.Stream == 3
	})
	if _, ok, _ := guard.Status(ctx, guards, isub.Durable, plain); ok {
		t.Fatal("a first success wrote a guard record")
	}
	if rec, ok := statusOf(plain, 1); !ok || rec.Status != guard.Completed {
		t.Fatalf("the plain success: %+v %v", rec, ok)
	}
	if rec, ok, _ := guard.Status(ctx, guards, isub.Durable, flaky); !ok || rec.Status != guard.Completed || rec.Attempts != 2 {
		t.Fatalf("the success after a failure is recorded as %+v %v", rec, ok)
	}
	if n := brokertest.Count(t, conn, stream.DLQ); n != 1 {
		t.Fatalf("%d dead letters", n)
	}
	// Nothing of the plain success in the outcomes; no lease was ever taken.
	for _, o := range outcomesOf(t, conn, plain) {
		t.Fatalf("outcome of the plain success: %+v", o)
	}
	if n := brokertest.Count(t, conn, "KV_"+stream.ContactLocks); n != 0 {
		t.Fatalf("%d contact lease writes", n)
	}
	// Before its consumer's ack floor passes it, an event it holds no record of is
	// received (not attempted yet).
	if _, ok := statusOf("ev_not_yet", 4); ok {
		t.Fatal("an event past the ack floor is told done")
	}
}

// An event the handler makes no effect of (Options.Acts false) claims nothing: no
// guard read before it, no outcome of its plain success, and one guard record written
// when it ends, completed, so that Status tells it as before; its failure is recorded
// and told, and so is the success after it; the event acted on is as it was.
func TestEventsTheHandlerDoesNotActOnClaimNothing(t *testing.T) {
	conn := brokertest.Start(t, "")
	ctx := context.Background()
	ids := publishFor(t, conn, 3, func(int) string { return "lead@example.com" })
	acted, idle, flaky := ids[0], ids[1], ids[2]
	reads, writes := guardTraffic(t, conn)
	var fx effects
	run(t, conn, func(ctx context.Context, ev Event) error {
		if n := fx.add(ev.Envelope.ID); ev.Envelope.ID == flaky && n < 2 {
			return retry.Transiently("hubspot", errors.New("503"))
		}
		return nil
	}, func(o *Options) { o.Acts = func(env envelope.Envelope) bool { return env.ID == acted } })
	guards, err := conn.JS.KeyValue(ctx, stream.Guards)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every event settled", func() bool {
		c, err := conn.JS.Consumer(ctx, stream.Events, sub.Durable)
		return err == nil && c.CachedInfo().AckFloor.Stream == 3
	})
	// The event not acted on: no record, neither read nor written; the one acted on was
	// claimed (created, then completed).
	acts, idles := guard.Key(sub.Durable, acted), guard.Key(sub.Durable, idle)
	if reads(idles) != 0 || writes(idles) != 0 || reads(acts)+writes(acts) < 2 {
		t.Fatalf("guard reads and writes: %d and %d of the event not acted on, %d and %d of the one acted on",
			reads(idles), writes(idles), reads(acts), writes(acts))
	}
	if rec, ok, err := Status(ctx, conn.JS, guards, sub, "acme", acted, 0); err != nil || !ok || rec.Status != guard.Completed || rec.Attempts != 1 {
		t.Fatalf("the event acted on is recorded as %+v %v %v", rec, ok, err)
	}
	// The one not acted on (stored second) is completed: past the ack floor, and, where
	// the service declared what its handler acts on, once delivered.
	if rec, ok, err := Status(ctx, conn.JS, guards, sub, "acme", idle, 2); err != nil || !ok || rec.Status != guard.Completed {
		t.Fatalf("the event not acted on reads %+v %v %v past the ack floor", rec, ok, err)
	}
	DeclareActs(sub.Name(), func(env envelope.Envelope) bool { return env.ID == acted })
	idleEnv := envelope.Envelope{ID: idle, Tenant: "acme", Provider: "instantly", Type: envelope.TypeReplyReceived}
	if rec, ok, err := NewStatuses(conn.JS, guards).OfEvent(ctx, sub, idleEnv, 2); err != nil || !ok || rec.Status != guard.Completed {
		t.Fatalf("the event not acted on reads %+v %v %v once delivered", rec, ok, err)
	}
	if rec, ok, _ := guard.Status(ctx, guards, sub.Durable, flaky); !ok || rec.Status != guard.Completed || rec.Attempts != 2 {
		t.Fatalf("the success after a failure is recorded as %+v %v", rec, ok)
	}
	waitFor(t, "the outcomes", func() bool { return len(outcomesOf(t, conn, acted)) == 1 && len(outcomesOf(t, conn, flaky)) == 2 })
	for _, o := range outcomesOf(t, conn, idle) {
		t.Fatalf("outcome of an event not acted on: %+v", o)
	}
	if n := fx.get(idle); n != 1 {
		t.Fatalf("the handler was called %d times for the event not acted on", n)
	}
}

// guardTraffic counts, by guard key, the reads (direct gets) and the writes of guard
// records this test's clients send the server from now on.
func guardTraffic(t *testing.T, conn *broker.Conn) (reads, writes func(key string) int) {
	t.Helper()
	var mu sync.Mutex
	got, put := map[string]int{}, map[string]int{}
	record := "$KV." + stream.Guards + "."
	count := func(m map[string]int, prefix string) nats.MsgHandler {
		return func(msg *nats.Msg) {
			mu.Lock()
			defer mu.Unlock()
			m[strings.TrimPrefix(msg.Subject, prefix)]++
		}
	}
	for subject, h := range map[string]nats.MsgHandler{
		"$JS.API.DIRECT.GET.KV_" + stream.Guards + ".>": count(got, "$JS.API.DIRECT.GET.KV_"+stream.Guards+"."+record),
		record + ">": count(put, record),
	} {
		s, err := conn.NC.Subscribe(subject, h)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Unsubscribe() })
	}
	if err := conn.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	of := func(m map[string]int) func(string) int {
		return func(key string) int {
			conn.NC.Flush()
			mu.Lock()
			defer mu.Unlock()
			return m[key]
		}
	}
	return of(got), of(put)
}

// Above the ack floor (held by an event still being retried) an idempotent consumer's
// event whose derived event is stored is completed: the classifier's reply with its
// reply.classified is not shown as received while an unsigned reply before it waits
// for its source.
func TestStatusAboveTheFloorByTheDerivedEvent(t *testing.T) {
	conn := brokertest.Start(t, "")
	ctx := context.Background()
	ids := publishFor(t, conn, 2, func(int) string { return "lead@example.com" })
	held, classified := ids[0], ids[1]
	index, err := conn.JS.KeyValue(ctx, stream.EventIndex)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := index.Put(ctx, stream.DerivedID("acme", stream.Classifier, envelope.TypeReplyClassified, classified), []byte("3")); err != nil {
		t.Fatal(err)
	}
	guards, err := conn.JS.KeyValue(ctx, stream.Guards)
	if err != nil {
		t.Fatal(err)
	}
	cl, _ := stream.SubscriptionOf(stream.Classifier)
	st := NewStatuses(conn.JS, guards)
	if rec, ok, err := st.Of(ctx, cl, "acme", classified, 2); err != nil || !ok || rec.Status != guard.Completed {
		t.Errorf("the classified reply: %+v %v %v", rec, ok, err)
	}
	if rec, ok, err := st.Of(ctx, cl, "acme", held, 1); err != nil || ok {
		t.Errorf("the held reply, nothing derived: %+v %v %v", rec, ok, err)
	}
	// Another consumer derives nothing of it: its status is its own.
	pr, _ := stream.SubscriptionOf(stream.Projector)
	if _, ok, err := st.Of(ctx, pr, "acme", classified, 2); err != nil || ok {
		t.Errorf("the projector: %v %v", ok, err)
	}
}

// An event a service declared its handler does nothing with reads received until its
// consumer delivered it (not completed before anyone saw it), as does one of a type the
// consumer does not take. A dead letter reset for its replay (its record deleted) is
// received, though long past the ack floor: the earlier version of this change read it
// completed there (found by review).
func TestStatusWithoutARecord(t *testing.T) {
	conn := brokertest.Start(t, "")
	ctx := context.Background()
	ids := publishFor(t, conn, 2, func(int) string { return "lead@example.com" })
	dead, idle := ids[0], ids[1]
	guards, err := conn.JS.KeyValue(ctx, stream.Guards)
	if err != nil {
		t.Fatal(err)
	}
	env := func(id, typ string) envelope.Envelope {
		return envelope.Envelope{ID: id, Tenant: "acme", Provider: "instantly", Type: typ}
	}
	s := sub
	s.Durable = "no-record"
	DeclareActs(s.Name(), func(e envelope.Envelope) bool { return e.ID == dead })
	// Before the consumer delivered anything: received, both.
	for _, id := range ids {
		if rec, ok, err := NewStatuses(conn.JS, guards).OfEvent(ctx, s, env(id, envelope.TypeReplyReceived), 2); err != nil || ok {
			t.Fatalf("%s before its delivery: %+v %v %v, want received", id, rec, ok, err)
		}
	}
	deadLetterFirst(t, conn, s, dead)
	if rec, ok, err := NewStatuses(conn.JS, guards).OfEvent(ctx, s, env(idle, envelope.TypeReplyReceived), 2); err != nil || !ok || rec.Status != guard.Completed {
		t.Fatalf("the event not acted on: %+v %v %v, want completed", rec, ok, err)
	}
	if rec, ok, err := NewStatuses(conn.JS, guards).OfEvent(ctx, s, env("ev_other", envelope.TypeEmailOpened), 2); err != nil || ok {
		t.Fatalf("an event of a type the consumer does not take: %+v %v %v, want received", rec, ok, err)
	}
	if rec, _, err := Status(ctx, conn.JS, guards, s, "acme", dead, 1); err != nil || rec.Status != guard.DeadLetter {
		t.Fatalf("the dead letter: %+v %v", rec, err)
	}
	if _, reset, err := guard.New(guards, s.Name(), 0).Reset(ctx, dead); err != nil || !reset {
		t.Fatalf("reset: %v %v", reset, err)
	}
	if rec, ok, err := Status(ctx, conn.JS, guards, s, "acme", dead, 1); err != nil || ok {
		t.Fatalf("Status of the dead letter reset for its replay: %+v %v %v, want received", rec, ok, err)
	}
	if rec, ok, err := NewStatuses(conn.JS, guards).OfEvent(ctx, s, env(dead, envelope.TypeReplyReceived), 1); err != nil || ok {
		t.Fatalf("OfEvent of the dead letter reset for its replay: %+v %v %v, want received", rec, ok, err)
	}
}

// An erasure writes the guards bucket anew (its entries alone, nothing of the old
// revisions on disk) and keeps the markers of keys deleted: a dead letter reset for its
// replay still reads received after anyone's erasure. (Found by review, with this test:
// the rewrite had dropped the markers, and the reset letter read completed.)
func TestAResetSurvivesAnErasure(t *testing.T) {
	conn := brokertest.Start(t, "")
	ctx := context.Background()
	ids := publishFor(t, conn, 2, func(int) string { return "lead@example.com" })
	dead := ids[0]
	guards, err := conn.JS.KeyValue(ctx, stream.Guards)
	if err != nil {
		t.Fatal(err)
	}
	s := sub
	s.Durable = "reset-erased"
	deadLetterFirst(t, conn, s, dead)
	if _, reset, err := guard.New(guards, s.Name(), 0).Reset(ctx, dead); err != nil || !reset {
		t.Fatalf("reset: %v %v", reset, err)
	}
	p := privacy.NewPerson("acme", "an_someone", []string{"email:someone.else@example.com"}, nil)
	r, err := privacy.Erase(ctx, conn.JS, p)
	if err != nil || !slices.Contains(r.Rewritten, stream.Guards) {
		t.Fatalf("erasure: %+v %v", r, err)
	}
	env := envelope.Envelope{ID: dead, Tenant: "acme", Provider: "instantly", Type: envelope.TypeReplyReceived}
	if rec, ok, err := NewStatuses(conn.JS, guards).OfEvent(ctx, s, env, 1); err != nil || ok {
		t.Fatalf("the reset dead letter after an erasure: %+v %v %v, want received", rec, ok, err)
	}
}

// deadLetterFirst runs s over the two events stored until both are settled: dead, which
// its handler acts on and fails for good (a dead letter), and the other, which it does
// nothing with.
func deadLetterFirst(t *testing.T, conn *broker.Conn, s stream.Subscription, dead string) {
	t.Helper()
	stop := run(t, conn, func(ctx context.Context, ev Event) error {
		if ev.Envelope.ID == dead {
			return retry.Permanently("hubspot", errors.New("400"))
		}
		return nil
	}, func(o *Options) { o.Sub = s; o.Acts = func(e envelope.Envelope) bool { return e.ID == dead } })
	defer stop()
	waitFor(t, "both events settled", func() bool {
		c, err := conn.JS.Consumer(context.Background(), stream.Events, s.Durable)
		return err == nil && c.CachedInfo().AckFloor.Stream == 2
	})
}
