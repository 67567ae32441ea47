package generic

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"exacto.dev/pkg/providers"
)

// sampleEvents are provider types of Default, the first being the default of `exacto
// send`; "account.updated" is not in Default.Types, so it shows an unmapped event.
var sampleEvents = []string{"reply.created", "email.sent", "email.opened", "email.bounced", "email.complained", "contact.updated", "account.updated"}

// Sample builds a delivery of event as a sender configured like Default posts it: one
// event with id, type and created_at. The same event and now give the same bytes.
func Sample(event string, now time.Time, given ...providers.Lead) ([]byte, error) {
	own := providers.Lead{Email: "ana.souza@example.com"}
	lead, err := providers.SampleLead("generic", given, own.Email, "")
	if err != nil {
		return nil, err
	}
	contact := map[string]any{"email": lead.Email, "name": lead.Name(own, "Ana Souza")}
	var data map[string]any
	switch event {
	case "reply.created":
		data = map[string]any{"contact": contact, "message": map[string]any{
			"subject": "Re: Your demo request", "text": "Thanks! Friday at 11:00 works for me."}}
	case "email.sent", "email.opened":
		data = map[string]any{"contact": contact, "message": map[string]any{"subject": "Your demo request"}}
	case "email.bounced":
		data = map[string]any{"contact": contact, "bounce": map[string]any{"kind": "hard", "reason": "550 5.1.1 user unknown"}}
	case "email.complained":
		data = map[string]any{"contact": contact, "complaint": map[string]any{"feedback_type": "abuse"}}
	case "contact.updated":
		data = map[string]any{"contact": contact, "property": map[string]any{"name": "lifecycle_stage", "value": "lead"}}
	case "account.updated":
		if lead != own {
			return nil, fmt.Errorf("generic: an account.updated delivery is about no lead (--email does not apply)")
		}
		data = map[string]any{"account": map[string]any{"id": "acc_7f3c", "plan": "team"}}
	default:
		return nil, fmt.Errorf("generic: no sample for event %q (known: %v)", event, sampleEvents)
	}
	sum := sha256.Sum256([]byte(event + "|" + now.UTC().Format(time.RFC3339Nano) + lead.Seed(own)))
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	err = enc.Encode(struct {
		ID        string         `json:"id"`
		Type      string         `json:"type"`
		CreatedAt string         `json:"created_at"`
		Data      map[string]any `json:"data"`
	}{"evt_" + hex.EncodeToString(sum[:12]), event, now.UTC().Format(time.RFC3339), data})
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), err
}
