package reconcile

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"exacto.dev/pkg/contacts"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/platform/hubspot"
	"exacto.dev/pkg/platform/instantly"
	"exacto.dev/pkg/platform/sandbox"
	"exacto.dev/pkg/projection"
)

// lost is a campaign whose every webhook was lost: the projection knows nothing of it.
const lost = "7b1d9a60-0c4e-4f7e-9d1a-2b3c4d5e6f70"

// queued is tenant's finding id as the diff queue holds it.
func (f *fixture) queued(id string) Finding {
	f.t.Helper()
	got, ok, err := f.deps.Queue.Get(context.Background(), tenant, id)
	if err != nil || !ok {
		f.t.Fatalf("finding %s not in the diff queue: %v", id, err)
	}
	return got
}

// A campaign active at the platform that the projection does not know is reported for
// review with its count of leads, and its leads are compared as every campaign's are:
// a lost unsubscribe in it is repaired at once, a Smartlead BLOCKED lead is an opt-out.
// A paused campaign the projection does not know is neither reported nor read.
func TestMissedCampaign(t *testing.T) {
	f := newFixture(t)
	f.sb.AddInstantlyCampaign(camp, "Known", instantly.CampaignActive)
	f.sb.AddInstantlyLead(camp, "ana@northwind.example")
	f.project("instantly", envelope.TypeEmailSent, "ana@northwind.example", camp, "em-1", time.Now().Add(-time.Hour))
	f.sb.AddInstantlyCampaign(lost, "Lost webhooks", instantly.CampaignActive)
	f.sb.AddInstantlyLead(lost, "bea@northwind.example")
	gone := f.sb.AddInstantlyLead(lost, "cai@northwind.example")
	f.sb.UpdateInstantlyLead(gone, func(l *sandbox.InstantlyLead) { l.Status = sandbox.InstantlyUnsubscribed })
	f.sb.AddInstantlyCampaign("0a0a0a0a-paused", "Paused", instantly.CampaignPaused)
	paused := f.sb.AddInstantlyLead("0a0a0a0a-paused", "dee@northwind.example")
	f.sb.UpdateInstantlyLead(paused, func(l *sandbox.InstantlyLead) { l.Status = sandbox.InstantlyUnsubscribed })
	f.sb.AddSmartleadCampaign(4343, "Smartlead Q1", "ACTIVE")
	blocked := f.sb.AddSmartleadLead(4343, "eve@contoso.example")
	f.sb.UpdateSmartleadLead(4343, blocked, func(l *sandbox.SmartleadLead) { l.Status = "BLOCKED" })
	before := map[string]int64{}
	for _, k := range []string{"instantly", "smartlead"} {
		before[MissedCampaign+k], before[MissedUnsubscribe+k] = countedBy(t, MissedCampaign, k), countedBy(t, MissedUnsubscribe, k)
	}

	rep := f.run(false)
	if rep.ByKind[MissedCampaign] != 2 || rep.ByKind[MissedUnsubscribe] != 2 || len(rep.Findings) != 4 || len(f.published) != 2 {
		t.Fatalf("report %+v, published %d", rep, len(f.published))
	}
	want := map[string]string{"instantly": "with 2 lead(s)", "smartlead": "with 1 lead(s)"}
	for _, fd := range rep.Findings {
		got := f.queued(fd.ID)
		switch fd.Kind {
		case MissedCampaign:
			if fd.Status != StatusOpen || fd.Applied || fd.Proposed != nil || !strings.Contains(fd.Found, want[fd.Provider]) ||
				!strings.Contains(got.Repair, "review") || got.Status != StatusOpen {
				t.Fatalf("missed campaign %+v (queued %+v)", fd, got)
			}
		case MissedUnsubscribe:
			if !got.Applied || got.Status != StatusApplied || got.Event == "" {
				t.Fatalf("missed unsubscribe %+v", got)
			}
		}
		if n := countedBy(t, fd.Kind, fd.Provider) - before[fd.Kind+fd.Provider]; n != 1 {
			t.Fatalf("%s %s counted %d", fd.Kind, fd.Provider, n)
		}
	}
	for _, ev := range f.published {
		if ev.Type != envelope.TypeLeadUnsubscribed {
			t.Fatalf("published %s", ev.Type)
		}
		switch ev.Provider {
		case "instantly":
			if ev.Data.Contact.Email != "cai@northwind.example" || ev.Data.Campaign.ID != lost {
				t.Fatalf("instantly repair %+v", ev.Data)
			}
		case "smartlead":
			if ev.Data.Contact.Email != "eve@contoso.example" || ev.Data.Contact.ExternalID != strconv.FormatInt(blocked, 10) || ev.Data.Campaign.ID != "4343" {
				t.Fatalf("smartlead repair %+v", ev.Data)
			}
		}
	}
	// A second pass: nothing new found, published or counted.
	if again := f.run(false); again.New != 0 || again.Applied != 0 || len(f.published) != 2 {
		t.Fatalf("second pass: %+v, published %d", again, len(f.published))
	}
	for _, k := range []string{MissedCampaign, MissedUnsubscribe} {
		if n := countedBy(t, k, "smartlead") - before[k+"smartlead"]; n != 1 {
			t.Fatalf("%s counted %d after two passes", k, n)
		}
	}
}

