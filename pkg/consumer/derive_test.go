package consumer

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/broker"
	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/retry"
	"exacto.dev/pkg/stream"
)

// countedGets counts the reads of a key-value bucket.
type countedGets struct {
	jetstream.KeyValue
	n atomic.Int64
}

func (c *countedGets) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	c.n.Add(1)
	return c.KeyValue.Get(ctx, key)
}

// countedDeriver is a Deriver over conn whose reads of the index are counted.
func countedDeriver(t *testing.T, conn *broker.Conn) (*Deriver, *countedGets) {
	t.Helper()
	d, err := NewDeriver(context.Background(), conn.JS)
	if err != nil {
		t.Fatal(err)
	}
	index := &countedGets{KeyValue: d.index}
	d.index = index
	return d, index
}

// A New attempt's own derived event is stored without asking the index of stored ids
// first: nothing can have stored it. Every other derivation asks: an attempt after a
// failed one (which may have stored it), one under another worker's name (another
// consumer attempting the same event derives the same id: pkg/confirm's), one from
// another event than the attempted one.
func TestOnlyANewAttemptsOwnDerivedEventIsNotLookedUp(t *testing.T) {
	conn := brokertest.Start(t, "")
	d, index := countedDeriver(t, conn)
	type seen struct {
		new   bool
		reads int64 // index reads of the attempt's Publish
	}
	var (
		mu       sync.Mutex
		attempts = map[string][]seen{}
		ids      []string
		idsReady = make(chan struct{})
	)
	solo := &Solo{}
	run(t, conn, func(ctx context.Context, ev Event) error {
		<-idsReady
		env := ev.Envelope
		var derived envelope.Envelope
		switch env.ID {
		case ids[2]:
			derived = envelope.Derive(env, "confirm", envelope.TypeEventUnconfirmed, envelope.Data{}, time.Now())
		case ids[3]:
			derived = envelope.Derive(envelope.Envelope{ID: "ev_other", Tenant: env.Tenant, Provider: env.Provider}, sub.Durable, envelope.TypeReplyClassified, envelope.Data{}, time.Now())
		default:
			derived = envelope.Derive(env, sub.Durable, envelope.TypeReplyClassified, envelope.Data{}, time.Now())
		}
		before := index.n.Load()
		err := d.Publish(ctx, derived)
		mu.Lock()
		attempts[env.ID] = append(attempts[env.ID], seen{ev.New, index.n.Load() - before})
		n := len(attempts[env.ID])
		mu.Unlock()
		if err != nil {
			t.Errorf("publish %s derived from %s: %v", derived.ID, env.ID, err)
			return err
		}
		if env.ID == ids[1] && n == 1 {
			return retry.Transiently("test", errors.New("the effect failed after its derived event was published"))
		}
		return nil
	}, func(o *Options) { o.Workers, o.Solo = 1, solo })
	waitFor(t, "the runner to work alone", solo.Alone)
	ids = publish(t, conn, 4)
	close(idsReady)
	waitFor(t, "every attempt made", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(attempts[ids[0]]) == 1 && len(attempts[ids[1]]) == 2 && len(attempts[ids[2]]) == 1 && len(attempts[ids[3]]) == 1
	})
	mu.Lock()
	defer mu.Unlock()
	for _, c := range []struct {
		what  string
		got   seen
		new   bool
		reads int64
	}{
		{"its own derived event", attempts[ids[0]][0], true, 0},
		{"its own derived event, first attempt", attempts[ids[1]][0], true, 0},
		{"its own derived event, after a failed attempt", attempts[ids[1]][1], false, 1},
		{"an event derived under another worker's name", attempts[ids[2]][0], true, 1},
		{"an event derived from another event", attempts[ids[3]][0], true, 1},
	} {
		if c.got.new != c.new {
			t.Errorf("%s: the attempt is New %v, want %v", c.what, c.got.new, c.new)
		}
		if c.got.reads != c.reads {
			t.Errorf("%s: %d reads of the index, want %d", c.what, c.got.reads, c.reads)
		}
	}
	// Each derived event stored once: the failed attempt's and its retry's are one (the
	// duplicate window).
	waitFor(t, "four events and four derived ones stored", func() bool { return brokertest.Count(t, conn, stream.Events) == 8 })
	time.Sleep(100 * time.Millisecond)
	if n := brokertest.Count(t, conn, stream.Events); n != 8 {
		t.Fatalf("%d events stored, want 8", n)
	}
}

// A derived event skips the look only when its id is the attempt's consumer's own
// derivation of the attempted event, the attempt is New, and it is within its time: an
// attempt past its deadline (its process frozen, then resumed) may come after a
// redelivery's attempt stored the event, by more than the duplicate window.
func TestAFirstDerivationIsOwnNewAndInTime(t *testing.T) {
	cause := envelope.Envelope{ID: "ev_cause", Tenant: "acme"}
	own := envelope.Derive(cause, stream.Stopper, envelope.TypeSequenceStopped, envelope.Data{}, time.Now())
	renamed := own // the same source and cause, another id
	renamed.ID = "ev_other"
	inTime, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	past, cancelPast := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancelPast()
	attempt := func(ctx context.Context, isNew bool, consumer string) *held {
		return &held{ctx: ctx, new: isNew, cause: cause.ID, consumer: consumer}
	}
	for _, c := range []struct {
		what string
		h    *held
		env  envelope.Envelope
		want bool
	}{
		{"a New attempt's own, in time", attempt(inTime, true, stream.Stopper), own, true},
		{"an attempt that is not New", attempt(inTime, false, stream.Stopper), own, false},
		{"an attempt past its deadline", attempt(past, true, stream.Stopper), own, false},
		{"an attempt without a deadline", attempt(context.Background(), true, stream.Stopper), own, false},
		{"another consumer's attempt", attempt(inTime, true, stream.CRMWriter), own, false},
		{"an event with another id", attempt(inTime, true, stream.Stopper), renamed, false},
		{"outside an attempt", nil, own, false},
	} {
		if got := c.h.first(c.env); got != c.want {
			t.Errorf("%s: first %v, want %v", c.what, got, c.want)
		}
	}
}

// Two processes on one consumer: neither is alone, so no attempt is New (another
// process's attempt at the same event may be under way), and every derived event is
// looked up before it is stored.
func TestNoAttemptIsNewBesideAnotherProcess(t *testing.T) {
	conn := brokertest.Start(t, "")
	d, index := countedDeriver(t, conn)
	var attempts, news atomic.Int64
	h := func(ctx context.Context, ev Event) error {
		attempts.Add(1)
		if ev.New {
			news.Add(1)
		}
		return d.Publish(ctx, envelope.Derive(ev.Envelope, sub.Durable, envelope.TypeReplyClassified, envelope.Data{}, time.Now()))
	}
	if _, second := runTwo(t, conn, h); second.Alone() {
		t.Fatal("the second process works alone beside the first")
	}
	const n = 20
	publish(t, conn, n)
	waitFor(t, "every event's derived event stored", func() bool { return brokertest.Count(t, conn, stream.Events) == 2*n })
	if a, nw, reads := attempts.Load(), news.Load(), index.n.Load(); a != n || nw != 0 || reads != n {
		t.Fatalf("%d attempts, %d of them New, %d index reads; want %d, none, %d", a, nw, reads, n, n)
	}
}
