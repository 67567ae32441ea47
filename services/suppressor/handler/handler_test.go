package handler

import (
	"context"
	"slices"
	"testing"

	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/consumer"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/platform/accounts"
	"exacto.dev/pkg/platform/hubspot"
	"exacto.dev/pkg/platform/instantly"
	"exacto.dev/pkg/platform/sandbox"
	"exacto.dev/pkg/platform/smartlead"
	"exacto.dev/pkg/retry"
	"exacto.dev/pkg/stream"
	"exacto.dev/pkg/suppression"
)

func TestWhatSuppresses(t *testing.T) {
	contact := &envelope.Contact{Email: "Ana@Example.com"}
	cases := []struct {
		env  envelope.Envelope
		want string
	}{
		{envelope.Envelope{Type: envelope.TypeLeadUnsubscribed, Data: envelope.Data{Contact: contact}}, Unsubscribed},
		{envelope.Envelope{Type: envelope.TypeEmailComplained, Data: envelope.Data{Contact: contact}}, Complaint},
		{envelope.Envelope{Type: envelope.TypeEmailBounced, Data: envelope.Data{Contact: contact, Bounce: &envelope.Bounce{Kind: "hard"}}}, Bounced},
		{envelope.Envelope{Type: envelope.TypeEmailBounced, Data: envelope.Data{Contact: contact, Bounce: &envelope.Bounce{Kind: "unknown"}}}, Bounced},
		{envelope.Envelope{Type: envelope.TypeEmailBounced, Data: envelope.Data{Contact: contact}}, Bounced},
		{envelope.Envelope{Type: envelope.TypeEmailBounced, Data: envelope.Data{Contact: contact, Bounce: &envelope.Bounce{Kind: "soft"}}}, ""},
		{envelope.Envelope{Type: envelope.TypeReplyReceived, Data: envelope.Data{Contact: contact}}, ""},
		{envelope.Envelope{Type: envelope.TypeReplyClassified, Data: envelope.Data{Contact: contact, Classification: &envelope.Classification{Label: "unsubscribe_request"}}}, DoNotContact},
		{envelope.Envelope{Type: envelope.TypeReplyClassified, Data: envelope.Data{Contact: contact, Classification: &envelope.Classification{Label: "bounce_notice"}}}, Bounced},
		{envelope.Envelope{Type: envelope.TypeReplyClassified, Data: envelope.Data{Contact: contact, Classification: &envelope.Classification{Label: "interested"}}}, ""},
	}
	for _, c := range cases {
		if got := Reason(c.env); got != c.want {
			t.Errorf("%s %+v: %q, want %q", c.env.Type, c.env.Data.Bounce, got, c.want)
		}
	}
}

func TestHandler(t *testing.T) {
	ctx := context.Background()
	conn := brokertest.Start(t, "")
	kv, _ := conn.JS.KeyValue(ctx, stream.Suppression)
	list := suppression.New(kv)
	sb := sandbox.Start(t)
	h := New(list, sandboxClients(sb), nil)
	env := envelope.Envelope{ID: "ev_1", Tenant: "acme", Type: envelope.TypeLeadUnsubscribed, Data: envelope.Data{Contact: &envelope.Contact{Email: "Ana@Example.com"}}}
	for range 2 { // twice: harmless
		if err := h(ctx, consumer.Event{Envelope: env}); err != nil {
			t.Fatal(err)
		}
	}
	e, ok, err := list.Lookup(ctx, "acme", "email:ana@example.com")
	if err != nil || !ok || e.Reason != Unsubscribed || e.EventID != "ev_1" {
		t.Fatalf("lookup: %+v %v %v", e, ok, err)
	}
	// An unsubscribe that names no one is a permanent error: no retry can fix it.
	err = h(ctx, consumer.Event{Envelope: envelope.Envelope{ID: "ev_2", Tenant: "acme", Type: envelope.TypeLeadUnsubscribed}})
	if retry.Of(err).Class != retry.Permanent {
		t.Fatalf("no contact: %v", err)
	}
	// A HubSpot opt-out names the contact by its HubSpot id alone. One HubSpot no longer
	// has is listed under that contact key, and no sending platform is asked anything
	// (no e-mail to tell them).
	calls := sb.TotalRequests()
	idOnly := envelope.Envelope{ID: "ev_3", Tenant: "acme", Provider: "hubspot", Type: envelope.TypeLeadUnsubscribed,
		Data: envelope.Data{Contact: &envelope.Contact{ExternalID: "1246965"}}}
	if err := h(ctx, consumer.Event{Envelope: idOnly}); err != nil {
		t.Fatalf("id-only opt-out: %v", err)
	}
	if e, ok, err := list.Lookup(ctx, "acme", "id:hubspot:1246965"); err != nil || !ok || e.Reason != Unsubscribed || e.EventID != "ev_3" {
		t.Fatalf("id-only lookup: %+v %v %v", e, ok, err)
	}
	if n := sb.TotalRequests() - calls - sb.Requests(sandbox.RouteHubSpotContactGet); n != 0 {
		t.Fatalf("%d platform calls for a contact without an e-mail", n)
	}
	// One HubSpot has: listed by its e-mail (what the reconciler looks up), which
	// goes on Instantly's block list.
	known := idOnly
	known.ID, known.Data.Contact = "ev_4", &envelope.Contact{ExternalID: sb.AddContact("opted@example.com", nil)}
	if err := h(ctx, consumer.Event{Envelope: known}); err != nil {
		t.Fatalf("id-only opt-out of a known contact: %v", err)
	}
	if e, ok, err := list.Lookup(ctx, "acme", "email:opted@example.com"); err != nil || !ok || e.EventID != "ev_4" {
		t.Fatalf("lookup by the contact's e-mail: %+v %v %v", e, ok, err)
	}
	if bl := sb.Blocklist(); !slices.Contains(bl, "opted@example.com") {
		t.Fatalf("block list %v", bl)
	}
}

