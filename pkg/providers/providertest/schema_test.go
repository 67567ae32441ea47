package providertest

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/providers"
)

// Every example in schemas/examples is valid, and there is one per canonical type.
func TestExamplesValidate(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(SchemaDir(), "examples", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := Validate(b); err != nil {
			t.Errorf("%s: %v", filepath.Base(f), err)
		}
		var head struct{ Type string }
		json.Unmarshal(b, &head)
		seen[head.Type] = true
	}
	for _, typ := range envelope.AllTypes {
		if !seen[typ] {
			t.Errorf("no example of %s in schemas/examples", typ)
		}
	}
}

// Each mutation of a valid example is refused by the schemas.
func TestSchemasRefuse(t *testing.T) {
	data := func(m map[string]any) map[string]any { return m["data"].(map[string]any) }
	cases := []struct {
		name, example string
		edit          func(m map[string]any)
	}{
		{"missing id", "reply.received", func(m map[string]any) { delete(m, "id") }},
		{"id not derived", "reply.received", func(m map[string]any) { m["id"] = "evt_123" }},
		{"id in upper case", "reply.received", func(m map[string]any) { m["id"] = "ev_1B159F2E3C2C20721E267262741AC338" }},
		{"unknown type", "reply.received", func(m map[string]any) { m["type"] = "reply.maybe" }},
		{"wrong specversion", "reply.received", func(m map[string]any) { m["specversion"] = "0.3" }},
		{"wrong content type", "reply.received", func(m map[string]any) { m["datacontenttype"] = "text/plain" }},
		{"extra attribute", "reply.received", func(m map[string]any) { m["surprise"] = "x" }},
		{"signed as a string", "reply.received", func(m map[string]any) { m["signed"] = "true" }},
		{"missing signed", "reply.received", func(m map[string]any) { delete(m, "signed") }},
		{"bad time", "reply.received", func(m map[string]any) { m["time"] = "yesterday" }},
		{"bad receivedat", "reply.received", func(m map[string]any) { m["receivedat"] = "2026-11-20 10:30" }},
		{"bad payload hash", "reply.received", func(m map[string]any) { m["payloadsha256"] = "abc" }},
		{"unknown auth method", "reply.received", func(m map[string]any) { m["authmethod"] = "trust" }},
		{"unknown channel", "message.status", func(m map[string]any) { m["channel"] = "telegram" }},
		{"tenant in upper case", "reply.received", func(m map[string]any) { m["tenant"] = "Acme" }},
		{"data not an object", "reply.received", func(m map[string]any) { m["data"] = "hello" }},
		{"reply without contact", "reply.received", func(m map[string]any) { delete(data(m), "contact") }},
		{"reply without message", "reply.received", func(m map[string]any) { delete(data(m), "message") }},
		{"contact without any id", "reply.received", func(m map[string]any) { data(m)["contact"] = map[string]any{"name": "Someone"} }},
		{"unmapped with an id-less contact", "unmapped", func(m map[string]any) { data(m)["contact"] = map[string]any{"name": "Someone"} }},
		{"unmapped with an id-less meeting", "unmapped", func(m map[string]any) { data(m)["meeting"] = map[string]any{"id": ""} }},
		{"data without raw", "reply.received", func(m map[string]any) { delete(data(m), "raw") }},
		{"data without provider type", "unmapped", func(m map[string]any) { delete(data(m), "provider_type") }},
		{"unknown data field", "reply.received", func(m map[string]any) { data(m)["mood"] = "happy" }},
		{"unknown message field", "reply.received", func(m map[string]any) { data(m)["message"].(map[string]any)["body"] = "hi" }},
		{"auto as a string", "reply.received", func(m map[string]any) { data(m)["message"].(map[string]any)["auto"] = "yes" }},
		{"bounce of unknown kind", "email.bounced", func(m map[string]any) { data(m)["bounce"] = map[string]any{"kind": "medium"} }},
		{"sent without contact", "email.sent", func(m map[string]any) { delete(data(m), "contact") }},
		{"unsubscribed without contact", "lead.unsubscribed", func(m map[string]any) { delete(data(m), "contact") }},
		{"status change without status", "lead.status_changed", func(m map[string]any) { delete(data(m), "status") }},
		{"contact update with neither", "contact.updated", func(m map[string]any) {
			delete(data(m), "contact")
			delete(data(m), "property")
		}},
		{"opportunity without id", "opportunity.created", func(m map[string]any) { delete(data(m)["opportunity"].(map[string]any), "id") }},
		{"meeting without id", "meeting.booked", func(m map[string]any) { delete(data(m)["meeting"].(map[string]any), "id") }},
		{"meeting start not a time", "meeting.booked", func(m map[string]any) { data(m)["meeting"].(map[string]any)["start"] = "tomorrow" }},
		{"cancellation without meeting", "meeting.cancelled", func(m map[string]any) { delete(data(m), "meeting") }},
		{"cancellation of another status", "meeting.cancelled", func(m map[string]any) { data(m)["status"] = "postponed" }},
		{"rescheduled from nothing", "meeting.booked", func(m map[string]any) { data(m)["meeting"].(map[string]any)["rescheduled_from"] = "" }},
		{"message without id", "message.received", func(m map[string]any) { delete(data(m)["message"].(map[string]any), "id") }},
		{"status without status", "message.status", func(m map[string]any) { delete(data(m), "status") }},
		{"status without message", "message.status", func(m map[string]any) { delete(data(m), "message") }},
		{"status not a status", "message.status", func(m map[string]any) { data(m)["status"] = "thinking" }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join(SchemaDir(), "examples", c.example+".json"))
			if err != nil {
				t.Fatal(err)
			}
			if err := Validate(b); err != nil {
				t.Fatalf("the example itself is refused: %v", err)
			}
			var m map[string]any
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			c.edit(m)
			b, _ = json.Marshal(m)
			if err := Validate(b); err == nil {
				t.Fatalf("accepted: %s", strings.TrimSpace(string(b)))
			}
		})
	}
}

