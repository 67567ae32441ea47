package projection

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/kvstore"
	"exacto.dev/pkg/stream"
)

// ErrConflict: the key's revision moved on since it was read (another projector wrote
// it): read again and merge again.
var ErrConflict = kvstore.ErrConflict

// Store holds one projection's keys, each value with a revision: a KV bucket live, a map
// during a replay (pkg/kvstore).
type (
	Store  = kvstore.Store
	KV     = kvstore.KV
	Memory = kvstore.Memory
)

// NewMemory returns an empty Memory store.
func NewMemory() *Memory { return kvstore.NewMemory() }

// update applies merge to key's value with optimistic concurrency: read, merge, write
// at the revision read, and again on a conflict. merge gets nil for an absent key and
// the revision read, and says whether it changed anything; an unchanged value is not
// written.
func update(ctx context.Context, s Store, key string, merge func(old []byte, rev uint64) ([]byte, bool, error)) ([]byte, uint64, error) {
	r, remembers := s.(*recently)
	for try := range 50 {
		var old []byte
		var rev uint64
		var err error
		fromMemory := false
		if remembers && try == 0 {
			old, rev, fromMemory = r.remembered(key)
		}
		if !fromMemory {
			if old, rev, err = s.Get(ctx, key); err != nil {
				return nil, 0, err
			}
		}
		next, changed, err := merge(old, rev)
		if err == nil && !changed && fromMemory {
			// Nothing to write by what this process remembers: no write checks it, so read
			// what the store holds (another projector may have folded the record away).
			continue
		}
		if err != nil || !changed {
			return old, rev, err
		}
		rev, err = s.Put(ctx, key, next, rev)
		if err == nil {
			return next, rev, nil
		}
		if !errors.Is(err, ErrConflict) {
			return nil, 0, err
		}
	}
	return nil, 0, fmt.Errorf("projection: %s: too much contention", key)
}

// Remembering is s whose stores remember what they last wrote or read of each key, for
// the live projector (see recently).
func Remembering(s Stores) Stores {
	return Stores{Contacts: newRecently(s.Contacts, recentBytes), Campaigns: newRecently(s.Campaigns, recentBytes),
		Suppression: newRecently(s.Suppression, recentBytes), held: s.held}
}

// recently is a Store that remembers the value it last wrote or read of each key, and
// its revision, for update: the live projector's next event of a contact (a reply's
// classification, its stop, its CRM contact, within milliseconds of the reply) merges
// into what it wrote instead of reading the record back, a round trip each. A write
// made meanwhile by anyone else (another projector, a repair) makes the write at the
// remembered revision a conflict: the key is forgotten, and update reads it and merges
// again. Bounded: two generations of at most max bytes of values each. A record whose
// type can be cloned (cloner: a contact record, a campaign shard) is also kept decoded
// beside its bytes, so that its next update clones it instead of decoding it again (a
// shard of 40 members: 1.4 µs and 4 allocations against 42 µs and 137).
type recently struct {
	Store
	max       int
	mu        sync.Mutex
	cur, prev map[string]remembered
	size      int // of cur
}

type remembered struct {
	value []byte
	rev   uint64
	// decoded is value decoded, when updateRecord kept it (keepDecoded); never changed:
	// whoever merges into it merges into a clone.
	decoded any
}

// cloner is a record that recently keeps decoded: clone is a copy that merging into
// leaves the original as it was.
type cloner[T any] interface{ clone() T }

var (
	_ cloner[Contact] = Contact{}
	_ cloner[Shard]   = Shard{}
)

// recentBytes bounds a generation of a live store's remembered values (their encoding;
// kept decoded, a record takes about as much again): a reply's records are written
// again within a second, a thousand contacts at load, and a campaign's shards take
// about 1 MB at 10,000 members. At 512 KiB the shards were mostly forgotten before
// their next update and decoded again (their updates took 3.3 s of the projector's CPU
// over the memory row, 1.9 s at 2 MiB; peak RSS did not move beyond its noise).
const recentBytes = 2 << 20

func newRecently(s Store, max int) *recently {
	return &recently{Store: s, max: max, cur: map[string]remembered{}, prev: map[string]remembered{}}
}

