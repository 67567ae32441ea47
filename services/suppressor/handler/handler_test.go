package handler

import (
	"context"
	"testing"

	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/consumer"
	"exacto.dev/pkg/envelope"
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
	h := New(list)
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
}
