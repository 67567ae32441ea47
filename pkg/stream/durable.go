package stream

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Who syncs a durable store's writes. An external server (or `sync: 2m`) syncs, or
// not, on its own. The embedded single node of `exacto up` runs with sync always by
// the process that embeds it instead (pkg/broker, sync.go): a writer whose store must
// not lose an acknowledged write asks for its sync before it relies on it — in that
// process directly, from another process (a worker or a tool bound to that server) by
// the $EXACTO.SYNC request. The embedding process marks EXACTO_EVENTS so
// (SyncMetadata: SyncByProcess), and Durable reads the mark.
const (
	SyncMetadata  = "exacto.sync"
	SyncByProcess = "process"
	// SyncSubject is where a process bound to another's embedded server asks that
	// process to sync stores: the stream names, space-separated; the answer is empty,
	// or the error (pkg/broker answers it).
	SyncSubject = "$EXACTO.SYNC"
)

// DurableStores are the stores whose every acknowledged write must be on disk before it
// is relied on: every file store but the derived ones.
func DurableStores(o Options) []string {
	var out []string
	for _, s := range Streams(o) {
		if !slices.Contains(Derived, s.Name) {
			out = append(out, s.Name)
		}
	}
	for _, b := range Buckets(o) {
		if name := "KV_" + b.Bucket; b.Storage == jetstream.FileStorage && !slices.Contains(Derived, name) {
			out = append(out, name)
		}
	}
	return out
}

// local are the syncers of the servers this process embeds, by server id: a
// connection to one of them asks it directly, not over NATS.
var local sync.Map // server id -> func(context.Context, ...string) error

// ServeSync makes sync the syncer of the embedded server serverID for this process's
// connections to it (pkg/broker); the returned func withdraws it.
func ServeSync(serverID string, fn func(ctx context.Context, streams ...string) error) (withdraw func()) {
	local.Store(serverID, fn)
	return func() { local.Delete(serverID) }
}

// localSync is the syncer of nc's server when this process embeds it.
func localSync(nc *nats.Conn) func(context.Context, ...string) error {
	if f, ok := local.Load(nc.ConnectedServerId()); ok {
		return f.(func(context.Context, ...string) error)
	}
	return nil
}

// syncMark caches, per connection, whether its server's process syncs (read again
// every markTTL: a server restarted in another mode is seen).
var syncMark sync.Map // markKey -> markEntry

type markKey struct {
	nc     *nats.Conn
	server string
}

type markEntry struct {
	byProcess bool
	at        time.Time
}

const markTTL = 10 * time.Second

// Durable returns once everything the named streams of js's server held when it was
// called is on disk: at once where the server syncs each write itself. A process-synced
// server that cannot be asked (its process gone, no answer) is an error: the write is
// not known to be durable.
func Durable(ctx context.Context, js jetstream.JetStream, streams ...string) error {
	nc := js.Conn()
	var m *marks
	var stored uint64
	if slices.Contains(streams, Events) { // what this process saw stored, the sync covers
		m = marksOf(nc)
		stored = m.stored.Load()
	}
	if err := syncStores(ctx, js, streams); err != nil {
		return err
	}
	if m != nil {
		m.raiseDurable(stored)
	}
	return nil
}

func syncStores(ctx context.Context, js jetstream.JetStream, streams []string) error {
	nc := js.Conn()
	if sync := localSync(nc); sync != nil {
		return sync(ctx, streams...)
	}
	byProcess, err := SyncedByProcess(ctx, js)
	if err != nil || !byProcess {
		return err
	}
	m, err := nc.RequestWithContext(ctx, SyncSubject, []byte(strings.Join(streams, " ")))
	if err != nil {
		return fmt.Errorf("sync %v: %w", streams, err)
	}
	if len(m.Data) > 0 {
		return fmt.Errorf("sync %v: %s", streams, m.Data)
	}
	return nil
}

// marks are, per server this process talks to (by id), the highest sequence of
// EXACTO_EVENTS it saw stored (a PubAck, a delivery) and the highest known to be on
// disk.
type marks struct {
	stored, durable atomic.Uint64
	mu              sync.Mutex
	moved           chan struct{} // closed when durable rises
}

var serverMarks sync.Map // server id -> *marks

func marksOf(nc *nats.Conn) *marks {
	id := nc.ConnectedServerId()
	if m, ok := serverMarks.Load(id); ok {
		return m.(*marks)
	}
	m, _ := serverMarks.LoadOrStore(id, &marks{moved: make(chan struct{})})
	return m.(*marks)
}

// raiseDurable sets durable to at least x and wakes whoever waits for it.
func (m *marks) raiseDurable(x uint64) {
	if x <= m.durable.Load() {
		return
	}
	raise(&m.durable, x)
	m.mu.Lock()
	close(m.moved)
	m.moved = make(chan struct{})
	m.mu.Unlock()
}

