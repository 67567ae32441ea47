package handler

import (
	"context"
	"testing"

	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/consumer"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/platform/sandbox"
	"exacto.dev/pkg/stream"
	"exacto.dev/pkg/suppression"
)

// A HubSpot opt-out names the contact by its HubSpot id only: it is suppressed by that
// contact key (id:hubspot:<id>), and no platform is asked anything, having no e-mail to
// be told.
func TestHubSpotOptOutByIDOnly(t *testing.T) {
	ctx := context.Background()
	conn := brokertest.Start(t, "")
	kv, _ := conn.JS.KeyValue(ctx, stream.Suppression)
	list := suppression.New(kv)
	sb := sandbox.Start(t)
	env := envelope.Envelope{ID: "ev_1", Tenant: "acme", Provider: "hubspot", Type: envelope.TypeLeadUnsubscribed,
		Data: envelope.Data{Contact: &envelope.Contact{ExternalID: "1246965"}, Property: &envelope.Property{Name: "hs_email_optout", Value: "true"}}}
	if err := New(list, sandboxClients(sb))(ctx, consumer.Event{Envelope: env}); err != nil {
		t.Fatal(err)
	}
	e, ok, err := list.Lookup(ctx, "acme", "id:hubspot:1246965")
	if err != nil || !ok || e.Reason != Unsubscribed || e.EventID != "ev_1" {
		t.Fatalf("lookup: %+v %v %v", e, ok, err)
	}
	if n := sb.TotalRequests(); n != 0 {
		t.Fatalf("%d platform calls for a contact without an e-mail", n)
	}
}
