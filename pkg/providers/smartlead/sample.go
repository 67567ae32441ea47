package smartlead

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"exacto.dev/pkg/providers"
)

// sampleEvents lists the events Sample builds, EMAIL_REPLY first (the default of
// `exacto send`). FIRST_EMAIL_SENT is left out: it is an EMAIL_SENT of step 1.
var sampleEvents = []string{
	"EMAIL_REPLY", "EMAIL_SENT", "EMAIL_OPEN", "EMAIL_LINK_CLICK", "EMAIL_BOUNCE",
	"LEAD_UNSUBSCRIBED", "LEAD_CATEGORY_UPDATED", "UNTRACKED_REPLIES",
}

// Sample builds a realistic delivery of event at now, shaped like the examples of
// Smartlead's webhook guide, with an empty secret_key that Sign fills in. The same event
// and now give the same bytes, as a retry by Smartlead would.
func Sample(event string, now time.Time, given ...providers.Lead) ([]byte, error) {
	own := providers.Lead{Email: "dana.kim@globex.example", Campaign: "91812"}
	lead, err := providers.SampleLead("smartlead", given, own.Email, own.Campaign)
	if err != nil {
		return nil, err
	}
	campaign, err := strconv.Atoi(lead.Campaign)
	if err != nil || campaign <= 0 {
		return nil, fmt.Errorf("smartlead: campaign %q: Smartlead's campaign ids are numbers", lead.Campaign)
	}
	ts := now.UTC().Format("2006-01-02T15:04:05.000000+00:00")
	// The e-mail sent is shared by the events about it; replies and bounces are their own.
	e := sha256.Sum256([]byte(ts + lead.Seed(own)))
	h := sha256.Sum256([]byte(event + "|" + ts + lead.Seed(own)))
	statsID := fmt.Sprintf("%x-%x-%x-%x-%x", e[0:4], e[4:6], e[6:8], e[8:10], e[10:16])
	sent := map[string]any{
		"message_id": fmt.Sprintf("<%x@mail.outbound.example.com>", e[16:24]),
		"html":       "<div>Hi Dana,</div><div>Worth a quick chat about your outbound stack?</div>",
		"text":       "Hi Dana,\nWorth a quick chat about your outbound stack?",
		"time":       now.UTC().Add(-26 * time.Hour).Format("2006-01-02T15:04:05.000Z"),
	}
	b := map[string]any{
		"webhook_id":      4211,
		"webhook_name":    "Exacto",
		"webhook_url":     "https://hooks.example.com/hooks/smartlead-main/TOKEN",
		"event_type":      event,
		"event_timestamp": ts,
		"secret_key":      "",
		"campaign_id":     campaign,
		"campaign_name":   "Ops leaders - EMEA",
		"campaign_status": "ACTIVE",
		"client_id":       nil,
		"description":     "",
		"metadata":        map[string]any{"webhook_created_at": "2026-01-12T09:14:40.843Z"},
	}
	leadID := lead.ID(own, "1482956", true)
	mapID, _ := strconv.Atoi(lead.ID(own, "1438627", true))
	name := lead.Name(own, "Dana Kim")
	leadFields := map[string]any{
		"stats_id":             statsID,
		"sl_email_lead_id":     leadID,
		"sl_email_lead_map_id": mapID,
		"from_email":           "sam@outbound.example.com",
		"to_email":             lead.Email,
		"to_name":              name,
		"subject":              "Outbound stack at Globex",
		"sequence_number":      1,
		"sent_message":         sent,
		"app_url":              "https://app.smartlead.ai/app/master-inbox?leadMap=" + strconv.Itoa(mapID),
	}
	switch event {
	case "EMAIL_SENT", "EMAIL_OPEN":
		copyInto(b, leadFields)
	case "EMAIL_LINK_CLICK":
		copyInto(b, leadFields)
		b["link_details"] = []string{"https://outbound.example.com/case-study"}
	case "EMAIL_BOUNCE":
		copyInto(b, leadFields)
		b["bounce_message"] = map[string]any{
			"message_id": fmt.Sprintf("<%x@mx.globex.example>", h[24:32]),
			"html":       "",
			"text":       "550 5.1.1 The email account that you tried to reach does not exist.\nPlease check the address.",
			"time":       ts,
		}
	case "EMAIL_REPLY":
		copyInto(b, leadFields)
		b["sl_lead_email"] = lead.Email
		b["stats_thread_id"] = statsID
		b["time_replied"] = ts
		b["subject"] = "Re: Outbound stack at Globex"
		b["reply_message"] = map[string]any{
			"message_id": fmt.Sprintf("<CA%x@mail.gmail.com>", h[16:32]),
			"html":       "<div>Hi Sam, sure. Thursday 3pm CET works.</div>",
			"text":       "Hi Sam, sure. Thursday 3pm CET works.\n",
			"time":       ts,
		}
	case "LEAD_UNSUBSCRIBED":
		copyInto(b, leadFields)
		delete(b, "stats_id")
	case "LEAD_CATEGORY_UPDATED":
		b["lead_id"], _ = strconv.Atoi(leadID)
		b["to_email"], b["to_name"], b["from_email"] = lead.Email, name, "sam@outbound.example.com"
		b["lead_category"] = map[string]any{"old_id": nil, "old_name": nil, "new_id": 1, "new_name": "Interested"}
		first, last, _ := strings.Cut(name, " ")
		b["lead_data"] = map[string]any{"email": lead.Email, "first_name": first, "last_name": last, "company_name": "Globex"}
		b["app_url"] = "https://app.smartlead.ai/app/master-inbox?leadMap=" + strconv.Itoa(mapID)
	case "UNTRACKED_REPLIES":
		if lead.Campaign != own.Campaign {
			return nil, fmt.Errorf("smartlead: an UNTRACKED_REPLIES delivery carries no campaign (--campaign does not apply)")
		}
		for _, k := range []string{"campaign_id", "campaign_name", "campaign_status", "client_id"} {
			delete(b, k)
		}
		b["sender_detail"] = "Lee Park <lee.park@initech.example>"
		if lead.Email != own.Email {
			b["sender_detail"] = lead.Email
		}
		b["recipient_detail"] = "sam@outbound.example.com"
		b["subject"] = "Saw your note"
		b["visible_text"] = "Saw your note - who handles partnerships?\n"
		b["has_attachment"] = false
		b["cc"], b["bcc"] = "", ""
		b["reply_message"] = map[string]any{
			"message_id": fmt.Sprintf("<CA%x@mail.gmail.com>", h[16:32]),
			"html":       "",
			"text":       "Saw your note - who handles partnerships?\n",
			"time":       ts,
		}
	default:
		return nil, fmt.Errorf("smartlead: no sample for event %q (known: %v)", event, sampleEvents)
	}
	return marshal(b)
}

func copyInto(dst, src map[string]any) {
	for k, v := range src {
		dst[k] = v
	}
}

// marshal encodes v without escaping HTML, as the provider posts it. Map keys come out
// sorted, so the bytes are deterministic.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}
