package instantly

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/providers"
	"exacto.dev/pkg/providers/providertest"
)

const (
	secret      = "inst-4c1b0e7d9a2f4e8b"
	otherSecret = "inst-77e3a9d05b6c4f12"
	hookURL     = "https://hooks.example.com/hooks/ep/tok"
)

func TestConformance(t *testing.T) {
	providertest.Run(t, providertest.Suite{Spec: Spec, Secret: secret, OtherSecret: otherSecret, URL: hookURL})
}

func newProvider(t testing.TB, cfg providers.Config) providers.Provider {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func request(body []byte, h http.Header) *providers.Request {
	if h == nil {
		h = http.Header{}
	}
	return &providers.Request{Method: http.MethodPost, URL: hookURL, Header: h, Body: body, Now: providertest.Now}
}

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The fixtures follow the payload schema of Instantly's "Webhook events" page
// (developer.instantly.ai/webhook-events), which documents fields, not a filled example.
func TestGolden(t *testing.T) {
	p := newProvider(t, providers.Config{})
	tests := []struct {
		file    string
		typ     string
		status  string
		subject string
		object  string
		check   func(t *testing.T, d envelope.Data)
	}{
		{"reply_received.json", envelope.TypeReplyReceived, "", "priya.shah@northwind.example", "0197a4c2-5e1b-7c3d-9a8f-6b2e4d1c0f9a", func(t *testing.T, d envelope.Data) {
			m := d.Message
			if m == nil || m.Auto || m.Subject != "Re: Following up on onboarding" || !strings.HasPrefix(m.Text, "Thanks Alex") ||
				!strings.HasPrefix(m.HTML, "<div>") || !strings.HasPrefix(m.URL, "https://app.instantly.ai/app/unibox") ||
				m.From != "priya.shah@northwind.example" || m.To != "alex@getoutbound.example" {
				t.Fatalf("message: %+v", m)
			}
			if c := d.Campaign; c == nil || c.ID != "3c6e0b8a-9c0b-4f1e-8b2a-7d5e4f3a2b1c" || c.Name != "SaaS founders - June" || c.Step != "2" {
				t.Fatalf("campaign: %+v", c)
			}
			if d.Contact == nil || d.Contact.Email != "priya.shah@northwind.example" {
				t.Fatalf("contact: %+v", d.Contact)
			}
		}},
		{"auto_reply_received.json", envelope.TypeReplyReceived, "", "tom@contoso.example", "0197a4c2-6a00-7000-8000-000000000001", func(t *testing.T, d envelope.Data) {
			if d.Message == nil || !d.Message.Auto {
				t.Fatalf("auto-reply not marked: %+v", d.Message)
			}
		}},
		{"email_sent.json", envelope.TypeEmailSent, "", "priya.shah@northwind.example", "0197a4c2-5e1b-7c3d-9a8f-000000000000", func(t *testing.T, d envelope.Data) {
			if m := d.Message; m == nil || m.Subject != "Quick question" || m.From != "alex@getoutbound.example" || m.To != "priya.shah@northwind.example" {
				t.Fatalf("message: %+v", m)
			}
		}},
		{"lead_meeting_booked.json", envelope.TypeLeadStatusChanged, "meeting_booked", "priya.shah@northwind.example", "priya.shah@northwind.example", nil},
		{"lead_no_show.json", envelope.TypeLeadStatusChanged, "no_show", "priya.shah@northwind.example", "priya.shah@northwind.example", nil},
		{"email_link_clicked.json", envelope.TypeEmailClicked, "", "priya.shah@northwind.example", "0197a4c2-5e1b-7c3d-9a8f-000000000000", func(t *testing.T, d envelope.Data) {
			if m := d.Message; m == nil || m.Subject != "Quick question" || m.To != "priya.shah@northwind.example" {
				t.Fatalf("message: %+v", m)
			}
		}},
		{"campaign_completed.json", envelope.TypeUnmapped, "", "", "3c6e0b8a-9c0b-4f1e-8b2a-7d5e4f3a2b1c", nil},
		{"custom_label.json", envelope.TypeUnmapped, "", "priya.shah@northwind.example", "priya.shah@northwind.example", nil},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			body := fixture(t, tt.file)
			evs, err := p.Events(request(body, nil))
			if err != nil {
				t.Fatal(err)
			}
			providertest.CheckEvents(t, Spec, evs)
			ev := evs[0]
			if ev.Type != tt.typ || ev.Data.Status != tt.status || ev.Subject != tt.subject || ev.ObjectID != tt.object {
				t.Fatalf("got type %q status %q subject %q object %q", ev.Type, ev.Data.Status, ev.Subject, ev.ObjectID)
			}
			if ev.ProviderEventID != "" {
				t.Fatalf("Instantly has no event id, got %q", ev.ProviderEventID)
			}
			if ev.Key == tt.subject || !strings.Contains(ev.Key, keyType(ev.ProviderType)) {
				t.Fatalf("key %q", ev.Key)
			}
			if string(ev.Data.Raw) != string(body) {
				t.Fatal("raw payload is not the body")
			}
			if tt.check != nil {
				tt.check(t, ev.Data)
			}
		})
	}
}

