package stripe

import (
	"net/http"
	"os"
	"testing"
	"time"

	"exacto.dev/pkg/providers"
	"exacto.dev/pkg/providers/providertest"
)

// Stripe's own fixed vector, from stripe-dotnet's EventUtilityTest
// (src/StripeTests/Services/Events/EventUtilityTest.cs) and its fixture
// src/StripeTests/Resources/event_test_signature.json (copied byte for byte, final newline
// included). Their comment: (echo -n "1533204620." && cat event_test_signature.json) |
// openssl sha256 -hmac "webhook_secret". The v0 entry is theirs too, and must be skipped.
func TestStripeDotnetVector(t *testing.T) {
	body, err := os.ReadFile("testdata/event_test_signature.json")
	if err != nil {
		t.Fatal(err)
	}
	const header = "t=1533204620,v1=2220f87ef101a04665f11cdf770523143f875572008577fa0f20882ddb9cc3c7,v0=63f3a72374a733066c4be69ed7f8e5ac85c22c9f0a6a612ab9a025a9e4ee7eef"
	p, err := New(providers.Config{Secrets: []string{"webhook_secret"}})
	if err != nil {
		t.Fatal(err)
	}
	r := &providers.Request{Header: http.Header{Header: {header}}, Body: body, Now: time.Unix(1533204620+100, 0)}
	if err := p.Verify(r); err != nil {
		t.Fatalf("stripe-dotnet vector: %v", err)
	}
	if h, _, _ := Sign("POST", "", body, "webhook_secret", time.Unix(1533204620, 0)); h.Get(Header) != header[:len("t=1533204620,v1=")+64] {
		t.Fatalf("Sign gives %s", h.Get(Header))
	}
	r.Now = time.Unix(1533204620+300+100, 0) // their RejectOutdatedTimestamp
	if err := p.Verify(r); err == nil {
		t.Fatal("outdated timestamp accepted")
	}
	evs, err := p.Events(r)
	if err != nil {
		t.Fatal(err)
	}
	providertest.CheckEvents(t, Spec, evs)
	ev := evs[0]
	if c := ev.Data.Contact; c == nil || c.Email != "test@stripe.com" || c.ExternalID != "cus_123" {
		t.Fatalf("contact %+v", c)
	}
	if ev.Key != "evt_123" || ev.ProviderEventID != "evt_123" || ev.ObjectID != "cus_123" || !ev.Time.Equal(time.Unix(1533204620, 0)) || ev.ProviderType != "customer.created" {
		t.Fatalf("event %+v", ev)
	}
}

// An invoice is not a contact: its id must not become a contact's external id.
func TestInvoiceIsNoContact(t *testing.T) {
	p, _ := New(providers.Config{Secrets: []string{"s"}})
	body, _ := Sample("invoice.paid", time.Unix(1732000000, 0))
	evs, err := p.Events(&providers.Request{Body: body})
	if err != nil {
		t.Fatal(err)
	}
	if c := evs[0].Data.Contact; c != nil {
		t.Errorf("invoice.paid carries contact %+v (subject %q)", c, evs[0].Subject)
	}
}

// A v1 that is not hex beside a valid one: stripe-go's client_test says it "should be
// ignored" (header + ",v1=bad_signature" validates).
func TestUnreadableV1Ignored(t *testing.T) {
	body, _ := os.ReadFile("testdata/event_test_signature.json")
	p, _ := New(providers.Config{Secrets: []string{"webhook_secret"}})
	h := "t=1533204620,v1=2220f87ef101a04665f11cdf770523143f875572008577fa0f20882ddb9cc3c7,v1=bad_signature"
	if err := p.Verify(&providers.Request{Header: http.Header{Header: {h}}, Body: body, Now: time.Unix(1533204620, 0)}); err != nil {
		t.Errorf("stripe-go accepts this header; we say %v", err)
	}
}
