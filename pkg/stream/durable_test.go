package stream_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/broker"
	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/stream"
)

// A process bound to another's embedded server asks that process for its syncs: its
// writes are durable once Durable returns, through the $EXACTO.SYNC request.
func TestDurableFromAnotherConnection(t *testing.T) {
	conn := brokertest.Start(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nc, err := nats.Connect(conn.NC.ConnectedUrl())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	if by, err := stream.SyncedByProcess(ctx, js); err != nil || !by {
		t.Fatalf("synced by its process: %v, %v; want true", by, err)
	}
	if err := stream.Durable(ctx, js, stream.Events, stream.DLQ); err != nil {
		t.Fatal(err)
	}
}

// Fail closed: a server marked as synced by its process, whose process does not
// answer, makes no write durable — Durable is an error, never a silent success.
func TestDurableFailsClosed(t *testing.T) {
	conn, err := broker.Open("", broker.Options{Listen: "127.0.0.1:-1", DataDir: t.TempDir(), Sync: "2m"}, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The mark as an embedding process leaves it, but nobody answers for it here.
	if _, err := conn.JS.CreateStream(ctx, jetstream.StreamConfig{Name: stream.Events, Subjects: []string{"exacto.>"},
		Storage: jetstream.FileStorage, Metadata: map[string]string{stream.SyncMetadata: stream.SyncByProcess}}); err != nil {
		t.Fatal(err)
	}
	if by, err := stream.SyncedByProcess(ctx, conn.JS); err != nil || !by {
		t.Fatalf("marked server: synced by process %v, %v", by, err)
	}
	if err := stream.Durable(ctx, conn.JS, stream.Events); err == nil {
		t.Fatal("Durable succeeded with nobody to sync the store")
	}
}

// An unmarked server nobody syncs for (sync 2m by choice, or an external server) needs
// no sync: Durable returns at once.
func TestDurableOnAServerThatSyncsItself(t *testing.T) {
	conn, err := broker.Open("", broker.Options{Listen: "127.0.0.1:-1", DataDir: t.TempDir(), Sync: "2m"}, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := stream.Ensure(ctx, conn.JS, brokertest.Topology); err != nil {
		t.Fatal(err)
	}
	if by, err := stream.SyncedByProcess(ctx, conn.JS); err != nil || by {
		t.Fatalf("synced by process %v, %v; want false", by, err)
	}
	if err := stream.Durable(ctx, conn.JS, stream.Events); err != nil {
		t.Fatal(err)
	}
}
