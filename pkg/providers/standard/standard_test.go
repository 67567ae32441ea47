package standard

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/providers"
	"exacto.dev/pkg/providers/providertest"
)

func TestConformance(t *testing.T) {
	providertest.Run(t, providertest.Suite{Spec: Spec, Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", OtherSecret: "whsec_dGhlLW9sZC1zZWNyZXQtb2YtMzItYnl0ZXMhIQ==", URL: "https://hooks.example.com/hooks/ep/tok"})
}

// The fixed vector every Standard Webhooks reference library tests against.
const (
	vecSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vecID     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vecTS     = "1614265330"
	vecBody   = `{"test": 2432232314}`
	vecSig    = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func vecRequest(sig string) *providers.Request {
	h := http.Header{}
	h.Set(HeaderID, vecID)
	h.Set(HeaderTimestamp, vecTS)
	h.Set(HeaderSignature, sig)
	return &providers.Request{Header: h, Body: []byte(vecBody), Now: time.Unix(1614265330, 0)}
}

func TestGoldenVector(t *testing.T) {
	p, err := New(providers.Config{Secrets: []string{vecSecret}})
	if err != nil {
		t.Fatal(err)
	}
	for _, sig := range []string{
		vecSig,
		"v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc= " + vecSig, // several, one valid
		"v1a,abc " + vecSig, // another version skipped
	} {
		if err := p.Verify(vecRequest(sig)); err != nil {
			t.Errorf("%s: %v", sig, err)
		}
	}
	// Bare base64 secrets (without whsec_) are accepted too, as the libraries do.
	bare, _ := New(providers.Config{Secrets: []string{"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}})
	if err := bare.Verify(vecRequest(vecSig)); err != nil {
		t.Fatal(err)
	}
	// Svix header names.
	r := vecRequest(vecSig)
	for std, sv := range svix {
		r.Header.Set(sv, r.Header.Get(std))
		r.Header.Del(std)
	}
	if err := p.Verify(r); err != nil {
		t.Fatalf("svix headers: %v", err)
	}
}

func TestRejections(t *testing.T) {
	p, _ := New(providers.Config{Secrets: []string{vecSecret}})
	cases := map[string]struct {
		mutate func(*providers.Request)
		want   error
	}{
		"no signature":    {func(r *providers.Request) { r.Header.Del(HeaderSignature) }, providers.ErrMissingSignature},
		"no id":           {func(r *providers.Request) { r.Header.Del(HeaderID) }, providers.ErrMissingSignature},
		"no timestamp":    {func(r *providers.Request) { r.Header.Del(HeaderTimestamp) }, providers.ErrMissingSignature},
		"other id":        {func(r *providers.Request) { r.Header.Set(HeaderID, "msg_other") }, providers.ErrBadSignature},
		"other timestamp": {func(r *providers.Request) { r.Header.Set(HeaderTimestamp, "1614265331") }, providers.ErrBadSignature},
		"bad timestamp":   {func(r *providers.Request) { r.Header.Set(HeaderTimestamp, "soon") }, providers.ErrBadSignature},
		"only v2":         {func(r *providers.Request) { r.Header.Set(HeaderSignature, "v2,"+vecSig[3:]) }, providers.ErrBadSignature},
		"not base64":      {func(r *providers.Request) { r.Header.Set(HeaderSignature, "v1,!!!") }, providers.ErrBadSignature},
		"tampered body":   {func(r *providers.Request) { r.Body = []byte(`{"test": 2432232315}`) }, providers.ErrBadSignature},
		"stale":           {func(r *providers.Request) { r.Now = r.Now.Add(6 * time.Minute) }, providers.ErrTimestamp},
		"future":          {func(r *providers.Request) { r.Now = r.Now.Add(-6 * time.Minute) }, providers.ErrTimestamp},
	}
	for name, c := range cases {
		r := vecRequest(vecSig)
		c.mutate(r)
		if err := p.Verify(r); !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", name, err, c.want)
		}
	}
	if _, err := New(providers.Config{Secrets: []string{"whsec_not base64!"}}); err == nil {
		t.Fatal("a secret that is not base64 was accepted")
	}
}

func TestEvents(t *testing.T) {
	p, _ := New(providers.Config{Secrets: []string{vecSecret}})
	now := time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)
	for event, want := range map[string]string{"reply.received": envelope.TypeReplyReceived, "lead.unsubscribed": envelope.TypeLeadUnsubscribed, "contact.updated": envelope.TypeContactUpdated, "invoice.paid": envelope.TypeUnmapped} {
		body, _ := Sample(event, now)
		h, _, _ := Sign("POST", "", body, vecSecret, now)
		evs, err := p.Events(&providers.Request{Header: h, Body: body})
		if err != nil {
			t.Fatal(err)
		}
		if evs[0].Type != want || evs[0].Key != h.Get(HeaderID) || !evs[0].Time.Equal(now) {
			t.Fatalf("%s: %+v", event, evs[0])
		}
	}
	// A canonical name without the data it needs is not trusted as that type.
	h := http.Header{}
	h.Set(HeaderID, "msg_1")
	evs, err := p.Events(&providers.Request{Header: h, Body: []byte(`{"type":"reply.received","timestamp":"2026-11-20T10:00:00Z","data":{}}`)})
	if err != nil || evs[0].Type != envelope.TypeUnmapped {
		t.Fatalf("reply without contact: %v %+v", err, evs)
	}
	for _, body := range []string{`{"timestamp":"2026-11-20T10:00:00Z"}`, `{"type":"x"}`, `{"type":"x","timestamp":"now"}`} {
		if _, err := p.Events(&providers.Request{Header: h, Body: []byte(body)}); !errors.Is(err, providers.ErrMalformed) {
			t.Errorf("%s: %v", body, err)
		}
	}
}

func FuzzVerify(f *testing.F) {
	f.Add(vecID, vecTS, vecSig, []byte(vecBody))
	f.Add("", "-1", "v1,", []byte{})
	f.Add("x", "999999999999999", "v1,==== v1a,x", []byte("{}"))
	p, _ := New(providers.Config{Secrets: []string{vecSecret}})
	f.Fuzz(func(t *testing.T, id, ts, sig string, body []byte) {
		h := http.Header{}
		h.Set(HeaderID, id)
		h.Set(HeaderTimestamp, ts)
		h.Set(HeaderSignature, sig)
		p.Verify(&providers.Request{Header: h, Body: body, Now: time.Unix(1614265330, 0)})
	})
}

func FuzzEvents(f *testing.F) {
	b, _ := Sample("reply.received", time.Unix(1700000000, 0))
	f.Add(b)
	f.Add([]byte(`{"type":"reply.received","timestamp":"2026-11-20T10:00:00Z","data":[1]}`))
	p, _ := New(providers.Config{Secrets: []string{vecSecret}})
	f.Fuzz(func(t *testing.T, body []byte) {
		h := http.Header{}
		h.Set(HeaderID, "msg_1")
		evs, err := p.Events(&providers.Request{Header: h, Body: body})
		if err == nil && (len(evs) != 1 || evs[0].Key != "msg_1") {
			t.Fatalf("identity lost: %+v", evs)
		}
		if err == nil {
			providertest.CheckFuzzed(t, Spec, evs)
		}
	})
}
