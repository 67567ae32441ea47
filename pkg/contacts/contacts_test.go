package contacts

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"

	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/internal/permute"
	"exacto.dev/pkg/kvstore"
	"exacto.dev/pkg/stream"
)

func directory(t *testing.T) *Directory {
	t.Helper()
	conn := brokertest.Start(t, "")
	kv, err := conn.JS.KeyValue(context.Background(), stream.ContactIDs)
	if err != nil {
		t.Fatal(err)
	}
	return New(kvstore.KV{KV: kv, JS: conn.JS})
}

func TestNormalizeEmail(t *testing.T) {
	for in, want := range map[string]string{
		"  Ana.Silva@Example.COM ":      "ana.silva@example.com",
		"Ana+news@example.com":          "ana+news@example.com", // the alias is kept as written
		"Ana Silva <ana@example.com>":   "ana@example.com",
		"not an address":                "",
		"@example.com":                  "",
		"ana@":                          "",
		"":                              "",
		"ana silva@example.com":         "",
		"<ana@example.com>":             "ana@example.com",
		"ANA@EXAMPLE.COM.":              "ana@example.com.",
		"first.last+tag@sub.example.io": "first.last+tag@sub.example.io",
	} {
		if got := NormalizeEmail(in); got != want {
			t.Errorf("NormalizeEmail(%q) = %q, want %q", in, got, want)
		}
	}
}