func TestTime(t *testing.T) {
	evs, err := newProvider(t, providers.Config{}).Events(request(fixture(t, "reply_received.json"), nil))
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2025, 6, 3, 14, 22, 51, 318000000, time.UTC); !evs[0].Time.Equal(want) {
		t.Fatalf("time %v, want %v", evs[0].Time, want)
	}
}

// The lead e-mail never identifies an event alone: the same lead's reply in another
// campaign, step or at another time is another event.
func TestIdentity(t *testing.T) {
	p := newProvider(t, providers.Config{})
	base := string(fixture(t, "reply_received.json"))
	key := func(body string) string {
		evs, err := p.Events(request([]byte(body), nil))
		if err != nil {
			t.Fatal(err)
		}
		return evs[0].Key
	}
	k := key(base)
	if key(base) != k {
		t.Fatal("same body, different key")
	}
	for _, change := range [][2]string{
		{`"campaign_id": "3c6e0b8a`, `"campaign_id": "4c6e0b8a`},
		{`"step": 2`, `"step": 3`},
		{`"variant": 1`, `"variant": 2`},
		{`14:22:51.318Z`, `14:22:52.318Z`},
		{`"email_id": "0197`, `"email_id": "0198`},
		{`"event_type": "reply_received"`, `"event_type": "auto_reply_received"`},
	} {
		if key(strings.Replace(base, change[0], change[1], 1)) == k {
			t.Fatalf("changing %s did not change the key", change[0])
		}
	}
	// Lead fields merged in by Instantly are not part of the identity.
	if key(strings.Replace(base, `"Priya"`, `"P."`, 1)) != k {
		t.Fatal("a lead field changed the key")
	}
}

// Instantly's webhook guide names a click link_clicked, its webhook API schema
// email_link_clicked: both are email.clicked, and one click posted under both names is
// one event.
func TestClickNames(t *testing.T) {
	p := newProvider(t, providers.Config{})
	schema := fixture(t, "email_link_clicked.json")
	guide := []byte(strings.Replace(string(schema), `"email_link_clicked"`, `"link_clicked"`, 1))
	var keys []string
	for _, body := range [][]byte{schema, guide} {
		evs, err := p.Events(request(body, nil))
		if err != nil {
			t.Fatal(err)
		}
		if evs[0].Type != envelope.TypeEmailClicked {
			t.Fatalf("%s: type %s", evs[0].ProviderType, evs[0].Type)
		}
		keys = append(keys, evs[0].Key)
	}
	if keys[0] != keys[1] {
		t.Fatalf("one click, two keys: %q %q", keys[0], keys[1])
	}
	opened := []byte(strings.Replace(string(schema), `"email_link_clicked"`, `"email_opened"`, 1))
	if evs, _ := p.Events(request(opened, nil)); evs[0].Key == keys[0] {
		t.Fatal("an open of the same e-mail got the click's key")
	}
}

func TestVerify(t *testing.T) {
	body := fixture(t, "reply_received.json")
	tests := []struct {
		name string
		cfg  providers.Config
		h    http.Header
		want error
	}{
		{"no secrets, no header", providers.Config{}, nil, nil},
		{"no secrets, any header", providers.Config{}, http.Header{DefaultHeader: {"whatever"}}, nil},
		{"right secret", providers.Config{Secrets: []string{secret}}, http.Header{DefaultHeader: {secret}}, nil},
		{"old secret still listed", providers.Config{Secrets: []string{otherSecret, secret}}, http.Header{DefaultHeader: {secret}}, nil},
		{"missing header", providers.Config{Secrets: []string{secret}}, nil, providers.ErrMissingSignature},
		{"empty header", providers.Config{Secrets: []string{secret}}, http.Header{DefaultHeader: {""}}, providers.ErrMissingSignature},
		{"wrong secret", providers.Config{Secrets: []string{secret}}, http.Header{DefaultHeader: {otherSecret}}, providers.ErrBadSecret},
		{"prefix of the secret", providers.Config{Secrets: []string{secret}}, http.Header{DefaultHeader: {secret[:len(secret)-1]}}, providers.ErrBadSecret},
		{"secret plus a byte", providers.Config{Secrets: []string{secret}}, http.Header{DefaultHeader: {secret + "x"}}, providers.ErrBadSecret},
		{"renamed header", providers.Config{Secrets: []string{secret}, SecretHeader: "X-Hook-Key"}, http.Header{"X-Hook-Key": {secret}}, nil},
		{"renamed header, default sent", providers.Config{Secrets: []string{secret}, SecretHeader: "X-Hook-Key"}, http.Header{DefaultHeader: {secret}}, providers.ErrMissingSignature},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := newProvider(t, tt.cfg).Verify(request(body, tt.h))
			if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
			if err != nil && strings.Contains(err.Error(), secret) {
				t.Fatal("error message contains the secret")
			}
		})
	}
}

