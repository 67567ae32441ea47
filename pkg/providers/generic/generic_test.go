package generic

import (
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/providers"
	"exacto.dev/pkg/providers/providertest"
)

const (
	secret      = "gen-2f9c41d8b7e64a1f"
	otherSecret = "gen-9a0e5c3b71d24f86"
	hookURL     = "https://hooks.example.com/hooks/ep/tok"
)

func TestConformance(t *testing.T) {
	providertest.Run(t, providertest.Suite{Spec: Spec, Secret: secret, OtherSecret: otherSecret, URL: hookURL,
		Config: providers.Config{Generic: &Default}})
}

func newProvider(t testing.TB, g providers.Generic, secrets ...string) providers.Provider {
	t.Helper()
	p, err := New(providers.Config{Generic: &g, Secrets: secrets})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// GitHub's documented test values ("Validating webhook deliveries",
// docs.github.com/webhooks/using-webhooks/validating-webhook-deliveries): secret
// "It's a Secret to Everybody", body "Hello, World!".
func TestGoldenGitHubStyle(t *testing.T) {
	g := providers.Generic{Header: "X-Hub-Signature-256", Prefix: "sha256=", Encoding: "hex", Algorithm: "sha256",
		TypeField: "action", TimeField: "created_at"}
	p := newProvider(t, g, "It's a Secret to Everybody")
	r := &providers.Request{Method: http.MethodPost, URL: hookURL, Body: []byte("Hello, World!"), Now: providertest.Now,
		Header: http.Header{"X-Hub-Signature-256": {"sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"}}}
	if err := p.Verify(r); err != nil {
		t.Fatal(err)
	}
	r.Body = []byte("Hello, World?")
	if err := p.Verify(r); !errors.Is(err, providers.ErrBadSignature) {
		t.Fatalf("tampered: %v", err)
	}
}

// The Standard Webhooks test vector (standard-webhooks/standard-webhooks, libraries'
// tests), expressed as a generic block: base64 over "{id}.{timestamp}.{body}". The key
// is the secret's bytes, so the whsec_ secret is given decoded.
func TestGoldenStandardWebhooksStyle(t *testing.T) {
	key, _ := base64.StdEncoding.DecodeString("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	g := providers.Generic{Header: "Webhook-Signature", Prefix: "v1,", Encoding: "base64", Algorithm: "sha256",
		Signed: "{id}.{timestamp}.{body}", TimestampHeader: "Webhook-Timestamp", IDHeader: "Webhook-Id",
		TypeField: "type", TimeField: "timestamp"}
	p := newProvider(t, g, "other", string(key))
	r := &providers.Request{Method: http.MethodPost, URL: hookURL, Body: []byte(`{"test": 2432232314}`), Now: time.Unix(1614265330, 0),
		Header: http.Header{
			"Webhook-Id":        {"msg_p5jXN8AQM9LWM0D4loKWxJek"},
			"Webhook-Timestamp": {"1614265330"},
			"Webhook-Signature": {"v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="},
		}}
	if err := p.Verify(r); err != nil {
		t.Fatal(err)
	}
	r.Header.Set("Webhook-Id", "msg_other")
	if err := p.Verify(r); !errors.Is(err, providers.ErrBadSignature) {
		t.Fatalf("changed id: %v", err)
	}
}

func TestNewRejects(t *testing.T) {
	base := Default
	tests := []struct {
		name   string
		change func(g *providers.Generic)
		want   string
	}{
		{"no header", func(g *providers.Generic) { g.Header = "" }, "generic.header: required"},
		{"bad header", func(g *providers.Generic) { g.Header = "X Sig" }, `generic.header: "X Sig"`},
		{"no encoding", func(g *providers.Generic) { g.Encoding = "" }, "generic.encoding: required"},
		{"bad encoding", func(g *providers.Generic) { g.Encoding = "hx" }, `generic.encoding: "hx" is not hex or base64`},
		{"bad algorithm", func(g *providers.Generic) { g.Algorithm = "md5" }, `generic.algorithm: "md5" is not sha256 or sha512`},
		{"unknown placeholder", func(g *providers.Generic) { g.Signed = "{timestamp}.{payload}" }, `generic.signed: unknown placeholder "{payload}"`},
		{"unbalanced", func(g *providers.Generic) { g.Signed = "{timestamp}.{body" }, "generic.signed: unbalanced"},
		{"stray close", func(g *providers.Generic) { g.Signed = "{timestamp}}.{body}" }, "generic.signed: unbalanced"},
		{"body unsigned", func(g *providers.Generic) { g.Signed = "{timestamp}" }, "does not sign {body}"},
		{"timestamp unsigned", func(g *providers.Generic) { g.Signed = "{body}" }, "generic.timestamp_header: X-Timestamp is not signed"},
		{"timestamp without header", func(g *providers.Generic) { g.TimestampHeader = "" }, "generic.signed: {timestamp} needs generic.timestamp_header"},
		{"id unsigned", func(g *providers.Generic) { g.IDHeader = "X-Id" }, "generic.id_header: X-Id is not signed"},
		{"id without header", func(g *providers.Generic) { g.Signed = "{id}.{timestamp}.{body}" }, "generic.signed: {id} needs generic.id_header"},
		{"no type field", func(g *providers.Generic) { g.TypeField = "" }, "generic.type_field: required"},
		{"no time field", func(g *providers.Generic) { g.TimeField = "" }, "generic.time_field: required"},
		{"bad path", func(g *providers.Generic) { g.IDField = "data..id" }, `generic.id_field: "data..id" is not a dotted path`},
		{"bad events path", func(g *providers.Generic) { g.EventsField = "events." }, `generic.events_field: "events." is not a dotted path`},
		{"bad type", func(g *providers.Generic) { g.Types = map[string]string{"reply": "reply.recieved"} }, `generic.types["reply"]: "reply.recieved" is not a canonical type`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := base
			tt.change(&g)
			_, err := New(providers.Config{Generic: &g, Secrets: []string{secret}})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
	if _, err := New(providers.Config{Secrets: []string{secret}}); err == nil {
		t.Fatal("nil generic block accepted")
	}
	if _, err := New(providers.Config{Generic: &base}); err == nil {
		t.Fatal("no secrets accepted")
	}
	if _, err := New(providers.Config{Generic: &base, Secrets: []string{""}}); err == nil {
		t.Fatal("empty secret accepted")
	}
	g := base
	g.Signed = ""
	g.TimestampHeader = ""
	if _, err := New(providers.Config{Generic: &g, Secrets: []string{secret}}); err != nil {
		t.Fatalf("empty signed means {body}: %v", err)
	}
}

func signed(t *testing.T, body string, now time.Time) *providers.Request {
	t.Helper()
	h, b, err := Sign(http.MethodPost, hookURL, []byte(body), secret, now)
	if err != nil {
		t.Fatal(err)
	}
	return &providers.Request{Method: http.MethodPost, URL: hookURL, Header: h, Body: b, Now: providertest.Now}
}

func TestVerify(t *testing.T) {
	p := newProvider(t, Default, secret)
	body := `{"id":"evt_1","type":"email.sent","created_at":"2026-11-20T10:29:00Z"}`
	tests := []struct {
		name   string
		change func(r *providers.Request)
		want   error
	}{
		{"valid", func(r *providers.Request) {}, nil},
		{"uppercase hex and prefix", func(r *providers.Request) {
			r.Header.Set("X-Signature", strings.ToUpper(r.Header.Get("X-Signature")))
		}, nil},
		{"second signature value", func(r *providers.Request) {
			r.Header["X-Signature"] = []string{"sha256=00", r.Header.Get("X-Signature")}
		}, nil},
		{"no signature", func(r *providers.Request) { r.Header.Del("X-Signature") }, providers.ErrMissingSignature},
		{"blank signature", func(r *providers.Request) { r.Header.Set("X-Signature", " ") }, providers.ErrMissingSignature},
		{"no timestamp", func(r *providers.Request) { r.Header.Del("X-Timestamp") }, providers.ErrMissingSignature},
		{"timestamp not a number", func(r *providers.Request) { r.Header.Set("X-Timestamp", "soon") }, providers.ErrTimestamp},
		{"timestamp changed", func(r *providers.Request) {
			r.Header.Set("X-Timestamp", strconv.FormatInt(providertest.Now.Unix()-1, 10))
		}, providers.ErrBadSignature},
		{"no prefix", func(r *providers.Request) {
			r.Header.Set("X-Signature", strings.TrimPrefix(r.Header.Get("X-Signature"), "sha256="))
		}, providers.ErrBadSignature},
		{"truncated", func(r *providers.Request) {
			s := r.Header.Get("X-Signature")
			r.Header.Set("X-Signature", s[:len(s)-2])
		}, providers.ErrBadSignature},
		{"sha512 length", func(r *providers.Request) {
			r.Header.Set("X-Signature", "sha256="+strings.Repeat("ab", 64))
		}, providers.ErrBadSignature},
		{"body changed", func(r *providers.Request) { r.Body = append(r.Body, ' ') }, providers.ErrBadSignature},
		{"stale", func(r *providers.Request) { r.Now = r.Now.Add(6 * time.Minute) }, providers.ErrTimestamp},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := signed(t, body, providertest.Now)
			tt.change(r)
			err := p.Verify(r)
			if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
		})
	}
	// A configured tolerance replaces the default.
	g := Default
	wide, err := New(providers.Config{Generic: &g, Secrets: []string{secret}, Tolerance: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	r := signed(t, body, providertest.Now.Add(-30*time.Minute))
	if err := wide.Verify(r); err != nil {
		t.Fatalf("within a 1h tolerance: %v", err)
	}
}

func TestVerifyBase64SHA512URL(t *testing.T) {
	g := providers.Generic{Header: "X-Sig", Encoding: "base64", Algorithm: "sha512", Signed: "{method} {url}\n{body}",
		TypeField: "type", TimeField: "ts"}
	p := newProvider(t, g, secret)
	s, _ := compile(g)
	body := []byte(`{"type":"x","ts":1700000000}`)
	r := &providers.Request{Method: http.MethodPost, URL: hookURL, Body: body, Now: providertest.Now}
	mac := s.mac([]byte(secret), []byte("POST "+hookURL+"\n"+string(body)))
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawURLEncoding} {
		r.Header = http.Header{"X-Sig": {enc.EncodeToString(mac)}}
		if err := p.Verify(r); err != nil {
			t.Fatal(err)
		}
	}
	r.URL = hookURL + "?x=1"
	if err := p.Verify(r); !errors.Is(err, providers.ErrBadSignature) {
		t.Fatalf("another URL: %v", err)
	}
}

func TestEvents(t *testing.T) {
	g := providers.Generic{Header: "X-Sig", Encoding: "hex", Algorithm: "sha256", EventsField: "payload.events",
		IDField: "meta.id", TypeField: "kind", TimeField: "at", Types: map[string]string{"reply": envelope.TypeReplyReceived}}
	p := newProvider(t, g, secret)
	body := `{"payload":{"events":[
		{"meta":{"id":"e-1"},"kind":"reply","at":"2026-11-20T10:00:00.5+01:00","data":{"contact":{"email":"a@example.com"},"message":{"text":"yes"}}},
		{"meta":{"id":42},"kind":"ping","at":1763632800},
		{"kind":"reply","at":1763632800123,"contact":{"email":"b@example.com"},"message":{"text":"no"}},
		{"kind":"reply","at":"1763632800.25","data":{"contact":{"phone":"+15550100"},"message":{}}},
		{"kind":"reply","at":1763632800}]}}`
	evs, err := p.Events(&providers.Request{Body: []byte(body), Header: http.Header{}})
	if err != nil {
		t.Fatal(err)
	}
	providertest.CheckEvents(t, Spec, evs)
	want := []struct {
		typ, id string
		at      time.Time
	}{
		{envelope.TypeReplyReceived, "e-1", time.Date(2026, 11, 20, 9, 0, 0, 5e8, time.UTC)},
		{envelope.TypeUnmapped, "42", time.Unix(1763632800, 0)},
		{envelope.TypeReplyReceived, "", time.UnixMilli(1763632800123)},
		{envelope.TypeReplyReceived, "", time.Unix(1763632800, 25e7)},
		{envelope.TypeUnmapped, "", time.Unix(1763632800, 0)}, // a reply without contact is not trusted as one
	}
	for i, w := range want {
		ev := evs[i]
		if ev.Type != w.typ || ev.ProviderEventID != w.id || !ev.Time.Equal(w.at) {
			t.Errorf("event %d: type %q id %q time %v", i, ev.Type, ev.ProviderEventID, ev.Time)
		}
		if w.id != "" && ev.Key != w.id {
			t.Errorf("event %d: key %q, want the id", i, ev.Key)
		}
	}
	if !strings.HasPrefix(string(evs[0].Data.Raw), `{"meta":{"id":"e-1"}`) {
		t.Errorf("raw is not the element: %s", evs[0].Data.Raw)
	}
	// Without an id, the key is the type, the time and the hash of the event's JSON:
	// stable on a retry, different for another event.
	again, _ := p.Events(&providers.Request{Body: []byte(body), Header: http.Header{}})
	if again[2].Key != evs[2].Key || evs[2].Key == evs[3].Key {
		t.Fatalf("keys %q %q %q", evs[2].Key, again[2].Key, evs[3].Key)
	}
}

func TestEventsIDHeader(t *testing.T) {
	g := providers.Generic{Header: "X-Sig", Encoding: "hex", Algorithm: "sha256", Signed: "{id}.{body}", IDHeader: "X-Event-Id",
		TypeField: "type", TimeField: "time"}
	p := newProvider(t, g, secret)
	h := http.Header{"X-Event-Id": {"dlv_1"}}
	one, err := p.Events(&providers.Request{Body: []byte(`{"type":"a","time":1700000000}`), Header: h})
	if err != nil || one[0].Key != "dlv_1" || one[0].ProviderEventID != "dlv_1" {
		t.Fatalf("single: %+v %v", one, err)
	}
	batch, err := p.Events(&providers.Request{Body: []byte(`[{"type":"a","time":1700000000},{"type":"a","time":1700000000}]`), Header: h})
	if err != nil || batch[0].Key == batch[1].Key || batch[0].Key == "dlv_1" {
		t.Fatalf("batch: %+v %v", batch, err)
	}
	providertest.CheckEvents(t, Spec, batch)
}

func TestEventsRejects(t *testing.T) {
	batched := Default
	batched.EventsField = "events"
	for name, c := range map[string]struct {
		g    providers.Generic
		body string
	}{
		"no type":            {Default, `{"id":"1","created_at":"2026-11-20T10:00:00Z"}`},
		"type is an object":  {Default, `{"id":"1","type":{},"created_at":"2026-11-20T10:00:00Z"}`},
		"no time":            {Default, `{"id":"1","type":"x"}`},
		"time is not a time": {Default, `{"id":"1","type":"x","created_at":"tomorrow"}`},
		"time is zero":       {Default, `{"id":"1","type":"x","created_at":0}`},
		"time is negative":   {Default, `{"id":"1","type":"x","created_at":-5}`},
		"time too far":       {Default, `{"id":"1","type":"x","created_at":9223372036854775807}`},
		"time is a float":    {Default, `{"id":"1","type":"x","created_at":1e9}`},
		"id is a list":       {Default, `{"id":[1],"type":"x","created_at":1700000000}`},
		"empty batch":        {Default, `[]`},
		"scalar body":        {Default, `"x"`},
		"no events field":    {batched, `{"id":"1","type":"x","created_at":1700000000}`},
		"events not a list":  {batched, `{"events":{"type":"x"}}`},
		"empty events":       {batched, `{"events":[]}`},
		"bad element":        {batched, `{"events":[{"type":"x","created_at":1700000000},{"type":"x"}]}`},
	} {
		p := newProvider(t, c.g, secret)
		if _, err := p.Events(&providers.Request{Body: []byte(c.body), Header: http.Header{}}); !errors.Is(err, providers.ErrMalformed) {
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
		if b, _ := Sample(e, providertest.Now); string(a) != string(b) {
			t.Fatalf("%s: two samples at one time differ", e)
		}
	}
	if _, err := Sample("nope", providertest.Now); err == nil {
		t.Fatal("unknown event sampled")
	}
}

func FuzzVerify(f *testing.F) {
	body, _ := Sample("reply.created", providertest.Now)
	h, _, _ := Sign(http.MethodPost, hookURL, body, secret, providertest.Now)
	f.Add(body, h.Get("X-Signature"), h.Get("X-Timestamp"))
	f.Add([]byte(nil), "sha256=", "")
	f.Add([]byte("{}"), "sha256=zz", "-1")
	f.Add([]byte("{}"), "SHA256="+strings.Repeat("0", 64), "99999999999999999999")
	p := newProvider(f, Default, secret, otherSecret)
	f.Fuzz(func(t *testing.T, body []byte, sig, ts string) {
		r := &providers.Request{Method: http.MethodPost, URL: hookURL, Body: body, Now: providertest.Now,
			Header: http.Header{"X-Signature": {sig}, "X-Timestamp": {ts}}}
		err := p.Verify(r)
		if err != nil && errors.Is(err, providers.ErrMalformed) {
			t.Fatalf("Verify reported a malformed body: %v", err)
		}
	})
}

func FuzzEvents(f *testing.F) {
	for _, e := range sampleEvents {
		b, _ := Sample(e, providertest.Now)
		f.Add(b)
	}
	f.Add([]byte(`[{"type":"a","created_at":1700000000123},{"type":"a","created_at":"1700000000.5"}]`))
	f.Add([]byte(`{"id":null,"type":7,"created_at":"2026-11-20T10:00:00Z"}`))
	batched := Default
	batched.EventsField = "data.items"
	ps := []providers.Provider{newProvider(f, Default, secret), newProvider(f, batched, secret)}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, p := range ps {
			evs, err := p.Events(&providers.Request{Body: body, Header: http.Header{}})
			if err != nil {
				if !errors.Is(err, providers.ErrMalformed) {
					t.Fatalf("error does not wrap ErrMalformed: %v", err)
				}
				continue
			}
			for _, ev := range evs {
				if ev.Key == "" || ev.Time.IsZero() || ev.Time.Year() > 9999 {
					t.Fatalf("bad event: %+v", ev)
				}
			}
			providertest.CheckFuzzed(t, Spec, evs)
		}
	})
}

// The default sender's spam complaint is an email.complained with its contact: what the
// stopper and the suppressor act on.
func TestDefaultMapsComplaints(t *testing.T) {
	p := newProvider(t, Default, secret)
	now := time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)
	body, err := Sample("email.complained", now)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := p.Events(&providers.Request{Body: body, Header: http.Header{}})
	if err != nil {
		t.Fatal(err)
	}
	providertest.CheckEvents(t, Spec, evs)
	if len(evs) != 1 || evs[0].Type != envelope.TypeEmailComplained || evs[0].Data.Contact == nil || evs[0].Data.Contact.Email == "" {
		t.Fatalf("events %+v", evs)
	}
}
