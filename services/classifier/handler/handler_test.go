package handler

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/classify"
	"exacto.dev/pkg/consumer"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/providers/providertest"
	"exacto.dev/pkg/stream"
)

func TestClassifiesOnce(t *testing.T) {
	ctx := context.Background()
	conn := brokertest.Start(t, "")
	d, err := consumer.NewDeriver(ctx, conn.JS)
	if err != nil {
		t.Fatal(err)
	}
	h := New(d, classify.New())
	reply := envelope.Envelope{SpecVersion: "1.0", ID: envelope.ID("acme", "smartlead", "r1"), Source: envelope.Source("acme", "sl"), Type: envelope.TypeReplyReceived,
		Time: time.Now(), DataContentType: "application/json", Tenant: "acme", Provider: "smartlead", Endpoint: "sl", ReceivedAt: time.Now(),
		PayloadSHA256: "0000000000000000000000000000000000000000000000000000000000000000", AuthMethod: "secret_key",
		Data: envelope.Data{ProviderType: "EMAIL_REPLY", Contact: &envelope.Contact{Email: "luis@example.com"},
			Message: &envelope.Message{Text: "Sí, me interesa. ¿Podemos hablar el jueves a las 10?"}}}
	for range 2 { // a redelivery derives the same event: stored once
		if err := h(ctx, consumer.Event{Envelope: reply}); err != nil {
			t.Fatal(err)
		}
	}
	if n := brokertest.Count(t, conn, stream.Events); n != 1 {
		t.Fatalf("%d events stored, want one classification", n)
	}
	st, _ := conn.JS.Stream(ctx, stream.Events)
	m, err := st.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if m.Subject != "events.acme.smartlead.reply.classified" {
		t.Fatalf("subject %s", m.Subject)
	}
	if err := providertest.Validate(m.Data); err != nil {
		t.Fatalf("%v\n%s", err, m.Data)
	}
	var env envelope.Envelope
	json.Unmarshal(m.Data, &env)
	c := env.Data.Classification
	if c == nil || c.Language != "es" || c.Classifier != Version || env.Data.Cause != reply.ID || env.Data.Contact.Email != "luis@example.com" {
		t.Fatalf("classification: %s", m.Data)
	}
}
