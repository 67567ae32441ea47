package handler

import (
	"strings"
	"testing"
	"time"

	"exacto.dev/pkg/envelope"
)

// A rescheduled booking's note says the meeting moved, and when to; it never reads as a
// second meeting, nor as a cancellation.
func TestRescheduledMeetingNote(t *testing.T) {
	env := envelope.Envelope{ID: "ev_moved", Tenant: "acme", Provider: "calendly", Type: envelope.TypeMeetingBooked,
		Data: envelope.Data{Meeting: &envelope.Meeting{ID: "https://api.calendly.com/scheduled_events/NEW", EventType: "Intro call",
			RescheduledFrom: "https://api.calendly.com/scheduled_events/OLD",
			Start:           time.Date(2026, 12, 8, 10, 0, 0, 0, time.UTC), End: time.Date(2026, 12, 8, 10, 30, 0, 0, time.UTC)}}}
	b := activityBody(env)
	for _, want := range []string{"Meeting moved", "Intro call", "replaces the earlier booking https://api.calendly.com/scheduled_events/OLD", "2026-12-08 10:00 UTC"} {
		if !strings.Contains(b, want) {
			t.Errorf("note lacks %q: %s", want, b)
		}
	}
	for _, never := range []string{"Meeting booked", "ancel"} {
		if strings.Contains(b, never) {
			t.Errorf("note says %q: %s", never, b)
		}
	}
}
