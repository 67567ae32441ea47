package standard

import (
	"fmt"
	"time"

	"exacto.dev/pkg/providers"
)

// sampleEvents lists the events Sample builds.
var sampleEvents = []string{"reply.received", "lead.unsubscribed", "contact.updated", "invoice.paid"}

// Sample builds a realistic Standard Webhooks body at now (type, timestamp, data); the
// same event and now give the same bytes.
func Sample(event string, now time.Time, given ...providers.Lead) ([]byte, error) {
	own := providers.Lead{Email: "sam.lead@example.com", Campaign: "cmp_q4_outbound"}
	lead, err := providers.SampleLead("standard", given, own.Email, own.Campaign)
	if err != nil {
		return nil, err
	}
	switch {
	case event == "invoice.paid" && lead != own:
		return nil, fmt.Errorf("standard: an invoice.paid delivery is about no lead (--email does not apply, nor --campaign)")
	case event == "contact.updated" && lead.Campaign != own.Campaign:
		return nil, fmt.Errorf("standard: a contact.updated delivery carries no campaign (--campaign does not apply)")
	}
	ts := now.UTC().Format(time.RFC3339)
	id, name := "lead_"+lead.ID(own, "8f2a", false), lead.Name(own, "Sam Lead")
	switch event {
	case "reply.received":
		return fmt.Appendf(nil, `{"type":"reply.received","timestamp":%q,"data":{"id":%q,"email":%q,"name":%q,"campaign_id":%q,"message_id":"<CAF8b2x@mail.example.com>","subject":"Re: Quick question","text":"Sounds interesting, can we talk Thursday?"}}`, ts, id, lead.Email, name, lead.Campaign), nil
	case "lead.unsubscribed":
		return fmt.Appendf(nil, `{"type":"lead.unsubscribed","timestamp":%q,"data":{"id":%q,"email":%q,"campaign_id":%q}}`, ts, id, lead.Email, lead.Campaign), nil
	case "contact.updated":
		return fmt.Appendf(nil, `{"type":"contact.updated","timestamp":%q,"data":{"id":%q,"email":%q,"name":%q}}`, ts, id, lead.Email, name), nil
	case "invoice.paid":
		return fmt.Appendf(nil, `{"type":"invoice.paid","timestamp":%q,"data":{"id":"inv_01","amount":2000}}`, ts), nil
	}
	return nil, fmt.Errorf("standard: no sample event %q (known: %v)", event, sampleEvents)
}
