package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/broker"
	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/stream"
)

// indexHarness is an embedded server with the topology, events to publish and an
// Indexer to run.
type indexHarness struct {
	t     *testing.T
	ctx   context.Context
	conn  *broker.Conn
	index jetstream.KeyValue
}

func newIndexHarness(t *testing.T) *indexHarness {
	conn := brokertest.Start(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	index, err := conn.JS.KeyValue(ctx, stream.EventIndex)
	if err != nil {
		t.Fatal(err)
	}
	return &indexHarness{t: t, ctx: ctx, conn: conn, index: index}
}

// publish stores events ev_from … ev_to-1.
func (h *indexHarness) publish(from, to int) {
	for i := from; i < to; i++ {
		msg := &nats.Msg{Subject: "events.acme.stripe.payment.succeeded", Data: []byte("{}"), Header: nats.Header{}}
		msg.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("ev_%d", i))
		if _, err := h.conn.JS.PublishMsg(h.ctx, msg); err != nil {
			h.t.Fatal(err)
		}
	}
}

func (h *indexHarness) indexed(i int) bool {
	_, err := h.index.Get(h.ctx, fmt.Sprintf("ev_%d", i))
	return err == nil
}

// run starts an Indexer (checkpoints nil: its consumer on disk) and returns what stops it.
func (h *indexHarness) run(checkpoints jetstream.KeyValue) (stop func()) {
	x, err := NewIndexer(h.ctx, h.conn.JS, checkpoints, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	if inMemory := x.cons.CachedInfo().Config.MemoryStorage; inMemory != (checkpoints != nil) {
		h.t.Fatalf("index consumer state in memory: %v, with checkpoints: %v", inMemory, checkpoints != nil)
	}
	rctx, cancel := context.WithCancel(h.ctx)
	done := make(chan struct{})
	go func() { x.Run(rctx); close(done) }()
	return func() { cancel(); <-done }
}

// On one node the index is persisted asynchronously: a power cut can take its last
// entries while the index consumer's acks survive. Simulated here by acking events
// nobody indexed: a new Indexer goes back from the index's last entry and indexes them.
func TestIndexerRewindsPastLostEntries(t *testing.T) {
	h := newIndexHarness(t)
	h.publish(0, 10)
	stop := h.run(nil)
	waitUntil(t, "the first ten indexed", func() bool { return h.indexed(9) })
	stop()
	// Ten more, acked by the index consumer but not in the index: what a power cut
	// leaves when the consumer's state reached the disk and the entries did not.
	h.publish(10, 20)
	cons, err := h.conn.JS.Consumer(h.ctx, stream.Events, stream.IndexConsumer)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(10, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	acked := 0
	for m := range batch.Messages() {
		if err := m.DoubleAck(h.ctx); err != nil {
			t.Fatal(err)
		}
		acked++
	}
	if acked != 10 || h.indexed(15) {
		t.Fatalf("acked %d; ev_15 indexed: %v", acked, h.indexed(15))
	}
	stop = h.run(nil)
	defer stop()
	waitUntil(t, "the lost entries indexed again", func() bool {
		for i := 10; i < 20; i++ {
			if !h.indexed(i) {
				return false
			}
		}
		return true
	})
}

// On one embedded node the index writer's consumer keeps its state in the server's
// memory and its ack floor as a checkpoint: written when it stops, and after a restart
// (the consumer gone with the server's memory) it binds again and goes on indexing.
func TestIndexerKeepsItsStateInMemoryWithACheckpoint(t *testing.T) {
	h := newIndexHarness(t)
	checkpoints, err := h.conn.JS.KeyValue(h.ctx, stream.ConsumerCheckpoints)
	if err != nil {
		t.Fatal(err)
	}
	h.publish(0, 10)
	stop := h.run(checkpoints)
	waitUntil(t, "ten indexed", func() bool { return h.indexed(9) })
	waitUntil(t, "the ten acked", func() bool {
		c, err := h.conn.JS.Consumer(h.ctx, stream.Events, stream.IndexConsumer)
		return err == nil && c.CachedInfo().AckFloor.Stream == 10
	})
	stop()
	e, err := checkpoints.Get(h.ctx, stream.IndexConsumer)
	if err != nil || string(e.Value()) != "10" {
		t.Fatalf("checkpoint after the stop: %v %v", e, err)
	}
	// A restart of the server: the consumer is gone.
	if err := h.conn.JS.DeleteConsumer(h.ctx, stream.Events, stream.IndexConsumer); err != nil {
		t.Fatal(err)
	}
	h.publish(10, 20)
	stop = h.run(checkpoints)
	defer stop()
	waitUntil(t, "the next ten indexed", func() bool { return h.indexed(19) })
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// An Indexer stopped while its consumer is still handing over messages stops cleanly:
// nats.go may call the consume callback with a message it had taken after the
// subscription is closed (a chaos run's gateway panicked on a send to the closed
// queue). Stopped 600 times in the middle of a backlog, none may panic, and every
// event is indexed by the last. (A race: the build before panicked here in one run
// of four to six.)
func TestIndexerStopsInTheMiddleOfABacklog(t *testing.T) {
	h := newIndexHarness(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute) // 600 starts: more than the harness's 30 s
	defer cancel()
	h.ctx = ctx
	const n = 1000
	h.publish(0, n)
	for i := range 600 {
		stop := h.run(nil)
		time.Sleep(time.Duration(i%5) * time.Millisecond)
		stop()
	}
	stop := h.run(nil)
	defer stop()
	for i, deadline := 0, time.Now().Add(30*time.Second); i < n; {
		if h.indexed(i) {
			i++
			continue
		}
		if time.Now().After(deadline) {
			t.Fatalf("ev_%d of %d not indexed 30 s after the last start", i, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