// A platform that refuses or fails its campaign listing: the pass reports the error,
// writes no finding and publishes nothing (the leads of the campaign it could not
// list are not read); once the platform answers, the next pass finds everything.
func TestCampaignListingRefused(t *testing.T) {
	for _, status := range []int{401, 500} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			f := newFixture(t)
			ctx := context.Background()
			f.sb.AddInstantlyCampaign(lost, "Lost webhooks", instantly.CampaignActive)
			gone := f.sb.AddInstantlyLead(lost, "cai@northwind.example")
			f.sb.UpdateInstantlyLead(gone, func(l *sandbox.InstantlyLead) { l.Status = sandbox.InstantlyUnsubscribed })
			f.sb.SetFault(sandbox.RouteInstantlyCampaignList, sandbox.Fault{Status: status})
			rep, err := f.deps.RunTenant(ctx, tenant, f.clients(), nil, false)
			if err != nil {
				t.Fatal(err)
			}
			msg := ""
			if rep.Err() != nil {
				msg = rep.Err().Error()
			}
			if !strings.Contains(msg, "missed_campaign: instantly campaign listing") || !strings.Contains(msg, "HTTP "+strconv.Itoa(status)) {
				t.Fatalf("errors %q", msg)
			}
			if all, _ := f.deps.Queue.List(ctx, Filter{Tenant: tenant}); len(rep.Findings) != 0 || len(f.published) != 0 || len(all) != 0 {
				t.Fatalf("findings %+v, published %d, queued %d", rep.Findings, len(f.published), len(all))
			}
			f.sb.ClearFaults()
			if rep := f.run(false); rep.ByKind[MissedCampaign] != 1 || rep.ByKind[MissedUnsubscribe] != 1 {
				t.Fatalf("after the platform answers: %+v", rep.Findings)
			}
		})
	}
}

// hubspotContact projects email's contact and records its HubSpot contact, as the
// crmwriter does, and returns the HubSpot id.
func (f *fixture) hubspotContact(email string) string {
	f.t.Helper()
	f.project("instantly", envelope.TypeEmailSent, email, camp, "em-"+email, time.Now().Add(-time.Hour))
	cid := f.sb.AddContact(email, nil)
	if _, err := f.dir.Record(context.Background(), tenant, contacts.Seen{Email: email, External: map[string]string{contacts.CRMContactID: "hubspot:" + cid}}); err != nil {
		f.t.Fatal(err)
	}
	return cid
}

