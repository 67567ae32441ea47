package reconcile

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/lifecycle"
	"exacto.dev/pkg/projection"
)

// A pass keeps each projection contact summed up (passContact), not its record: its
// views, in each campaign and outside them, and each campaign's own discrepancies are
// the record's, for random histories of contacts across campaigns (replies, opt-outs,
// bounces, meetings, opportunities, sends after an opt-out, which the lifecycle
// refuses).
func TestPassContactIsTheRecordSummedUp(t *testing.T) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(15, 12))
	stores := projection.Memories()
	campaigns := []string{"c-1", "c-2", "c-3"}
	types := []string{envelope.TypeEmailSent, envelope.TypeReplyReceived, envelope.TypeLeadUnsubscribed, envelope.TypeEmailBounced,
		envelope.TypeMeetingBooked, envelope.TypeOpportunityCreated, envelope.TypeEmailOpened, envelope.TypeSequenceStopped}
	at := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	for i := range 400 {
		email := fmt.Sprintf("p%d@northwind.example", r.IntN(40))
		env := providerEvent("instantly", types[r.IntN(len(types))], email, campaigns[r.IntN(len(campaigns))], fmt.Sprint("ev-", i),
			at.Add(time.Duration(r.IntN(600))*time.Minute))
		if r.IntN(4) == 0 {
			env.Data.Campaign = nil // a contact-level event
		}
		switch env.Type {
		case envelope.TypeMeetingBooked:
			env.Data.Meeting = &envelope.Meeting{ID: fmt.Sprint("mt-", i)}
		case envelope.TypeOpportunityCreated:
			env.Data.Opportunity = &envelope.Opportunity{ID: fmt.Sprint("op-", i)}
		}
		if _, err := projection.Apply(ctx, stores, nil, env); err != nil {
			t.Fatal(err)
		}
	}
	keys, err := stores.Contacts.Keys(ctx, tenant+".")
	if err != nil || len(keys) < 30 {
		t.Fatalf("%d contacts, %v", len(keys), err)
	}
	reader := projection.Reader{Stores: stores}
	discrepancies, replied, completed := 0, 0, 0
	for _, k := range keys {
		c, ok, err := reader.Contact(ctx, tenant, strings.TrimPrefix(k, tenant+"."))
		if err != nil || !ok {
			t.Fatalf("%s: %v %v", k, ok, err)
		}
		s := sumUp(c)
		same := func(got passView, want lifecycle.View) bool {
			return got.Status == want.Status && got.Replied == want.Replied && got.Completed == slices.Contains(want.Reached, lifecycle.Completed) &&
				reflect.DeepEqual(got.Meetings, want.Meetings) && reflect.DeepEqual(got.Opportunities, want.Opportunities) &&
				reflect.DeepEqual(got.Discrepancies, want.Discrepancies)
		}
		if !same(s.View(), c.View()) {
			t.Fatalf("%s: view %+v, the record's %+v", k, s.View(), c.View())
		}
		for _, id := range append([]string{"", "c-absent"}, campaigns...) {
			if got, want := s.InCampaign(id), c.InCampaign(id); !same(got, want) {
				t.Fatalf("%s in %q: %+v, the record's %+v", k, id, got, want)
			}
			if v := c.InCampaign(id); v.Replied {
				replied++
			}
			if v := c.InCampaign(id); slices.Contains(v.Reached, lifecycle.Completed) {
				completed++
			}
		}
		if len(s.in) != len(c.Campaigns) {
			t.Fatalf("%s: %d campaigns, the record %d", k, len(s.in), len(c.Campaigns))
		}
		for _, in := range s.in {
			if want := c.Campaigns[in.id].View().Discrepancies; !reflect.DeepEqual(in.own, want) {
				t.Fatalf("%s: %s's own discrepancies %+v, the record's %+v", k, in.id, in.own, want)
			}
			discrepancies += len(in.own)
		}
		if s.ContactID != c.ContactID || !reflect.DeepEqual(s.Keys, c.Keys) || !reflect.DeepEqual(s.External, c.External) {
			t.Fatalf("%s: ids %+v, the record's %+v", k, s, c)
		}
	}
	if discrepancies == 0 || replied == 0 || completed == 0 {
		t.Fatalf("the histories made %d discrepancies, %d replied and %d completed views: the test compares nothing of some", discrepancies, replied, completed)
	}
}

// BenchmarkPassContactHeld reports the heap a pass holds per contact (a reply's four
// events in one campaign): the decoded record, against the contact summed up.
func BenchmarkPassContactHeld(b *testing.B) {
	ctx := context.Background()
	stores := projection.Memories()
	at := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	types := []string{envelope.TypeEmailSent, envelope.TypeReplyReceived, envelope.TypeSequenceStopped, envelope.TypeEmailOpened}
	for i := range 2000 {
		for j, typ := range types {
			env := providerEvent("instantly", typ, fmt.Sprintf("p%d@northwind.example", i), camp, fmt.Sprint("ev-", i, "-", j),
				at.Add(time.Duration(j)*time.Minute))
			if _, err := projection.Apply(ctx, stores, nil, env); err != nil {
				b.Fatal(err)
			}
		}
	}
	keys, err := stores.Contacts.Keys(ctx, tenant+".")
	if err != nil {
		b.Fatal(err)
	}
	reader := projection.Reader{Stores: stores}
	for _, sum := range []bool{false, true} {
		b.Run(map[bool]string{false: "record", true: "summed"}[sum], func(b *testing.B) {
			var held uint64
			for b.Loop() {
				runtime.GC()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				var cs []projection.Contact
				var ps []passContact
				for _, k := range keys {
					c, _, err := reader.Contact(ctx, tenant, strings.TrimPrefix(k, tenant+"."))
					if err != nil {
						b.Fatal(err)
					}
					if sum {
						ps = append(ps, sumUp(c))
					} else {
						cs = append(cs, c)
					}
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				runtime.KeepAlive(cs)
				runtime.KeepAlive(ps)
				held = (after.HeapAlloc - before.HeapAlloc) / uint64(len(keys))
			}
			b.ReportMetric(float64(held), "B/contact")
		})
	}
}
