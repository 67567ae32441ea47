// Package providertest is the conformance suite every provider package passes: valid
// delivery, each rejection, redelivery, batch split, identity stability and schema
// validity. Adding a provider means adding its Spec and fixtures, not new test logic.
package providertest

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/providers"
)

// Suite configures the conformance run for one provider.
type Suite struct {
	Spec providers.Spec
	// Secret and OtherSecret are two valid, different secrets in the provider's format.
	Secret, OtherSecret string
	// URL is where the deliveries are addressed (signed by schemes that sign the URL).
	URL string
	// Config is the base endpoint config; Secrets are filled in by the suite.
	Config providers.Config
	// SigningSecret, for a provider whose signature is optional (Spec.SignOptional),
	// runs the suite against an endpoint with this signing secret: every delivery is
	// signed with it too, and the signature checks run as for a signed provider.
	SigningSecret string
}

// Now is the fixed clock of the suite.
var Now = time.Date(2026, 11, 20, 10, 30, 0, 0, time.UTC)

// Deliver turns an http.Request into the verifier's view of it, reading its body.
func Deliver(t testing.TB, req *http.Request, now time.Time) *providers.Request {
	t.Helper()
	var body []byte
	if req.Body != nil {
		var err error
		body, err = io.ReadAll(req.Body)
		if err != nil {
			t.Fatal(err)
		}
	}
	return &providers.Request{Method: req.Method, URL: req.URL.String(), Header: req.Header.Clone(), Body: body, Now: now}
}

func (s Suite) provider(t *testing.T, secrets ...string) providers.Provider {
	t.Helper()
	cfg := s.Config
	cfg.Secrets = secrets
	if s.SigningSecret != "" {
		cfg.SigningSecrets = []string{s.SigningSecret}
	}
	p, err := s.Spec.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return p
}

func (s Suite) example(t *testing.T, event, secret string, now time.Time) *providers.Request {
	t.Helper()
	req, err := providers.Example(s.Spec, event, secret, s.URL, now)
	if err != nil {
		t.Fatalf("Example(%s): %v", event, err)
	}
	r := Deliver(t, req, Now)
	s.signOptional(r.Header, r.Body)
	return r
}

// signOptional adds the optional signature over body to h when the suite runs with a
// signing secret.
func (s Suite) signOptional(h http.Header, body []byte) {
	if s.SigningSecret == "" {
		return
	}
	maps.Copy(h, s.Spec.SignOptional(body, s.SigningSecret))
}

