package stream_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/stream"
)

// On one node the derived stores are persisted asynchronously and everything else,
// EXACTO_EVENTS first, stays synced; the buckets still work as buckets.
func TestDerivedStoresPersistAsynchronously(t *testing.T) {
	conn := brokertest.Start(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var names []string
	for _, s := range stream.Streams(brokertest.Topology) {
		names = append(names, s.Name)
	}
	for _, b := range stream.Buckets(brokertest.Topology) {
		if b.Storage == jetstream.FileStorage {
			names = append(names, "KV_"+b.Bucket)
		}
	}
	async := 0
	for _, name := range names {
		s, err := conn.JS.Stream(ctx, name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want := jetstream.DefaultPersistMode
		if slices.Contains(stream.Derived, name) {
			want = jetstream.AsyncPersistMode
			async++
		}
		if got := s.CachedInfo().Config.PersistMode; got != want {
			t.Errorf("%s persists %v, want %v", name, got, want)
		}
	}
	if async != len(stream.Derived) {
		t.Fatalf("%d of the %d derived stores exist", async, len(stream.Derived))
	}
	kv, err := conn.JS.KeyValue(ctx, stream.Guards)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, "stopper.ev_1", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, "stopper.ev_1", []byte("y")); err == nil {
		t.Fatal("a second create of one key succeeded")
	}
	if st, _ := kv.Status(ctx); st.TTL() != 0 {
		t.Fatalf("guards expire after %v: they must last as long as the stream", st.TTL())
	}
}

// A data dir made before the derived stores were asynchronous keeps its synced stores
// (the server cannot change a persist mode) and Exacto still starts on it.
func TestEnsureKeepsAnExistingPersistMode(t *testing.T) {
	conn := brokertest.Start(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Make one derived stream synced by hand, as an earlier version left it.
	if err := conn.JS.DeleteStream(ctx, stream.Outcomes); err != nil {
		t.Fatal(err)
	}
	cfg := stream.Streams(brokertest.Topology)
	i := slices.IndexFunc(cfg, func(c jetstream.StreamConfig) bool { return c.Name == stream.Outcomes })
	if _, err := conn.JS.CreateStream(ctx, cfg[i]); err != nil {
		t.Fatal(err)
	}
	if err := stream.Ensure(ctx, conn.JS, brokertest.Topology); err != nil {
		t.Fatalf("ensure over an earlier version's streams: %v", err)
	}
	s, err := conn.JS.Stream(ctx, stream.Outcomes)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CachedInfo().Config.PersistMode; got != jetstream.DefaultPersistMode {
		t.Fatalf("the existing stream's persist mode became %v", got)
	}
}

// A store that must be on disk before it is acknowledged but was made persisted
// asynchronously (a development version's data dir) is refused by name, stream or
// bucket alike, and left as it is: no fsync of its files covers its writes.
func TestEnsureRefusesAnAsynchronousDurableStore(t *testing.T) {
	conn := brokertest.Start(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	remake := func(name string, cfg jetstream.StreamConfig) {
		t.Helper()
		if err := conn.JS.DeleteStream(ctx, name); err != nil {
			t.Fatal(err)
		}
		cfg.PersistMode = jetstream.AsyncPersistMode
		if _, err := conn.JS.CreateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	streams := stream.Streams(brokertest.Topology)
	i := slices.IndexFunc(streams, func(c jetstream.StreamConfig) bool { return c.Name == stream.DLQ })
	remake(stream.DLQ, streams[i])
	err := stream.Ensure(ctx, conn.JS, brokertest.Topology)
	if err == nil || !strings.Contains(err.Error(), "stream "+stream.DLQ+" is persisted asynchronously") {
		t.Fatalf("ensure over an asynchronous %s: %v", stream.DLQ, err)
	}
	if s, err := conn.JS.Stream(ctx, stream.DLQ); err != nil || s.CachedInfo().Config.PersistMode != jetstream.AsyncPersistMode {
		t.Fatalf("the refused stream was changed: %v", err)
	}
	// The same for a bucket (the DLQ's stream made right again first).
	remakeSynced := streams[i]
	if err := conn.JS.DeleteStream(ctx, stream.DLQ); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.JS.CreateStream(ctx, remakeSynced); err != nil {
		t.Fatal(err)
	}
	bucket := "KV_" + stream.DLQActions
	s, err := conn.JS.Stream(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	remake(bucket, s.CachedInfo().Config)
	if err := stream.Ensure(ctx, conn.JS, brokertest.Topology); err == nil || !strings.Contains(err.Error(), "stream "+bucket+" is persisted asynchronously") {
		t.Fatalf("ensure over an asynchronous %s: %v", bucket, err)
	}
}

// EXACTO_EVENTS and EXACTO_OUTCOMES are cut in blocks of at most 4 MiB (halfBlocks),
// not nats-server's 8 MiB for a stream without limits: 5 MiB of events fill a block
// and start another.
func TestStreamsAreCutInHalfBlocks(t *testing.T) {
	conn := brokertest.Start(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	payload := make([]byte, 10<<10)
	for _, name := range []string{stream.Events, stream.Outcomes} {
		subject := map[string]string{stream.Events: "events.t.p.blocks", stream.Outcomes: "outcomes.c.t.p.blocks"}[name]
		for range 512 { // 5 MiB
			if _, err := conn.JS.PublishAsync(subject, payload); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case <-conn.JS.PublishAsyncComplete():
		case <-ctx.Done():
			t.Fatal("publishing timed out")
		}
		blocks, err := filepath.Glob(filepath.Join(conn.Embedded.StoreDir(), "$G", "streams", name, "msgs", "*.blk"))
		if err != nil {
			t.Fatal(err)
		}
		if len(blocks) < 2 {
			t.Errorf("%s holds 5 MiB in %d block: its blocks are larger than 4 MiB", name, len(blocks))
		}
		for _, b := range blocks {
			if fi, err := os.Stat(b); err == nil && fi.Size() > int64(4<<20+len(payload)+256) {
				t.Errorf("%s: block %s is %d bytes", name, filepath.Base(b), fi.Size())
			}
		}
	}
}

// The confirmations bucket is a day of cached verdicts. In a memory store it would sit in
// the heap of whoever runs the server: on one node that is Exacto's own process, growing
// with a day's volume. So there it is a file store persisted asynchronously (a lost
// verdict costs one more question to the source); in a cluster, where the servers' memory
// is their operator's and async persist is refused, it stays in memory. A data dir whose
// bucket an earlier version made in memory gets the file store at the next start.
func TestConfirmationsAreOnDiskOnOneNode(t *testing.T) {
	storage := func(o stream.Options) jetstream.StorageType {
		for _, b := range stream.Buckets(o) {
			if b.Bucket == stream.Confirmations {
				return b.Storage
			}
		}
		t.Fatal("no confirmations bucket")
		return 0
	}
	if got := storage(stream.Options{Replicas: 3}); got != jetstream.MemoryStorage {
		t.Errorf("in a cluster the confirmations are kept in %v", got)
	}
	if got := storage(stream.Options{Replicas: 1}); got != jetstream.MemoryStorage {
		t.Errorf("on a server Exacto does not embed the confirmations are kept in %v", got)
	}

	dir := t.TempDir()
	conn := brokertest.Start(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := "KV_" + stream.Confirmations
	check := func(when string) {
		t.Helper()
		s, err := conn.JS.Stream(ctx, name)
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		if c := s.CachedInfo().Config; c.Storage != jetstream.FileStorage || c.PersistMode != jetstream.AsyncPersistMode || c.MaxAge != 24*time.Hour || !c.AllowMsgTTL {
			t.Fatalf("%s: the confirmations are kept in %v, persisted %v, for %v, a TTL of their own allowed: %v (an erasure keeps each one's age with it)",
				when, c.Storage, c.PersistMode, c.MaxAge, c.AllowMsgTTL)
		}
	}
	check("a new data dir")

	// As an earlier version made it: in memory. Ensure, at the next start, moves it.
	if err := conn.JS.DeleteKeyValue(ctx, stream.Confirmations); err != nil {
		t.Fatal(err)
	}
	old, err := conn.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: stream.Confirmations, TTL: 24 * time.Hour, Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.Put(ctx, "t1.ev_1", []byte(`{"confirmed":true}`)); err != nil {
		t.Fatal(err)
	}
	if err := stream.Ensure(ctx, conn.JS, brokertest.Topology); err != nil {
		t.Fatalf("ensure over a bucket in memory: %v", err)
	}
	check("a bucket an earlier version made in memory")
	kv, err := conn.JS.KeyValue(ctx, stream.Confirmations)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "t1.ev_2", []byte(`{"confirmed":true}`)); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	conn = brokertest.Start(t, dir)
	check("a restart")
	kv, err = conn.JS.KeyValue(ctx, stream.Confirmations)
	if err != nil {
		t.Fatal(err)
	}
	if e, err := kv.Get(ctx, "t1.ev_2"); err != nil || string(e.Value()) != `{"confirmed":true}` {
		t.Fatalf("a verdict put before a clean restart: %v", err)
	}
}
