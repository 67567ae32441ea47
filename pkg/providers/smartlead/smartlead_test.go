package smartlead

import (
	"bytes"
	"encoding/json"
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
	secret      = "0b6f7d2c-91a4-4c1e-8f33-5e2a9d7b4c10"
	otherSecret = "c8e1a5f0-3d27-4b9a-a6c2-7f4e1b0d9e58"
	hookURL     = "https://hooks.example.com/hooks/ep/tok"
	// The signing secrets of X-Smartlead-Signature, distinct from the secret_key.
	signingSecret      = "sl-signing-6d1f0c4e9b2a"
	otherSigningSecret = "sl-signing-31a7e5d08c4f"
)

func TestConformance(t *testing.T) {
	providertest.Run(t, providertest.Suite{Spec: Spec, Secret: secret, OtherSecret: otherSecret, URL: hookURL})
	t.Run("with signing_secrets", func(t *testing.T) {
		providertest.Run(t, providertest.Suite{Spec: Spec, Secret: secret, OtherSecret: otherSecret, URL: hookURL, SigningSecret: signingSecret})
	})
}

func newProvider(t testing.TB, secrets ...string) providers.Provider {
	t.Helper()
	p, err := New(providers.Config{Secrets: secrets})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func request(body []byte) *providers.Request {
	return &providers.Request{Method: http.MethodPost, URL: hookURL, Header: http.Header{}, Body: body, Now: providertest.Now}
}

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The fixtures are the example payloads of Smartlead's webhook guide
// (help.smartlead.ai "Webhook Guide Updated": Untracked replies, Email Opened, Link
// Clicked, Lead Unsubscribed, Lead Category Updated, Email Bounce), of the enhanced
// Email Reply webhook (api.smartlead.ai/reference/email-reply-webhooks) and of the
// EMAIL_SENT example of api.smartlead.ai/api-reference/webhooks/events. Addresses the
// pages show obfuscated are replaced by example.com ones; fields the excerpts cut off
// are completed from each page's "Response Structure".
func TestGolden(t *testing.T) {
	tests := []struct {
		file, secret, typ, subject, object string
		check                              func(t *testing.T, ev providers.Event)
	}{
		{"untracked_replies.json", "e0207d40-84ef-4ad6-89eb-7dbff8c0138d", envelope.TypeReplyReceived, "sunita@example.com",
			"<CAJZgRaRf=B4WEPmv4gujBNmJE46XpNbWiN7V_DHsAvyvqgEpDg@mail.gmail.com>", func(t *testing.T, ev providers.Event) {
				m := ev.Data.Message
				if m.From != "sunita@example.com" || m.To != "mailbox@example.com" || m.Text != `Hi\n` || m.Subject != "Untracked replies" {
					t.Fatalf("message %+v", m)
				}
				if ev.Data.Campaign != nil {
					t.Fatalf("an untracked reply has no campaign: %+v", ev.Data.Campaign)
				}
				want := envelope.Key("UNTRACKED_REPLIES", "", "<CAJZgRaRf=B4WEPmv4gujBNmJE46XpNbWiN7V_DHsAvyvqgEpDg@mail.gmail.com>")
				if ev.Key != want {
					t.Fatalf("key %q, want %q", ev.Key, want)
				}
			}},
		{"email_reply.json", "4f7c8d23-a619-58c2-93g6-72936ee16f38", envelope.TypeReplyReceived, "james.parker@example.com",
			"<BDD5kUwc77maSjLRv2gmq35VkzEF9K4L3csPPCVx8e5kWbUnrsD@mail.gmail.com>", func(t *testing.T, ev providers.Event) {
				m := ev.Data.Message
				if m.Text != "webhook reply\n" || m.From != "james.parker@example.com" || m.To != "sender@example.com" ||
					m.URL != "https://app.smartlead.ai/app/master-inbox?leadMap=1438627" {
					t.Fatalf("message %+v", m)
				}
				if c := ev.Data.Campaign; c.ID != "9181" || c.Name != "email sent" || c.Step != "1" {
					t.Fatalf("campaign %+v", c)
				}
				if c := ev.Data.Contact; c.Name != "James Parker" || c.ExternalID != "1482956" {
					t.Fatalf("contact %+v", c)
				}
				want := envelope.Key("EMAIL_REPLY", "9181", "<BDD5kUwc77maSjLRv2gmq35VkzEF9K4L3csPPCVx8e5kWbUnrsD@mail.gmail.com>")
				if ev.Key != want {
					t.Fatalf("key %q, want %q", ev.Key, want)
				}
			}},
		{"email_open.json", "7a5f0c1e-2b3d-4e5f-8a9b-0c1d2e3f4a5b", envelope.TypeEmailOpened, "david.carroll@example.com",
			"<3d0bf6a4-8a5e-4b1a-9b9e-1f2a3b4c5d6e@example.com>", func(t *testing.T, ev providers.Event) {
				if want := time.Date(2023, 9, 25, 17, 29, 11, 618881000, time.UTC); !ev.Time.Equal(want) {
					t.Fatalf("time %v", ev.Time)
				}
				if m := ev.Data.Message; m.Subject != "OR" || m.From != "sender@example.com" || m.To != "david.carroll@example.com" {
					t.Fatalf("message %+v", m)
				}
			}},
		{"email_link_click.json", "7a5f0c1e-2b3d-4e5f-8a9b-0c1d2e3f4a5b", envelope.TypeEmailClicked, "bob@example.com",
			"<3d0bf6a4-8a5e-4b1a-9b9e-1f2a3b4c5d6e@example.com>", func(t *testing.T, ev providers.Event) {
				if ev.Data.Message.URL != "https://example.com/demo" {
					t.Fatalf("clicked link %q", ev.Data.Message.URL)
				}
			}},
		{"email_bounce.json", "7a5f0c1e-2b3d-4e5f-8a9b-0c1d2e3f4a5b", envelope.TypeEmailBounced, "nobody@example.org",
			"<a1b2c3d4-0000-4000-8000-000000000003@example.com>", func(t *testing.T, ev providers.Event) {
				if b := ev.Data.Bounce; b == nil || b.Kind != "unknown" || b.Reason != "Delivery has failed to these recipients: nobody@example.org" {
					t.Fatalf("bounce %+v", b)
				}
			}},
		{"lead_unsubscribed.json", "7a5f0c1e-2b3d-4e5f-8a9b-0c1d2e3f4a5b", envelope.TypeLeadUnsubscribed, "bob@example.com",
			"<a1b2c3d4-0000-4000-8000-000000000001@example.com>", nil},
		{"lead_category_updated.json", "7a5f0c1e-2b3d-4e5f-8a9b-0c1d2e3f4a5b", envelope.TypeLeadStatusChanged, "ramesh@smartlead.example",
			"ramesh@smartlead.example", func(t *testing.T, ev providers.Event) {
				if ev.Data.Status != "Interested" || ev.Data.Message != nil || ev.Data.Contact.ExternalID != "2341" {
					t.Fatalf("status %q message %+v contact %+v", ev.Data.Status, ev.Data.Message, ev.Data.Contact)
				}
			}},
		{"email_sent_legacy.json", "", envelope.TypeEmailSent, "lead@example.com", "abc123def456", func(t *testing.T, ev providers.Event) {
			if want := time.Date(2025, 1, 15, 9, 0, 0, 0, time.UTC); !ev.Time.Equal(want) {
				t.Fatalf("time_sent not used: %v", ev.Time)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			body := fixture(t, tt.file)
			var p providers.Provider
			if tt.secret != "" {
				p = newProvider(t, tt.secret)
			} else {
				p = newProvider(t)
			}
			if err := p.Verify(request(body)); err != nil {
				t.Fatalf("Verify: %v", err)
			}
			evs, err := p.Events(request(body))
			if err != nil {
				t.Fatal(err)
			}
			providertest.CheckEvents(t, Spec, evs)
			ev := evs[0]
			if ev.Type != tt.typ || ev.Subject != tt.subject || ev.ObjectID != tt.object || ev.ProviderEventID != "" {
				t.Fatalf("type %q subject %q object %q event id %q", ev.Type, ev.Subject, ev.ObjectID, ev.ProviderEventID)
			}
			if tt.secret != "" && bytes.Contains(ev.Data.Raw, []byte(tt.secret)) {
				t.Fatal("the stored raw payload contains the secret_key")
			}
			if tt.check != nil {
				tt.check(t, ev)
			}
		})
	}
}

func TestRawRedacted(t *testing.T) {
	body := fixture(t, "email_reply.json")
	evs, err := newProvider(t).Events(request(body))
	if err != nil {
		t.Fatal(err)
	}
	raw := evs[0].Data.Raw
	if bytes.Contains(raw, []byte("4f7c8d23-a619-58c2-93g6-72936ee16f38")) {
		t.Fatal("raw contains the secret_key")
	}
	want := bytes.Replace(body, []byte(`"4f7c8d23-a619-58c2-93g6-72936ee16f38"`), []byte(`"REDACTED"`), 1)
	if !bytes.Equal(raw, want) {
		t.Fatalf("raw is not the body with only the secret redacted:\n%s", raw)
	}
	for in, out := range map[string]string{
		`{"secret_key":"s"}`:                   `{"secret_key":"REDACTED"}`,
		`{ "a" : 1 , "secret_key" : "s\"x" }`:  `{ "a" : 1 , "secret_key" : "REDACTED" }`,
		`{"a":{"secret_key":"nested"},"b":2}`:  `{"a":{"secret_key":"nested"},"b":2}`,
		`{"secret_key":null,"b":2}`:            `{"secret_key":"REDACTED","b":2}`,
		`{"secret_key":12345}`:                 `{"secret_key":"REDACTED"}`,
		`[{"secret_key":"s"}]`:                 `[{"secret_key":"s"}]`,
		`{"b":"secret_key","secret_key":"s2"}`: `{"b":"secret_key","secret_key":"REDACTED"}`,
		// Every spelling Verify's decoder takes for secret_key.
		`{"Secret_Key":"s3","b":2}`:     `{"Secret_Key":"REDACTED","b":2}`,
		`{"SECRET_KEY":"s4"}`:           `{"SECRET_KEY":"REDACTED"}`,
		`{"\u017fecret_\u212aey":"s5"}`: `{"\u017fecret_\u212aey":"REDACTED"}`,
	} {
		if got := string(Redact([]byte(in))); got != out {
			t.Errorf("Redact(%s) = %s, want %s", in, got, out)
		}
	}
}

// A body whose secret_key is spelled in another case is verified by it (encoding/json
// matches the field whatever its case), so it must be redacted by it too: the secret
// never reaches the stream.
func TestSecretKeyInAnotherCaseIsRedacted(t *testing.T) {
	const secret = "4f7c8d23-a619-58c2-93g6-72936ee16f38"
	body := bytes.Replace(fixture(t, "email_reply.json"), []byte(`"secret_key"`), []byte(`"Secret_Key"`), 1)
	if !bytes.Contains(body, []byte(`"Secret_Key":"`+secret+`"`)) && !bytes.Contains(body, []byte(`"Secret_Key": "`+secret+`"`)) {
		t.Fatalf("the fixture's secret_key is not %s", secret)
	}
	p := newProvider(t, secret)
	if err := p.Verify(request(body)); err != nil {
		t.Fatalf("Verify: %v", err)
	}
	evs, err := p.Events(request(body))
	if err != nil {
		t.Fatal(err)
	}
	if raw := evs[0].Data.Raw; bytes.Contains(raw, []byte(secret)) || !bytes.Contains(raw, []byte(`"Secret_Key": "REDACTED"`)) && !bytes.Contains(raw, []byte(`"Secret_Key":"REDACTED"`)) {
		t.Fatalf("the raw payload keeps the secret or lost its key:\n%s", raw)
	}
	// Two spellings at once are refused before anyone picks one.
	both := bytes.Replace(body, []byte(`{`), []byte(`{"secret_key":"`+secret+`",`), 1)
	if err := p.Verify(request(both)); !errors.Is(err, providers.ErrMalformed) {
		t.Fatalf("Verify of secret_key and Secret_Key = %v, want ErrMalformed", err)
	}
}

func TestSign(t *testing.T) {
	for in, out := range map[string]string{
		`{"secret_key":"","a":1}`:  `{"secret_key":"k\"1","a":1}`,
		`{"a":1}`:                  `{"secret_key":"k\"1","a":1}`,
		` {}`:                      ` {"secret_key":"k\"1"}`,
		`{"secret_key":"old"}`:     `{"secret_key":"k\"1"}`,
		`{"a":{"secret_key":"x"}}`: `{"secret_key":"k\"1","a":{"secret_key":"x"}}`,
	} {
		_, got, err := Sign(http.MethodPost, hookURL, []byte(in), `k"1`, providertest.Now)
		if err != nil || string(got) != out {
			t.Errorf("Sign(%s) = %s, %v; want %s", in, got, err, out)
		}
		if !json.Valid(got) {
			t.Errorf("Sign(%s) is not JSON", in)
		}
	}
	if _, _, err := Sign(http.MethodPost, hookURL, []byte(`[1]`), "k", providertest.Now); err == nil {
		t.Error("signed an array")
	}
	if _, got, _ := Sign(http.MethodPost, hookURL, []byte(`{"a":1}`), "", providertest.Now); string(got) != `{"a":1}` {
		t.Errorf("no secret changed the body: %s", got)
	}
}

func TestVerify(t *testing.T) {
	with := func(v string) []byte { return []byte(`{"event_type":"EMAIL_OPEN","secret_key":` + v + `}`) }
	tests := []struct {
		name    string
		secrets []string
		body    []byte
		want    error
	}{
		{"no secrets, no field", nil, []byte(`{"event_type":"EMAIL_OPEN"}`), nil},
		{"no secrets, not even JSON", nil, []byte(`garbage`), nil},
		{"right secret", []string{secret}, with(`"` + secret + `"`), nil},
		{"rotation", []string{otherSecret, secret}, with(`"` + secret + `"`), nil},
		{"missing field", []string{secret}, []byte(`{"event_type":"EMAIL_OPEN"}`), providers.ErrMissingSignature},
		{"empty field", []string{secret}, with(`""`), providers.ErrMissingSignature},
		{"null field", []string{secret}, with(`null`), providers.ErrMissingSignature},
		{"wrong secret", []string{secret}, with(`"` + otherSecret + `"`), providers.ErrBadSecret},
		{"secret prefix", []string{secret}, with(`"` + secret[:10] + `"`), providers.ErrBadSecret},
		{"nested secret only", []string{secret}, []byte(`{"a":{"secret_key":"` + secret + `"}}`), providers.ErrMissingSignature},
		{"number", []string{secret}, with(`12`), providers.ErrMalformed},
		{"not JSON", []string{secret}, []byte(`secret_key=` + secret), providers.ErrMalformed},
		{"duplicate secret_key", []string{secret}, []byte(`{"secret_key":"x","secret_key":"` + secret + `"}`), providers.ErrMalformed},
		{"array", []string{secret}, []byte(`[{"secret_key":"` + secret + `"}]`), providers.ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := newProvider(t, tt.secrets...).Verify(request(tt.body))
			if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
			if err != nil && strings.Contains(err.Error(), secret) {
				t.Fatal("error message contains the secret")
			}
		})
	}
}

// X-Smartlead-Signature (Smartlead's webhook docs: "sha256=" and the hex HMAC-SHA256
// of the raw body with the signing secret). With signing_secrets it is required and
// checked before the body's secret_key; without, it is ignored.
func TestSignature(t *testing.T) {
	body := fixture(t, "email_reply.json") // its secret_key is 4f7c8d23-…
	const bodySecret = "4f7c8d23-a619-58c2-93g6-72936ee16f38"
	sig := func(key string, b []byte) string { return SignOptional(b, key).Get(SignatureHeader) }
	good := sig(signingSecret, body)
	signing := providers.Config{Secrets: []string{bodySecret}, SigningSecrets: []string{otherSigningSecret, signingSecret}}
	tests := []struct {
		name   string
		cfg    providers.Config
		header string // "" sends none
		body   []byte
		want   error
	}{
		{"valid", signing, good, body, nil},
		{"upper-case hex", signing, "sha256=" + strings.ToUpper(strings.TrimPrefix(good, "sha256=")), body, nil},
		{"upper-case prefix", signing, "SHA256=" + strings.TrimPrefix(good, "sha256="), body, nil},
		{"rotation: the other signing secret", signing, sig(otherSigningSecret, body), body, nil},
		{"signing secrets only, no secret_key check", providers.Config{SigningSecrets: []string{signingSecret}}, good, body, nil},
		{"missing header", signing, "", body, providers.ErrMissingSignature},
		{"no prefix", signing, strings.TrimPrefix(good, "sha256="), body, providers.ErrBadSignature},
		{"sha1 prefix", signing, "sha1=" + strings.TrimPrefix(good, "sha256="), body, providers.ErrBadSignature},
		{"not hex", signing, "sha256=zz" + good[9:], body, providers.ErrBadSignature},
		{"truncated", signing, good[:len(good)-2], body, providers.ErrBadSignature},
		{"empty digest", signing, "sha256=", body, providers.ErrBadSignature},
		{"wrong signing secret", signing, sig("not-a-signing-secret", body), body, providers.ErrBadSignature},
		{"signed with the secret_key", signing, sig(bodySecret, body), body, providers.ErrBadSignature},
		{"body changed after signing", signing, good, bytes.Replace(body, []byte("webhook reply"), []byte("webhook replx"), 1), providers.ErrBadSignature},
		{"signed, wrong secret_key", providers.Config{Secrets: []string{secret}, SigningSecrets: []string{signingSecret}}, good, body, providers.ErrBadSecret},
		{"no signing secrets: the header is ignored", providers.Config{Secrets: []string{bodySecret}}, "sha256=garbage", body, nil},
		{"no signing secrets, no header", providers.Config{Secrets: []string{bodySecret}}, "", body, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := New(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			r := request(tt.body)
			if tt.header != "" {
				r.Header.Set(SignatureHeader, tt.header)
			}
			err = p.Verify(r)
			if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
			for _, s := range append(tt.cfg.Secrets, tt.cfg.SigningSecrets...) {
				if err != nil && strings.Contains(err.Error(), s) {
					t.Fatal("error message contains a secret")
				}
			}
		})
	}
}

// A signed delivery's events are signed (authmethod hmac); an endpoint without
// signing_secrets stays unsigned whatever header comes. The stored raw payload has its
// secret_key redacted either way.
func TestSignedEnvelope(t *testing.T) {
	body := fixture(t, "email_reply.json")
	for _, c := range []struct {
		cfg    providers.Config
		auth   string
		signed bool
	}{
		{providers.Config{SigningSecrets: []string{signingSecret}}, "hmac", true},
		{providers.Config{Secrets: []string{secret}, SigningSecrets: []string{signingSecret}}, "hmac", true},
		{providers.Config{Secrets: []string{secret}}, "secret_key", false},
		{providers.Config{}, "path_token", false},
	} {
		p, err := New(c.cfg)
		if err != nil {
			t.Fatal(err)
		}
		evs, err := p.Events(request(body))
		if err != nil {
			t.Fatal(err)
		}
		env := evs[0].Envelope(Spec, "acme", "ep-1", Spec.Auth(c.cfg), providertest.Now, strings.Repeat("0", 64))
		if env.AuthMethod != c.auth || env.Signed != c.signed {
			t.Errorf("%+v: authmethod %q signed %v, want %q %v", c.cfg, env.AuthMethod, env.Signed, c.auth, c.signed)
		}
		if !bytes.Contains(env.Data.Raw, []byte(`"secret_key": "REDACTED"`)) || bytes.Contains(env.Data.Raw, []byte("4f7c8d23-a619")) {
			t.Errorf("%+v: raw keeps the secret_key: %s", c.cfg, env.Data.Raw)
		}
		providertest.ValidateEnvelope(t, env)
	}
}

func TestNewRejects(t *testing.T) {
	for name, cfg := range map[string]providers.Config{
		"empty secret":         {Secrets: []string{""}},
		"secret header":        {SecretHeader: "X-Secret"},
		"empty signing secret": {SigningSecrets: []string{signingSecret, ""}},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestIdentity(t *testing.T) {
	p := newProvider(t)
	key := func(body []byte) string {
		t.Helper()
		evs, err := p.Events(request(body))
		if err != nil {
			t.Fatal(err)
		}
		return evs[0].Key
	}
	// A reply is its Message-ID: the same reply re-posted later is the same event.
	reply := fixture(t, "email_reply.json")
	later := bytes.ReplaceAll(reply, []byte(`2025-03-28T09:35:01+00:00`), []byte(`2025-03-28T09:36:01+00:00`))
	if key(reply) != key(later) {
		t.Fatal("a reply's key depends on its timestamp")
	}
	other := bytes.Replace(reply, []byte(`<BDD5`), []byte(`<CDD5`), 1)
	if key(reply) == key(other) {
		t.Fatal("two replies share a key")
	}
	// Two opens of one e-mail by one lead are two events.
	open := fixture(t, "email_open.json")
	again := bytes.Replace(open, []byte(`"event_timestamp": "2023-09-25T17:29:11`), []byte(`"event_timestamp": "2023-09-26T08:00:00`), 1)
	if key(open) == key(again) {
		t.Fatal("a second open got the first one's key")
	}
	// The subscription that reported it is not part of the event.
	if key(open) != key(bytes.Replace(open, []byte(`"webhook_id": 100`), []byte(`"webhook_id": 101`), 1)) {
		t.Fatal("webhook_id changed the key")
	}
	// Category changes back and forth are distinct.
	cat := fixture(t, "lead_category_updated.json")
	if key(cat) == key(bytes.ReplaceAll(cat, []byte(`"Interested"`), []byte(`"Not Interested"`))) {
		t.Fatal("two categories share a key")
	}
	// FIRST_EMAIL_SENT reports the EMAIL_SENT of step 1.
	sent, _ := Sample("EMAIL_SENT", providertest.Now)
	first := bytes.Replace(sent, []byte(`"EMAIL_SENT"`), []byte(`"FIRST_EMAIL_SENT"`), 1)
	if key(sent) != key(first) {
		t.Fatal("FIRST_EMAIL_SENT and EMAIL_SENT of one e-mail differ")
	}
}

func TestEventsRejects(t *testing.T) {
	p := newProvider(t)
	for name, body := range map[string]string{
		"no time":            `{"event_type":"EMAIL_OPEN","campaign_id":1}`,
		"time not RFC 3339":  `{"event_type":"EMAIL_OPEN","event_timestamp":"25/09/2023"}`,
		"no event type":      `{"event_timestamp":"2023-09-25T17:29:11Z"}`,
		"array":              `[{"event_type":"EMAIL_OPEN","event_timestamp":"2023-09-25T17:29:11Z"}]`,
		"campaign id object": `{"event_type":"EMAIL_OPEN","event_timestamp":"2023-09-25T17:29:11Z","campaign_id":{}}`,
		"reply not object":   `{"event_type":"EMAIL_REPLY","event_timestamp":"2023-09-25T17:29:11Z","reply_message":"x"}`,
		"duplicate key":      `{"event_type":"EMAIL_OPEN","event_type":"EMAIL_REPLY","event_timestamp":"2023-09-25T17:29:11Z"}`,
	} {
		if _, err := p.Events(request([]byte(body))); !errors.Is(err, providers.ErrMalformed) {
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
		if b, _ := Sample(e, providertest.Now); !bytes.Equal(a, b) {
			t.Fatalf("%s: two samples at one time differ", e)
		}
	}
	if _, err := Sample("EMAIL_OPENED", providertest.Now); err == nil {
		t.Fatal("unknown event sampled")
	}
}

func FuzzVerify(f *testing.F) {
	f.Add([]byte(`{"secret_key":"` + secret + `"}`))
	f.Add([]byte(`{"secret_key":""}`))
	f.Add([]byte(`{"secret_key":"` + secret + `","secret_key":"x"}`))
	f.Add([]byte("\xff"))
	p := newProvider(f, secret)
	f.Fuzz(func(t *testing.T, body []byte) {
		if p.Verify(request(body)) == nil && !bytes.Contains(body, []byte(secret)) && !bytes.Contains(body, []byte(`\u`)) {
			t.Fatalf("accepted %q", body)
		}
	})
}

// FuzzVerifySignature: with signing_secrets, a delivery is accepted only with the
// body's HMAC under the signing secret, after "sha256=" (either case), in hex of either
// case.
func FuzzVerifySignature(f *testing.F) {
	body := []byte(`{"event_type":"EMAIL_OPEN","event_timestamp":"2026-11-20T10:00:00Z"}`)
	f.Add(SignOptional(body, signingSecret).Get(SignatureHeader), body)
	f.Add("sha256=", []byte(``))
	p := newSigningProvider(f)
	f.Fuzz(func(t *testing.T, header string, body []byte) {
		r := request(body)
		r.Header.Set(SignatureHeader, header)
		err := p.Verify(r)
		want := SignOptional(body, signingSecret).Get(SignatureHeader)
		if (err == nil) != strings.EqualFold(header, want) {
			t.Fatalf("Verify(%q) = %v", header, err)
		}
		if err != nil && errors.Is(err, providers.ErrMalformed) {
			t.Fatalf("a signature error must be answered 401: %v", err)
		}
	})
}

func newSigningProvider(t testing.TB) providers.Provider {
	t.Helper()
	p, err := New(providers.Config{SigningSecrets: []string{signingSecret}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func FuzzEvents(f *testing.F) {
	for _, e := range sampleEvents {
		b, _ := Sample(e, providertest.Now)
		b, _ = withSecret(b)
		f.Add(b)
	}
	f.Add([]byte(`{"event_type":"X","event_timestamp":"2023-09-25T17:29:11Z","secret_key":{"a":[1]}}`))
	f.Add([]byte(`{"event_type":"EMAIL_LINK_CLICK","event_timestamp":"2023-09-25T17:29:11Z","link_details":[null,1]}`))
	p := newProvider(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		evs, err := p.Events(request(body))
		if err != nil {
			if !errors.Is(err, providers.ErrMalformed) {
				t.Fatalf("error does not wrap ErrMalformed: %v", err)
			}
			return
		}
		if len(evs) != 1 || evs[0].Key == "" || evs[0].Time.IsZero() || !json.Valid(evs[0].Data.Raw) {
			t.Fatalf("bad events: %+v", evs)
		}
		var raw map[string]json.RawMessage
		if json.Unmarshal(evs[0].Data.Raw, &raw) == nil && raw["secret_key"] != nil && string(raw["secret_key"]) != `"REDACTED"` {
			t.Fatalf("raw keeps the secret_key: %s", evs[0].Data.Raw)
		}
		if err == nil {
			providertest.CheckFuzzed(t, Spec, evs)
		}
	})
}

func withSecret(b []byte) ([]byte, error) {
	_, out, err := Sign(http.MethodPost, hookURL, b, secret, providertest.Now)
	return out, err
}