// Run runs the whole suite.
func Run(t *testing.T, s Suite) {
	if len(s.Spec.Events) == 0 {
		t.Fatal("spec lists no events")
	}
	t.Run("valid", func(t *testing.T) {
		p := s.provider(t, s.Secret)
		for _, event := range s.Spec.Events {
			r := s.example(t, event, s.Secret, Now)
			if err := p.Verify(r); err != nil {
				t.Fatalf("%s: Verify: %v", event, err)
			}
			evs, err := p.Events(r)
			if err != nil {
				t.Fatalf("%s: Events: %v", event, err)
			}
			CheckEvents(t, s.Spec, evs)
		}
	})
	t.Run("rotation", func(t *testing.T) {
		r := s.example(t, s.Spec.Events[0], s.Secret, Now)
		if err := s.provider(t, s.OtherSecret, s.Secret).Verify(r); err != nil {
			t.Fatalf("new secret listed second: %v", err)
		}
		if err := s.provider(t, s.Secret, s.OtherSecret).Verify(r); err != nil {
			t.Fatalf("new secret listed first: %v", err)
		}
	})
	t.Run("wrong secret", func(t *testing.T) {
		r := s.example(t, s.Spec.Events[0], s.OtherSecret, Now)
		err := s.provider(t, s.Secret).Verify(r)
		if !errors.Is(err, providers.ErrBadSignature) && !errors.Is(err, providers.ErrBadSecret) {
			t.Fatalf("signed with another secret: got %v, want a signature or secret mismatch", err)
		}
	})
	if s.Spec.Signed || s.SigningSecret != "" {
		t.Run("tampered body", func(t *testing.T) {
			r := s.example(t, s.Spec.Events[0], s.Secret, Now)
			r.Body = tamper(r.Body)
			if err := s.provider(t, s.Secret).Verify(r); !errors.Is(err, providers.ErrBadSignature) {
				t.Fatalf("tampered body: got %v, want ErrBadSignature", err)
			}
		})
		t.Run("missing signature", func(t *testing.T) {
			r := s.example(t, s.Spec.Events[0], s.Secret, Now)
			for _, h := range s.Spec.SignatureHeaders {
				r.Header.Del(h)
			}
			if err := s.provider(t, s.Secret).Verify(r); !errors.Is(err, providers.ErrMissingSignature) {
				t.Fatalf("no signature headers: got %v, want ErrMissingSignature", err)
			}
		})
		t.Run("garbage signature", func(t *testing.T) {
			r := s.example(t, s.Spec.Events[0], s.Secret, Now)
			for _, h := range s.Spec.SignatureHeaders {
				r.Header.Set(h, "%%%not-a-signature")
			}
			err := s.provider(t, s.Secret).Verify(r)
			if err == nil {
				t.Fatal("garbage signature accepted")
			}
			if errors.Is(err, providers.ErrMalformed) {
				t.Fatalf("garbage signature must be a 401 class error, got %v", err)
			}
		})
	}
	if s.Spec.SignsTime {
		for name, skew := range map[string]time.Duration{"stale": -time.Hour, "future": time.Hour} {
			t.Run(name+" timestamp", func(t *testing.T) {
				r := s.example(t, s.Spec.Events[0], s.Secret, Now.Add(skew))
				if err := s.provider(t, s.Secret).Verify(r); !errors.Is(err, providers.ErrTimestamp) {
					t.Fatalf("signed %v from now: got %v, want ErrTimestamp", skew, err)
				}
			})
		}
		t.Run("within tolerance", func(t *testing.T) {
			r := s.example(t, s.Spec.Events[0], s.Secret, Now.Add(-2*time.Minute))
			if err := s.provider(t, s.Secret).Verify(r); err != nil {
				t.Fatalf("signed 2 minutes ago: %v", err)
			}
		})
	}
	t.Run("samples depend on event and time only", func(t *testing.T) {
		for _, event := range s.Spec.Events {
			a, errA := s.Spec.Sample(event, Now)
			b, errB := s.Spec.Sample(event, Now)
			c, errC := s.Spec.Sample(event, Now.Add(time.Second))
			if errA != nil || errB != nil || errC != nil {
				t.Fatalf("%s: %v %v %v", event, errA, errB, errC)
			}
			if !bytes.Equal(a, b) || bytes.Equal(a, c) {
				t.Errorf("%s: a sample depends on its event and time only", event)
			}
		}
		if _, err := s.Spec.Sample("no-such-event", Now); err == nil {
			t.Error("a sample of an unknown event")
		}
	})
	t.Run("another lead is another event about them", func(t *testing.T) {
		p := s.provider(t, s.Secret)
		other := providers.Lead{Email: "other.lead@example.org", Campaign: "4242"}
		for _, field := range []providers.Lead{{Email: other.Email}, {Campaign: other.Campaign}} {
			for _, event := range s.Spec.Events {
				body, err := s.Spec.Sample(event, Now, field)
				if err != nil {
					// A provider refuses a field its deliveries do not carry, by name.
					if !strings.Contains(err.Error(), "does not apply") {
						t.Fatalf("%s %+v: %v", event, field, err)
					}
					continue
				}
				own := events(t, p, s.deliver(t, s.example(t, event, s.Secret, Now).Body))
				theirs := events(t, p, s.deliver(t, body))
				if len(own) != len(theirs) {
					t.Fatalf("%s %+v: %d events, the sample's own lead gives %d", event, field, len(theirs), len(own))
				}
				for i, ev := range theirs {
					if ev.Key == own[i].Key {
						t.Errorf("%s %+v: the same key as the sample's own lead: a retry, not another event", event, field)
					}
					// A field the event does not carry is refused, not ignored.
					if field.Email != "" && (ev.Data.Contact == nil || ev.Data.Contact.Email != field.Email) {
						t.Errorf("%s: contact %+v, want %s", event, ev.Data.Contact, field.Email)
					}
					// Another lead is another record at the platform too: not the own lead's
					// id or name (a stop by id would stop the wrong lead).
					if c, o := ev.Data.Contact, own[i].Data.Contact; field.Email != "" && c != nil && o != nil &&
						(o.ExternalID != "" && c.ExternalID == o.ExternalID || o.Name != "" && c.Name == o.Name) {
						t.Errorf("%s: another lead keeps the own lead's id %q or name %q", event, c.ExternalID, c.Name)
					}
					if field.Campaign != "" && (ev.Data.Campaign == nil || ev.Data.Campaign.ID != field.Campaign) {
						t.Errorf("%s: campaign %+v, want %s", event, ev.Data.Campaign, field.Campaign)
					}
				}
			}
		}
		if _, err := s.Spec.Sample(s.Spec.Events[0], Now, other, other); err == nil {
			t.Error("a sample of two leads")
		}
	})
	t.Run("redelivery keeps identity", func(t *testing.T) {
		p := s.provider(t, s.Secret)
		for _, event := range s.Spec.Events {
			first := keys(t, p, s.example(t, event, s.Secret, Now))
			// A retry: the same payload, signed again later.
			body, err := s.Spec.Sample(event, Now)
			if err != nil {
				t.Fatal(err)
			}
			later := Now.Add(90 * time.Second)
			h, body, err := s.Spec.Sign(http.MethodPost, s.URL, body, s.Secret, later)
			if err != nil {
				t.Fatal(err)
			}
			s.signOptional(h, body)
			retry := &providers.Request{Method: http.MethodPost, URL: s.URL, Header: h, Body: body, Now: later}
			if err := p.Verify(retry); err != nil {
				t.Fatalf("%s: retry: %v", event, err)
			}
			if again := keys(t, p, retry); !equal(first, again) {
				t.Fatalf("%s: identity changed on redelivery: %q then %q", event, first, again)
			}
		}
	})
	t.Run("distinct events have distinct ids", func(t *testing.T) {
		p := s.provider(t, s.Secret)
		seen := map[string]string{}
		for _, event := range s.Spec.Events {
			for _, k := range keys(t, p, s.example(t, event, s.Secret, Now)) {
				id := envelope.ID("t", s.Spec.Name, k)
				if prev, dup := seen[id]; dup && prev != event {
					t.Fatalf("events %s and %s share id %s", prev, event, id)
				}
				seen[id] = event
			}
		}
	})
	t.Run("malformed body", func(t *testing.T) {
		p := s.provider(t, s.Secret)
		for _, body := range [][]byte{[]byte(`{"truncated": `), []byte("not json"), []byte("\xff\xfe"), []byte(`{"a":1,"a":2}`)} {
			r := &providers.Request{Method: http.MethodPost, URL: s.URL, Header: http.Header{}, Body: body, Now: Now}
			if _, err := p.Events(r); !errors.Is(err, providers.ErrMalformed) {
				t.Fatalf("Events(%q): got %v, want ErrMalformed", body, err)
			}
		}
	})
}

