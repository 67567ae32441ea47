package projection

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/lifecycle"
)

// Both stores refuse a write at a revision that moved on: Create over an existing key,
// Update at a stale (or a future) revision are conflicts, and the value stays.
func TestPutRefusesAStaleRevision(t *testing.T) {
	ctx := context.Background()
	live, _ := openLive(t)
	for name, s := range map[string]Store{"kv": live.Contacts, "memory": NewMemory()} {
		t.Run(name, func(t *testing.T) {
			rev1, err := s.Put(ctx, "acme.ct_1", []byte(`{"v":1}`), 0)
			if err != nil || rev1 == 0 {
				t.Fatalf("create: %d %v", rev1, err)
			}
			if _, err := s.Put(ctx, "acme.ct_1", []byte(`{"v":"create again"}`), 0); !errors.Is(err, ErrConflict) {
				t.Fatalf("create over an existing key: %v, want ErrConflict", err)
			}
			rev2, err := s.Put(ctx, "acme.ct_1", []byte(`{"v":2}`), rev1)
			if err != nil || rev2 <= rev1 {
				t.Fatalf("update at the revision read: %d %v", rev2, err)
			}
			for _, rev := range []uint64{rev1, rev2 + 7} {
				if _, err := s.Put(ctx, "acme.ct_1", []byte(`{"v":"stale"}`), rev); !errors.Is(err, ErrConflict) {
					t.Fatalf("update at revision %d (current %d): %v, want ErrConflict", rev, rev2, err)
				}
			}
			v, rev, err := s.Get(ctx, "acme.ct_1")
			if err != nil || rev != rev2 || string(v) != `{"v":2}` {
				t.Fatalf("after the refused writes: %s at %d (%v), want {\"v\":2} at %d", v, rev, err, rev2)
			}
		})
	}
}

// paused is the context key of the projector that pauses between its read and its write.
type paused struct{}

// pausing is a store on which the projector whose context carries paused stops right
// after its first read of key, until resume: another projector writes the key between
// its read and its write.
type pausing struct {
	Store
	key       string
	read      chan struct{} // closed once the paused projector has read key
	resume    chan struct{}
	once      sync.Once
	conflicts atomic.Int32 // writes of key refused as conflicts
}

func (p *pausing) Get(ctx context.Context, key string) ([]byte, uint64, error) {
	v, rev, err := p.Store.Get(ctx, key)
	if key == p.key && ctx.Value(paused{}) != nil {
		p.once.Do(func() { close(p.read); <-p.resume })
	}
	return v, rev, err
}

func (p *pausing) Put(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	r, err := p.Store.Put(ctx, key, value, rev)
	if key == p.key && errors.Is(err, ErrConflict) {
		p.conflicts.Add(1)
	}
	return r, err
}

// Two projectors forced to interleave on one contact: the first reads the record, the
// second reads, merges and writes it, then the first writes. Its write is refused (the
// revision moved on), it merges again, and the record holds both events: the state one
// projector builds from them in order. Both for a record not yet there (two creates)
// and for one already there (two updates), each event paused in turn.
func TestInterleavedProjectorsKeepBothEvents(t *testing.T) {
	ctx := context.Background()
	conn := brokertest.Start(t, "")
	email := "ana@northwind.example"
	before := event(1, envelope.TypeEmailDelivered, email, "camp-1", 0)
	sent := event(2, envelope.TypeEmailSent, email, "camp-2", time.Minute)
	reply := event(3, envelope.TypeReplyReceived, email, "camp-1", time.Hour)
	who, err := identify(ctx, nil, sent)
	if err != nil {
		t.Fatal(err)
	}
	key := ContactKey("acme", who.contactID)
	n := 0
	for _, existing := range []bool{false, true} {
		for _, pair := range [][2]envelope.Envelope{{sent, reply}, {reply, sent}} {
			n++
			live, err := Open(ctx, conn.JS, fmt.Sprint("case", n), 1) // buckets of its own
			if err != nil {
				t.Fatal(err)
			}
			want := Memories()
			if existing {
				for _, s := range []Stores{live, want} {
					if _, err := Apply(ctx, s, nil, before); err != nil {
						t.Fatal(err)
					}
				}
			}
			p := &pausing{Store: live.Contacts, key: key, read: make(chan struct{}), resume: make(chan struct{})}
			// Whatever ends the test (a t.Fatal below too), the paused projector resumes.
			resume := sync.OnceFunc(func() { close(p.resume) })
			t.Cleanup(resume)
			stores := live
			stores.Contacts = p
			first, second := pair[0], pair[1]
			done := make(chan error, 1)
			go func() {
				_, err := Apply(context.WithValue(ctx, paused{}, true), stores, nil, first)
				done <- err
			}()
			select {
			case <-p.read:
			case err := <-done:
				t.Fatalf("existing %v, %s paused: the projector ended before its read: %v", existing, first.Type, err)
			}
			if _, err := Apply(ctx, stores, nil, second); err != nil {
				t.Fatal(err)
			}
			resume()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if c := p.conflicts.Load(); c != 1 {
				t.Fatalf("existing %v, %s paused: %d conflicts, want the paused write refused once", existing, first.Type, c)
			}
			for _, env := range pair {
				if _, err := Apply(ctx, want, nil, env); err != nil {
					t.Fatal(err)
				}
			}
			if err := sameProjections(ctx, want, live); err != nil {
				t.Fatalf("existing %v, %s paused: not what one projector in order makes: %v", existing, first.Type, err)
			}
			c, ok, err := (Reader{Stores: live}).ContactByEmail(ctx, "acme", email)
			if err != nil || !ok || !c.InCampaign("camp-1").Replied || c.InCampaign("camp-2").Status != lifecycle.Sent {
				t.Fatalf("existing %v, %s paused: the record lost an event: %+v", existing, first.Type, c)
			}
		}
	}
}