// A deal and a meeting in HubSpot on a contact Exacto knows, which the projection lacks:
// missed_opportunity and missed_meeting (provider hubspot), open, each with the event
// it proposes; a cancelled meeting and another person's deal are no finding. Approved,
// the events reach the projection and the next pass finds nothing. A failing search is
// the check's error and gives no finding.
func TestHubSpotDealsAndMeetings(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	email := "gia@northwind.example"
	cid := f.hubspotContact(email)
	deal := f.sb.AddDealFor(cid, map[string]string{"dealname": "Gia - team plan", "dealstage": "appointmentscheduled", "amount": "4800"})
	meeting := f.sb.AddMeetingFor(cid, map[string]string{"hs_meeting_title": "Demo", "hs_meeting_outcome": hubspot.MeetingScheduled,
		"hs_timestamp": time.Now().Add(24 * time.Hour).UTC().Format(time.RFC3339)})
	f.sb.AddMeetingFor(cid, map[string]string{"hs_meeting_title": "Intro", "hs_meeting_outcome": hubspot.MeetingCanceled})
	f.sb.AddDealFor(f.sb.AddContact("hal@contoso.example", nil), map[string]string{"dealname": "Not ours"})

	f.sb.SetFault(sandbox.RouteHubSpotDealSearch, sandbox.Fault{Status: 500, Count: 1})
	rep, err := f.deps.RunTenant(ctx, tenant, f.clients(), nil, false)
	if err != nil || rep.Err() == nil || !strings.Contains(rep.Err().Error(), "hubspot_outcomes") ||
		rep.ByKind[MissedOpportunity]+rep.ByKind[MissedMeeting] != 0 {
		t.Fatalf("a failing deal search: %+v %v", rep, err)
	}
	beforeOpp, beforeMeet := countedBy(t, MissedOpportunity, "hubspot"), countedBy(t, MissedMeeting, "hubspot")
	rep = f.run(false)
	opp, mt := only(t, rep, MissedOpportunity), only(t, rep, MissedMeeting)
	if opp.Provider != "hubspot" || opp.Contact != email || opp.Status != StatusOpen || opp.Applied || !strings.Contains(opp.Where, deal) ||
		opp.Proposed == nil || opp.Proposed.Type != envelope.TypeOpportunityCreated || opp.Proposed.Data.Opportunity.ID != deal ||
		opp.Proposed.Data.Opportunity.Amount != "4800" || !strings.Contains(f.queued(opp.ID).Repair, "publish opportunity.created "+opp.Proposed.ID) {
		t.Fatalf("missed opportunity %+v", opp)
	}
	if mt.Provider != "hubspot" || mt.Status != StatusOpen || mt.Proposed == nil || mt.Proposed.Type != envelope.TypeMeetingBooked ||
		mt.Proposed.Data.Meeting.ID != meeting || f.queued(mt.ID).Proposed == nil {
		t.Fatalf("missed meeting %+v", mt)
	}
	if len(f.published) != 0 || countedBy(t, MissedOpportunity, "hubspot")-beforeOpp != 1 || countedBy(t, MissedMeeting, "hubspot")-beforeMeet != 1 {
		t.Fatalf("published %d, counted %d %d", len(f.published), countedBy(t, MissedOpportunity, "hubspot")-beforeOpp,
			countedBy(t, MissedMeeting, "hubspot")-beforeMeet)
	}
	if again := f.run(false); again.New != 0 || len(f.published) != 0 {
		t.Fatalf("second pass: %+v", again)
	}
	for _, fd := range []Finding{opp, mt} {
		if _, err := f.deps.Queue.Decide(ctx, tenant, fd.ID, true, "ops@acme", "the deal is real"); err != nil {
			t.Fatal(err)
		}
	}
	if len(f.published) != 2 {
		t.Fatalf("published %d after approval", len(f.published))
	}
	if rep := f.run(false); rep.ByKind[MissedOpportunity]+rep.ByKind[MissedMeeting] != 0 || rep.New != 0 {
		t.Fatalf("after approval: %+v", rep.Findings)
	}
}

// One pass reads at most MaxCRMContacts contacts at HubSpot, two searches each.
func TestCRMReadsAreBounded(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	for _, e := range []string{"a@northwind.example", "b@northwind.example", "c@northwind.example"} {
		f.hubspotContact(e)
	}
	p := f.deps.Pass(tenant, f.clients(), nil, false)
	p.MaxCRMContacts = 2
	if _, err := Run(ctx, p, f.deps.Queue); err != nil {
		t.Fatal(err)
	}
	if d, m := f.sb.Requests(sandbox.RouteHubSpotDealSearch), f.sb.Requests(sandbox.RouteHubSpotMeetingSearch); d != 2 || m != 2 {
		t.Fatalf("%d deal and %d meeting searches, want 2 and 2", d, m)
	}
	f.run(false)
	if d := f.sb.Requests(sandbox.RouteHubSpotDealSearch); d != 5 {
		t.Fatalf("%d deal searches after an unbounded pass, want 5", d)
	}
}

