package main

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/stream"
)

// The comparison waits for a running projector behind the rebuild: it says once that it
// waits, gives up at the deadline with how far the projector got, and returns as soon
// as it has caught up; with no projector at all there is nothing to wait for.
func TestLiveHandledWaits(t *testing.T) {
	conn := brokertest.Start(t, "")
	ctx := context.Background()
	if got, paused, err := liveHandled(ctx, conn.JS, 1, time.Minute, func(uint64) { t.Error("waited without a projector") }); err != nil || got != 1 || paused {
		t.Fatalf("no projector: %d %v %v", got, paused, err)
	}
	for i := range 3 {
		if _, err := conn.JS.Publish(ctx, stream.EventSubject("acme", "instantly", "email.opened"), []byte{'{', '}'}, jetstream.WithMsgID(string(rune('a'+i)))); err != nil {
			t.Fatal(err)
		}
	}
	// A projector's durable consumer that has handled nothing yet.
	c, err := conn.JS.CreateConsumer(ctx, stream.Events, jetstream.ConsumerConfig{Durable: stream.Projector, AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	said := 0
	if got, paused, err := liveHandled(ctx, conn.JS, 3, 500*time.Millisecond, func(uint64) { said++ }); err != nil || got != 0 || paused || said != 1 {
		t.Fatalf("behind at the deadline: handled %d, paused %v, said %d times (%v)", got, paused, said, err)
	}
	go func() { // it catches up while the comparison waits
		time.Sleep(300 * time.Millisecond)
		msgs, err := c.Fetch(3)
		if err != nil {
			return
		}
		for m := range msgs.Messages() {
			m.DoubleAck(ctx)
		}
	}()
	began := time.Now()
	if got, _, err := liveHandled(ctx, conn.JS, 3, time.Minute, func(uint64) {}); err != nil || got != 3 {
		t.Fatalf("caught up while waiting: %d %v", got, err)
	}
	if took := time.Since(began); took > 10*time.Second {
		t.Fatalf("returned %v after it caught up", took)
	}
}
