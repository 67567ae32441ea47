package stripe

import (
	"crypto/sha256"
	"fmt"
	"time"

	"exacto.dev/pkg/providers"
)

// sampleEvents lists the events Sample builds.
var sampleEvents = []string{"customer.updated", "customer.created", "invoice.paid"}

// Sample builds a realistic Stripe event at now; the same event and now give the same
// bytes, as a retry would.
func Sample(event string, now time.Time, given ...providers.Lead) ([]byte, error) {
	own := providers.Lead{Email: "jenny.rosen@example.com"}
	lead, err := providers.SampleLead("stripe", given, own.Email, "")
	if err != nil {
		return nil, err
	}
	id := fmt.Sprintf("evt_1Q%010d%s", now.Unix(), short(event))
	if seed := lead.Seed(own); seed != "" {
		id += fmt.Sprintf("%x", sha256.Sum256([]byte(seed)))[:8]
	}
	switch event {
	case "customer.updated", "customer.created":
		return fmt.Appendf(nil, `{"id":%q,"object":"event","api_version":"2024-06-20","created":%d,"data":{"object":{"id":%q,"object":"customer","email":%q,"name":%q,"phone":null,"metadata":{}},"previous_attributes":{"name":"Jenny R."}},"livemode":false,"pending_webhooks":1,"request":{"id":"req_6YwoiIy1Pw8iVr","idempotency_key":null},"type":%q}`, id, now.Unix(), "cus_"+lead.ID(own, "NffrFeUfNV2Hib", false), lead.Email, lead.Name(own, "Jenny Rosen"), event), nil
	case "invoice.paid":
		if lead != own {
			return nil, fmt.Errorf("stripe: an invoice.paid event names no e-mail (--email does not apply)")
		}
		return fmt.Appendf(nil, `{"id":%q,"object":"event","api_version":"2024-06-20","created":%d,"data":{"object":{"id":"in_1MtHbELkdIwHu7ixl4OzzPMv","object":"invoice","customer":"cus_NffrFeUfNV2Hib","amount_paid":2000,"currency":"usd","status":"paid"}},"livemode":false,"pending_webhooks":1,"request":{"id":null,"idempotency_key":null},"type":"invoice.paid"}`, id, now.Unix()), nil
	}
	return nil, fmt.Errorf("stripe: no sample event %q (known: %v)", event, sampleEvents)
}

// short distinguishes the sample events' ids.
func short(event string) string {
	switch event {
	case "customer.updated":
		return "cu"
	case "customer.created":
		return "cc"
	}
	return "ip"
}
