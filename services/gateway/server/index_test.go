package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/stream"
)

// On one node the index is persisted asynchronously: a power cut can take its last
// entries while the index consumer's acks survive. Simulated here by acking events
// nobody indexed: a new Indexer goes back from the index's last entry and indexes them.
func TestIndexerRewindsPastLostEntries(t *testing.T) {
	conn := brokertest.Start(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	publish := func(from, to int) {
		for i := from; i < to; i++ {
			msg := &nats.Msg{Subject: "events.acme.stripe.payment.succeeded", Data: []byte("{}"), Header: nats.Header{}}
			msg.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("ev_%d", i))
			if _, err := conn.JS.PublishMsg(ctx, msg); err != nil {
				t.Fatal(err)
			}
		}
	}
	index, err := conn.JS.KeyValue(ctx, stream.EventIndex)
	if err != nil {
		t.Fatal(err)
	}
	indexed := func(i int) bool { _, err := index.Get(ctx, fmt.Sprintf("ev_%d", i)); return err == nil }
	runIndexer := func() (stop func()) {
		x, err := NewIndexer(ctx, conn.JS, nil)
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { x.Run(rctx); close(done) }()
		return func() { cancel(); <-done }
	}

	publish(0, 10)
	stop := runIndexer()
	waitUntil(t, "the first ten indexed", func() bool { return indexed(9) })
	stop()
	// Ten more, acked by the index consumer but not in the index: what a power cut
	// leaves when the consumer's state reached the disk and the entries did not.
	publish(10, 20)
	cons, err := conn.JS.Consumer(ctx, stream.Events, stream.IndexConsumer)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(10, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	acked := 0
	for m := range batch.Messages() {
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
		acked++
	}
	if acked != 10 || indexed(15) {
		t.Fatalf("acked %d; ev_15 indexed: %v", acked, indexed(15))
	}
	stop = runIndexer()
	defer stop()
	waitUntil(t, "the lost entries indexed again", func() bool {
		for i := 10; i < 20; i++ {
			if !indexed(i) {
				return false
			}
		}
		return true
	})
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
