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

// A reschedule, shaped as Calendly's "Webhook Payloads for Rescheduled Events" guide
// describes it (the guide shows the pair as images, so the bodies are the documented
// payloads with its fields set): invitee.canceled of the old invitee with rescheduled
// true and new_invitee, invitee.created of the new one with old_invitee. The cancel is
// a move (status rescheduled), the booking names the meeting it moves.
func TestReschedulePair(t *testing.T) {
	p, _ := New(providers.Config{Secrets: []string{"k"}})
	const (
		oldMeeting = "https://api.calendly.com/scheduled_events/DFGHQ2KZP7WXNB4A"
		newMeeting = "https://api.calendly.com/scheduled_events/HJK3LMN5PQR7ST9U"
	)
	got := map[string]providers.Event{}
	for _, name := range []string{"invitee_canceled_rescheduled.json", "invitee_created_rescheduled.json"} {
		body, err := os.ReadFile("testdata/" + name)
		if err != nil {
			t.Fatal(err)
		}
		evs, err := p.Events(&providers.Request{Header: http.Header{}, Body: body})
		if err != nil {
			t.Fatal(err)
		}
		providertest.CheckEvents(t, Spec, evs)
		got[name] = evs[0]
	}
	moved, booked := got["invitee_canceled_rescheduled.json"], got["invitee_created_rescheduled.json"]
	if moved.Type != envelope.TypeMeetingCancelled || moved.Data.Status != envelope.MeetingRescheduled ||
		moved.Data.Meeting.ID != oldMeeting || moved.Data.Meeting.RescheduledFrom != "" {
		t.Errorf("the rescheduled cancel: %s %q %+v", moved.Type, moved.Data.Status, moved.Data.Meeting)
	}
	if booked.Type != envelope.TypeMeetingBooked || booked.Data.Status != "" || booked.Data.Meeting.ID != newMeeting ||
		booked.Data.Meeting.RescheduledFrom != oldMeeting || booked.Data.Meeting.Start.IsZero() {
		t.Errorf("the new booking: %s %q %+v", booked.Type, booked.Data.Status, booked.Data.Meeting)
	}
	if moved.Key == booked.Key || moved.Data.Contact.Email != booked.Data.Contact.Email {
		t.Errorf("keys %q %q, contacts %+v %+v", moved.Key, booked.Key, moved.Data.Contact, booked.Data.Contact)
	}
	// A plain cancellation and a plain booking carry neither.
	for _, name := range []string{"invitee_canceled.json", "invitee_created.json"} {
		body, _ := os.ReadFile("testdata/" + name)
		evs, err := p.Events(&providers.Request{Header: http.Header{}, Body: body})
		if err != nil || evs[0].Data.Status != "" || evs[0].Data.Meeting.RescheduledFrom != "" {
			t.Errorf("%s: %v %q %+v", name, err, evs[0].Data.Status, evs[0].Data.Meeting)
		}
	}
	// An old_invitee of another shape is kept whole: it names no meeting we know.
	if m := meetingOf("urn:invitee:42"); m != "urn:invitee:42" {
		t.Errorf("meetingOf kept %q", m)
	}
}