func (r *recently) Get(ctx context.Context, key string) ([]byte, uint64, error) {
	v, rev, err := r.Store.Get(ctx, key)
	switch {
	case err == nil && rev != 0:
		r.remember(key, v, rev)
	case err == nil:
		r.forget(key) // absent
	}
	return v, rev, err
}

func (r *recently) Put(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	n, err := r.Store.Put(ctx, key, value, rev)
	if err != nil {
		r.forget(key) // moved on, or unknown: read it again
		return n, err
	}
	r.remember(key, value, n)
	return n, nil
}

func (r *recently) Delete(ctx context.Context, key string, rev uint64) error {
	r.forget(key)
	err := r.Store.Delete(ctx, key, rev)
	r.forget(key) // and what a read remembered meanwhile
	return err
}

// remembered is key's value and revision as this store last wrote or read them.
func (r *recently) remembered(key string) ([]byte, uint64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m, ok := r.lookup(key)
	return m.value, m.rev, ok
}

// lookup is what r remembers of key; r.mu is held.
func (r *recently) lookup(key string) (remembered, bool) {
	m, ok := r.cur[key]
	if !ok {
		m, ok = r.prev[key]
	}
	return m, ok
}

func (r *recently) remember(key string, value []byte, rev uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m, ok := r.lookup(key)
	if ok && m.rev > rev {
		return // a slower read or write of an older revision
	}
	keep := remembered{value: value, rev: rev}
	if ok && m.rev == rev {
		// The same message (a revision is a stream sequence), so its decoding holds: a
		// skipped write reads the key back, and decoding the shard again each time was
		// most of the projector's time in shards.
		keep.decoded = m.decoded
	}
	if r.size+len(value) > r.max {
		r.prev, r.cur, r.size = r.cur, map[string]remembered{}, 0
	}
	delete(r.prev, key)
	r.cur[key] = keep
	r.size += len(value)
}

// decodedAt is key's decoded value if r remembers one at revision rev (nil r: none).
func (r *recently) decodedAt(key string, rev uint64) any {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if m, ok := r.lookup(key); ok && m.rev == rev {
		return m.decoded
	}
	return nil
}

// keepDecoded keeps v as key's value decoded, if r remembers key at revision rev.
func (r *recently) keepDecoded(key string, rev uint64, v any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if m, ok := r.cur[key]; ok && m.rev == rev {
		m.decoded = v
		r.cur[key] = m
	} else if m, ok := r.prev[key]; ok && m.rev == rev {
		m.decoded = v
		r.prev[key] = m
	}
}

func (r *recently) forget(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.cur, key)
	delete(r.prev, key)
}

// Open binds the stores of the live projections (into "") or of a replay's (into NAME),
// creating a replay's buckets.
func Open(ctx context.Context, js jetstream.JetStream, into string, replicas int) (Stores, error) {
	var st [3]Store
	for i, name := range Names {
		cfg := stream.ProjectionBucket(name, into, replicas)
		var kv jetstream.KeyValue
		var err error
		if into == "" {
			kv, err = js.KeyValue(ctx, cfg.Bucket)
		} else {
			kv, err = js.CreateOrUpdateKeyValue(ctx, cfg)
		}
		if err != nil {
			return Stores{}, fmt.Errorf("bucket %s: %w", cfg.Bucket, err)
		}
		st[i] = KV{KV: kv, JS: js}
	}
	return Stores{Contacts: st[0], Campaigns: st[1], Suppression: st[2]}, nil
}

// Memories are stores in memory, for a replay.
func Memories() Stores {
	return Stores{Contacts: NewMemory(), Campaigns: NewMemory(), Suppression: NewMemory()}
}

// Copy writes every key of src's projections into dst's (over what dst holds for it).
func Copy(ctx context.Context, dst, src Stores) error {
	for _, name := range Names {
		from, _ := src.Of(name)
		to, _ := dst.Of(name)
		keys, err := from.Keys(ctx, "")
		if err != nil {
			return err
		}
		for _, k := range keys {
			v, _, err := from.Get(ctx, k)
			if err != nil {
				return err
			}
			if _, _, err := update(ctx, to, k, func([]byte, uint64) ([]byte, bool, error) { return v, true, nil }); err != nil {
				return fmt.Errorf("copy %s %s: %w", name, k, err)
			}
		}
	}
	return nil
}

