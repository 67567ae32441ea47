package reconcile

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"exacto.dev/pkg/contacts"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/platform/hubspot"
)

// DefaultMaxCRMContacts is how many contacts one pass reads at HubSpot for their deals
// and meetings when Pass.MaxCRMContacts is 0: two searches each (200 records a page),
// so at most 400 searches a pass, 80 s at HubSpot's 5 searches a second.
const DefaultMaxCRMContacts = 200

// crmOutcomes: a deal or a meeting in HubSpot, associated with a contact Exacto knows,
// that the projection lacks (its webhook was lost, or it was made where no webhook
// reaches us). Only contacts with a HubSpot contact id recorded (the crmwriter wrote
// them) are read, at most MaxCRMContacts a pass (see crmWindow). Reported for review
// (missed_opportunity, missed_meeting, provider hubspot) with the event each proposes:
// opportunity.created for the deal, meeting.booked for the meeting, published on
// approval while fresh (Queue.Decide).
//
// A deal is missed when the projection names no opportunity of its id. A meeting
// (neither cancelled nor rescheduled) is missed when the projection names no meeting
// of its id and holds fewer meetings than HubSpot shows: a booking made through
// another tool (Calendly) reaches HubSpot as a meeting of another id.
func crmOutcomes(ctx context.Context, p *Pass) ([]Finding, error) {
	if p.Clients.HubSpot == nil {
		return nil, nil
	}
	cs, err := p.projectionContacts(ctx)
	if err != nil {
		return nil, err
	}
	ts := hubspotTargets(cs)
	slices.SortFunc(ts, func(a, b hubspotTarget) int { return cmp.Compare(a.key, b.key) })
	start, n, err := p.crmWindow(ctx, ts)
	if err != nil {
		return nil, err
	}
	var out []Finding
	for i := range n {
		t := ts[(start+i)%len(ts)]
		deals, err := p.Clients.HubSpot.DealsOfContact(ctx, t.id)
		if err != nil {
			return out, p.crmAdvance(ctx, ts, start, n, i, err)
		}
		meetings, err := p.Clients.HubSpot.MeetingsOfContact(ctx, t.id)
		if err != nil {
			return out, p.crmAdvance(ctx, ts, start, n, i, err)
		}
		opps, held := named(*t.c, func(v passView) []string { return v.Opportunities }), named(*t.c, func(v passView) []string { return v.Meetings })
		email := emailOf(*t.c)
		for _, d := range deals {
			if slices.Contains(opps, d.ID) {
				continue
			}
			f := newFinding(p, MissedOpportunity, "hubspot", "deal/"+d.ID)
			f.Contact = email
			f.Where = "hubspot deal " + d.ID + " (" + d.Name + ", stage " + d.Stage + ") on contact " + t.id
			f.Found = "HubSpot has the deal on the contact; the projection has no opportunity " + d.ID
			data := envelope.Data{Contact: &envelope.Contact{Email: email, ExternalID: t.id},
				Opportunity: &envelope.Opportunity{ID: d.ID, Name: d.Name, Stage: d.Stage, Amount: d.Amount}}
			out = append(out, propose(p, f, "deal/"+d.ID, envelope.TypeOpportunityCreated, data, d, d.Created))
		}
		live := slices.DeleteFunc(slices.Clone(meetings), func(m hubspot.Meeting) bool { return !m.Held() })
		for _, m := range live {
			if slices.Contains(held, m.ID) || len(held) >= len(live) {
				continue
			}
			f := newFinding(p, MissedMeeting, "hubspot", "meeting/"+m.ID)
			f.Contact = email
			f.Where = "hubspot meeting " + m.ID + " (" + m.Title + ") on contact " + t.id
			f.Found = "HubSpot has the meeting on the contact (outcome " + cmp.Or(m.Outcome, "none") + "); the projection has no meeting " + m.ID
			data := envelope.Data{Contact: &envelope.Contact{Email: email, ExternalID: t.id},
				Meeting: &envelope.Meeting{ID: m.ID, Start: m.Start, End: m.End}}
			out = append(out, propose(p, f, "meeting/"+m.ID, envelope.TypeMeetingBooked, data, m, cmp.Or(m.At, m.Start)))
		}
	}
	return out, p.crmAdvance(ctx, ts, start, n, n, nil)
}

