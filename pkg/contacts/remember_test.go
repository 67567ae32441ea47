package contacts

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"exacto.dev/pkg/kvstore"
)

// indexReads counts a store's reads of index entries.
type indexReads struct {
	*kvstore.Memory
	n int
}

func (s *indexReads) Get(ctx context.Context, key string) ([]byte, uint64, error) {
	if strings.Contains(key, ".k.") {
		s.n++
	}
	return s.Memory.Get(ctx, key)
}

// Remembering index entries changes nothing but the reads: two directories that
// remember, taking turns over one store (two projectors), return the same records as
// one that reads every entry, given the same random histories, and leave the same
// values after every step — also when the other one has merged, moved or rewritten
// what one remembers, and after records were spoiled. They read fewer index entries.
func TestRememberedIndexIsReadingIt(t *testing.T) {
	ctx := context.Background()
	at := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	now := func() time.Time { return at }
	remembered, read, found := 0, 0, 0
	for trial := range 300 {
		r := rand.New(rand.NewPCG(uint64(trial), 11))
		shared, alone := &indexReads{Memory: kvstore.NewMemory()}, &indexReads{Memory: kvstore.NewMemory()}
		two := []*Directory{{store: shared, now: now, index: newIndexMemory()}, {store: shared, now: now, index: newIndexMemory()}}
		ref := &Directory{store: alone, now: now}
		for step := range 40 {
			if r.IntN(8) == 0 {
				if err := spoil(ctx, r, shared.Memory, alone.Memory); err != nil {
					t.Fatal(err)
				}
			}
			s := randomSeen(r)
			d := two[r.IntN(2)]
			got, gerr := d.Record(ctx, "acme", s)
			want, werr := ref.Record(ctx, "acme", s)
			if fmt.Sprint(gerr) != fmt.Sprint(werr) || !reflect.DeepEqual(got, want) {
				t.Fatalf("trial %d step %d, %+v:\n remembering %+v (%v)\n reading     %+v (%v)", trial, step, s, got, gerr, want, werr)
			}
			keys, _ := alone.Keys(ctx, "")
			if gk, _ := shared.Keys(ctx, ""); !slices.Equal(gk, keys) {
				t.Fatalf("trial %d step %d: keys %v, reading %v", trial, step, gk, keys)
			}
			for _, k := range keys {
				gv, _, _ := shared.Memory.Get(ctx, k)
				wv, _, _ := alone.Memory.Get(ctx, k)
				if string(gv) != string(wv) {
					t.Fatalf("trial %d step %d (%+v): %s = %s, reading %s", trial, step, s, k, gv, wv)
				}
			}
			// Find through either directory finds what reading finds.
			if e := s.Email; e != "" {
				g, gok, gerr := two[r.IntN(2)].Find(ctx, "acme", "email", e)
				w, wok, werr := ref.Find(ctx, "acme", "email", e)
				if gok != wok || fmt.Sprint(gerr) != fmt.Sprint(werr) || !reflect.DeepEqual(g, w) {
					t.Fatalf("trial %d step %d: find %s: %+v %v, reading %+v %v", trial, step, e, g, gok, w, wok)
				}
				found++
			}
		}
		remembered, read = remembered+shared.n, read+alone.n
	}
	if found < 1000 || remembered*2 > read {
		t.Fatalf("%d finds; %d index reads remembering, %d reading: the memory should save at least half", found, remembered, read)
	}
}

// Each generation holds at most indexMemorySize entries; an entry used from the older
// one moves to the newer; forgotten is forgotten.
func TestIndexMemoryBounded(t *testing.T) {
	m := newIndexMemory()
	for i := range 3 * indexMemorySize {
		m.put(fmt.Sprint(i), indexEntry{fmt.Sprint("ct_", i), uint64(i + 1)})
	}
	if len(m.cur) > indexMemorySize || len(m.prev) > indexMemorySize {
		t.Fatalf("%d and %d entries", len(m.cur), len(m.prev))
	}
	if _, ok := m.get("0"); ok {
		t.Fatal("the oldest entry outlived two generations")
	}
	old := fmt.Sprint(2*indexMemorySize - 1)
	if e, ok := m.get(old); !ok || e.id != "ct_"+old {
		t.Fatalf("the previous generation's entry: %+v %v", e, ok)
	}
	if _, ok := m.cur[old]; !ok {
		t.Fatal("an entry used from the previous generation was not kept in the current one")
	}
	m.forget([]string{old})
	if _, ok := m.get(old); ok {
		t.Fatal("a forgotten entry was remembered")
	}
}

// A directory that remembers a key's entry from before another merged its contact
// answers as reading does: it writes nothing where reading writes nothing (no record
// rewritten at a new revision, its time changed), and a directory that only finds
// learns the entry as it is now.
func TestEntryRememberedBeforeAMerge(t *testing.T) {
	ctx := context.Background()
	store := &puts{Memory: kvstore.NewMemory()}
	clock := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	now := func() time.Time { clock = clock.Add(time.Second); return clock }
	d1 := &Directory{store: store, now: now, index: newIndexMemory()}
	d2 := &Directory{store: store, now: now, index: newIndexMemory()}
	finder := &Directory{store: store, now: now, index: newIndexMemory()}
	crm := Seen{External: map[string]string{CRMContactID: "hubspot:1"}}
	y, err := d2.Record(ctx, "acme", crm)
	if err != nil {
		t.Fatal(err)
	}
	if f, ok, err := finder.Find(ctx, "acme", CRMContactID, "hubspot:1"); err != nil || !ok || f.ContactID != y.ContactID {
		t.Fatalf("find before the merge: %+v %v %v", f, ok, err)
	}
	x, err := d1.Record(ctx, "acme", Seen{Email: "ana@northwind.example", External: crm.External})
	if err != nil || x.ContactID == y.ContactID {
		t.Fatalf("the merge: %+v %v", x, err)
	}
	store.n = 0
	again, err := d2.Record(ctx, "acme", crm)
	if err != nil || again.ContactID != x.ContactID || !again.Updated.Equal(x.Updated) || store.n != 0 {
		t.Fatalf("recorded again by the directory that remembered the entry: %+v %v, %d writes; want %s as written, no write", again, err, store.n, x.ContactID)
	}
	if f, ok, err := finder.Find(ctx, "acme", CRMContactID, "hubspot:1"); err != nil || !ok || f.ContactID != x.ContactID {
		t.Fatalf("find after the merge: %+v %v %v", f, ok, err)
	}
	if e, ok := finder.index.get(indexKey("acme", "crm_contact_id:hubspot:1")); !ok || e.id != x.ContactID {
		t.Fatalf("the finder remembers %+v %v, want the entry as it is now (%s)", e, ok, x.ContactID)
	}
}
