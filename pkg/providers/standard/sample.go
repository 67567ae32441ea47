package standard

import (
	"fmt"
	"time"
)

// sampleEvents lists the events Sample builds.
var sampleEvents = []string{"reply.received", "lead.unsubscribed", "contact.updated", "invoice.paid"}

// Sample builds a realistic Standard Webhooks body at now (type, timestamp, data); the
// same event and now give the same bytes.
func Sample(event string, now time.Time) ([]byte, error) {
	ts := now.UTC().Format(time.RFC3339)
	switch event {
	case "reply.received":
		return fmt.Appendf(nil, `{"type":"reply.received","timestamp":%q,"data":{"id":"lead_8f2a","email":"sam.lead@example.com","name":"Sam Lead","campaign_id":"cmp_q4_outbound","message_id":"<CAF8b2x@mail.example.com>","subject":"Re: Quick question","text":"Sounds interesting, can we talk Thursday?"}}`, ts), nil
	case "lead.unsubscribed":
		return fmt.Appendf(nil, `{"type":"lead.unsubscribed","timestamp":%q,"data":{"id":"lead_8f2a","email":"sam.lead@example.com","campaign_id":"cmp_q4_outbound"}}`, ts), nil
	case "contact.updated":
		return fmt.Appendf(nil, `{"type":"contact.updated","timestamp":%q,"data":{"id":"lead_8f2a","email":"sam.lead@example.com","name":"Sam Lead"}}`, ts), nil
	case "invoice.paid":
		return fmt.Appendf(nil, `{"type":"invoice.paid","timestamp":%q,"data":{"id":"inv_01","amount":2000}}`, ts), nil
	}
	return nil, fmt.Errorf("standard: no sample event %q (known: %v)", event, sampleEvents)
}
