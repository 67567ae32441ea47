package stripe

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/providers"
	"exacto.dev/pkg/providers/providertest"
)

func TestConformance(t *testing.T) {
	providertest.Run(t, providertest.Suite{Spec: Spec, Secret: "whsec_new_0123456789", OtherSecret: "whsec_old_9876543210", URL: "https://hooks.example.com/hooks/ep/tok"})
}

// The header format from Stripe's docs (t, then v1, with v0 and extra v1 during a roll),
// over a vector computed once with `openssl dgst -sha256 -hmac whsec_test_secret` (and
// Python's hmac, which agrees) on
// `1492774577.{"id":"evt_test_webhook","object":"event"}`.
func TestGolden(t *testing.T) {
	body := []byte(`{"id":"evt_test_webhook","object":"event"}`)
	const good = "88a022085c6bdb887b02cb26ff76dd681234d9675c0f22844059f55552a8883a"
	now := time.Unix(1492774577, 0).Add(30 * time.Second)
	p, err := New(providers.Config{Secrets: []string{"whsec_test_secret"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, header := range []string{
		"t=1492774577,v1=" + good,
		"t=1492774577,v1=" + good + ",v0=6ffbb59b2300aae63f272406069a9788598b792a944a07aba816edb039989a39",
		"t=1492774577,v1=0000000000000000000000000000000000000000000000000000000000000000,v1=" + good,
		"t=1492774577,v1=88A022085C6BDB887B02CB26FF76DD681234D9675C0F22844059F55552A8883A",
	} {
		r := &providers.Request{Header: http.Header{Header: {header}}, Body: body, Now: now}
		if err := p.Verify(r); err != nil {
			t.Errorf("%s: %v", header, err)
		}
	}
	// Our signer produces the same header for the same inputs.
	h, _, _ := Sign("POST", "", body, "whsec_test_secret", time.Unix(1492774577, 0))
	if got := h.Get(Header); got != "t=1492774577,v1="+good {
		t.Fatalf("Sign gives %s", got)
	}
}

func TestRejections(t *testing.T) {
	body := []byte(`{"id":"evt_test_webhook","object":"event"}`)
	const good = "88a022085c6bdb887b02cb26ff76dd681234d9675c0f22844059f55552a8883a"
	now := time.Unix(1492774577, 0)
	p, _ := New(providers.Config{Secrets: []string{"whsec_test_secret"}})
	cases := []struct {
		header string
		want   error
	}{
		{"", providers.ErrMissingSignature},
		{"t=1492774577", providers.ErrMissingSignature},
		{"t=1492774577,v0=" + good, providers.ErrMissingSignature},
		{"v1=" + good, providers.ErrBadSignature},
		{"t=1492774577, v1=" + good, providers.ErrBadSignature},
		{"t=1492774577,v1= " + good, providers.ErrBadSignature},
		{"t=1492774577,t=1492774577,v1=" + good, providers.ErrBadSignature},
		{"t=abc,v1=" + good, providers.ErrBadSignature},
		{"t=1492774577,v1=zz", providers.ErrBadSignature},
		{"t=1492774578,v1=" + good, providers.ErrBadSignature},
		{"t=1492774577,v1=" + good[:62], providers.ErrBadSignature},
		{"garbage", providers.ErrBadSignature},
	}
	for _, c := range cases {
		r := &providers.Request{Header: http.Header{Header: {c.header}}, Body: body, Now: now}
		if err := p.Verify(r); !errors.Is(err, c.want) {
			t.Errorf("%q: got %v, want %v", c.header, err, c.want)
		}
	}
	// Valid signature, outside the configured tolerance.
	strict, _ := New(providers.Config{Secrets: []string{"whsec_test_secret"}, Tolerance: 10 * time.Second})
	r := &providers.Request{Header: http.Header{Header: {"t=1492774577,v1=" + good}}, Body: body, Now: now.Add(11 * time.Second)}
	if err := strict.Verify(r); !errors.Is(err, providers.ErrTimestamp) {
		t.Fatalf("outside a 10s tolerance: %v", err)
	}
	if _, err := New(providers.Config{}); err == nil {
		t.Fatal("New without secrets succeeded")
	}
}

func TestEvents(t *testing.T) {
	p, _ := New(providers.Config{Secrets: []string{"s"}})
	now := time.Unix(1732000000, 0).UTC()
	for event, want := range map[string]string{"customer.updated": envelope.TypeContactUpdated, "customer.created": envelope.TypeContactUpdated, "invoice.paid": envelope.TypeUnmapped} {
		body, _ := Sample(event, now)
		evs, err := p.Events(&providers.Request{Body: body})
		if err != nil || len(evs) != 1 {
			t.Fatalf("%s: %v", event, err)
		}
		ev := evs[0]
		if ev.Type != want || ev.ProviderType != event || !ev.Time.Equal(now) || ev.Key == "" || ev.Key != ev.ProviderEventID {
			t.Fatalf("%s: %+v", event, ev)
		}
		if want == envelope.TypeContactUpdated && (ev.Data.Contact == nil || ev.Data.Contact.Email != "jenny.rosen@example.com") {
			t.Fatalf("%s: contact %+v", event, ev.Data.Contact)
		}
	}
	for _, body := range []string{`{"type":"customer.updated","created":1}`, `{"id":"evt_1","created":1}`, `{"id":"evt_1","type":"x"}`, `[]`} {
		if _, err := p.Events(&providers.Request{Body: []byte(body)}); !errors.Is(err, providers.ErrMalformed) {
			t.Errorf("%s: %v", body, err)
		}
	}
}

func FuzzVerify(f *testing.F) {
	f.Add("t=1492774577,v1=88a022085c6bdb887b02cb26ff76dd681234d9675c0f22844059f55552a8883a", []byte(`{"id":"evt_test_webhook","object":"event"}`))
	f.Add("t=,v1=", []byte(`{}`))
	f.Add("t=99999999999999999999,v1=00", []byte(``))
	p, _ := New(providers.Config{Secrets: []string{"whsec_test_secret"}})
	f.Fuzz(func(t *testing.T, header string, body []byte) {
		r := &providers.Request{Header: http.Header{Header: {header}}, Body: body, Now: time.Unix(1492774577, 0)}
		if p.Verify(r) != nil {
			return
		}
		// Whatever was accepted carries the true MAC of this body among its v1 entries.
		want, _, _ := Sign("", "", body, "whsec_test_secret", time.Unix(1492774577, 0))
		if !strings.Contains(strings.ToLower(header), strings.TrimPrefix(want.Get(Header), "t=1492774577,")) {
			t.Fatalf("accepted %q without the body's MAC", header)
		}
	})
}

func FuzzEvents(f *testing.F) {
	body, _ := Sample("customer.updated", time.Unix(1732000000, 0))
	f.Add(body)
	f.Add([]byte(`{"id":"evt_1","type":"invoice.paid","created":1,"data":{"object":[]}}`))
	f.Add([]byte(`{"id":"evt_1","type":"customer.updated","created":-1}`))
	p, _ := New(providers.Config{Secrets: []string{"s"}})
	f.Fuzz(func(t *testing.T, body []byte) {
		evs, err := p.Events(&providers.Request{Body: body})
		if err == nil && (len(evs) != 1 || evs[0].Key == "") {
			t.Fatalf("accepted without identity: %+v", evs)
		}
		if err == nil {
			providertest.CheckFuzzed(t, Spec, evs)
		}
	})
}
