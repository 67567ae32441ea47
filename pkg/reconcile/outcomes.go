package reconcile

import (
	"context"
	"strconv"
	"time"

	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/platform/instantly"
)

// InFlight is how long after a reply the pipeline may still be taking it in.
const InFlight = 10 * time.Minute

// missedOutcomes: the platform counts a reply, shows a booked meeting or a won lead
// that the projection lacks for the contact in that campaign. Reported for review, not
// applied: a reply found late may be stale, and acting on it (a CRM note, a
// classification, a follow-up) waits for a person. A missed reply carries the
// reply.received event it proposes (Queue.Decide publishes it if still fresh); a
// meeting or an opportunity carries none, since the platform gives no meeting or deal
// id to make one from.
//
// Only Instantly shows replies and outcomes on its leads (email_reply_count,
// lt_interest_status); Smartlead's campaign lead listing does not.
//
// A lead whose last reply is more recent than InFlight is not judged yet: its webhook,
// or the projector's backlog behind it, may still be on the way (under load a pass
// found thousands of replies the projector had not reached); a later pass judges it.
func missedOutcomes(ctx context.Context, p *Pass) ([]Finding, error) {
	leads, err := p.platformLeads(ctx)
	if err != nil {
		return nil, err
	}
	var out []Finding
	for _, l := range leads {
		if l.Provider != "instantly" || l.Email == "" {
			continue
		}
		interest := 0
		hasInterest := l.Interest != nil
		if hasInterest {
			interest = *l.Interest
		}
		positive := hasInterest && (interest == instantly.Interested || interest == instantly.MeetingBooked ||
			interest == instantly.MeetingCompleted || interest == instantly.Won)
		meeting := hasInterest && (interest == instantly.MeetingBooked || interest == instantly.MeetingCompleted)
		won := hasInterest && interest == instantly.Won
		if l.Replies == 0 && !positive || !l.LastReply.IsZero() && p.now().Sub(l.LastReply) < InFlight {
			continue
		}
		c, known, err := p.contactByEmail(ctx, l.Email)
		if err != nil {
			return out, err
		}
		v := c.InCampaign(l.Campaign)
		object := l.ID + "@" + l.Campaign
		if !known || !v.Replied {
			f := newFinding(p, MissedReply, l.Provider, object)
			f.Contact, f.Campaign, f.Where = l.Email, l.Campaign, l.where()
			f.Found = "instantly counts " + strconv.Itoa(l.Replies) + " repl(ies)"
			if positive {
				f.Found += " and interest status " + strconv.Itoa(interest)
			}
			f.Found += "; the projection shows no reply"
			data := envelope.Data{Contact: &envelope.Contact{Email: l.Email, ExternalID: l.ID}, Campaign: &envelope.Campaign{ID: l.Campaign},
				Message: &envelope.Message{From: l.Email, Subject: "(reply found by reconciliation; its text was not received)"}}
			ev := event(p, MissedReply, l.Provider, envelope.TypeReplyReceived, object, data, l.Raw, l.LastReply)
			f.Proposed = &ev
			f.Repair = "publish reply.received " + ev.ID + " after review, if still fresh (dlq.freshness)"
			out = append(out, f)
		}
		if meeting && (!known || !v.MeetingBooked) {
			f := newFinding(p, MissedMeeting, l.Provider, object)
			f.Contact, f.Campaign, f.Where = l.Email, l.Campaign, l.where()
			f.Found = "instantly shows a meeting (interest status " + strconv.Itoa(interest) + "); the projection has none"
			f.Repair = "review: find the meeting in the calendar tool; its webhook may have been lost"
			out = append(out, f)
		}
		if won && (!known || !v.Opportunity) {
			f := newFinding(p, MissedOpportunity, l.Provider, object)
			f.Contact, f.Campaign, f.Where = l.Email, l.Campaign, l.where()
			f.Found = "instantly shows the lead won; the projection has no opportunity"
			f.Repair = "review: find the deal in the CRM; its webhook may have been lost"
			out = append(out, f)
		}
	}
	return out, nil
}