// openLive starts a server and opens the live projections' buckets on it.
func openLive(t *testing.T) (Stores, jetstream.JetStream) {
	t.Helper()
	conn := brokertest.Start(t, "")
	live, err := Open(context.Background(), conn.JS, "", 1)
	if err != nil {
		t.Fatal(err)
	}
	return live, conn.JS
}

// countingStore counts its reads and the bytes written through it.
type countingStore struct {
	Store
	gets, written atomic.Int64
}

func (c *countingStore) Put(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	c.written.Add(int64(len(value)))
	return c.Store.Put(ctx, key, value, rev)
}

func (c *countingStore) Get(ctx context.Context, key string) ([]byte, uint64, error) {
	c.gets.Add(1)
	return c.Store.Get(ctx, key)
}

// A live projector does not read back what it wrote: a contact's next event merges into
// the record and shard it remembers. Written meanwhile by another projector, the record
// is read again (the write at the remembered revision is a conflict) and nothing of
// either is lost.
func TestRememberedRecordsAreNotReadBack(t *testing.T) {
	ctx := context.Background()
	live, _ := openLive(t)
	contactsKV, campaignsKV := &countingStore{Store: live.Contacts}, &countingStore{Store: live.Campaigns}
	mine := Remembering(Stores{Contacts: contactsKV, Campaigns: campaignsKV, Suppression: live.Suppression})
	other := live // another projector, remembering nothing
	ev := func(i int, typ string, at time.Duration) envelope.Envelope {
		return event(i, typ, "ana@northwind.example", "camp-1", at)
	}
	if _, err := Apply(ctx, mine, nil, ev(1, envelope.TypeEmailSent, 0)); err != nil {
		t.Fatal(err)
	}
	contactsKV.gets.Store(0)
	campaignsKV.gets.Store(0)
	if _, err := Apply(ctx, mine, nil, ev(2, envelope.TypeEmailDelivered, time.Minute)); err != nil {
		t.Fatal(err)
	}
	if c, s := contactsKV.gets.Load(), campaignsKV.gets.Load(); c != 0 || s != 0 {
		t.Fatalf("the contact's second event read its record %d times and its shard %d times, want 0", c, s)
	}
	// Another projector writes the record and the shard; then mine applies a third event.
	if _, err := Apply(ctx, other, nil, ev(3, envelope.TypeEmailOpened, 2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	res, err := Apply(ctx, mine, nil, ev(4, envelope.TypeReplyReceived, 3*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if contactsKV.gets.Load() == 0 {
		t.Fatal("a record another projector wrote was not read again")
	}
	want := Memories()
	for i, typ := range []string{envelope.TypeEmailSent, envelope.TypeEmailDelivered, envelope.TypeEmailOpened, envelope.TypeReplyReceived} {
		if _, err := Apply(ctx, want, nil, ev(i+1, typ, time.Duration(i)*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	if err := sameProjections(ctx, want, live); err != nil {
		t.Fatalf("after a write from elsewhere: %v (the last event's contact: %+v)", err, res.Contact.Lifecycle)
	}
}

// A store remembers at most two generations of max bytes: the oldest are forgotten.
func TestRecentlyForgetsTheOldest(t *testing.T) {
	ctx := context.Background()
	r := newRecently(NewMemory(), 10)
	for i := range 6 {
		if _, err := r.Put(ctx, fmt.Sprint("k", i), []byte("1234"), 0); err != nil {
			t.Fatal(err)
		}
	}
	// Generations of at most 10 bytes: {k0 k1}, {k2 k3}, {k4 k5}.
	for i, want := range []bool{false, false, true, true, true, true} {
		if _, _, ok := r.remembered(fmt.Sprint("k", i)); ok != want {
			t.Fatalf("k%d remembered %v, want %v", i, ok, want)
		}
	}
	// A conflict forgets the key.
	if _, err := r.Put(ctx, "k5", []byte("x"), 0); !errors.Is(err, ErrConflict) {
		t.Fatalf("create over k5: %v", err)
	}
	if _, _, ok := r.remembered("k5"); ok {
		t.Fatal("k5 remembered after a conflict")
	}
}

// An event that changes nothing of what a projector remembers is checked against what
// the store holds: here another projector deleted the record meanwhile (as a fold of
// the contact into another does), and the event writes it again, as a projector that
// remembers nothing would.
func TestRememberedNoOpIsCheckedAgainstTheStore(t *testing.T) {
	ctx := context.Background()
	live, _ := openLive(t)
	mine := Remembering(live)
	env := event(1, envelope.TypeReplyReceived, "ana@northwind.example", "camp-1", 0)
	res, err := Apply(ctx, mine, nil, env)
	if err != nil || !res.Changed {
		t.Fatalf("apply: %v %v", res.Changed, err)
	}
	key := ContactKey(env.Tenant, res.Contact.ContactID)
	_, rev, err := live.Contacts.Get(ctx, key)
	if err != nil || rev == 0 {
		t.Fatalf("record: %d %v", rev, err)
	}
	if err := live.Contacts.Delete(ctx, key, rev); err != nil { // another projector, not mine
		t.Fatal(err)
	}
	if _, err := Apply(ctx, mine, nil, env); err != nil { // a redelivery: nothing new to what mine remembers
		t.Fatal(err)
	}
	if _, rev, err := live.Contacts.Get(ctx, key); err != nil || rev == 0 {
		t.Fatalf("the record deleted elsewhere was not written again: rev %d, %v", rev, err)
	}
}

// What a store remembers is never replaced by an older revision of it.
func TestRecentlyKeepsTheNewerRevision(t *testing.T) {
	r := newRecently(NewMemory(), 1<<10)
	r.remember("k", []byte("new"), 7)
	r.remember("k", []byte("old"), 5)
	if v, rev, _ := r.remembered("k"); string(v) != "new" || rev != 7 {
		t.Fatalf("remembered %s at %d, want new at 7", v, rev)
	}
}

// A remembered shard is kept decoded: its next update clones it instead of decoding it
// again (it allocates less than the decoding alone would), and a shard an update
// returned is not changed by the next one.
func TestRememberedShardIsKeptDecoded(t *testing.T) {
	ctx := context.Background()
	r := newRecently(NewMemory(), recentBytes)
	const key = "acme.c.00"
	add := func(id string) func(*Shard, bool) (bool, error) {
		return func(sh *Shard, _ bool) (bool, error) {
			if sh.Members == nil {
				sh.Members = map[string]Member{}
			}
			sh.Members[id] = Member{Rev: 1, Status: lifecycle.Status("replied"), Replied: true}
			return true, nil
		}
	}
	for i := range 100 {
		if _, _, err := updateRecord(ctx, r, nil, false, "campaign shard", key, add(fmt.Sprint("ct_", i))); err != nil {
			t.Fatal(err)
		}
	}
	first, _, err := updateRecord(ctx, r, nil, false, "campaign shard", key, add("ct_first"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := updateRecord(ctx, r, nil, false, "campaign shard", key, add("ct_next")); err != nil {
		t.Fatal(err)
	}
	if _, ok := first.Members["ct_next"]; ok {
		t.Fatal("the next update changed the shard an earlier one returned")
	}
	stored, rev, err := r.Store.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var want Shard
	if err := json.Unmarshal(stored, &want); err != nil {
		t.Fatal(err)
	}
	if got, ok := r.decodedAt(key, rev).(Shard); !ok || !reflect.DeepEqual(got, want) {
		t.Fatalf("kept decoded at revision %d: %v, want what the store holds (%d members)", rev, ok, len(want.Members))
	}
	decoding := testing.AllocsPerRun(20, func() {
		var sh Shard
		json.Unmarshal(stored, &sh)
	})
	n := 0
	updating := testing.AllocsPerRun(20, func() {
		n++
		if _, _, err := updateRecord(ctx, r, nil, false, "campaign shard", key, add(fmt.Sprint("ct_more", n))); err != nil {
			t.Fatal(err)
		}
	})
	if updating >= decoding {
		t.Fatalf("an update allocated %.0f times, decoding the shard alone %.0f: it was decoded again", updating, decoding)
	}
	// An update that changes nothing reads the key back (update checks a remembered no-op
	// against the store): the revision read is the one kept, and so is its decoding.
	unchanged := func(*Shard, bool) (bool, error) { return false, nil }
	skipping := testing.AllocsPerRun(20, func() {
		if _, _, err := updateRecord(ctx, r, nil, false, "campaign shard", key, unchanged); err != nil {
			t.Fatal(err)
		}
	})
	if skipping >= decoding {
		t.Fatalf("an update that changed nothing allocated %.0f times, decoding the shard alone %.0f: reading it back lost its decoding", skipping, decoding)
	}
}
