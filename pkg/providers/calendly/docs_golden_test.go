package calendly

import (
	"net/http"
	"os"
	"testing"
	"time"

	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/providers"
	"exacto.dev/pkg/providers/providertest"
)

// testdata/invitee_created.json and invitee_canceled.json are the "Example: Invitee
// Created" and "Example: Invitee Canceled" bodies of Calendly's Webhook Payload reference,
// byte for byte as the docs print them.
func TestDocumentedPayloads(t *testing.T) {
	p, _ := New(providers.Config{Secrets: []string{"k"}})
	var keys []string
	for name, want := range map[string]struct {
		typ, reason string
		time        time.Time
	}{
		"invitee_created.json":  {envelope.TypeMeetingBooked, "", time.Date(2020, 11, 23, 17, 51, 19, 0, time.UTC)},
		"invitee_canceled.json": {envelope.TypeMeetingCancelled, "Meeting Conflict", time.Date(2020, 11, 23, 17, 54, 22, 0, time.UTC)},
	} {
		body, err := os.ReadFile("testdata/" + name)
		if err != nil {
			t.Fatal(err)
		}
		h, _, _ := Sign("POST", "", body, "k", want.time)
		r := &providers.Request{Header: h, Body: body, Now: want.time.Add(time.Minute)}
		if err := p.Verify(r); err != nil {
			t.Fatal(err)
		}
		evs, err := p.Events(r)
		if err != nil {
			t.Fatal(err)
		}
		providertest.CheckEvents(t, Spec, evs)
		ev := evs[0]
		m := ev.Data.Meeting
		const invitee = "https://api.calendly.com/scheduled_events/AAAAAAAAAAAAAAAA/invitees/AAAAAAAAAAAAAAAA"
		if ev.Type != want.typ || !ev.Time.Equal(want.time) || ev.ProviderEventID != invitee || ev.Subject != "test@example.com" ||
			ev.Data.Contact == nil || ev.Data.Contact.Email != "test@example.com" || ev.Data.Contact.Name != "John Doe" || m == nil ||
			m.ID != "https://api.calendly.com/scheduled_events/GBGBDCAADAEDCRZ2" || m.Invitee != "test@example.com" || m.Reason != want.reason ||
			!m.Start.Equal(time.Date(2019, 8, 24, 14, 15, 22, 123456000, time.UTC)) || m.EventType != "15 Minute Meeting" {
			t.Errorf("%s: %+v %+v", name, ev, m)
		}
		keys = append(keys, ev.Key)
	}
	if keys[0] == keys[1] {
		t.Fatal("booking and cancelling one invitee share a key")
	}
}

// The first v2 payloads named the scheduled event by payload.event (a URI) and had no
// scheduled_event object.
func TestLegacyPayload(t *testing.T) {
	p, _ := New(providers.Config{Secrets: []string{"k"}})
	body, _ := os.ReadFile("testdata/invitee_canceled_legacy.json")
	evs, err := p.Events(&providers.Request{Header: http.Header{}, Body: body})
	if err != nil {
		t.Fatal(err)
	}
	if m := evs[0].Data.Meeting; m == nil || m.ID != "https://api.calendly.com/scheduled_events/DDVRNUTABYGF4LO2" {
		t.Errorf("meeting %+v", m)
	}
}
