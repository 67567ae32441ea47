package contacts

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"exacto.dev/pkg/kvstore"
)

// A preloaded directory names contacts as the bucket does, writes what it records
// through to the bucket, and sees past its copy where another writer moved a key on
// after the load: the link made meanwhile is kept, no contention error.
func TestPreloadReadsTheCopyAndWritesThrough(t *testing.T) {
	ctx := context.Background()
	d := directory(t)
	ana, err := d.Record(ctx, "acme", Seen{Email: "ana@northwind.example", External: map[string]string{MessageID: "m-1"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Record(ctx, "acme", Seen{Email: "ben@northwind.example"}); err != nil {
		t.Fatal(err)
	}
	if same, err := d.Preload(ctx, "", 2); err != nil || same != d {
		t.Fatalf("4 entries preloaded with a bound of 2: %v", err)
	}
	p, err := d.Preload(ctx, "", 100)
	if err != nil || p == d {
		t.Fatalf("preload: %v (the same directory: %v)", err, p == d)
	}
	// Another writer links Ana's e-mail to her CRM id after the load.
	if _, err := d.Record(ctx, "acme", Seen{Email: "ana@northwind.example", External: map[string]string{CRMContactID: "hubspot:901"}}); err != nil {
		t.Fatal(err)
	}
	got, err := p.Record(ctx, "acme", Seen{Email: "Ana@Northwind.example", External: map[string]string{MessageID: "m-2"}})
	if err != nil {
		t.Fatal(err)
	}
	if got.ContactID != ana.ContactID || len(got.External[CRMContactID]) != 1 || len(got.External[MessageID]) != 2 {
		t.Fatalf("preloaded record after another writer's link: %+v", got)
	}
	rec, ok, err := d.Find(ctx, "acme", CRMContactID, "hubspot:901")
	if err != nil || !ok || len(rec.External[MessageID]) != 2 {
		t.Fatalf("the bucket after a preloaded record: %+v %v %v, want both message ids", rec, ok, err)
	}
	if rec, ok, err := p.Find(ctx, "acme", "email", "ben@northwind.example"); err != nil || !ok || rec.ContactID == "" {
		t.Fatalf("Ben from the copy: %+v %v %v", rec, ok, err)
	}
	// A tenant's copy holds its keys alone, and finds another tenant's in the bucket.
	if _, err := d.Record(ctx, "globex", Seen{Email: "cy@globex.example"}); err != nil {
		t.Fatal(err)
	}
	acme, err := d.Preload(ctx, "acme.", 100)
	if err != nil || acme == d {
		t.Fatalf("preload of acme: %v", err)
	}
	for key := range acme.store.(*preloaded).vals {
		if !strings.HasPrefix(key, "acme.") {
			t.Errorf("acme's copy holds %s", key)
		}
	}
	if n := len(acme.store.(*preloaded).vals); n != 5 {
		t.Errorf("acme's copy holds %d keys, want 5 (Ana's record and the index entries of her e-mail and CRM id, Ben's record and e-mail)", n)
	}
	if rec, ok, err := acme.Find(ctx, "globex", "email", "cy@globex.example"); err != nil || !ok || rec.ContactID == "" {
		t.Fatalf("globex's contact through acme's copy: %+v %v %v", rec, ok, err)
	}
	// The bound is the tenant's: globex's two entries are copied with a bound of 2,
	// though the bucket holds seven; acme's five are not with a bound of 4.
	if g, err := d.Preload(ctx, "globex.", 2); err != nil || g == d || len(g.store.(*preloaded).vals) != 2 {
		t.Errorf("globex's two entries preloaded with a bound of 2: %v (the same directory: %v)", err, g == d)
	}
	if same, err := d.Preload(ctx, "acme.", 4); err != nil || same != d {
		t.Errorf("acme's five entries preloaded with a bound of 4: %v (the same directory: %v)", err, same == d)
	}
	// In memory already: nothing to load.
	m := New(kvstore.NewMemory())
	if same, err := m.Preload(ctx, "", 100); err != nil || same != m {
		t.Fatalf("a directory in memory preloaded: %v", err)
	}
}

// same says what comparing the encodings says.
func TestSameIsEqualEncodings(t *testing.T) {
	base := Record{ContactID: "ct_1", AccountID: "ac_1", Keys: []string{"email:a@b.example"}, Emails: []string{"a@b.example"},
		External: map[string][]string{MessageID: {"m-1", "m-2"}}, Updated: time.Unix(1, 0)}
	variants := []func(r *Record){
		func(r *Record) {},
		func(r *Record) { r.Updated = time.Unix(2, 0) },
		func(r *Record) { r.ContactID = "ct_2" },
		func(r *Record) { r.AccountID = "" },
		func(r *Record) { r.MergedInto = "ct_0" },
		func(r *Record) { r.Keys = append(r.Keys, "phone:5550100000") },
		func(r *Record) { r.Emails = nil },
		func(r *Record) { r.Phones = []string{} },
		func(r *Record) { r.Merged = []string{"ct_9"} },
		func(r *Record) { r.External = nil },
		func(r *Record) { r.External = map[string][]string{} },
		func(r *Record) { r.External = map[string][]string{MessageID: {"m-1", "m-2"}, CampaignID: nil} },
		func(r *Record) { r.External = map[string][]string{MessageID: {"m-1", "m-2"}, CampaignID: {}} },
		func(r *Record) { r.External = map[string][]string{MessageID: {"m-2", "m-1"}} },
		func(r *Record) { r.External = map[string][]string{MessageID: {"m-1"}} },
	}
	clone := func(r Record) Record {
		b, _ := json.Marshal(r)
		var c Record
		json.Unmarshal(b, &c)
		c.External = map[string][]string{}
		for k, v := range r.External {
			c.External[k] = v
		}
		if r.External == nil {
			c.External = nil
		}
		return c
	}
	enc := func(r Record) string {
		r.Updated = time.Time{}
		b, _ := json.Marshal(r)
		return string(b)
	}
	for i, fa := range variants {
		for j, fb := range variants {
			a, b := clone(base), clone(base)
			fa(&a)
			fb(&b)
			if want := enc(a) == enc(b); same(a, b) != want {
				t.Errorf("variants %d and %d: same %v, encodings equal %v", i, j, !want, want)
			}
		}
	}
}
