package handler

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/contacts"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/kvstore"
	"exacto.dev/pkg/projection"
	"exacto.dev/pkg/stream"
)

// A power cut can take the projector's last writes (its buckets are persisted
// asynchronously) while its acks survive. Simulated: events the projector's consumer
// delivered and acked, with nothing written. On start the projector applies again
// every event from its lowest checkpoint to the last delivered — and only those — and
// the result equals a projection built from the stream.
func TestProjectorAppliesAgainWhatFollowsItsCheckpoint(t *testing.T) {
	conn := brokertest.Start(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	at := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	var envs []envelope.Envelope
	for i := range 6 {
		env := event(fmt.Sprintf("ev_%d", i), envelope.TypeReplyReceived, at.Add(time.Duration(i)*time.Minute))
		env.Data.Contact = &envelope.Contact{Email: fmt.Sprintf("lead%d@northwind.example", i)}
		envs = append(envs, env)
		data, _ := json.Marshal(env)
		msg := &nats.Msg{Subject: env.StreamSubject(), Data: data, Header: nats.Header{}}
		msg.Header.Set(jetstream.MsgIDHeader, env.ID)
		if _, err := conn.JS.PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
	// The projector's consumer delivered and acked all six; nothing reached the stores.
	sub, _ := stream.SubscriptionOf(stream.Projector)
	cons, err := conn.JS.CreateOrUpdateConsumer(ctx, stream.Events, sub.ConsumerConfig())
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(6, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
	}
	dir, err := contacts.Open(ctx, conn.JS)
	if err != nil {
		t.Fatal(err)
	}
	stores, err := projection.Open(ctx, conn.JS, "", 1)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := openCheckpoints(ctx, conn.JS, slog.New(slog.DiscardHandler))
	if err != nil || cp == nil {
		t.Fatalf("checkpoints over the asynchronous buckets: %v %v", cp, err)
	}
	// Two events are behind every bucket's checkpoint; one bucket lags at one.
	for i, kv := range cp.buckets {
		at := "2"
		if i == 1 {
			at = "1"
		}
		if _, err := kv.Put(ctx, kvstore.CheckpointKey, []byte(at)); err != nil {
			t.Fatal(err)
		}
	}
	n, err := cp.recover(ctx, stores, dir)
	if err != nil || n != 5 {
		t.Fatalf("applied again %d events (%v), want the 5 after the lowest checkpoint", n, err)
	}
	keys, err := stores.Contacts.Keys(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 5 || slices.Contains(keys, kvstore.CheckpointKey) {
		t.Fatalf("contacts after recovery: %v", keys)
	}
	// What it built equals a projection of those five events from scratch.
	want, wantDir := projection.Memories(), contacts.New(kvstore.NewMemory())
	for _, env := range envs[1:] {
		if _, err := projection.Apply(ctx, want, wantDir, env); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range keys {
		got, _, _ := stores.Contacts.Get(ctx, k)
		exp, _, _ := want.Contacts.Get(ctx, k)
		if string(got) != string(exp) {
			t.Errorf("contact %s:\n got %s\nwant %s", k, got, exp)
		}
	}
	// Applying again is idempotent: a second recovery changes nothing.
	before, _, _ := stores.Contacts.Get(ctx, keys[0])
	if _, err := cp.recover(ctx, stores, dir); err != nil {
		t.Fatal(err)
	}
	if after, _, _ := stores.Contacts.Get(ctx, keys[0]); string(after) != string(before) {
		t.Fatalf("a second recovery changed %s", keys[0])
	}

	// The checkpoint follows the ack floor into every bucket.
	defer func(d time.Duration) { checkpointEvery = d }(checkpointEvery)
	checkpointEvery = 20 * time.Millisecond
	kctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { cp.keep(kctx); close(done) }()
	defer func() { stop(); <-done }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if low, err := cp.lowest(ctx); err == nil && low == 6 {
			break
		}
		if time.Now().After(deadline) {
			low, err := cp.lowest(ctx)
			t.Fatalf("checkpoint %d (%v), want the ack floor 6", low, err)
		}
	}
}