// Two contact records in the projection for one e-mail: duplicate_contact, provider
// exacto, reported and never merged.
func TestProjectionDuplicateContact(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	email := "ivy@northwind.example"
	f.project("instantly", envelope.TypeEmailSent, email, camp, "em-1", time.Now())
	c, ok, err := f.deps.Reader.ContactByEmail(ctx, tenant, email)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	first := c.ContactID
	c.ContactID, c.External = "ct_second", nil
	b, _ := json.Marshal(c)
	if _, err := f.deps.Reader.Contacts.Put(ctx, projection.ContactKey(tenant, "ct_second"), b, 0); err != nil {
		t.Fatal(err)
	}
	before := countedBy(t, DuplicateContact, "exacto")
	rep := f.run(false)
	dc := only(t, rep, DuplicateContact)
	if dc.Provider != "exacto" || dc.Contact != email || dc.Status != StatusOpen || dc.Applied || !strings.Contains(dc.Where, "ct_second") ||
		!strings.Contains(dc.Where, first) || !strings.Contains(f.queued(dc.ID).Repair, "never merges") {
		t.Fatalf("finding %+v", dc)
	}
	if n := countedBy(t, DuplicateContact, "exacto") - before; n != 1 {
		t.Fatalf("counted %d", n)
	}
	keys, _ := f.deps.Reader.Contacts.Keys(ctx, tenant+".")
	if again := f.run(false); again.New != 0 || len(keys) != 2 {
		t.Fatalf("second pass %+v, %d contact records", again, len(keys))
	}
}

// A note that names our note's event id in its body (logged again by another
// integration) is a duplicate activity, reported; nothing is deleted.
func TestDuplicateNoteNamingOurEvent(t *testing.T) {
	f := newFixture(t)
	email := "jo@northwind.example"
	cid := f.hubspotContact(email)
	const ev = "ev_fedcba9876543210fedcba9876543210"
	ours := f.sb.AddNoteFor(cid, map[string]string{"exacto_event_id": ev,
		"hs_note_body": "<p><strong>Reply received</strong> via instantly</p><p>Sure.</p><p>Exacto event " + ev + "</p>"})
	again := f.sb.AddNoteFor(cid, map[string]string{"hs_note_body": "Synced from the inbox tool (source " + ev + "): Sure."})
	before := countedBy(t, DuplicateActivity, "hubspot")
	rep := f.run(false)
	fd := only(t, rep, DuplicateActivity)
	if fd.Provider != "hubspot" || fd.Status != StatusOpen || !strings.Contains(fd.Where, again) ||
		!strings.Contains(fd.Found, "names our event "+ev+" in its body") || !strings.Contains(fd.Found, ours) ||
		!strings.Contains(fd.Found, "no exacto_event_id") || !strings.Contains(f.queued(fd.ID).Repair, "deletes nothing") {
		t.Fatalf("finding %+v", fd)
	}
	if n := countedBy(t, DuplicateActivity, "hubspot") - before; n != 1 || len(f.sb.Notes()) != 2 {
		t.Fatalf("counted %d, %d notes", n, len(f.sb.Notes()))
	}
	if again := f.run(false); again.New != 0 {
		t.Fatalf("second pass %+v", again)
	}
}

// Instantly shows the lead won (interest status 4) and the projection has no
// opportunity: missed_opportunity (provider instantly), open, with nothing published.
func TestMissedOpportunityFromInstantly(t *testing.T) {
	f := newFixture(t)
	email := "kim@northwind.example"
	id := f.sb.AddInstantlyLead(camp, email)
	f.project("instantly", envelope.TypeEmailSent, email, camp, "em-1", time.Now().Add(-time.Hour))
	won := instantly.Won
	f.sb.UpdateInstantlyLead(id, func(l *sandbox.InstantlyLead) { l.InterestStatus, l.Status = &won, sandbox.InstantlyCompleted })
	before := countedBy(t, MissedOpportunity, "instantly")
	rep := f.run(false)
	fd := only(t, rep, MissedOpportunity)
	if fd.Provider != "instantly" || fd.Contact != email || fd.Campaign != camp || fd.Status != StatusOpen || fd.Applied ||
		!strings.Contains(fd.Where, id) || !strings.Contains(f.queued(fd.ID).Repair, "find the deal in the CRM") || len(f.published) != 0 {
		t.Fatalf("finding %+v, published %d", fd, len(f.published))
	}
	if n := countedBy(t, MissedOpportunity, "instantly") - before; n != 1 {
		t.Fatalf("counted %d", n)
	}
	if again := f.run(false); again.New != 0 || again.ByKind[MissedOpportunity] != 1 {
		t.Fatalf("second pass %+v", again)
	}
}

