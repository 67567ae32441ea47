package calendly

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
	providertest.Run(t, providertest.Suite{Spec: Spec, Secret: "calendly-key-new", OtherSecret: "calendly-key-old", URL: "https://hooks.example.com/hooks/ep/tok"})
}

// Calendly's documented scheme, over a vector computed once with Python's hmac:
// HMAC-SHA256("calendly-signing-key", `1700000000.{"event":"invitee.created"}`).
func TestGolden(t *testing.T) {
	const sig = "t=1700000000,v1=" + golden
	body := []byte(`{"event":"invitee.created"}`)
	p, _ := New(providers.Config{Secrets: []string{"calendly-signing-key"}})
	r := &providers.Request{Header: http.Header{Header: {sig}}, Body: body, Now: time.Unix(1700000100, 0)}
	if err := p.Verify(r); err != nil {
		t.Fatal(err)
	}
	if h, _, _ := Sign("POST", "", body, "calendly-signing-key", time.Unix(1700000000, 0)); h.Get(Header) != sig {
		t.Fatalf("Sign gives %s", h.Get(Header))
	}
	// Three minutes is the default window.
	r.Now = time.Unix(1700000000, 0).Add(3*time.Minute + time.Second)
	if err := p.Verify(r); !errors.Is(err, providers.ErrTimestamp) {
		t.Fatalf("past 3 minutes: %v", err)
	}
}

const golden = "81a9bfd092b45e5532457d73f595f87d45462d421449a6bae3fa0fa5ec207239"

func TestRejections(t *testing.T) {
	body := []byte(`{"event":"invitee.created"}`)
	p, _ := New(providers.Config{Secrets: []string{"calendly-signing-key"}})
	for _, c := range []struct {
		header string
		want   error
	}{
		{"", providers.ErrMissingSignature},
		{"t=1700000000", providers.ErrMissingSignature},
		{"t=1700000000,v1=" + golden[:10], providers.ErrBadSignature},
		{"t=1700000001,v1=" + golden, providers.ErrBadSignature},
		{"v1=" + golden, providers.ErrBadSignature},
		{"t=1700000000 ,v1=" + golden, providers.ErrBadSignature},
	} {
		r := &providers.Request{Header: http.Header{Header: {c.header}}, Body: body, Now: time.Unix(1700000000, 0)}
		if err := p.Verify(r); !errors.Is(err, c.want) {
			t.Errorf("%q: got %v, want %v", c.header, err, c.want)
		}
	}
	if _, err := New(providers.Config{Secrets: []string{""}}); err == nil {
		t.Fatal("empty signing key accepted")
	}
}

func TestEvents(t *testing.T) {
	p, _ := New(providers.Config{Secrets: []string{"k"}})
	now := time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)
	created, _ := Sample("invitee.created", now)
	canceled, _ := Sample("invitee.canceled", now)
	evs, err := p.Events(&providers.Request{Body: created})
	if err != nil {
		t.Fatal(err)
	}
	booked := evs[0]
	if booked.Type != envelope.TypeMeetingBooked || booked.Data.Meeting == nil || booked.Data.Meeting.Start.IsZero() || booked.Data.Contact.Email != "jane.lead@example.com" || !booked.Time.Equal(now) {
		t.Fatalf("booked: %+v %+v", booked, booked.Data.Meeting)
	}
	evs, err = p.Events(&providers.Request{Body: canceled})
	if err != nil {
		t.Fatal(err)
	}
	c := evs[0]
	if c.Type != envelope.TypeMeetingCancelled || c.Data.Meeting.Reason != "Found another time" || c.Key == booked.Key || c.ObjectID != booked.ObjectID {
		t.Fatalf("cancelled: %+v %+v", c, c.Data.Meeting)
	}
	for _, body := range []string{`{"event":"invitee.created","created_at":"2026-11-20T10:00:00Z","payload":{}}`, `{"created_at":"2026-11-20T10:00:00Z"}`, `{"event":"invitee.created"}`, `{"event":"x","created_at":"yesterday"}`,
		`{"event":"invitee.canceled","created_at":"2026-11-20T10:00:00Z","payload":{"uri":"u","rescheduled":"yes"}}`,
		`{"event":"invitee.created","created_at":"2026-11-20T10:00:00Z","payload":{"uri":"u","old_invitee":{"uri":"v"}}}`} {
		if _, err := p.Events(&providers.Request{Body: []byte(body)}); !errors.Is(err, providers.ErrMalformed) {
			t.Errorf("%s: %v", body, err)
		}
	}
	// Another Calendly event (routing_form_submission.created) is kept, unmapped.
	evs, err = p.Events(&providers.Request{Body: []byte(`{"event":"routing_form_submission.created","created_at":"2026-11-20T10:00:00Z","payload":{"submitter":null}}`)})
	if err != nil || evs[0].Type != envelope.TypeUnmapped {
		t.Fatalf("unmapped: %v %+v", err, evs)
	}
}

func FuzzVerify(f *testing.F) {
	f.Add("t=1700000000,v1="+golden, []byte(`{"event":"invitee.created"}`))
	f.Add("t=,v1=,v1", []byte(``))
	p, _ := New(providers.Config{Secrets: []string{"calendly-signing-key"}})
	f.Fuzz(func(t *testing.T, header string, body []byte) {
		p.Verify(&providers.Request{Header: http.Header{Header: {header}}, Body: body, Now: time.Unix(1700000000, 0)})
	})
}

func FuzzEvents(f *testing.F) {
	b, _ := Sample("invitee.canceled", time.Unix(1700000000, 0))
	f.Add(b)
	f.Add([]byte(`{"event":"invitee.created","created_at":"2026-11-20T10:00:00Z","payload":{"uri":"u","scheduled_event":{"start_time":"x"}}}`))
	p, _ := New(providers.Config{Secrets: []string{"k"}})
	f.Fuzz(func(t *testing.T, body []byte) {
		evs, err := p.Events(&providers.Request{Body: body})
		if err == nil && (len(evs) != 1 || evs[0].Key == "" || evs[0].Time.IsZero()) {
			t.Fatalf("accepted without identity or time: %+v", evs)
		}
		if err == nil {
			providertest.CheckFuzzed(t, Spec, evs)
		}
	})
}
