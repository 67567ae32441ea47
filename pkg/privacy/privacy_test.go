package privacy

import (
	"encoding/json"
	"strings"
	"testing"

	"exacto.dev/pkg/envelope"
)

func TestIdentify(t *testing.T) {
	for in, want := range map[string]string{
		"Ana.Lopez@Northwind.example": "email:ana.lopez@northwind.example",
		" <ana@x.example> ":           "email:ana@x.example",
		"+1 (555) 010-4477":           "phone:15550104477",
	} {
		if got, err := Identify(in); err != nil || got != want {
			t.Errorf("Identify(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for in, why := range map[string]string{
		"ana@":      "not an e-mail address",
		"@x.com":    "not an e-mail address",
		"ana lopez": "neither an e-mail address nor a phone number",
		"12345":     "at least 7 digits",
		"":          "neither",
	} {
		if got, err := Identify(in); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("Identify(%q) = %q, %v; want an error saying %q", in, got, err, why)
		}
	}
}

func TestHasherIsKeyed(t *testing.T) {
	a, b := Hasher{key: make([]byte, 32)}, Hasher{key: append(make([]byte, 31), 1)}
	k := "email:ana@x.example"
	if a.Anonymous("acme", k) != (Hasher{key: make([]byte, 32)}).Anonymous("acme", k) || a.Anonymous("acme", k) == b.Anonymous("acme", k) ||
		a.Anonymous("acme", k) == a.Anonymous("other", k) || a.Key("acme", k) == strings.TrimPrefix(a.Anonymous("acme", k), "an_") {
		t.Fatal("keyed hashes: deterministic per key and tenant, different across keys, tenants and uses")
	}
	if !strings.HasPrefix(a.Anonymous("acme", k), "an_") || len(a.Anonymous("acme", k)) != 35 {
		t.Fatal(a.Anonymous("acme", k))
	}
}

func reply(email, name, text string) envelope.Envelope {
	return envelope.Envelope{ID: "ev_1", Tenant: "acme", Provider: "instantly", Type: envelope.TypeReplyReceived, Subject: "",
		Data: envelope.Data{Contact: &envelope.Contact{Email: email, Name: name, ExternalID: "lead-0001"},
			Campaign:       &envelope.Campaign{ID: "c1", Name: "Founders Q4"},
			Message:        &envelope.Message{ID: "m1", From: email, Subject: "Re: hi", Text: text, HTML: "<p>" + text + "</p>"},
			Classification: &envelope.Classification{Label: "interested", Evidence: []string{text}},
			Raw:            json.RawMessage(`{"lead_email":"` + email + `","reply_text":` + strconvQuote(text) + `}`)}}
}

func strconvQuote(s string) string { b, _ := json.Marshal(s); return string(b) }

// An event about the person keeps what the projections count and nothing of them; an
// event of someone else's that names them keeps everything else.
func TestRewrite(t *testing.T) {
	anon := "an_" + strings.Repeat("cd", 16)
	p := NewPerson("acme", anon, []string{"email:ana@x.example", "phone:15550104477", "sending_platform_contact_id:instantly:lead-0001"}, []string{"ct_1"})
	hers := reply("Ana@X.example", "Ana Lopez", "Yes! Call me on +1 (555) 010-4477")
	if !p.About(&hers) || !p.Rewrite(&hers) {
		t.Fatal("her reply is about her")
	}
	data, _ := json.Marshal(hers)
	for _, s := range []string{"ana@", "Ana", "010-4477", "lead-0001", "Call me"} {
		if strings.Contains(string(data), s) {
			t.Errorf("her rewritten reply holds %q: %s", s, data)
		}
	}
	if hers.Data.Contact.Anonymous != anon || hers.Erasure != anon || hers.Data.Classification.Label != "interested" ||
		hers.Data.Campaign.ID != "c1" || hers.Data.Message.ID != "m1" || string(hers.Data.Raw) != string(Erased) {
		t.Errorf("her rewritten reply: %s", data)
	}
	if k := hers.ContactKey(); k != envelope.AnonymousKey+anon {
		t.Errorf("contact key %q", k)
	}

	bobs := reply("bob@x.example", "Bob Stone", "Not me: ANA@x.example or +1 555 010 4477 decides, ask lead-0001")
	bobs.Data.Contact.ExternalID = "lead-0002"
	if p.About(&bobs) {
		t.Fatal("bob's reply is not about her")
	}
	if !p.Rewrite(&bobs) {
		t.Fatal("bob's reply names her")
	}
	want := "Not me: [erased] or [erased] decides, ask lead-0001"
	if bobs.Data.Message.Text != want || bobs.Data.Classification.Evidence[0] != want || bobs.Data.Contact.Email != "bob@x.example" || bobs.Erasure != "" {
		t.Errorf("bob's rewritten reply: %+v %+v", bobs.Data.Message, bobs.Data.Contact)
	}
	// A classification's Also (a referral beside an unsubscribe) naming her is scrubbed too.
	carls := reply("carl@x.example", "Carl", "remove me, talk to ana@x.example")
	carls.Data.Contact.ExternalID = "lead-0005"
	carls.Data.Classification.Also = []string{"referral: ana@x.example"}
	if !p.Rewrite(&carls) || carls.Data.Classification.Also[0] != "referral: [erased]" {
		t.Errorf("carl's classification: %+v", carls.Data.Classification)
	}
	var raw map[string]string
	if err := json.Unmarshal(bobs.Data.Raw, &raw); err != nil || raw["reply_text"] != want || raw["lead_email"] != "bob@x.example" {
		t.Errorf("bob's raw payload: %s", bobs.Data.Raw)
	}
	// A whole string that is her id is erased; inside a sentence it is not a word.
	words := reply("carl@x.example", "", "hello")
	words.Data.Contact.ExternalID = "lead-0004"
	words.Data.Raw = json.RawMessage(`{"lead_id":"lead-0001","note":"\u0061na@x.example"}`)
	if !p.Rewrite(&words) || strings.Contains(string(words.Data.Raw), "lead-0001") || strings.Contains(string(words.Data.Raw), "x.example") {
		t.Errorf("ids and escaped addresses in a raw payload: %s", words.Data.Raw)
	}
	other := reply("dan@x.example", "Dan", "nothing about anyone")
	other.Data.Contact.ExternalID = "lead-0003"
	if p.Rewrite(&other) || other.Erasure != "" {
		t.Error("an event that does not name her was rewritten")
	}
}

func TestMentions(t *testing.T) {
	p := NewPerson("acme", "an_x", []string{"email:ana@x.example", "phone:15550104477"}, []string{"ct_0123"})
	for _, s := range []string{`"ANA@X.EXAMPLE"`, `ana\u0040x.example`, `call +1-555-010-4477`, `{"id":"ct_0123"}`, `write to ana@x.example.`, `<ana@x.example>`} {
		if !p.Mentions([]byte(s)) {
			t.Errorf("%s names her", s)
		}
	}
	for _, s := range []string{`"hana@x.example"`, `ana@x.example.org`, `ana@x.examples`, `call +1-555-010-4478`, `ct_0124`} {
		if p.Mentions([]byte(s)) {
			t.Errorf("%s does not name her", s)
		}
	}
}
