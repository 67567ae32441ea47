package meta

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
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
	secret      = "8f2c1e0b9d4a47f6a3b5c7d9e1f20314"
	otherSecret = "1d3f5b7a9c0e2f4a6b8c0d1e3f5a7b9c"
	hookURL     = "https://hooks.example.com/hooks/ep/tok"
)

func TestConformance(t *testing.T) {
	providertest.Run(t, providertest.Suite{Spec: Spec, Secret: secret, OtherSecret: otherSecret, URL: hookURL})
}

func newProvider(t testing.TB, secrets ...string) providers.Provider {
	t.Helper()
	p, err := New(providers.Config{Secrets: secrets})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// signed is a delivery of body signed with key, as Meta posts it.
func signed(body []byte, key string) *providers.Request {
	h, body, _ := Sign(http.MethodPost, hookURL, body, key, providertest.Now)
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

func events(t *testing.T, name string) ([]byte, []providers.Event) {
	t.Helper()
	body := fixture(t, name)
	p := newProvider(t, secret)
	r := signed(body, secret)
	if err := p.Verify(r); err != nil {
		t.Fatalf("Verify: %v", err)
	}
	evs, err := p.Events(r)
	if err != nil {
		t.Fatalf("Events: %v", err)
	}
	providertest.CheckEvents(t, Spec, evs)
	for _, ev := range evs {
		if !bytes.Contains(body, ev.Data.Raw) {
			t.Fatalf("%s: raw is not a byte-for-byte slice of the body: %s", ev.Key, ev.Data.Raw)
		}
	}
	return body, evs
}

type want struct {
	typ, key, channel, subject, status, text, version string
	time                                              time.Time
}

// The fixtures are Meta's documented examples: the WhatsApp "Text messages webhook
// reference" (text message; "Message business" button), the "Status messages webhook
// reference" (sent; failed) and the "message_template_status_update webhook
// reference"; the Messenger Platform "messages", "message_deliveries" and
// "message_reads" references; the Instagram Platform "Webhook Notification Examples"
// (message, messaging_seen, message_reactions). Where a page shows placeholders
// (<PSID>, <PAGE_ID>, <MESSAGE_ID>) they are filled with example ids; whatsapp_batch
// puts the text and button messages and the sent and failed statuses in one post.
func TestGolden(t *testing.T) {
	const (
		wamidText   = "wamid.HBgLMTY1MDM4Nzk0MzkVAgASGBQzQTRBNjU5OUFFRTAzODEwMTQ0RgA="
		wamidButton = "wamid.HBgLMTY1MDM4Nzk0MzkVAgASGBQzQTA2NTUwRkNEMDdFQjJCRUU0NQA="
		wamidSent   = "wamid.HBgLMTY1MDM4Nzk0MzkVAgASGBQzQUFERjg0NDEzNDdFODU3MUMxMAA="
		wamidFailed = "wamid.HBgLMTY1MDM4Nzk0MzkVAgARGBI0QUQ2MjA4NEYyRkExNjMyREUA"
	)
	tests := map[string][]want{
		"whatsapp_text.json": {{envelope.TypeMessageReceived, wamidText, "whatsapp", "16505551234", "",
			"Does it come in another color?", "1749416383", time.Unix(1749416383, 0)}},
		"whatsapp_status_sent.json": {{envelope.TypeMessageStatus, wamidSent + ":sent", "whatsapp", "16505551234", "sent",
			"", "sent", time.Unix(1750030073, 0)}},
		"whatsapp_status_failed.json": {{envelope.TypeMessageStatus, wamidFailed + ":failed", "whatsapp", "16505551234", "failed",
			"", "failed", time.Unix(1751142888, 0)}},
		"whatsapp_batch.json": {
			{envelope.TypeMessageReceived, wamidText, "whatsapp", "16505551234", "", "Does it come in another color?", "1749416383", time.Unix(1749416383, 0)},
			{envelope.TypeMessageReceived, wamidButton, "whatsapp", "16505551234", "", "Is this still available?", "1750016800", time.Unix(1750016800, 0)},
			{envelope.TypeMessageStatus, wamidSent + ":sent", "whatsapp", "16505551234", "sent", "", "sent", time.Unix(1750030073, 0)},
			{envelope.TypeMessageStatus, wamidFailed + ":failed", "whatsapp", "16505551234", "failed", "", "failed", time.Unix(1751142888, 0)},
		},
		"messenger_text.json": {{envelope.TypeMessageReceived, "m_1457764197618:41d102a3e1ae206a38", "messenger", "7263748593827161", "",
			"hello, world!", "1458692752478", time.UnixMilli(1458692752478)}},
		// No timestamp in a delivery receipt: its watermark is the time.
		"messenger_delivery.json": {{envelope.TypeMessageStatus, "mid.1458668856218:ed81099e15d3f4f233:delivered", "messenger", "7263748593827161",
			"delivered", "", "delivered", time.UnixMilli(1458668856253)}},
		"messenger_read.json": {{envelope.TypeMessageStatus, envelope.Key("read", "7263748593827161", "104976425133841", "1458668856253"),
			"messenger", "7263748593827161", "read", "", "read", time.UnixMilli(1458668856463)}},
		"instagram_message.json": {{envelope.TypeMessageReceived, "aWdfZAG1faXRlbToxOklHTWVzc2FnZAUlEOjE3ODQxNDA1ODIyMzA0OTE0", "instagram",
			"6541238795421367", "", "Do you ship to Canada?", "1569262485349", time.UnixMilli(1569262485349)}},
		"instagram_seen.json": {{envelope.TypeMessageStatus, "aWdfZAG1faXRlbToxOklHTWVzc2FnZAUlEOjE3ODQxNDA1ODIyMzA0OTE1:read", "instagram",
			"6541238795421367", "read", "", "read", time.UnixMilli(1569262485349)}},
	}
	for name, wants := range tests {
		t.Run(name, func(t *testing.T) {
			_, evs := events(t, name)
			if len(evs) != len(wants) {
				t.Fatalf("%d events, want %d", len(evs), len(wants))
			}
			for i, w := range wants {
				ev := evs[i]
				text := ""
				if ev.Data.Message != nil {
					text = ev.Data.Message.Text
				}
				if ev.Type != w.typ || ev.Key != w.key || ev.Channel != w.channel || ev.Subject != w.subject ||
					ev.Data.Status != w.status || text != w.text || ev.Version != w.version || !ev.Time.Equal(w.time) {
					t.Errorf("event %d:\n got %s %q %s %q %q %q %q %v\nwant %s %q %s %q %q %q %q %v", i,
						ev.Type, ev.Key, ev.Channel, ev.Subject, ev.Data.Status, text, ev.Version, ev.Time,
						w.typ, w.key, w.channel, w.subject, w.status, w.text, w.version, w.time)
				}
			}
		})
	}
}

func TestWhatsAppDetails(t *testing.T) {
	_, evs := events(t, "whatsapp_batch.json")
	m := evs[1]
	if m.ProviderEventID != m.Key || m.ObjectID != m.Key {
		t.Fatalf("message ids: %+v", m)
	}
	if c := m.Data.Contact; c.Phone != "16505551234" || c.Name != "Sheena Nelson" {
		t.Fatalf("contact %+v", c)
	}
	if msg := m.Data.Message; msg.From != "16505551234" || msg.To != "15550783881" || msg.Kind != "text" ||
		msg.InReplyTo != "wamid.HBgLMTY1MDM4Nzk0MzkVAgARGA9wcm9kdWN0X2lucXVpcnkA" {
		t.Fatalf("message %+v", msg)
	}
	st := evs[3]
	if st.ProviderEventID != "" || st.ObjectID != "wamid.HBgLMTY1MDM4Nzk0MzkVAgARGBI0QUQ2MjA4NEYyRkExNjMyREUA" ||
		st.Data.Message.To != "16505551234" || st.Data.Contact.Phone != "16505551234" {
		t.Fatalf("status %+v", st)
	}
	if !bytes.Contains(st.Data.Raw, []byte(`"code": 131049`)) {
		t.Fatalf("the failed status's errors are not in its raw payload: %s", st.Data.Raw)
	}
}

// A status is never a received message, and sent, delivered and read of one message
// are distinct events.
func TestStatusesOfOneMessage(t *testing.T) {
	body, err := Sample("batch", providertest.Now)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := newProvider(t, secret).Events(signed(body, secret))
	if err != nil {
		t.Fatal(err)
	}
	providertest.CheckEvents(t, Spec, evs)
	var received, statuses int
	for _, ev := range evs {
		switch ev.Type {
		case envelope.TypeMessageReceived:
			received++
		case envelope.TypeMessageStatus:
			statuses++
			if ev.Data.Status == "" || !strings.HasSuffix(ev.Key, ":"+ev.Data.Status) {
				t.Fatalf("status event %+v", ev)
			}
		}
	}
	if received != 2 || statuses != 3 {
		t.Fatalf("%d messages and %d statuses, want 2 and 3", received, statuses)
	}
	if evs[2].ObjectID != evs[3].ObjectID || evs[2].Key == evs[3].Key {
		t.Fatalf("sent and delivered of one message: %q and %q", evs[2].Key, evs[3].Key)
	}
}

func TestUnmapped(t *testing.T) {
	for _, name := range []string{"whatsapp_template_status_update.json", "instagram_reaction.json"} {
		t.Run(name, func(t *testing.T) {
			_, evs := events(t, name)
			if len(evs) != 1 || evs[0].Type != envelope.TypeUnmapped {
				t.Fatalf("events %+v", evs)
			}
			ev := evs[0]
			switch name {
			case "whatsapp_template_status_update.json":
				raw := ev.Data.Raw
				want := envelope.Key("change", "102290129340398", "message_template_status_update", "1751247548", digest(raw))
				if ev.ProviderType != "message_template_status_update" || ev.Key != want || !ev.Time.Equal(time.Unix(1751247548, 0)) ||
					!bytes.HasPrefix(raw, []byte(`{
          "value": {
            "event": "APPROVED"`)) || !bytes.HasSuffix(raw, []byte(`"field": "message_template_status_update"
        }`)) {
					t.Fatalf("event %+v, raw %s", ev, raw)
				}
			case "instagram_reaction.json":
				if ev.ProviderType != "reaction" || ev.Subject != "6541238795421367" || ev.Channel != "instagram" {
					t.Fatalf("event %+v", ev)
				}
			}
		})
	}
	// An unknown WhatsApp field and an echo of the page's own message.
	for _, tt := range []struct{ body, kind string }{
		{`{"object":"whatsapp_business_account","entry":[{"id":"1","time":1739321024,"changes":[{"value":{"phone_number":"15550783881","event":"VERIFIED_ACCOUNT"},"field":"account_update"}]}]}`, "account_update"},
		{`{"object":"page","entry":[{"id":"1","time":1457764198246,"messaging":[{"sender":{"id":"1"},"recipient":{"id":"2"},"timestamp":1457764197627,"message":{"is_echo":true,"app_id":1517776481860111,"mid":"mid.1457764197618:41d102a3e1ae206a38","text":"hi"}}]}]}`, "message_echo"},
		{`{"object":"page","entry":[{"id":"1","time":1457764198246}]}`, "entry"},
		{`{"object":"whatsapp_business_account","entry":[{"id":"1","changes":[{"value":{"messaging_product":"whatsapp","errors":[{"code":131000}]},"field":"messages"}]}]}`, "messages"},
	} {
		evs, err := newProvider(t, secret).Events(signed([]byte(tt.body), secret))
		if err != nil {
			t.Fatal(err)
		}
		providertest.CheckEvents(t, Spec, evs)
		if len(evs) != 1 || evs[0].Type != envelope.TypeUnmapped || evs[0].ProviderType != tt.kind {
			t.Fatalf("%s: events %+v", tt.kind, evs)
		}
	}
}

// One status listed twice in a post is one event.
func TestRepeatInOnePost(t *testing.T) {
	st := `{"id":"wamid.A","status":"delivered","timestamp":"1750030073","recipient_id":"16505551234"}`
	body := `{"object":"whatsapp_business_account","entry":[{"id":"1","changes":[{"value":{"messaging_product":"whatsapp","statuses":[` +
		st + `,` + st + `]},"field":"messages"}]}]}`
	evs, err := newProvider(t, secret).Events(signed([]byte(body), secret))
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 || evs[0].Key != "wamid.A:delivered" {
		t.Fatalf("events %+v", evs)
	}
}

func TestVerifyRejections(t *testing.T) {
	body := fixture(t, "whatsapp_text.json")
	good := hex.EncodeToString(hmacOf(secret, body))
	tests := []struct {
		name, header string
		want         error
	}{
		{"no header", "", providers.ErrMissingSignature},
		{"no prefix", good, providers.ErrBadSignature},
		{"sha1 prefix", "sha1=" + good, providers.ErrBadSignature},
		{"not hex", "sha256=zz" + good[2:], providers.ErrBadSignature},
		{"short", "sha256=" + good[:62], providers.ErrBadSignature},
		{"empty digest", "sha256=", providers.ErrBadSignature},
		{"unknown secret", "sha256=" + hex.EncodeToString(hmacOf("not-a-configured-secret", body)), providers.ErrBadSignature},
		{"ok", "sha256=" + good, nil},
		{"upper-case hex", "sha256=" + strings.ToUpper(good), nil},
		{"upper-case prefix", "SHA256=" + good, nil},
	}
	p := newProvider(t, otherSecret, secret)
	for _, tt := range tests {
		h := http.Header{}
		if tt.header != "" {
			h.Set(SignatureHeader, tt.header)
		}
		err := p.Verify(&providers.Request{Method: http.MethodPost, URL: hookURL, Header: h, Body: body, Now: providertest.Now})
		if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
			t.Errorf("%s: got %v, want %v", tt.name, err, tt.want)
		}
	}
}

func hmacOf(key string, body []byte) []byte {
	m := hmac.New(sha256.New, []byte(key))
	m.Write(body)
	return m.Sum(nil)
}

func TestMalformed(t *testing.T) {
	for _, body := range []string{
		`[]`,
		`{"entry":[]}`,
		`{"object":"page"}`,
		`{"object":"page","entry":[]}`,
		`{"object":"page","entry":[1]}`,
		`{"object":"page","entry":[{"messaging":[{"sender":{"id":{}}}]}]}`,
		`{"object":"whatsapp_business_account","entry":[{"changes":[{"field":"messages","value":{"messages":[{"from":"1","type":"text"}]}}]}]}`,
		`{"object":"whatsapp_business_account","entry":[{"changes":[{"field":"messages","value":{"statuses":[{"id":"wamid.x"}]}}]}]}`,
		`{"object":"whatsapp_business_account","entry":[{"changes":[{"field":"messages","value":{"messages":"no"}}]}]}`,
		`{"object":"page","entry":[{"id":"1"}],"object":"instagram"}`,
	} {
		_, err := newProvider(t, secret).Events(signed([]byte(body), secret))
		if !errors.Is(err, providers.ErrMalformed) {
			t.Errorf("Events(%s): got %v, want ErrMalformed", body, err)
		}
	}
}

func TestHandshake(t *testing.T) {
	tokens := []string{"", "old-token", "new-token"}
	q := func(mode, token, challenge string) url.Values {
		v := url.Values{}
		for k, s := range map[string]string{"hub.mode": mode, "hub.verify_token": token, "hub.challenge": challenge} {
			if s != "" {
				v.Set(k, s)
			}
		}
		return v
	}
	tests := []struct {
		name  string
		query url.Values
		ok    bool
	}{
		{"new token", q("subscribe", "new-token", "1158201444"), true},
		{"old token", q("subscribe", "old-token", "1158201444"), true},
		{"wrong token", q("subscribe", "new-token2", "1158201444"), false},
		{"token prefix", q("subscribe", "new", "1158201444"), false},
		{"no token", q("subscribe", "", "1158201444"), false},
		{"wrong mode", q("unsubscribe", "new-token", "1158201444"), false},
		{"no mode", q("", "new-token", "1158201444"), false},
		{"no challenge", q("subscribe", "new-token", ""), false},
	}
	for _, tt := range tests {
		got, ok := Handshake(tt.query, tokens)
		if ok != tt.ok || (ok && got != "1158201444") || (!ok && got != "") {
			t.Errorf("%s: got %q, %v", tt.name, got, ok)
		}
	}
	if _, ok := Handshake(q("subscribe", "x", "1"), nil); ok {
		t.Error("accepted with no verify token configured")
	}
}

func TestNew(t *testing.T) {
	for _, cfg := range []providers.Config{
		{},
		{Secrets: []string{secret, ""}},
		{Secrets: []string{secret}, SecretHeader: "X-Secret"},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}

func TestSample(t *testing.T) {
	// Determinism of every sample is checked by the conformance suite.
	if _, err := Sample("nope", providertest.Now); err == nil {
		t.Error("unknown sample event accepted")
	}
}

func fuzzSeeds(f *testing.F) [][]byte {
	var seeds [][]byte
	names, _ := filepath.Glob("testdata/*.json")
	for _, n := range names {
		b, _ := os.ReadFile(n)
		seeds = append(seeds, b)
	}
	for _, e := range sampleEvents {
		b, _ := Sample(e, providertest.Now)
		seeds = append(seeds, b)
	}
	return seeds
}

func FuzzVerify(f *testing.F) {
	for _, b := range fuzzSeeds(f) {
		f.Add(b, "sha256="+hex.EncodeToString(hmacOf(secret, b)))
	}
	f.Add([]byte{}, "sha256=")
	p := newProvider(f, secret)
	f.Fuzz(func(t *testing.T, body []byte, sig string) {
		h := http.Header{}
		h.Set(SignatureHeader, sig)
		err := p.Verify(&providers.Request{Method: http.MethodPost, URL: hookURL, Header: h, Body: body, Now: providertest.Now})
		want := "sha256=" + hex.EncodeToString(hmacOf(secret, body))
		if (err == nil && !strings.EqualFold(sig, want)) || (err != nil && sig == want) {
			t.Fatalf("Verify(%q) = %v", sig, err)
		}
	})
}

func FuzzEvents(f *testing.F) {
	for _, b := range fuzzSeeds(f) {
		f.Add(b)
	}
	f.Add([]byte(`{"object":"page","entry":[{"messaging":[{"delivery":{"watermark":99999999999999999999}}]}]}`))
	p := newProvider(f, secret)
	f.Fuzz(func(t *testing.T, body []byte) {
		evs, err := p.Events(&providers.Request{Method: http.MethodPost, URL: hookURL, Header: http.Header{}, Body: body, Now: providertest.Now})
		if err != nil {
			if !errors.Is(err, providers.ErrMalformed) {
				t.Fatalf("error not ErrMalformed: %v", err)
			}
			return
		}
		for _, ev := range evs {
			if ev.Key == "" || ev.Time.IsZero() || ev.Time.Year() > 9999 || !bytes.Contains(body, ev.Data.Raw) {
				t.Fatalf("bad event %+v", ev)
			}
		}
		if err == nil {
			providertest.CheckFuzzed(t, Spec, evs)
		}
	})
}
