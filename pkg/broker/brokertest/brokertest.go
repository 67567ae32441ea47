// Package brokertest starts a real embedded nats-server with JetStream for tests: a
// temporary store, a free loopback port, SyncAlways, and Exacto's topology declared.
package brokertest

import (
	"context"
	"testing"
	"time"

	"exacto.dev/pkg/broker"
	"exacto.dev/pkg/stream"
)

// Topology is the topology tests get unless they pass their own.
var Topology = stream.Options{DuplicateWindow: 2 * time.Minute, Replicas: 1, DedupTTL: 7 * 24 * time.Hour, Embedded: true}

// Start starts a server in dir (t.TempDir() when empty) and connects to it; both stop
// when the test ends.
func Start(t testing.TB, dir string, topo ...stream.Options) *broker.Conn {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	conn, err := broker.Open("", broker.Options{Listen: "127.0.0.1:-1", DataDir: dir, Sync: "always"}, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	o := Topology
	if len(topo) > 0 {
		o = topo[0]
	}
	o.SelfSync = conn.SelfSynced()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := stream.Ensure(ctx, conn.JS, o); err != nil {
		t.Fatal(err)
	}
	if err := conn.KeepDurable(ctx, stream.DurableStores(o)...); err != nil {
		t.Fatal(err)
	}
	return conn
}

// Count is the number of messages in a stream.
func Count(t testing.TB, conn *broker.Conn, name string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := conn.JS.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}