func TestNewRejects(t *testing.T) {
	for name, cfg := range map[string]providers.Config{
		"header with a space": {SecretHeader: "X Secret"},
		"header with a colon": {SecretHeader: "X-Secret:"},
		"empty secret":        {Secrets: []string{secret, ""}},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestEventsRejects(t *testing.T) {
	p := newProvider(t, providers.Config{})
	for name, body := range map[string]string{
		"no timestamp":        `{"event_type":"email_sent","workspace":"w","campaign_id":"c"}`,
		"timestamp not ISO":   `{"timestamp":"yesterday","event_type":"email_sent"}`,
		"timestamp as number": `{"timestamp":1717400000,"event_type":"email_sent"}`,
		"no event type":       `{"timestamp":"2025-06-03T14:22:51Z","workspace":"w"}`,
		"array":               `[{"timestamp":"2025-06-03T14:22:51Z","event_type":"email_sent"}]`,
		"step is an object":   `{"timestamp":"2025-06-03T14:22:51Z","event_type":"email_sent","step":{}}`,
		"duplicate key":       `{"timestamp":"2025-06-03T14:22:51Z","event_type":"email_sent","event_type":"reply_received"}`,
		"trailing data":       `{"timestamp":"2025-06-03T14:22:51Z","event_type":"email_sent"} {}`,
		"empty":               ``,
	} {
		if _, err := p.Events(request([]byte(body), nil)); !errors.Is(err, providers.ErrMalformed) {
			t.Errorf("%s: got %v, want ErrMalformed", name, err)
		}
	}
}

func TestSampleDeterministic(t *testing.T) {
	for _, e := range Spec.Events {
		a, err := Sample(e, providertest.Now)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := Sample(e, providertest.Now)
		if string(a) != string(b) {
			t.Fatalf("%s: two samples at one time differ", e)
		}
	}
	if _, err := Sample("nope", providertest.Now); err == nil {
		t.Fatal("unknown event sampled")
	}
}

func FuzzVerify(f *testing.F) {
	f.Add(secret, []byte(`{}`))
	f.Add("", []byte(nil))
	f.Add(otherSecret+"\x00", []byte("\xff"))
	p := newProvider(f, providers.Config{Secrets: []string{secret, otherSecret}})
	f.Fuzz(func(t *testing.T, header string, body []byte) {
		err := p.Verify(request(body, http.Header{DefaultHeader: {header}}))
		if err == nil && header != secret && header != otherSecret {
			t.Fatalf("accepted header %q", header)
		}
	})
}

func FuzzEvents(f *testing.F) {
	for _, e := range sampleEvents[:4] {
		b, _ := Sample(e, providertest.Now)
		f.Add(b)
	}
	f.Add([]byte(`{"timestamp":"2025-06-03T14:22:51Z","event_type":"x","step":-1,"variant":1e400}`))
	f.Add([]byte(`{"timestamp":"2025-06-03T14:22:51Z","event_type":"email_sent","email_id":null}`))
	f.Add([]byte(`[]`))
	p := newProvider(f, providers.Config{})
	f.Fuzz(func(t *testing.T, body []byte) {
		evs, err := p.Events(request(body, nil))
		if err != nil {
			if !errors.Is(err, providers.ErrMalformed) {
				t.Fatalf("error does not wrap ErrMalformed: %v", err)
			}
			return
		}
		if len(evs) != 1 || evs[0].Key == "" || evs[0].Time.IsZero() {
			t.Fatalf("bad events: %+v", evs)
		}
		if err == nil {
			providertest.CheckFuzzed(t, Spec, evs)
		}
	})
}
