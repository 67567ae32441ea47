package handler

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/consumer"
	"exacto.dev/pkg/contacts"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/lifecycle"
	"exacto.dev/pkg/platform/accounts"
	"exacto.dev/pkg/platform/instantly"
	"exacto.dev/pkg/platform/sandbox"
	"exacto.dev/pkg/projection"
)

type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
func (l *logBuffer) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

func event(id, typ string, at time.Time) envelope.Envelope {
	return envelope.Envelope{SpecVersion: "1.0", ID: id, Type: typ, Tenant: "acme", Provider: "instantly", Endpoint: "ep",
		Time: at, ReceivedAt: at, Data: envelope.Data{ProviderType: typ, Contact: &envelope.Contact{Email: "ana@northwind.example"},
			Campaign: &envelope.Campaign{ID: "camp-1"}}}
}

// A send and an unsubscribe at the same second with no version cannot be ordered from
// the events: the projector asks Instantly and logs what it found beside the pair. A
// send timed after the unsubscribe is a discrepancy, logged and kept in the view.
func TestUndecidedAsksTheSourceAndDiscrepanciesAreLogged(t *testing.T) {
	ctx := context.Background()
	conn := brokertest.Start(t, "")
	sb := sandbox.Start(t)
	sb.AddInstantlyLead("camp-1", "ana@northwind.example")
	dir, err := contacts.Open(ctx, conn.JS)
	if err != nil {
		t.Fatal(err)
	}
	stores, err := projection.Open(ctx, conn.JS, "", 1)
	if err != nil {
		t.Fatal(err)
	}
	var logs logBuffer
	h := New(Options{Stores: stores, Dir: dir, Log: slog.New(slog.NewJSONHandler(&logs, nil)),
		Platforms: func(string) (accounts.Clients, bool) {
			return accounts.Clients{Instantly: instantly.New(instantly.Config{BaseURL: sb.URL, APIKey: sandbox.InstantlyKey})}, true
		}})
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for _, env := range []envelope.Envelope{event("ev_unsub", envelope.TypeLeadUnsubscribed, at), event("ev_sent", envelope.TypeEmailSent, at)} {
		if err := h(ctx, consumer.Event{Envelope: env}); err != nil {
			t.Fatal(err)
		}
	}
	if n := sb.Requests(sandbox.RouteInstantlyLeadList); n != 1 {
		t.Fatalf("%d lookups at Instantly for one undecided pair", n)
	}
	if l := logs.String(); !strings.Contains(l, "asking the source") || !strings.Contains(l, `instantly: \"campaign camp-1 status`) {
		t.Fatalf("log:\n%s", l)
	}
	// A follow-up timed after the opt-out: a discrepancy, logged, in the view.
	if err := h(ctx, consumer.Event{Envelope: event("ev_follow_up", envelope.TypeEmailSent, at.Add(time.Hour))}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), `"msg":"lifecycle discrepancy"`) || !strings.Contains(logs.String(), "ev_follow_up") {
		t.Fatalf("no discrepancy logged:\n%s", logs.String())
	}
	// The crmwriter recorded the contact's HubSpot ids in the directory: the read API
	// shows them beside the ids the stream named.
	if _, err := dir.Record(ctx, "acme", contacts.Seen{Email: "ana@northwind.example", External: map[string]string{contacts.CRMContactID: "hubspot:501"}}); err != nil {
		t.Fatal(err)
	}
	c, ok, err := (projection.Reader{Stores: stores, Dir: dir}).ContactByEmail(ctx, "acme", "ana@northwind.example")
	if err != nil || !ok {
		t.Fatalf("contact: %v %v", ok, err)
	}
	if ids := c.External[contacts.CRMContactID]; len(ids) != 1 || ids[0] != "hubspot:501" || len(c.External[contacts.CampaignID]) != 1 {
		t.Fatalf("external ids %v", c.External)
	}
	if v := c.InCampaign("camp-1"); v.Status != lifecycle.Unsubscribed || len(v.Discrepancies) != 1 || v.Discrepancies[0].Event != "ev_follow_up" {
		t.Fatalf("view %+v", v)
	}
	// The same events again change nothing and ask nobody.
	for _, id := range []string{"ev_unsub", "ev_sent"} {
		typ := envelope.TypeEmailSent
		if id == "ev_unsub" {
			typ = envelope.TypeLeadUnsubscribed
		}
		if err := h(ctx, consumer.Event{Envelope: event(id, typ, at)}); err != nil {
			t.Fatal(err)
		}
	}
	if n := sb.Requests(sandbox.RouteInstantlyLeadList); n != 1 {
		t.Fatalf("a redelivery asked the source again (%d lookups)", n)
	}
}