// sandboxClients serves every tenant from the sandbox.
func sandboxClients(sb *sandbox.Server) Clients {
	return func(string) (accounts.Clients, bool) {
		return accounts.Clients{
			Instantly: instantly.New(instantly.Config{BaseURL: sb.URL, APIKey: sandbox.InstantlyKey}),
			Smartlead: smartlead.New(smartlead.Config{BaseURL: sb.URL, APIKey: sandbox.SmartleadKey}),
			HubSpot:   hubspot.New(hubspot.Config{BaseURL: sb.URL, Token: sandbox.HubSpotToken}),
		}, true
	}
}

// An unsubscribe reaches every sending platform, once, and nothing resubscribes.
func TestEveryPlatformIsTold(t *testing.T) {
	ctx := context.Background()
	conn := brokertest.Start(t, "")
	kv, _ := conn.JS.KeyValue(ctx, stream.Suppression)
	list := suppression.New(kv)
	sb := sandbox.Start(t)
	leadID := sb.AddSmartleadLead(9181, "ana@example.com")
	sb.AddSmartleadLead(9182, "ana@example.com")
	h := New(list, sandboxClients(sb), nil)
	env := envelope.Envelope{ID: "ev_1", Tenant: "acme", Provider: "hubspot", Type: envelope.TypeLeadUnsubscribed,
		Data: envelope.Data{Contact: &envelope.Contact{Email: "Ana@Example.com"}}}
	for range 3 { // redeliveries: harmless
		if err := h(ctx, consumer.Event{Envelope: env}); err != nil {
			t.Fatal(err)
		}
	}
	if bl := sb.Blocklist(); len(bl) != 1 || bl[0] != "ana@example.com" {
		t.Fatalf("instantly block list %v", bl)
	}
	if !sb.SmartleadUnsubscribedAll(leadID) {
		t.Fatal("the smartlead lead is still subscribed")
	}
	if n := sb.Requests(sandbox.RouteSmartleadUnsubscribeAll); n != 1 {
		t.Fatalf("%d smartlead unsubscribe calls, want 1 (the repeats see it unsubscribed)", n)
	}
	// A contact Smartlead does not know: blocked at Instantly, nothing asked of Smartlead
	// but the lookup.
	other := env
	other.ID, other.Data.Contact = "ev_2", &envelope.Contact{Email: "ben@example.com"}
	if err := h(ctx, consumer.Event{Envelope: other}); err != nil {
		t.Fatal(err)
	}
	if n := sb.Requests(sandbox.RouteSmartleadUnsubscribeAll); n != 1 {
		t.Fatalf("smartlead unsubscribe called for an unknown lead (%d calls)", n)
	}
}

// A platform that is down delays the telling, never the list.
func TestListBeforePlatforms(t *testing.T) {
	ctx := context.Background()
	conn := brokertest.Start(t, "")
	kv, _ := conn.JS.KeyValue(ctx, stream.Suppression)
	list := suppression.New(kv)
	sb := sandbox.Start(t)
	sb.SetFault(sandbox.RouteInstantlyBlocklist, sandbox.Fault{Status: 503})
	h := New(list, sandboxClients(sb), nil)
	env := envelope.Envelope{ID: "ev_1", Tenant: "acme", Provider: "instantly", Type: envelope.TypeEmailBounced,
		Data: envelope.Data{Contact: &envelope.Contact{Email: "ana@example.com"}, Bounce: &envelope.Bounce{Kind: "hard"}}}
	err := h(ctx, consumer.Event{Envelope: env})
	if err == nil || retry.Of(err).Class != retry.Transient {
		t.Fatalf("instantly down: %v, want a transient error", err)
	}
	if e, ok, _ := list.Lookup(ctx, "acme", "email:ana@example.com"); !ok || e.Reason != Bounced {
		t.Fatalf("not suppressed while a platform was down: %+v %v", e, ok)
	}
	sb.ClearFaults()
	if err := h(ctx, consumer.Event{Envelope: env}); err != nil {
		t.Fatal(err)
	}
	if len(sb.Blocklist()) != 1 {
		t.Fatalf("block list %v after recovery", sb.Blocklist())
	}
	// A phone-only contact is suppressed, and no e-mail platform is asked.
	before := sb.TotalRequests()
	phone := envelope.Envelope{ID: "ev_3", Tenant: "acme", Provider: "meta", Type: envelope.TypeLeadUnsubscribed,
		Data: envelope.Data{Contact: &envelope.Contact{Phone: "+15550100"}}}
	if err := h(ctx, consumer.Event{Envelope: phone}); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := list.Lookup(ctx, "acme", phone.ContactKey()); !ok || sb.TotalRequests() != before {
		t.Fatalf("phone-only: suppressed %v, %d platform calls", ok, sb.TotalRequests()-before)
	}
	// A tenant without accounts is a permanent error, after the list.
	noAccounts := New(list, func(string) (accounts.Clients, bool) { return accounts.Clients{}, false }, nil)
	if err := noAccounts(ctx, consumer.Event{Envelope: env}); retry.Of(err).Class != retry.Permanent {
		t.Fatalf("unknown tenant: %v", err)
	}
}