// A tenant with more HubSpot contacts than the bound is read a window a pass, from a
// cursor each pass moves by the bound (wrapping at the last contact): successive
// passes cover every contact exactly once per cycle, whatever their time (all at one
// instant here). A dry run reads the next window and moves nothing; the cursor is no
// finding in the diff queue.
func TestCRMCursorCoversEveryContact(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	byID := map[string]string{}
	for _, e := range []string{"a@northwind.example", "b@northwind.example", "c@northwind.example", "d@northwind.example", "e@northwind.example"} {
		cid := f.hubspotContact(e)
		f.sb.AddDealFor(cid, map[string]string{"dealname": e})
		byID[cid] = e
	}
	order := slices.Sorted(maps.Keys(byID))
	at := time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)
	pass := func(dryRun bool) []string {
		t.Helper()
		p := f.deps.Pass(tenant, f.clients(), nil, dryRun)
		p.MaxCRMContacts, p.Now = 2, func() time.Time { return at }
		rep, err := Run(ctx, p, f.deps.Queue)
		if err != nil || rep.Err() != nil {
			t.Fatal(err, rep.Err())
		}
		var read []string
		for _, fd := range rep.Findings {
			if fd.Kind == MissedOpportunity {
				read = append(read, fd.Contact)
			}
		}
		slices.Sort(read)
		return read
	}
	var got []string
	for i := range 5 {
		if i == 2 {
			dry, next := pass(true), pass(false)
			if !slices.Equal(dry, next) {
				t.Fatalf("a dry run read %v, the next pass %v: the dry run moved the cursor", dry, next)
			}
			got = append(got, next...)
			continue
		}
		got = append(got, pass(false)...)
	}
	count := map[string]int{}
	for i := 0; i < len(got); i += 2 {
		want := []string{byID[order[i%5]], byID[order[(i+1)%5]]}
		slices.Sort(want)
		if !slices.Equal(got[i:i+2], want) {
			t.Fatalf("pass %d read %v, want %v (all: %v)", i/2+1, got[i:i+2], want, got)
		}
		count[got[i]]++
		count[got[i+1]]++
	}
	for _, e := range byID {
		if count[e] != 2 {
			t.Fatalf("%s read %d times in 5 passes of 2 over 5 contacts: %v", e, count[e], got)
		}
	}
	if all, _ := f.deps.Queue.List(ctx, Filter{Tenant: tenant}); len(all) != 5 {
		t.Fatalf("%d in the diff queue, want the 5 findings", len(all))
	}
}

// One campaign id at two platforms: the projection knows the one at one platform,
// the other's is still a campaign it does not know, reported and its leads compared.
func TestSameCampaignIDAtTwoPlatforms(t *testing.T) {
	for _, known := range []string{"smartlead", "instantly"} {
		t.Run(known, func(t *testing.T) {
			f := newFixture(t)
			f.sb.AddInstantlyCampaign("4242", "Instantly 4242", instantly.CampaignActive)
			f.sb.AddSmartleadCampaign(4242, "Smartlead 4242", "ACTIVE")
			missed := "instantly"
			if known == "smartlead" {
				f.sb.AddSmartleadLead(4242, "sam@contoso.example")
				f.project("smartlead", envelope.TypeEmailSent, "sam@contoso.example", "4242", "sl-1", time.Now().Add(-time.Hour))
				gone := f.sb.AddInstantlyLead("4242", "cai@northwind.example")
				f.sb.UpdateInstantlyLead(gone, func(l *sandbox.InstantlyLead) { l.Status = sandbox.InstantlyUnsubscribed })
			} else {
				missed = "smartlead"
				f.sb.AddInstantlyLead("4242", "ana@northwind.example")
				f.project("instantly", envelope.TypeEmailSent, "ana@northwind.example", "4242", "em-1", time.Now().Add(-time.Hour))
				blocked := f.sb.AddSmartleadLead(4242, "eve@contoso.example")
				f.sb.UpdateSmartleadLead(4242, blocked, func(l *sandbox.SmartleadLead) { l.Status = "BLOCKED" })
			}
			rep := f.run(false)
			mc, mu := only(t, rep, MissedCampaign), only(t, rep, MissedUnsubscribe)
			if mc.Provider != missed || mc.Campaign != "4242" || !strings.Contains(mc.Found, "with 1 lead(s)") {
				t.Fatalf("missed campaign %+v", mc)
			}
			if mu.Provider != missed || mu.Campaign != "4242" || len(f.published) != 1 || f.published[0].Provider != missed {
				t.Fatalf("missed unsubscribe %+v, published %+v", mu, f.published)
			}
		})
	}
}