// WaitDurable returns once EXACTO_EVENTS of js's server is on disk through every event
// this process saw stored so far (a derived event it just published among them):
// covered by the next sync anyone asks for — a webhook's, a checkpoint's — or, when
// none comes within within, by one asked for here. Where the server syncs each write
// itself (or nobody does), at once. A consumer waits so before its guard says an
// attempt that derived events completed: a guard on disk before its derived event would
// skip the attempt that would derive it again.
func WaitDurable(ctx context.Context, js jetstream.JetStream, within time.Duration) error {
	if by, err := SyncedByProcess(ctx, js); err != nil || !by {
		return err
	}
	m := marksOf(js.Conn())
	want := m.stored.Load()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for {
		m.mu.Lock()
		moved := m.moved
		m.mu.Unlock()
		if m.durable.Load() >= want {
			return nil
		}
		select {
		case <-moved:
		case <-deadline.C:
			return Durable(ctx, js, Events)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// raise sets v to at least x.
func raise(v *atomic.Uint64, x uint64) {
	for cur := v.Load(); x > cur && !v.CompareAndSwap(cur, x); cur = v.Load() {
	}
}

// NoteStored notes that EXACTO_EVENTS of js's server holds seq (its PubAck came): the
// next Durable covers it, and says so to DurableThrough.
func NoteStored(js jetstream.JetStream, seq uint64) { raise(&marksOf(js.Conn()).stored, seq) }

// DurableThrough returns once EXACTO_EVENTS is on disk up to seq, a sequence it holds;
// stored (at least seq) is the highest the caller knows it holds (a delivery's
// sequence and what is pending after it). At once when an earlier sync covered seq,
// else after one Durable, which covers every sequence stored before it was called.
// Whatever is derived from an event — an index entry that says it is stored, a guard,
// a projection — must not reach the disk before the event does: a reader of the
// stream calls this before it acts on what it read (a power cut would otherwise leave
// the derived store ahead of the log, and an index entry of a lost event would make
// the provider's retry of it a "duplicate").
func DurableThrough(ctx context.Context, js jetstream.JetStream, seq, stored uint64) error {
	m := marksOf(js.Conn())
	if seq <= m.durable.Load() {
		return nil
	}
	raise(&m.stored, max(seq, stored))
	return Durable(ctx, js, Events)
}

// SyncedByProcess reports whether js's server is synced by the process that embeds it
// (Durable then asks it), rather than on each write by the server itself: EXACTO_EVENTS
// is marked so, or a process answers $EXACTO.SYNC there. The mark makes it fail
// closed: a marked server whose process does not answer is not taken for synced.
func SyncedByProcess(ctx context.Context, js jetstream.JetStream) (bool, error) {
	nc := js.Conn()
	if localSync(nc) != nil {
		return true, nil
	}
	// Keyed by the server too: a server restarted (another id) in another mode is asked
	// again at once.
	key := markKey{nc, nc.ConnectedServerId()}
	if e, ok := syncMark.Load(key); ok && time.Since(e.(markEntry).at) < markTTL {
		return e.(markEntry).byProcess, nil
	}
	s, err := js.Stream(ctx, Events)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return false, nil // no topology yet: nothing durable to sync
	}
	if err != nil {
		return false, fmt.Errorf("who syncs %s: %w", Events, err)
	}
	byProcess := s.CachedInfo().Config.Metadata[SyncMetadata] == SyncByProcess
	if !byProcess { // unmarked (a topology declared without it): does a process answer?
		_, err := nc.RequestWithContext(ctx, SyncSubject, nil)
		byProcess = err == nil
	}
	syncMark.Store(key, markEntry{byProcess, time.Now()})
	return byProcess, nil
}

// DurableKV is kv whose writes return once durable (Durable after each).
func DurableKV(js jetstream.JetStream, kv jetstream.KeyValue) jetstream.KeyValue {
	return durableKV{KeyValue: kv, js: js, name: "KV_" + kv.Bucket()}
}

type durableKV struct {
	jetstream.KeyValue
	js   jetstream.JetStream
	name string
}

func (d durableKV) sync(ctx context.Context, rev uint64, err error) (uint64, error) {
	if err != nil {
		return rev, err
	}
	return rev, Durable(ctx, d.js, d.name)
}

func (d durableKV) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	rev, err := d.KeyValue.Put(ctx, key, value)
	return d.sync(ctx, rev, err)
}

func (d durableKV) PutString(ctx context.Context, key string, value string) (uint64, error) {
	return d.Put(ctx, key, []byte(value))
}

func (d durableKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	rev, err := d.KeyValue.Create(ctx, key, value, opts...)
	return d.sync(ctx, rev, err)
}

func (d durableKV) Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error) {
	rev, err := d.KeyValue.Update(ctx, key, value, last)
	return d.sync(ctx, rev, err)
}

func (d durableKV) Delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	if err := d.KeyValue.Delete(ctx, key, opts...); err != nil {
		return err
	}
	return Durable(ctx, d.js, d.name)
}

func (d durableKV) Purge(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	if err := d.KeyValue.Purge(ctx, key, opts...); err != nil {
		return err
	}
	return Durable(ctx, d.js, d.name)
}