// CheckEvents asserts what every normalised event must hold, and validates its
// envelope against the JSON Schemas in schemas/.
func CheckEvents(t testing.TB, spec providers.Spec, evs []providers.Event) {
	t.Helper()
	if len(evs) == 0 {
		t.Fatal("a valid delivery gave no events")
	}
	ids := map[string]bool{}
	for _, ev := range evs {
		if !known(ev.Type) {
			t.Fatalf("event type %q is not canonical", ev.Type)
		}
		if ev.Key == "" {
			t.Fatalf("%s: empty identity key", ev.Type)
		}
		if ev.Time.IsZero() {
			t.Fatalf("%s: no event time", ev.Type)
		}
		if !json.Valid(ev.Data.Raw) {
			t.Fatalf("%s: raw payload is not JSON: %q", ev.Type, ev.Data.Raw)
		}
		id := envelope.ID("t", spec.Name, ev.Key)
		if ids[id] {
			t.Fatalf("two events of one delivery share id %s (key %q)", id, ev.Key)
		}
		ids[id] = true
		env := ev.Envelope(spec, "acme", "ep-1", spec.Auth(providers.Config{Secrets: []string{"secret"}}), Now, "0000000000000000000000000000000000000000000000000000000000000000")
		ValidateEnvelope(t, env)
	}
}

// CheckFuzzed checks what a provider accepted from a fuzzed body as the gateway would
// store it: each event has a canonical type, an identity key, a time the schemas
// accept and a raw payload that is JSON, and its envelope matches schemas/. (Unlike
// CheckEvents, two events of one delivery may share an id: a body may repeat one.)
func CheckFuzzed(t testing.TB, spec providers.Spec, evs []providers.Event) {
	t.Helper()
	for _, ev := range evs {
		if !known(ev.Type) || ev.Key == "" || ev.Time.IsZero() || !json.Valid(ev.Data.Raw) {
			t.Fatalf("accepted a bad event: type %q key %q time %v raw %q", ev.Type, ev.Key, ev.Time, ev.Data.Raw)
		}
		ValidateEnvelope(t, ev.Envelope(spec, "acme", "ep-1", spec.Auth(providers.Config{Secrets: []string{"secret"}}), Now, "0000000000000000000000000000000000000000000000000000000000000000"))
	}
}

func known(typ string) bool {
	for _, t := range envelope.Types {
		if t == typ {
			return true
		}
	}
	return false
}

// deliver is body signed now as the provider signs it.
func (s Suite) deliver(t *testing.T, body []byte) *providers.Request {
	t.Helper()
	h, body, err := s.Spec.Sign(http.MethodPost, s.URL, body, s.Secret, Now)
	if err != nil {
		t.Fatal(err)
	}
	s.signOptional(h, body)
	return &providers.Request{Method: http.MethodPost, URL: s.URL, Header: h, Body: body, Now: Now}
}

func events(t *testing.T, p providers.Provider, r *providers.Request) []providers.Event {
	t.Helper()
	if err := p.Verify(r); err != nil {
		t.Fatal(err)
	}
	evs, err := p.Events(r)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

func keys(t *testing.T, p providers.Provider, r *providers.Request) []string {
	t.Helper()
	evs, err := p.Events(r)
	if err != nil {
		t.Fatal(err)
	}
	var ks []string
	for _, ev := range evs {
		ks = append(ks, ev.Key)
	}
	return ks
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// tamper changes one byte inside the body while keeping it the same length.
func tamper(body []byte) []byte {
	out := bytes.Clone(body)
	for i := len(out) / 2; i < len(out); i++ {
		if out[i] >= 'a' && out[i] <= 'y' {
			out[i]++
			return out
		}
	}
	return append(out, ' ')
}
