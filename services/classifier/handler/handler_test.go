package handler

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"exacto.dev/pkg/broker"
	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/classify"
	"exacto.dev/pkg/consumer"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/providers/providertest"
	"exacto.dev/pkg/stream"
)

// start is a classifier handler over an embedded server's stream.
func start(t *testing.T) (*broker.Conn, consumer.Handler) {
	t.Helper()
	conn := brokertest.Start(t, "")
	d, err := consumer.NewDeriver(context.Background(), conn.JS)
	if err != nil {
		t.Fatal(err)
	}
	return conn, New(d, classify.New())
}

func TestClassifiesOnce(t *testing.T) {
	ctx := context.Background()
	conn, h := start(t)
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

// A WhatsApp message (message.received from Meta) is classified like an e-mail reply.
func TestClassifiesChatMessages(t *testing.T) {
	ctx := context.Background()
	conn, h := start(t)
	msg := envelope.Envelope{SpecVersion: "1.0", ID: envelope.ID("acme", "meta", "wamid.1"), Source: envelope.Source("acme", "wa"), Type: envelope.TypeMessageReceived,
		Time: time.Now(), DataContentType: "application/json", Tenant: "acme", Provider: "meta", Endpoint: "wa", ReceivedAt: time.Now(), Channel: "whatsapp",
		PayloadSHA256: "0000000000000000000000000000000000000000000000000000000000000000", Signed: true, AuthMethod: "hmac",
		Data: envelope.Data{ProviderType: "messages", Contact: &envelope.Contact{Phone: "+5511999990000"},
			Message: &envelope.Message{ID: "wamid.1", Text: "Por favor, me remova da sua lista. Não quero mais receber mensagens."}}}
	if err := h(ctx, consumer.Event{Envelope: msg}); err != nil {
		t.Fatal(err)
	}
	st, _ := conn.JS.Stream(ctx, stream.Events)
	m, err := st.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := providertest.Validate(m.Data); err != nil {
		t.Fatalf("%v\n%s", err, m.Data)
	}
	var env envelope.Envelope
	json.Unmarshal(m.Data, &env)
	if c := env.Data.Classification; c == nil || c.Label != "unsubscribe_request" || c.Language != "pt" || env.Data.Cause != msg.ID {
		t.Fatalf("classification: %s", m.Data)
	}
}
