package broker

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
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
	// max_bytes under 128 KB gives 32 KB blocks: a dozen 10 KB messages fill four.
	const name = "SYNCTEST"
	c, dir := testStore(t, ctx, name)
	if !c.SelfSynced() {
		t.Fatal("an embedded single node with sync always is not synced by its process")
	}
	var mu sync.Mutex
	synced := map[string]int64{} // file -> size when last fsynced
	c.syncer.setObserve(func(p string, size int64) {
		mu.Lock()
		synced[p] = size
		mu.Unlock()
	})
	msgs := filepath.Join(dir, "msgs")
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

// setObserve sets the syncer's observe hook while its loops run.
func (s *syncer) setObserve(f func(path string, size int64)) {
	s.notes.Lock()
	s.observe = f
	s.notes.Unlock()
}

// testStore opens an embedded server synced by its process, with a stream of 32 KB
// blocks (max_bytes under 128 KB): a few 10 KB messages fill one.
func testStore(t *testing.T, ctx context.Context, name string) (*Conn, string) {
	t.Helper()
	c, err := Open("", Options{Listen: "127.0.0.1:-1", DataDir: t.TempDir(), Sync: "always"}, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if _, err := c.JS.CreateStream(ctx, testStream(name)); err != nil {
		t.Fatal(err)
	}
	return c, filepath.Join(c.Embedded.StoreDir(), "$G", "streams", name)
}

// durableStore is testStore with the stream kept durable by the process's syncer.
func durableStore(t *testing.T, ctx context.Context, name string) (*Conn, string) {
	t.Helper()
	c, dir := testStore(t, ctx, name)
	if err := c.KeepDurable(ctx, name); err != nil {
		t.Fatal(err)
	}
	return c, dir
}

// testStream is the test stream's config: max_bytes under 128 KB gives 32 KB blocks.
func testStream(name string) jetstream.StreamConfig {
	return jetstream.StreamConfig{Name: name, Subjects: []string{"synctest.>"}, Storage: jetstream.FileStorage,
		MaxBytes: 127_000, Discard: jetstream.DiscardNew}
}

var tenKB = bytes.Repeat([]byte{'x'}, 10_000)

// holder holds the first fsync its match accepts (the sweep's, in these tests) until
// released, and records every fsync's size; any other fsync, and any after the first,
// passes.
type holder struct {
	match    func(path string) bool
	held     chan struct{} // closed once one is held
	release  chan struct{}
	taken    atomic.Bool
	released sync.Once
	mu       sync.Mutex
	synced   map[string]int64 // path -> size when last fsynced
}

func newHolder(match func(string) bool) *holder {
	return &holder{match: match, held: make(chan struct{}), release: make(chan struct{}), synced: map[string]int64{}}
}

func (h *holder) observe(p string, size int64) {
	h.mu.Lock()
	h.synced[p] = size
	h.mu.Unlock()
	if h.match(p) && h.taken.CompareAndSwap(false, true) {
		close(h.held)
		<-h.release
	}
}

func (h *holder) wait(t *testing.T) {
	t.Helper()
	select {
	case <-h.held:
	case <-time.After(10 * time.Second):
		t.Fatal("no sweep came to the fsync it is to be held in within 10 s")
	}
}

func (h *holder) let() { h.released.Do(func() { close(h.release) }) }

// syncedAt is the size path had when it was last fsynced (-1: never).
func (h *holder) syncedAt(p string) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if n, ok := h.synced[p]; ok {
		return n
	}
	return -1
}