// One person seen by e-mail, then by the platform's lead id with the e-mail, then by
// the CRM id alone: one contact with every id, and the same ids on a second recording.
func TestOneContactAcrossSystems(t *testing.T) {
	ctx := context.Background()
	d := directory(t)
	a, err := d.Record(ctx, "acme", Seen{Email: "Ana@Northwind.example", External: map[string]string{CampaignID: "instantly:camp-1", MessageID: "m-1"}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := d.Record(ctx, "acme", Seen{Email: "ana@northwind.example", External: map[string]string{SendingPlatformContactID: "instantly:lead-7", CRMContactID: "hubspot:901"}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := d.Record(ctx, "acme", Seen{External: map[string]string{CRMContactID: "hubspot:901", CRMActivityID: "hubspot:note-5"}})
	if err != nil {
		t.Fatal(err)
	}
	if a.ContactID == "" || b.ContactID != a.ContactID || c.ContactID != a.ContactID {
		t.Fatalf("three contacts for one person: %s %s %s", a.ContactID, b.ContactID, c.ContactID)
	}
	got, ok, err := d.Find(ctx, "acme", SendingPlatformContactID, "instantly:lead-7")
	if err != nil || !ok {
		t.Fatalf("find by lead id: %v %v", ok, err)
	}
	for kind, want := range map[string]string{CampaignID: "instantly:camp-1", MessageID: "m-1", SendingPlatformContactID: "instantly:lead-7", CRMContactID: "hubspot:901", CRMActivityID: "hubspot:note-5"} {
		if l := got.External[kind]; len(l) != 1 || l[0] != want {
			t.Errorf("%s = %v, want [%s]", kind, l, want)
		}
	}
	if len(got.Emails) != 1 || got.Emails[0] != "ana@northwind.example" {
		t.Errorf("emails %v", got.Emails)
	}
	// A campaign finds nobody: it is shared by many.
	if _, ok, _ := d.Find(ctx, "acme", CampaignID, "instantly:camp-1"); ok {
		t.Error("a campaign id found a contact")
	}
	// Recording the same again changes nothing.
	again, err := d.Record(ctx, "acme", Seen{Email: "ana@northwind.example", External: map[string]string{CRMContactID: "hubspot:901"}})
	if err != nil || !again.Updated.Equal(got.Updated) {
		t.Fatalf("a repeat changed the record: %v %v -> %v", err, got.Updated, again.Updated)
	}
}

func TestAliasesTenantsAndAccounts(t *testing.T) {
	ctx := context.Background()
	d := directory(t)
	plain, _ := d.Record(ctx, "acme", Seen{Email: "ana@northwind.example"})
	alias, _ := d.Record(ctx, "acme", Seen{Email: "ana+promo@northwind.example"})
	colleague, _ := d.Record(ctx, "acme", Seen{Email: "ben@northwind.example"})
	other, _ := d.Record(ctx, "globex", Seen{Email: "ana@northwind.example"})
	gmailA, _ := d.Record(ctx, "acme", Seen{Email: "ana.x@gmail.com"})
	gmailB, _ := d.Record(ctx, "acme", Seen{Email: "ben.y@gmail.com"})
	if plain.ContactID == alias.ContactID {
		t.Error("a plus-alias was merged into the plain address on a guess")
	}
	if plain.ContactID == other.ContactID {
		t.Error("two tenants share a contact")
	}
	if plain.AccountID != colleague.AccountID || plain.AccountID != alias.AccountID {
		t.Error("colleagues at one domain are not one account")
	}
	if gmailA.AccountID == gmailB.AccountID {
		t.Error("two free-mail users were made one account")
	}
	// Deterministic: the same first key gives the same id in a fresh directory (a replay).
	fresh, _ := directory(t).Record(ctx, "acme", Seen{Email: "ANA@northwind.example"})
	if fresh.ContactID != plain.ContactID || fresh.AccountID != plain.AccountID {
		t.Errorf("a replay assigned other ids: %s/%s vs %s/%s", fresh.ContactID, fresh.AccountID, plain.ContactID, plain.AccountID)
	}
}

func TestRefusesWhatNamesNobody(t *testing.T) {
	d := directory(t)
	for _, s := range []Seen{{}, {Email: "nonsense"}, {External: map[string]string{CampaignID: "c-1"}}} {
		if _, err := d.Record(context.Background(), "acme", s); err == nil {
			t.Errorf("recorded %+v", s)
		}
	}
	if _, err := d.Record(context.Background(), "", Seen{Email: "a@b.example"}); err == nil {
		t.Error("recorded without a tenant")
	}
}

// Workers adding ids to one contact at once lose none of them.
func TestConcurrentRecordsKeepEveryID(t *testing.T) {
	ctx := context.Background()
	d := directory(t)
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := d.Record(ctx, "acme", Seen{Email: "ana@northwind.example", External: map[string]string{MessageID: fmt.Sprint("m-", i)}}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	rec, ok, err := d.Find(ctx, "acme", "email", "Ana@Northwind.example")
	if err != nil || !ok || len(rec.External[MessageID]) != 12 {
		t.Fatalf("after 12 concurrent records: %v %v %d message ids", ok, err, len(rec.External[MessageID]))
	}
}

// One person seen by its HubSpot id alone, by e-mail, by phone, and through two links
// (HubSpot's contact for the e-mail, HubSpot's phone for the id): in every order of
// those five recordings, one contact, whose id is the e-mail's, found by every key;
// the contacts made before a link came are merged into it and listed as such.
func TestOnePersonWhateverTheOrder(t *testing.T) {
	ctx := context.Background()
	seens := []Seen{
		{External: map[string]string{CRMContactID: "hubspot:901"}},
		{Email: "Ana@Northwind.example", External: map[string]string{CampaignID: "instantly:c-1"}},
		{Phone: "+34 600 000 000"},
		{Email: "ana@northwind.example", External: map[string]string{CRMContactID: "hubspot:901"}},
		{Phone: "34600000000", External: map[string]string{CRMContactID: "hubspot:901"}},
	}
	want := ContactID("acme", "email:ana@northwind.example")
	orders := 0
	for order := range permute.Orders(len(seens)) {
		orders++
		d := New(kvstore.NewMemory())
		var last Record
		for _, i := range order {
			rec, err := d.Record(ctx, "acme", seens[i])
			if err != nil {
				t.Fatal(err)
			}
			last = rec
		}
		if last.ContactID != want {
			t.Fatalf("order %v: the last record names %s, want %s", order, last.ContactID, want)
		}
		for _, k := range [][2]string{{"email", "ANA@northwind.example"}, {"phone", "+34600000000"}, {CRMContactID, "hubspot:901"}} {
			got, ok, err := d.Find(ctx, "acme", k[0], k[1])
			if err != nil || !ok || got.ContactID != want {
				t.Fatalf("order %v: find %s %s: %s %v %v", order, k[0], k[1], got.ContactID, ok, err)
			}
			if !slices.Equal(got.Keys, []string{"email:ana@northwind.example", "phone:34600000000", "crm_contact_id:hubspot:901"}) ||
				len(got.External[CampaignID]) != 1 {
				t.Fatalf("order %v: record %+v", order, got)
			}
		}
		for _, m := range last.Merged {
			if m == want {
				t.Fatalf("order %v: the contact lists itself as merged", order)
			}
		}
	}
	if orders != 120 {
		t.Fatalf("%d orders", orders)
	}
}

// Links recorded at once by concurrent projectors still make one contact.
func TestConcurrentLinksMakeOneContact(t *testing.T) {
	ctx := context.Background()
	d := directory(t)
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := Seen{Email: fmt.Sprintf("p%d@northwind.example", i), External: map[string]string{CRMContactID: fmt.Sprint("hubspot:", i/2)}}
			if i%2 == 1 { // odd ones link their id to the next pair's too
				s = Seen{External: map[string]string{CRMContactID: fmt.Sprint("hubspot:", i/2), ClayRecordID: "clay:rec-1"}}
			}
			if _, err := d.Record(ctx, "acme", s); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	// The Clay record links every odd recording's HubSpot id: ids 0..4 and their e-mails are one person.
	first, ok, err := d.Find(ctx, "acme", "email", "p0@northwind.example")
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	for i := range 10 {
		if i%2 == 1 {
			continue
		}
		got, ok, err := d.Find(ctx, "acme", "email", fmt.Sprintf("p%d@northwind.example", i))
		if err != nil || !ok || got.ContactID != first.ContactID {
			t.Fatalf("p%d: %s, want %s (%v %v)", i, got.ContactID, first.ContactID, ok, err)
		}
	}
	if first.ContactID != ContactID("acme", "email:p0@northwind.example") {
		t.Fatalf("the group's id is %s, not its least key's", first.ContactID)
	}
}

// Two people a CRM gives the same phone (a company's switchboard) stay two contacts:
// a phone alone joins no two contacts that each have an e-mail. A placeholder phone
// ("0", an extension) is no key at all.
func TestSharedLineJoinsNoOne(t *testing.T) {
	ctx := context.Background()
	d := New(kvstore.NewMemory())
	ana, err := d.Record(ctx, "acme", Seen{Email: "ana@globex.example", Phone: "+1 650 555 0100", External: map[string]string{CRMContactID: "hubspot:1"}})
	if err != nil {
		t.Fatal(err)
	}
	ben, err := d.Record(ctx, "acme", Seen{Email: "ben@globex.example", Phone: "+1 (650) 555-0100", External: map[string]string{CRMContactID: "hubspot:2"}})
	if err != nil {
		t.Fatal(err)
	}
	if ana.ContactID == ben.ContactID || len(ben.Merged) != 0 || slices.Contains(ben.Phones, "16505550100") {
		t.Fatalf("a shared line joined two people: ana %+v, ben %+v", ana, ben)
	}
	// Ben's HubSpot id seen with the line again changes nothing; the line stays Ana's.
	if again, err := d.Record(ctx, "acme", Seen{Phone: "16505550100", External: map[string]string{CRMContactID: "hubspot:2"}}); err != nil || again.ContactID != ben.ContactID {
		t.Fatalf("ben again: %+v %v", again, err)
	}
	if line, ok, err := d.Find(ctx, "acme", "phone", "16505550100"); err != nil || !ok || line.ContactID != ana.ContactID {
		t.Fatalf("the line is %s's (%v %v), want ana's", line.ContactID, ok, err)
	}
	if _, err := d.Record(ctx, "acme", Seen{Phone: "0"}); err == nil {
		t.Fatal("the phone \"0\" was recorded as a key")
	}
}

// counting is a store that counts its reads.
type counting struct {
	kvstore.Store
	gets int
}

func (c *counting) Get(ctx context.Context, key string) ([]byte, uint64, error) {
	c.gets++
	return c.Store.Get(ctx, key)
}

// A Record whose keys all belong to one contact reads each key's index entry and that
// contact's record once: a round trip each, live.
func TestRecordReadsOneContactOnce(t *testing.T) {
	ctx := context.Background()
	store := &counting{Store: kvstore.NewMemory()}
	d := New(store)
	s := Seen{Email: "ana@example.com", Phone: "+14155550100", External: map[string]string{SendingPlatformContactID: "instantly:l1"}}
	if _, err := d.Record(ctx, "acme", s); err != nil {
		t.Fatal(err)
	}
	store.gets = 0
	rec, err := d.Record(ctx, "acme", s)
	if err != nil || len(rec.Keys) != 3 {
		t.Fatalf("%+v %v", rec, err)
	}
	if want := 3 + 1; store.gets != want {
		t.Fatalf("a known contact of 3 keys: %d reads, want %d (3 index entries, 1 record)", store.gets, want)
	}
}

// A contact none of whose keys is linked yet is created without reading its record
// first (a read each, live, of a record that is almost never there): one read per key.
// Where another Record wrote the record and not yet its index entries, the create is
// refused and the next try reads and merges it: nothing is lost.
func TestRecordCreatesANewContactWithoutReadingIt(t *testing.T) {
	ctx := context.Background()
	store := &counting{Store: kvstore.NewMemory()}
	d := New(store)
	s := Seen{Email: "ana@example.com", External: map[string]string{SendingPlatformContactID: "instantly:l1"}}
	rec, err := d.Record(ctx, "acme", s)
	if err != nil || len(rec.Keys) != 2 {
		t.Fatalf("%+v %v", rec, err)
	}
	if store.gets != 2 {
		t.Fatalf("a new contact of 2 keys: %d reads, want 2 (its index entries)", store.gets)
	}
	// Another Record's write of ben's record, its index entry not written yet.
	other := New(kvstore.NewMemory())
	ben, err := other.Record(ctx, "acme", Seen{Email: "ben@example.com", External: map[string]string{CampaignID: "instantly:c1"}})
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(ben)
	if _, err := store.Put(ctx, recordKey("acme", ben.ContactID), data, 0); err != nil {
		t.Fatal(err)
	}
	got, err := d.Record(ctx, "acme", Seen{Email: "ben@example.com", External: map[string]string{CampaignID: "instantly:c2"}})
	if err != nil || got.ContactID != ben.ContactID || !slices.Equal(got.External[CampaignID], []string{"instantly:c1", "instantly:c2"}) {
		t.Fatalf("ben recorded as %+v (%v), want his record with both campaigns", got, err)
	}
}