// The envelope schema's type enum is envelope.AllTypes.
func TestTypeEnumIsTypes(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(SchemaDir(), "envelope.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Properties struct {
			Type struct {
				Enum []string `json:"enum"`
			} `json:"type"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.Properties.Type.Enum, envelope.AllTypes) {
		t.Fatalf("schema enum %q, envelope.AllTypes %q", s.Properties.Type.Enum, envelope.AllTypes)
	}
}

// The examples speak the Go structs' JSON: each decodes into envelope.Envelope with no
// field left over, encodes back to the same document, passes ValidateEnvelope and is
// Complete.
func TestExamplesAreGoEnvelopes(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(SchemaDir(), "examples", "*.json"))
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			dec := json.NewDecoder(bytes.NewReader(b))
			dec.DisallowUnknownFields()
			var env envelope.Envelope
			if err := dec.Decode(&env); err != nil {
				t.Fatalf("not an envelope.Envelope: %v", err)
			}
			again, err := json.Marshal(env)
			if err != nil {
				t.Fatal(err)
			}
			var want, got any
			json.Unmarshal(b, &want)
			json.Unmarshal(again, &got)
			if !reflect.DeepEqual(want, got) {
				t.Fatalf("does not survive a round trip through the Go struct:\n%s", again)
			}
			ValidateEnvelope(t, env)
			if !envelope.Complete(env.Type, env.Data) {
				t.Fatalf("envelope.Complete(%s) is false", env.Type)
			}
		})
	}
}

// envelope.Complete and the data schemas agree on what each type requires, for data
// whose objects are well formed. (Beyond Complete, the schemas require in every type that
// a contact has an email, phone or external_id and that a meeting or opportunity has an
// id: see TestSchemasRefuse.)
func TestCompleteAgreesWithSchemas(t *testing.T) {
	raw := json.RawMessage(`{"id":"x"}`)
	contact := &envelope.Contact{Email: "jordan.lee@acme.example"}
	variants := map[string]envelope.Data{
		"bare":                 {},
		"contact":              {Contact: contact},
		"phone only":           {Contact: &envelope.Contact{Phone: "16505551234"}},
		"external id only":     {Contact: &envelope.Contact{ExternalID: "1234"}},
		"contact and message":  {Contact: contact, Message: &envelope.Message{Text: "hi"}},
		"message with id":      {Message: &envelope.Message{ID: "wamid.1"}},
		"message without id":   {Message: &envelope.Message{From: "page", To: "user"}},
		"message and status":   {Message: &envelope.Message{ID: "wamid.1"}, Status: "read"},
		"receipt by watermark": {Message: &envelope.Message{From: "page", To: "user"}, Status: "read"},
		"status":               {Status: "interested"},
		"property":             {Property: &envelope.Property{Name: "lifecyclestage", Value: "lead"}},
		"opportunity":          {Opportunity: &envelope.Opportunity{ID: "deal-1", Name: "Acme"}},
		"meeting":              {Meeting: &envelope.Meeting{ID: "mtg-1", Start: Now}},
		"rescheduled meeting":  {Meeting: &envelope.Meeting{ID: "mtg-1", RescheduledFrom: "mtg-0"}, Status: envelope.MeetingRescheduled},
		"meeting and a status": {Meeting: &envelope.Meeting{ID: "mtg-1"}, Status: "interested"},
		"contact and bounce":   {Contact: contact, Bounce: &envelope.Bounce{Kind: "hard"}},
	}
	for _, typ := range envelope.Types {
		for name, d := range variants {
			d.ProviderType, d.Raw = "provider.type", raw
			env := ev(typ, d)
			env.Type = typ // as a provider maps it, before the builder's fallback to unmapped
			b, err := json.Marshal(env)
			if err != nil {
				t.Fatal(err)
			}
			err = Validate(b)
			if complete := envelope.Complete(typ, d); complete != (err == nil) {
				t.Errorf("%s, %s: Complete %v, schema error %v", typ, name, complete, err)
			}
		}
	}
}

// ValidateEnvelope accepts an envelope built the way providers build it.
func TestValidateEnvelopeOfEvent(t *testing.T) {
	env := ev(envelope.TypeEmailOpened, envelope.Data{ProviderType: "email_opened", Contact: &envelope.Contact{Email: "jordan.lee@acme.example"}, Raw: json.RawMessage(`{}`)})
	ValidateEnvelope(t, env)
	if err := Validate([]byte(`{"specversion":"1.0"`)); err == nil {
		t.Fatal("truncated JSON accepted")
	}
}

func ev(typ string, d envelope.Data) envelope.Envelope {
	e := providers.Event{Type: typ, ProviderType: d.ProviderType, Key: "k", Time: Now, Data: d}
	return e.Envelope(providers.Spec{Name: "instantly", AuthMethod: "header_secret"}, "acme", "ep-1", "path_token", Now, strings.Repeat("0", 64))
}

// The envelope builder stores a mapped type without what it requires as unmapped (raw
// kept), and drops a contact that identifies no one: what is stored always matches
// schemas/.
func TestEnvelopeNeverHalfAnEvent(t *testing.T) {
	raw := json.RawMessage(`{"event_type":"EMAIL_REPLY","reply_message":null}`)
	reply := ev(envelope.TypeReplyReceived, envelope.Data{ProviderType: "EMAIL_REPLY", Message: &envelope.Message{}, Raw: raw})
	if reply.Type != envelope.TypeUnmapped || string(reply.Data.Raw) != string(raw) {
		t.Fatalf("a reply naming no one stored as %q", reply.Type)
	}
	ValidateEnvelope(t, reply)
	status := ev(envelope.TypeMessageStatus, envelope.Data{ProviderType: "delivered", Contact: &envelope.Contact{Name: "no id"},
		Message: &envelope.Message{From: "page"}, Status: "delivered", Raw: raw})
	if status.Type != envelope.TypeMessageStatus || status.Data.Contact != nil {
		t.Fatalf("receipt stored as %q with contact %+v", status.Type, status.Data.Contact)
	}
	ValidateEnvelope(t, status)
	opened := ev(envelope.TypeEmailOpened, envelope.Data{ProviderType: "email_opened", Contact: &envelope.Contact{Email: "a@example.com"}, Raw: raw})
	if opened.Type != envelope.TypeEmailOpened || opened.Data.Contact == nil {
		t.Fatalf("a complete event changed: %+v", opened)
	}
}
