package calendly

import (
	"crypto/sha256"
	"fmt"
	"time"

	"exacto.dev/pkg/providers"
)

// Sample builds a realistic Calendly delivery at now, shaped like the examples in
// Calendly's webhook docs; the same event and now give the same bytes.
func Sample(event string, now time.Time, given ...providers.Lead) ([]byte, error) {
	own := providers.Lead{Email: "jane.lead@example.com"}
	lead, err := providers.SampleLead("calendly", given, own.Email, "")
	if err != nil {
		return nil, err
	}
	created := now.UTC().Format("2006-01-02T15:04:05.000000Z")
	start := now.UTC().Add(48 * time.Hour).Truncate(time.Hour)
	invitee := fmt.Sprintf("https://api.calendly.com/scheduled_events/GBGBDCAADAEDCRZ2/invitees/AAAA%010d", now.Unix())
	if lead.Email != own.Email { // another invitee of the same event
		invitee += fmt.Sprintf("%x", sha256.Sum256([]byte(lead.Email)))[:8]
	}
	cancel := "null"
	status := "active"
	switch event {
	case "invitee.created":
	case "invitee.canceled":
		status = "canceled"
		cancel = `{"canceled_by":"Jane Lead","reason":"Found another time","canceler_type":"invitee","created_at":"` + created + `"}`
	default:
		return nil, fmt.Errorf("calendly: no sample event %q (known: invitee.created, invitee.canceled)", event)
	}
	return fmt.Appendf(nil, `{"created_at":%q,"created_by":"https://api.calendly.com/users/AAAAAAAAAAAAAAAA","event":%q,"payload":{"cancel_url":"https://calendly.com/cancellations/AAAAAAAAAAAAAAAA","created_at":%q,"email":%q,"event":"https://api.calendly.com/scheduled_events/GBGBDCAADAEDCRZ2","name":%q,"new_invitee":null,"old_invitee":null,"questions_and_answers":[],"reschedule_url":"https://calendly.com/reschedulings/AAAAAAAAAAAAAAAA","rescheduled":false,"status":%q,"timezone":"Europe/Berlin","uri":%q,"scheduled_event":{"uri":"https://api.calendly.com/scheduled_events/GBGBDCAADAEDCRZ2","name":"Intro call","status":%q,"start_time":%q,"end_time":%q,"event_type":"https://api.calendly.com/event_types/GBGBDCAADAEDCRZ2"},"cancellation":%s}}`,
		created, event, created, lead.Email, lead.Name(own, "Jane Lead"), status, invitee, status, start.Format(time.RFC3339), start.Add(30*time.Minute).Format(time.RFC3339), cancel), nil
}
