package broker

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestSyncCoversWhatTheServerStored checks what the process's own sync relies on, on
// the nats-server it embeds: a stored message is in its stream's block file
// (<store>/$G/streams/<name>/msgs/<index>.blk) when its PubAck arrives, and Durable
// fsyncs every block written since the last round — several, when a burst filled
// more than one. If nats-server moved its files or wrote after acknowledging, this
// fails, and the power-cut test would too.
func TestSyncCoversWhatTheServerStored(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Open("", Options{Listen: "127.0.0.1:-1", DataDir: t.TempDir(), Sync: "always"}, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !c.SelfSynced() {
		t.Fatal("an embedded single node with sync always is not synced by its process")
	}
	var mu sync.Mutex
	synced := map[string]int64{} // file -> size when last fsynced
	c.syncer.observe = func(p string, size int64) {
		mu.Lock()
		synced[p] = size
		mu.Unlock()
	}
	// max_bytes under 128 KB gives 32 KB blocks: a dozen 10 KB messages fill four.
	const name = "SYNCTEST"
	if _, err := c.JS.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{"synctest.>"},
		Storage: jetstream.FileStorage, MaxBytes: 127_000, Discard: jetstream.DiscardNew}); err != nil {
		t.Fatal(err)
	}
	msgs := filepath.Join(c.Embedded.StoreDir(), "$G", "streams", name, "msgs")
	body := func(i int) []byte {
		return append([]byte(fmt.Sprintf("message-%03d:", i)), bytes.Repeat([]byte{'x'}, 10_000)...)
	}
	stored := func(i int) bool {
		files, _ := filepath.Glob(filepath.Join(msgs, "*.blk"))
		for _, f := range files {
			if b, err := os.ReadFile(f); err == nil && bytes.Contains(b, body(i)[:12]) {
				return true
			}
		}
		return false
	}
	if _, err := c.JS.Publish(ctx, "synctest.a", body(0)); err != nil {
		t.Fatal(err)
	}
	if !stored(0) {
		t.Fatal("a message acknowledged is not in its block file yet: the server writes after its PubAck, or elsewhere")
	}
	if err := c.Durable(ctx, name); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < 12; i++ {
		if _, err := c.JS.Publish(ctx, "synctest.a", body(i)); err != nil {
			t.Fatal(err)
		}
		if !stored(i) {
			t.Fatalf("message %d acknowledged but not in a block file", i)
		}
	}
	if err := c.Durable(ctx, name); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(msgs, "*.blk"))
	if len(files) < 3 {
		t.Fatalf("%d blocks: want the burst to fill several", len(files))
	}
	mu.Lock()
	defer mu.Unlock()
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := synced[f]; !ok || got != fi.Size() {
			t.Errorf("%s: %d bytes, fsynced at %d (%v): a block written since the last round was not synced", filepath.Base(f), fi.Size(), got, ok)
		}
	}
}

// TestDurableWithoutSelfSync: a server that syncs each write itself (or is lazy by
// choice) needs no sync from its process, and Durable returns at once.
func TestDurableWithoutSelfSync(t *testing.T) {
	for _, sync := range []string{"2m"} {
		c, err := Open("", Options{Listen: "127.0.0.1:-1", DataDir: t.TempDir(), Sync: sync}, t.Name())
		if err != nil {
			t.Fatal(err)
		}
		if c.SelfSynced() {
			t.Errorf("sync %s: self-synced", sync)
		}
		if err := c.Durable(context.Background(), "ANY"); err != nil {
			t.Errorf("sync %s: %v", sync, err)
		}
		c.Close()
	}
}
