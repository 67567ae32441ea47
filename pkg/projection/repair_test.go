package projection

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"exacto.dev/pkg/envelope"
)

// After a power cut the contacts bucket's revisions start again lower: an entry
// computed from a record the cut took (a higher revision) would stay for ever, since
// derive keeps the higher revision. Repair recomputes every entry above the revision
// the bucket held, and leaves the others.
func TestRepairRecomputesEntriesOfLostRecords(t *testing.T) {
	ctx := context.Background()
	s := Memories()
	at := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	reply := envelope.Envelope{SpecVersion: "1.0", ID: "ev_1", Type: envelope.TypeReplyReceived, Tenant: "acme", Provider: "instantly",
		Time: at, ReceivedAt: at, Data: envelope.Data{ProviderType: envelope.TypeReplyReceived,
			Contact: &envelope.Contact{Email: "ana@northwind.example"}, Campaign: &envelope.Campaign{ID: "camp-1"}}}
	res, err := Apply(ctx, s, nil, reply)
	if err != nil {
		t.Fatal(err)
	}
	held := res.Rev
	// What a lost future left: the member from a record of revision 1000 that says
	// unsubscribed, and a suppression entry of the same record.
	shardKeys, _ := s.Campaigns.Keys(ctx, "")
	if len(shardKeys) != 1 {
		t.Fatalf("shards %v", shardKeys)
	}
	data, rev, _ := s.Campaigns.Get(ctx, shardKeys[0])
	var sh Shard
	json.Unmarshal(data, &sh)
	right := sh.Members[res.Contact.ContactID]
	stale := right
	stale.Rev, stale.Status, stale.Unsubscribed = 1000, "unsubscribed", true
	sh.Members[res.Contact.ContactID] = stale
	sh.Members["ct_other"] = Member{Rev: held, Status: "replied"} // not above: left as it is
	b, _ := json.Marshal(sh)
	if _, err := s.Campaigns.Put(ctx, shardKeys[0], b, rev); err != nil {
		t.Fatal(err)
	}
	gone, _ := json.Marshal(Suppressed{Tenant: "acme", ContactID: res.Contact.ContactID, Status: "unsubscribed", Rev: 1000})
	if _, err := s.Suppression.Put(ctx, SuppressionKey("acme", res.Contact.ContactID), gone, 0); err != nil {
		t.Fatal(err)
	}

	n, err := Repair(ctx, s, held)
	if err != nil || n != 2 {
		t.Fatalf("repaired %d (%v), want the member and the suppression entry", n, err)
	}
	data, _, _ = s.Campaigns.Get(ctx, shardKeys[0])
	sh = Shard{}
	json.Unmarshal(data, &sh)
	if got := sh.Members[res.Contact.ContactID]; got != right {
		t.Fatalf("member after repair %+v, want %+v", got, right)
	}
	if got := sh.Members["ct_other"]; got.Status != "replied" || got.Rev != held {
		t.Fatalf("an entry not above the held revision changed: %+v", got)
	}
	if _, rev, _ := s.Suppression.Get(ctx, SuppressionKey("acme", res.Contact.ContactID)); rev != 0 {
		t.Fatal("the suppression entry of a contact that is not suppressed stayed")
	}
	if n, err := Repair(ctx, s, held); err != nil || n != 0 {
		t.Fatalf("a second repair rewrote %d (%v), want none", n, err)
	}
}
