package handler

import (
	"testing"

	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/guard"
	"exacto.dev/pkg/platform/sandbox"
)

// A HubSpot opt-out (hs_email_optout set to true) names the contact by its HubSpot id
// only. The stopper asks HubSpot for the contact's e-mail and stops its leads by it; a
// contact HubSpot no longer has (or has no e-mail for) completes without touching a
// platform and without a dead letter.
func TestHubSpotOptOutByIDOnly(t *testing.T) {
	r := newRig(t)
	hsID := r.sb.AddContact("opted@example.com", nil)
	lead := r.sb.AddInstantlyLead(instCampaign, "opted@example.com")
	r.run()
	optOut := func(key, id string) envelope.Envelope {
		e := event("hubspot", envelope.TypeLeadUnsubscribed, key, envelope.Data{ProviderType: "contact.propertyChange",
			Contact: &envelope.Contact{ExternalID: id}, Property: &envelope.Property{Name: "hs_email_optout", Value: "true"}})
		e.Subject, e.Channel = "contact/"+id, "crm"
		return e
	}
	gone := optOut("hs-optout-1", "1246965")
	r.publish(gone, "")
	r.waitStatus(gone.ID, guard.Completed)
	writes := r.sb.Requests(sandbox.RouteInstantlyInterest) + r.sb.Requests(sandbox.RouteInstantlyBlocklist) +
		r.sb.Requests(sandbox.RouteSmartleadPause) + r.sb.Requests(sandbox.RouteSmartleadUnsubscribeAll)
	if writes != 0 || len(r.stopped()) != 0 || len(r.deadLetters()) != 0 {
		t.Fatalf("a contact HubSpot does not have: writes %d, sequence.stopped %d, dead letters %d", writes, len(r.stopped()), len(r.deadLetters()))
	}
	known := optOut("hs-optout-2", hsID)
	r.publish(known, "")
	r.waitStatus(known.ID, guard.Completed)
	if l, _ := r.sb.InstantlyLeadState(lead); l.Status == sandbox.InstantlyActive {
		t.Fatalf("the opted-out contact's lead is active: %+v", l)
	}
	if st := r.stopped(); len(st) != 1 || st[0].Data.Contact == nil || st[0].Data.Contact.Email != "opted@example.com" {
		t.Fatalf("sequence.stopped %+v", st)
	}
}