// Fill writes src's projections into the fresh buckets of a replay into into, every
// write in flight at once: a rebuild of a million events must not wait for one fsync
// per key, and a fresh bucket needs no compare-and-set.
func Fill(ctx context.Context, js jetstream.JetStream, into string, src Stores) error {
	var acks []jetstream.PubAckFuture
	for _, name := range Names {
		from, _ := src.Of(name)
		keys, err := from.Keys(ctx, "")
		if err != nil {
			return err
		}
		bucket := stream.ProjectionBucket(name, into, 1).Bucket
		for _, k := range keys {
			v, _, err := from.Get(ctx, k)
			if err != nil {
				return err
			}
			f, err := js.PublishAsync("$KV."+bucket+"."+k, v)
			if err != nil {
				return fmt.Errorf("fill %s: %w", bucket, err)
			}
			acks = append(acks, f)
			if len(acks)%2000 == 0 { // stay under the client's limit of writes in flight
				select {
				case <-js.PublishAsyncComplete():
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		return ctx.Err()
	}
	for _, f := range acks {
		select {
		case err := <-f.Err():
			return fmt.Errorf("fill %s: %w", f.Msg().Subject, err)
		default:
		}
	}
	return nil
}

// held keeps, during a replay, the records it last read or wrote, decoded, each with
// the revision of the stored bytes it equals: a contact's next event need not decode
// what its last one encoded. At most maxHeld of each kind (the events of a contact come
// close together; a replay of millions must not hold everything twice).
//
// A replay into memory (the stores are Memory) also writes back: a changed record stays
// here, decoded, with the revision it was given, and is encoded and stored once — when
// it leaves to make room, or when the replay ends (flush) — instead of on every event
// that changes it. Whatever reads a store directly during the replay (a fold) flushes
// first.
type held struct {
	contacts map[string]heldRec[Contact]
	shards   map[string]heldRec[Shard]
	// behind are the held contacts (by record key) whose campaign members are not
	// derived from their latest record yet: with write-back, a contact's members are
	// derived once, before its record or any shard is stored, not on each of its events
	// (each would overwrite the last).
	behind map[string]struct{}
	// back: the replay's stores are memory of its own, nobody else writes them: write
	// back (Replay sets it when every store is a Memory).
	back bool
	// noMembers, noSuppression: a replay with write-back read for one projection
	// (ReplayOptions.Only) leaves out the derived one nothing reads.
	noMembers, noSuppression bool
}

type heldRec[T any] struct {
	rev   uint64
	v     T
	dirty bool // changed since it was stored (write-back)
}

var maxHeld = 1 << 16 // a variable for tests only

func newHeld() *held {
	return &held{contacts: map[string]heldRec[Contact]{}, shards: map[string]heldRec[Shard]{}, behind: map[string]struct{}{}}
}

// flush stores every changed record of h into s (write-back) and forgets them all:
// the records too when a contact's members could not be derived (that error is
// returned).
func (h *held) flush(ctx context.Context, s Stores) error {
	// Deriving the members (into the shards) and encoding the contact records (into
	// s.Contacts) share only reads of h.contacts: one core each.
	var behind error
	derived := make(chan struct{})
	go func() {
		defer close(derived)
		behind = h.catchUp(ctx, s)
	}()
	err := storeHeld(s.Contacts, h.contacts)
	<-derived
	clear(h.contacts)
	if err != nil {
		return err
	}
	if err := flushHeld(s.Campaigns, h.shards); err != nil {
		return err
	}
	return behind
}

// catchUp derives the campaign members of every contact that is behind. Each is
// taken off the list first: one that fails is reported once, not again with every
// later catch-up.
func (h *held) catchUp(ctx context.Context, s Stores) error {
	behind := h.behind
	h.behind = map[string]struct{}{} // new, not cleared: a cleared map keeps its size, and is walked whole
	var first error
	for key := range behind {
		r := h.contacts[key]
		if err := deriveMembers(ctx, s, r.v, r.rev); err != nil && first == nil {
			first = fmt.Errorf("campaign members of %s: %w", key, err)
		}
	}
	return first
}

// flushHeld stores every changed record of m into s and forgets them all.
func flushHeld[T any](s Store, m map[string]heldRec[T]) error {
	err := storeHeld(s, m)
	clear(m)
	return err
}

// storeHeld stores every changed record of m into s.
func storeHeld[T any](s Store, m map[string]heldRec[T]) error {
	for k, r := range m {
		if err := store(s, k, r); err != nil {
			return err
		}
	}
	return nil
}

// store writes r to s at its revision when it changed since it was stored.
func store[T any](s Store, key string, r heldRec[T]) error {
	if !r.dirty {
		return nil
	}
	b, err := encode(r.v)
	if err != nil {
		return err
	}
	s.(*Memory).Set(key, b, r.rev)
	return nil
}

// hold keeps r as key's in m, making room if m is full (a changed record that leaves is
// stored into s first).
func hold[T any](s Store, m map[string]heldRec[T], key string, r heldRec[T]) error {
	if _, ok := m[key]; !ok && len(m) >= maxHeld {
		for k, old := range m { // any one: map order is random
			if err := store(s, k, old); err != nil {
				return err
			}
			delete(m, k)
			break
		}
	}
	m[key] = r
	return nil
}

// updateRecord is update for a decoded record (what names its kind in errors): merge
// changes *v (the zero T when key is absent, found false) and says whether it did; a
// changed record is encoded and written at the revision read. It returns the record as
// stored and its revision. With m (a replay), the record comes from m when m holds key
// at the revision read, and merge owns it: m gives it up until the write; with back,
// m holds it for good (write-back, above).
func updateRecord[T any](ctx context.Context, s Store, m map[string]heldRec[T], back bool, what, key string, merge func(v *T, found bool) (bool, error)) (T, uint64, error) {
	if mem, ok := s.(*Memory); ok && back {
		return updateBack(ctx, mem, m, what, key, merge)
	}
	var v T
	r, _ := s.(*recently)
	_, rev, err := update(ctx, s, key, func(old []byte, rev uint64) ([]byte, bool, error) {
		v = *new(T)
		if h, ok := m[key]; ok && h.rev == rev && rev != 0 {
			v = h.v
			delete(m, key) // merge may change it; kept again below
		} else if d, ok := r.decodedAt(key, rev).(cloner[T]); ok && old != nil {
			v = d.clone()
		} else if old != nil {
			if err := json.Unmarshal(old, &v); err != nil {
				return nil, false, fmt.Errorf("%s: %w", what, err)
			}
		}
		changed, err := merge(&v, old != nil)
		if err != nil || !changed {
			return nil, false, err
		}
		b, err := encode(v)
		return b, true, err
	})
	if err != nil {
		var zero T
		return zero, 0, err
	}
	if _, ok := any(v).(cloner[T]); ok && r != nil && rev != 0 {
		r.keepDecoded(key, rev, v)
	}
	if m != nil && rev != 0 {
		if err := hold(s, m, key, heldRec[T]{rev: rev, v: v}); err != nil {
			var zero T
			return zero, 0, err
		}
	}
	return v, rev, nil
}

// updateBack is updateRecord for a replay into memory: the record is read from m, else
// from mem, merged in place, and given mem's next revision when it changed; it is
// stored when it leaves m.
func updateBack[T any](ctx context.Context, mem *Memory, m map[string]heldRec[T], what, key string, merge func(v *T, found bool) (bool, error)) (T, uint64, error) {
	var zero T
	h, ok := m[key]
	if !ok {
		old, rev, err := mem.Get(ctx, key)
		if err != nil {
			return zero, 0, err
		}
		h.rev = rev
		if old != nil {
			if err := json.Unmarshal(old, &h.v); err != nil {
				return zero, 0, fmt.Errorf("%s: %w", what, err)
			}
		}
	}
	changed, err := merge(&h.v, h.rev != 0)
	if err != nil {
		return zero, 0, err
	}
	if changed {
		h.rev, h.dirty = mem.NextRev(), true
	}
	if h.rev == 0 { // absent, and left so
		return h.v, 0, nil
	}
	if err := hold(mem, m, key, h); err != nil {
		return zero, 0, err
	}
	return h.v, h.rev, nil
}