// propose gives f the event about object that an approval publishes, and says so in
// its repair.
func propose(p *Pass, f Finding, object, typ string, data envelope.Data, raw any, at time.Time) Finding {
	ev := event(p, f.Kind, f.Provider, typ, object, data, raw, at)
	f.Proposed = &ev
	f.Repair = "publish " + typ + " " + ev.ID + " after review, if still fresh (dlq.freshness)"
	return f
}

// named is every id pick gives of the contact's views: its own and each campaign's.
func named(c passContact, pick func(passView) []string) []string {
	out := slices.Clone(pick(c.View()))
	for _, in := range c.in {
		out = append(out, pick(in.v)...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// crmWindow is which of ts (sorted by key) this pass reads: all when they are within
// the bound, else MaxCRMContacts of them, from the first one after the tenant's cursor
// (the key of the last one a pass read, kept in the diff bucket: Queue.crmCursor),
// wrapping past the last to the first. Each pass thus reads the next window whatever
// its time or interval, and every n contacts read cover every contact once; a contact
// added or removed between passes moves no other one. Logged.
func (p *Pass) crmWindow(ctx context.Context, ts []hubspotTarget) (start, count int, err error) {
	limit := p.MaxCRMContacts
	if limit <= 0 {
		limit = DefaultMaxCRMContacts
	}
	if len(ts) <= limit {
		return 0, len(ts), nil
	}
	after := ""
	if p.queue != nil {
		if after, err = p.queue.crmCursor(ctx, p.Tenant); err != nil {
			return 0, 0, err
		}
	}
	if after != "" {
		start, _ = slices.BinarySearchFunc(ts, after, func(t hubspotTarget, key string) int {
			if cmp.Compare(t.key, key) <= 0 {
				return -1
			}
			return 1
		})
		start %= len(ts)
	}
	p.Log.Warn("reconcile: HubSpot deals and meetings read for part of the contacts this pass",
		"tenant", p.Tenant, "contacts", len(ts), "read", limit, "from", ts[start].key, "after", after)
	return start, limit, nil
}

// crmAdvance moves the tenant's cursor past the read contacts of the window (start,
// count) of ts that the pass read entirely: all of it, or those before the one whose
// search failed (which the next pass reads first). A dry run moves nothing, nor does
// a pass whose contacts are all within the bound. It returns err, or the cursor's.
func (p *Pass) crmAdvance(ctx context.Context, ts []hubspotTarget, start, count, read int, err error) error {
	if p.DryRun || p.queue == nil || read == 0 || count == len(ts) {
		return err
	}
	if werr := p.queue.setCRMCursor(ctx, p.Tenant, ts[(start+read-1)%len(ts)].key, p.now()); werr != nil {
		return errors.Join(err, werr)
	}
	return err
}

// hubspotTarget is a projection contact and one HubSpot contact id recorded for it.
type hubspotTarget struct {
	c  *passContact // in the pass's list, not a copy (copies held a second list: 12 MB at 10,000 contacts)
	id string
	// key orders the targets and names the cursor's place: the HubSpot id, then the
	// contact's (one HubSpot contact may be recorded for two projection contacts). Made
	// once: a sort that built it per comparison made 280,000 strings for 10,000 contacts.
	key string
}

// hubspotTargets are the HubSpot contacts recorded for cs (by the crmwriter), in cs's
// order.
func hubspotTargets(cs []passContact) []hubspotTarget {
	ts := make([]hubspotTarget, 0, len(cs))
	for i := range cs {
		c := &cs[i]
		for _, ext := range c.External[contacts.CRMContactID] {
			if crm, id, _ := strings.Cut(ext, ":"); crm == "hubspot" && id != "" {
				ts = append(ts, hubspotTarget{c: c, id: id, key: id + "/" + c.ContactID})
			}
		}
	}
	return ts
}
