package instantly

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"exacto.dev/pkg/providers"
)

// sampleEvents lists the events Sample builds, reply_received first (the default of
// `exacto send`).
var sampleEvents = []string{
	"reply_received", "auto_reply_received", "email_sent", "email_opened", "link_clicked",
	"email_link_clicked", "email_bounced", "lead_unsubscribed", "lead_interested",
	"lead_not_interested", "lead_neutral", "lead_meeting_booked", "lead_meeting_completed",
	"lead_closed", "lead_out_of_office", "lead_wrong_person", "lead_no_show",
	"account_error", "campaign_completed",
}

// sample has the documented fields in the documented order, plus two lead fields as
// Instantly merges them in.
type sample struct {
	Timestamp        string `json:"timestamp"`
	EventType        string `json:"event_type"`
	Workspace        string `json:"workspace"`
	CampaignID       string `json:"campaign_id"`
	CampaignName     string `json:"campaign_name"`
	LeadEmail        string `json:"lead_email,omitempty"`
	EmailAccount     string `json:"email_account,omitempty"`
	UniboxURL        string `json:"unibox_url,omitempty"`
	Step             int    `json:"step,omitempty"`
	Variant          int    `json:"variant,omitempty"`
	IsFirst          *bool  `json:"is_first,omitempty"`
	EmailID          string `json:"email_id,omitempty"`
	EmailSubject     string `json:"email_subject,omitempty"`
	EmailText        string `json:"email_text,omitempty"`
	EmailHTML        string `json:"email_html,omitempty"`
	ReplyTextSnippet string `json:"reply_text_snippet,omitempty"`
	ReplySubject     string `json:"reply_subject,omitempty"`
	ReplyText        string `json:"reply_text,omitempty"`
	ReplyHTML        string `json:"reply_html,omitempty"`
	FirstName        string `json:"firstName,omitempty"`
	CompanyName      string `json:"companyName,omitempty"`
}

// Sample builds a realistic delivery of event at now. The same event and now give the
// same bytes, as a retry by Instantly would.
func Sample(event string, now time.Time, given ...providers.Lead) ([]byte, error) {
	own := providers.Lead{Email: "jordan.lee@acme.example", Campaign: "5a4f1d2e-8c7b-4e6a-b3d9-2f0e1c7a6b58"}
	lead, err := providers.SampleLead("instantly", given, own.Email, own.Campaign)
	if err != nil {
		return nil, err
	}
	known := false
	for _, e := range sampleEvents {
		known = known || e == event
	}
	if !known {
		return nil, fmt.Errorf("instantly: no sample for event %q (known: %v)", event, sampleEvents)
	}
	s := sample{
		Timestamp:    now.UTC().Format("2006-01-02T15:04:05.000Z"),
		EventType:    event,
		Workspace:    "0e3c5e7a-3b1f-4a8e-9d2c-6f1b2a7c9e41",
		CampaignID:   lead.Campaign,
		CampaignName: "Q4 Founders Outreach",
	}
	switch event {
	case "campaign_completed", "account_error":
		if lead.Email != own.Email {
			return nil, fmt.Errorf("instantly: a %s delivery is about no lead (--email does not apply)", event)
		}
	}
	switch event {
	case "campaign_completed":
		return marshal(s)
	case "account_error":
		s.EmailAccount = "maya@outbound.example.com"
		return marshal(s)
	}
	first, _, _ := strings.Cut(lead.Name(own, "Jordan Lee"), " ")
	s.LeadEmail, s.FirstName, s.CompanyName = lead.Email, first, "Acme Corp"
	switch event {
	case "email_sent", "email_opened", "link_clicked", "email_link_clicked", "email_bounced", "reply_received", "auto_reply_received":
		first := true
		s.EmailAccount, s.Step, s.Variant, s.IsFirst = "maya@outbound.example.com", 1, 1, &first
		s.EmailID = uuid(event+lead.Seed(own), now)
		s.EmailSubject = "Quick question about Acme's onboarding"
	}
	switch event {
	case "email_sent":
		s.EmailText = "Hi Jordan,\n\nWould a 15 minute call next week make sense?\n\nMaya"
		s.EmailHTML = "<p>Hi Jordan,</p><p>Would a 15 minute call next week make sense?</p><p>Maya</p>"
	case "reply_received":
		s.ReplySubject = "Re: Quick question about Acme's onboarding"
		s.ReplyText = "Hi Maya, happy to talk. Tuesday at 10:00 works for me.\n\nJordan"
		s.ReplyHTML = "<div>Hi Maya, happy to talk. Tuesday at 10:00 works for me.</div><div>Jordan</div>"
		s.ReplyTextSnippet = "Hi Maya, happy to talk. Tuesday at 10:00 works for me."
		s.UniboxURL = "https://app.instantly.ai/app/unibox?thread_search=" + s.EmailID
	case "auto_reply_received":
		s.ReplySubject = "Automatic reply: Quick question about Acme's onboarding"
		s.ReplyText = "I am out of the office until Monday with limited access to e-mail."
		s.ReplyTextSnippet = s.ReplyText
		s.UniboxURL = "https://app.instantly.ai/app/unibox?thread_search=" + s.EmailID
	}
	return marshal(s)
}

// marshal encodes v without escaping HTML, as the provider posts it.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// uuid derives a stable UUID-shaped id from the event and its time.
func uuid(event string, now time.Time) string {
	h := sha256.Sum256([]byte(event + "|" + now.UTC().Format(time.RFC3339Nano)))
	return fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}
