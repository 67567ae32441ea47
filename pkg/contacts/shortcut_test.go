package contacts

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"exacto.dev/pkg/kvstore"
)

// randomSeen names a few of a small world's e-mails (one in two spellings), phones
// and ids, so that histories link, merge and repeat themselves.
func randomSeen(r *rand.Rand) Seen {
	pick := func(vals ...string) string { return vals[r.IntN(len(vals))] }
	s := Seen{
		Email:    pick("", "", "ana@northwind.example", "ANA@Northwind.example", "ben@northwind.example", "cy@gmail.com"),
		Phone:    pick("", "", "", "+1 415 555 0100", "14155550101"),
		External: map[string]string{},
	}
	for _, ids := range [][]string{ // kind, then its values
		{CRMContactID, "hubspot:1", "hubspot:2"},
		{SendingPlatformContactID, "instantly:l1", "instantly:l2"},
		{ClayRecordID, "clay:r1"},
		{CampaignID, "instantly:c1", "instantly:c2"},
		{MessageID, "m1", "m2", "m3"},
		{CRMActivityID, "hubspot:n1"},
	} {
		if r.IntN(3) == 0 {
			s.External[ids[0]] = pick(ids[1:]...)
		}
	}
	return s
}

// spoil rewrites one record of both stores as record never writes one, the same way in
// each: what a shortcut that trusted the stored form would get wrong.
func spoil(ctx context.Context, r *rand.Rand, stores ...*kvstore.Memory) error {
	keys, err := stores[0].Keys(ctx, "acme.c.")
	if err != nil || len(keys) == 0 {
		return err
	}
	key := keys[r.IntN(len(keys))]
	how := r.IntN(11)
	for _, st := range stores {
		data, rev, err := st.Get(ctx, key)
		if err != nil {
			return err
		}
		var rec Record
		if err := json.Unmarshal(data, &rec); err != nil {
			return err
		}
		switch how {
		case 0:
			slices.Reverse(rec.Keys)
		case 1:
			rec.Emails = append(rec.Emails, rec.Emails...)
		case 2:
			if rec.External == nil {
				rec.External = map[string][]string{}
			}
			rec.External[MessageID] = []string{} // stored as [], where record writes none
		case 3:
			rec.AccountID = "ac_elsewhere"
		case 4:
			rec.Merged = append(rec.Merged, rec.ContactID)
		case 5:
			rec.ContactID = ContactID("acme", "email:someone@else.example")
		case 6:
			rec.Keys = append(rec.Keys, rec.Keys[len(rec.Keys)-1])
		case 7: // its id no longer its least key's
			rec.Keys = append([]string{"email:0@northwind.example"}, rec.Keys...)
		case 8: // its phone keys without their phones
			rec.Phones = nil
		case 9: // its e-mail keys without their e-mails (a free-mail account stays the same)
			rec.Emails = nil
		case 10:
			rec.Phones = append(rec.Phones, rec.Phones...)
		}
		if data, err = json.Marshal(rec); err != nil {
			return err
		}
		if _, err := st.Put(ctx, key, data, rev); err != nil {
			return err
		}
	}
	return nil
}

// puts counts a store's writes.
type puts struct {
	*kvstore.Memory
	n int
}

func (p *puts) Put(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	p.n++
	return p.Memory.Put(ctx, key, value, rev)
}

// Telling "nothing new" without building the record changes nothing: two directories
// given the same random histories, one taking the shortcut and one always building the
// record, return the same records, write as many times and hold the same values after
// every step, also after records were spoiled (written as record never writes them).
// (Revisions may differ: one store's revisions are not the other's once a write conflicts.)
func TestShortcutIsBuildingTheRecord(t *testing.T) {
	ctx := context.Background()
	at := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	now := func() time.Time { return at }
	unwritten := 0
	for trial := range 300 {
		r := rand.New(rand.NewPCG(uint64(trial), 7))
		fastStore, slowStore := &puts{Memory: kvstore.NewMemory()}, &puts{Memory: kvstore.NewMemory()}
		fast, slow := &Directory{store: fastStore, now: now}, &Directory{store: slowStore, now: now, build: true}
		for step := range 40 {
			if r.IntN(8) == 0 {
				if err := spoil(ctx, r, fastStore.Memory, slowStore.Memory); err != nil {
					t.Fatal(err)
				}
			}
			s := randomSeen(r)
			fastStore.n, slowStore.n = 0, 0
			got, gerr := fast.Record(ctx, "acme", s)
			want, werr := slow.Record(ctx, "acme", s)
			if fmt.Sprint(gerr) != fmt.Sprint(werr) || !reflect.DeepEqual(got, want) || fastStore.n != slowStore.n {
				t.Fatalf("trial %d step %d, %+v:\n shortcut %+v (%v), %d writes\n built    %+v (%v), %d writes",
					trial, step, s, got, gerr, fastStore.n, want, werr, slowStore.n)
			}
			if gerr == nil && fastStore.n == 0 {
				unwritten++
			}
			keys, _ := slowStore.Keys(ctx, "")
			if fk, _ := fastStore.Keys(ctx, ""); !slices.Equal(fk, keys) {
				t.Fatalf("trial %d step %d: keys %v, built %v", trial, step, fk, keys)
			}
			for _, k := range keys {
				fv, _, _ := fastStore.Get(ctx, k)
				sv, _, _ := slowStore.Get(ctx, k)
				if string(fv) != string(sv) {
					t.Fatalf("trial %d step %d: %s = %s, built %s", trial, step, k, fv, sv)
				}
			}
		}
	}
	if unwritten < 1000 {
		t.Fatalf("only %d of 12,000 records wrote nothing: the histories do not repeat enough to test the shortcut", unwritten)
	}
}

// The shortcut is taken: a known contact recorded again as it is builds nothing.
func TestKnownContactBuildsNothing(t *testing.T) {
	ctx := context.Background()
	d := New(kvstore.NewMemory())
	s := Seen{Email: "ana@northwind.example", Phone: "+1 415 555 0100", External: map[string]string{CRMContactID: "hubspot:1", MessageID: "m1"}}
	if _, err := d.Record(ctx, "acme", s); err != nil {
		t.Fatal(err)
	}
	allocs := func(d *Directory) float64 {
		return testing.AllocsPerRun(50, func() {
			if _, err := d.Record(ctx, "acme", s); err != nil {
				t.Fatal(err)
			}
		})
	}
	short := allocs(d)
	d.build = true
	built := allocs(d)
	if short >= built {
		t.Fatalf("a known contact recorded again: %.0f allocations with the shortcut, %.0f building the record", short, built)
	}
}