func sizeOf(t *testing.T, p string) int64 {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// TestRoundDoesNotWaitForTheSweep: a writer's Durable is answered while the sweep of
// the durable stores is in the middle of its fsyncs (here held in one of them), not
// after it, and what it wrote is synced.
func TestRoundDoesNotWaitForTheSweep(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const name = "SWEEPTEST"
	c, dir := durableStore(t, ctx, name)
	// Only the sweep syncs a consumer's files: the first one holds it.
	h := newHolder(func(p string) bool {
		return strings.Contains(p, string(filepath.Separator)+"obs"+string(filepath.Separator))
	})
	defer h.let()
	c.syncer.setObserve(h.observe)
	if _, err := c.JS.CreateOrUpdateConsumer(ctx, name, jetstream.ConsumerConfig{Durable: "reader"}); err != nil {
		t.Fatal(err)
	}
	h.wait(t)
	if _, err := c.JS.Publish(ctx, "synctest.a", tenKB); err != nil {
		t.Fatal(err)
	}
	wait, stop := context.WithTimeout(ctx, 3*time.Second)
	defer stop()
	if err := c.Durable(wait, name); err != nil {
		t.Fatalf("Durable while the sweep is held: %v (the round waits for the sweep)", err)
	}
	block := filepath.Join(dir, "msgs", "1.blk")
	if got, want := h.syncedAt(block), sizeOf(t, block); got != want {
		t.Errorf("1.blk holds %d bytes, synced at %d when Durable returned", want, got)
	}
}

// TestRoundSyncsTheDirectoryOfARenamedMetaFile: nats-server writes a stream's new
// definition to a temporary file and renames it over meta.inf. A sweep that synced the
// new file but is still walking (held here in a block, before it syncs the directory)
// must not make a round beside it take the rename as synced.
func TestRoundSyncsTheDirectoryOfARenamedMetaFile(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const name = "METATEST"
	c, dir := durableStore(t, ctx, name)
	if _, err := c.JS.Publish(ctx, "synctest.a", tenKB); err != nil { // the sweep has a block to sync
		t.Fatal(err)
	}
	cfg := testStream(name)
	cfg.Description = "renamed in"
	if _, err := c.JS.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	// The walk takes meta.inf and meta.sum before msgs/ (lexical order): held in 1.blk,
	// the sweep has synced and noted both, and not yet their directory.
	h := newHolder(func(p string) bool { return strings.HasSuffix(p, ".blk") })
	defer h.let()
	c.syncer.setObserve(h.observe)
	h.wait(t)
	if h.syncedAt(filepath.Join(dir, "meta.inf")) < 0 {
		t.Fatal("the sweep held in 1.blk had not synced the new meta.inf: the walk's order has changed")
	}
	if h.syncedAt(dir) >= 0 {
		t.Fatal("the sweep synced the stream's directory before its blocks: the walk's order has changed")
	}
	if _, err := c.JS.Publish(ctx, "synctest.a", tenKB); err != nil {
		t.Fatal(err)
	}
	if err := c.Durable(ctx, name); err != nil {
		t.Fatal(err)
	}
	if h.syncedAt(dir) < 0 {
		t.Error("Durable returned with the stream's directory unsynced since meta.inf was renamed into it")
	}
}

// TestSweepLeavesNoBlockUnsynced: a block added while the sweep walks the store (after
// it synced the block before, which was written again meanwhile) must not become where
// the next round starts, or the writes to the block before are never synced by a round.
func TestSweepLeavesNoBlockUnsynced(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const name = "WALKTEST"
	c, dir := testStore(t, ctx, name)
	msgs := filepath.Join(dir, "msgs")
	if _, err := c.JS.Publish(ctx, "synctest.a", tenKB); err != nil {
		t.Fatal(err)
	}
	// A syncer of the test's own, its loops not started, over the same store.
	s := &syncer{root: filepath.Dir(dir), seen: map[string]fileState{}, last: map[string]int{}}
	if err := s.syncLast(name); err != nil {
		t.Fatal(err)
	}
	h := newHolder(func(p string) bool { return strings.HasSuffix(p, ".blk") })
	defer h.let()
	s.observe = h.observe
	if _, err := c.JS.Publish(ctx, "synctest.a", tenKB); err != nil { // 1.blk changed since
		t.Fatal(err)
	}
	swept := make(chan error, 1)
	go func() { swept <- s.syncAll(name) }()
	h.wait(t) // the sweep has synced 1.blk and listed the blocks
	for range 2 {
		if _, err := c.JS.Publish(ctx, "synctest.a", tenKB); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(filepath.Join(msgs, "2.blk")); err != nil {
		t.Fatalf("four messages of 10 KB did not start a second 32 KB block: %v", err)
	}
	h.let()
	if err := <-swept; err != nil {
		t.Fatal(err)
	}
	if err := s.syncLast(name); err != nil { // the next round
		t.Fatal(err)
	}
	first := filepath.Join(msgs, "1.blk")
	if got, want := h.syncedAt(first), sizeOf(t, first); got != want {
		t.Errorf("1.blk holds %d bytes, last synced at %d: the round after the sweep started past it", want, got)
	}
}
