package envelope

import (
	"encoding/json"
	"testing"
	"time"
)

func TestIDDeterministicAndSeparated(t *testing.T) {
	a := ID("acme", "stripe", "evt_1")
	if a != ID("acme", "stripe", "evt_1") {
		t.Fatal("ID is not deterministic")
	}
	for _, other := range []string{ID("acme2", "stripe", "evt_1"), ID("acme", "hubspot", "evt_1"), ID("acme", "stripe", "evt_2"), ID("acmestripe", "", "evt_1")} {
		if other == a {
			t.Fatalf("different events share id %s", a)
		}
	}
	if len(a) != 35 || a[:3] != "ev_" {
		t.Fatalf("id shape %q", a)
	}
}

func TestKeyIsUnambiguous(t *testing.T) {
	if Key("a|b", "c") == Key("a", "b|c") || Key("ab", "") == Key("a", "b") || Key("") == Key() {
		t.Fatal("two part lists give one key")
	}
}

func TestComplete(t *testing.T) {
	contact := &Contact{Email: "a@example.com"}
	cases := []struct {
		typ  string
		d    Data
		want bool
	}{
		{TypeReplyReceived, Data{Contact: contact, Message: &Message{}}, true},
		{TypeReplyReceived, Data{Contact: contact}, false},
		{TypeReplyReceived, Data{Contact: &Contact{Name: "no id"}, Message: &Message{}}, false},
		{TypeLeadUnsubscribed, Data{Contact: contact}, true},
		{TypeLeadStatusChanged, Data{}, false},
		{TypeContactUpdated, Data{Property: &Property{Name: "x"}}, true},
		{TypeOpportunityCreated, Data{Opportunity: &Opportunity{}}, false},
		{TypeMeetingBooked, Data{Meeting: &Meeting{ID: "m"}}, true},
		{TypeMeetingCancelled, Data{Meeting: &Meeting{ID: "m"}}, true},
		{TypeMeetingCancelled, Data{Meeting: &Meeting{ID: "m"}, Status: MeetingRescheduled}, true},
		{TypeMeetingCancelled, Data{Meeting: &Meeting{ID: "m"}, Status: "interested"}, false},
		{TypeMessageReceived, Data{Message: &Message{}}, false},
		{TypeMessageStatus, Data{Message: &Message{}, Status: "read"}, true},
		{TypeUnmapped, Data{ProviderType: "x"}, true},
		{"nonsense", Data{ProviderType: "x"}, false},
	}
	for _, c := range cases {
		if got := Complete(c.typ, c.d); got != c.want {
			t.Errorf("Complete(%s, %+v) = %v", c.typ, c.d, got)
		}
	}
}

func TestContactKey(t *testing.T) {
	e := Envelope{Provider: "meta", Subject: "s1"}
	if e.ContactKey() != "subject:meta:s1" {
		t.Fatal(e.ContactKey())
	}
	e.Data.Contact = &Contact{ExternalID: "42"}
	if e.ContactKey() != "id:meta:42" {
		t.Fatal(e.ContactKey())
	}
	e.Data.Contact.Phone = "+15550100"
	if e.ContactKey() != "phone:15550100" {
		t.Fatal(e.ContactKey())
	}
	e.Data.Contact.Email = " Ana+Q4@Example.com"
	if e.ContactKey() != "email:ana+q4@example.com" {
		t.Fatal(e.ContactKey())
	}
	if (&Envelope{}).ContactKey() != "" {
		t.Fatal("no contact, no key")
	}
}

// Decode reads a stored envelope as encoding/json does.
func TestDecodeAsEncodingJSON(t *testing.T) {
	at := time.Date(2026, 12, 4, 10, 0, 0, 123, time.UTC)
	envs := []Envelope{
		{SpecVersion: "1.0", ID: "ev_1", Type: TypeReplyReceived, Time: at, Tenant: "acme", Provider: "instantly", ReceivedAt: at.Add(time.Second),
			Data: Data{ProviderType: "reply_received", Contact: &Contact{Email: "a@b.example", ExternalID: "x"}, Campaign: &Campaign{ID: "c1", Name: "Q4 \u2603"},
				Message: &Message{ID: "m", Text: "Sounds good <b>\n\"quoted\"\\"}, Raw: json.RawMessage(`{"a":[1,2,{"b":null}],"c":"\u00e9"}`)}, Signed: true},
		{ID: "ev_2", Type: TypeReplyClassified, Data: Data{Cause: "ev_1", Classification: &Classification{Label: "interested", Confidence: 0.93}}},
		{},
	}
	for _, env := range envs {
		b, err := json.Marshal(env)
		if err != nil {
			t.Fatal(err)
		}
		var want, got Envelope
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatal(err)
		}
		if err := Decode(b, &got); err != nil {
			t.Fatal(err)
		}
		wb, _ := json.Marshal(want)
		gb, _ := json.Marshal(got)
		if string(wb) != string(gb) {
			t.Errorf("Decode:\n got %s\nwant %s", gb, wb)
		}
	}
	var e Envelope
	if err := Decode([]byte(`{"id": "x", `), &e); err == nil {
		t.Error("a truncated envelope decoded")
	}
}
