package handler

import (
	"testing"

	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/guard"
	"exacto.dev/pkg/platform/sandbox"
)

// A HubSpot opt-out (hs_email_optout set to true) names the contact by its HubSpot id
// only. The stopper finds leads by e-mail, so it completes it without touching a
// platform and without a dead letter; the suppressor lists it by its contact key.
func TestHubSpotOptOutByIDOnly(t *testing.T) {
	r := newRig(t)
	r.run()
	optOut := event("hubspot", envelope.TypeLeadUnsubscribed, "hs-optout-1", envelope.Data{ProviderType: "contact.propertyChange",
		Contact: &envelope.Contact{ExternalID: "1246965"}, Property: &envelope.Property{Name: "hs_email_optout", Value: "true"}})
	optOut.Subject, optOut.Channel = "contact/1246965", "crm"
	r.publish(optOut, "")
	r.waitStatus(optOut.ID, guard.Completed)
	writes := r.sb.Requests(sandbox.RouteInstantlyInterest) + r.sb.Requests(sandbox.RouteInstantlyBlocklist) +
		r.sb.Requests(sandbox.RouteSmartleadPause) + r.sb.Requests(sandbox.RouteSmartleadUnsubscribeAll)
	if writes != 0 || len(r.stopped()) != 0 || len(r.deadLetters()) != 0 {
		t.Fatalf("writes %d, sequence.stopped %d, dead letters %d", writes, len(r.stopped()), len(r.deadLetters()))
	}
}
