// Package instantly verifies and normalises Instantly (API v2) webhooks.
//
// Instantly signs nothing and sends no event id. A delivery is authenticated by the
// endpoint's path token (checked by the gateway) and, when the endpoint lists secrets, by
// a static header the user adds in Instantly's webhook settings (X-Exacto-Secret unless
// secret_header renames it).
package instantly

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/providers"
	"exacto.dev/pkg/verify"
)

// DefaultHeader carries the shared secret when Config.SecretHeader is empty.
const DefaultHeader = "X-Exacto-Secret"

// Spec describes Instantly for the registry.
var Spec = providers.Spec{
	Name:       "instantly",
	Signed:     false,
	AuthMethod: "header_secret",
	SignsTime:  false,
	// RetryHorizon: Instantly documents no retry horizon: providers.DefaultRetryHorizon assumed.
	SignatureHeaders: []string{DefaultHeader},
	NeedsSecret:      false,
	New:              New,
	Events:           sampleEvents,
	Sample:           Sample,
	Sign:             Sign,
}

type provider struct {
	header  string
	secrets verify.Shared
}

// New builds the verifier of one endpoint.
func New(cfg providers.Config) (providers.Provider, error) {
	p := &provider{header: DefaultHeader}
	if cfg.SecretHeader != "" {
		if !providers.ValidHeaderName(cfg.SecretHeader) {
			return nil, fmt.Errorf("instantly: secret_header %q is not a valid header name", cfg.SecretHeader)
		}
		p.header = cfg.SecretHeader
	}
	var err error
	if p.secrets, err = verify.NewShared("instantly", cfg.Secrets); err != nil {
		return nil, err
	}
	return p, nil
}

// Verify checks the static header secret. Without secrets the path token alone
// authenticates the endpoint, so there is nothing to check here.
func (p *provider) Verify(r *providers.Request) error {
	if len(p.secrets) == 0 {
		return nil
	}
	got := r.Header.Get(p.header)
	if got == "" {
		return fmt.Errorf("%w: no %s header", providers.ErrMissingSignature, p.header)
	}
	if !p.secrets.Match(got) {
		return fmt.Errorf("%w: %s header", providers.ErrBadSecret, p.header)
	}
	return nil
}

// payload is the documented webhook body. Lead fields merged in by Instantly are
// ignored here and kept in Data.Raw.
type payload struct {
	Timestamp        string           `json:"timestamp"`
	EventType        string           `json:"event_type"`
	Workspace        providers.Scalar `json:"workspace"`
	CampaignID       providers.Scalar `json:"campaign_id"`
	CampaignName     string           `json:"campaign_name"`
	LeadEmail        string           `json:"lead_email"`
	EmailAccount     string           `json:"email_account"`
	Step             providers.Scalar `json:"step"`
	Variant          providers.Scalar `json:"variant"`
	EmailID          providers.Scalar `json:"email_id"`
	EmailSubject     string           `json:"email_subject"`
	EmailText        string           `json:"email_text"`
	EmailHTML        string           `json:"email_html"`
	ReplySubject     string           `json:"reply_subject"`
	ReplyText        string           `json:"reply_text"`
	ReplyHTML        string           `json:"reply_html"`
	ReplyTextSnippet string           `json:"reply_text_snippet"`
	UniboxURL        string           `json:"unibox_url"`
}

// Events normalises the one event a delivery carries.
func (p *provider) Events(r *providers.Request) ([]providers.Event, error) {
	var b payload
	if err := providers.Decode(r.Body, &b); err != nil {
		return nil, err
	}
	if b.EventType == "" {
		return nil, fmt.Errorf("%w: no event_type", providers.ErrMalformed)
	}
	t, err := time.Parse(time.RFC3339Nano, b.Timestamp)
	if err != nil {
		return nil, fmt.Errorf("%w: timestamp is not an ISO 8601 time", providers.ErrMalformed)
	}
	typ, status, auto := mapType(b.EventType)
	ev := providers.Event{
		Type:         typ,
		ProviderType: b.EventType,
		// Instantly has no event id. These fields together identify one event: the same
		// lead can get the same event type in another campaign, step or variant, or
		// again later (a second open, a second reply), so the lead e-mail is only one
		// part. A retry re-posts the same body, so the key is stable across retries.
		Key: envelope.Key(keyType(b.EventType), string(b.Workspace), string(b.CampaignID), string(b.EmailID),
			string(b.Step), string(b.Variant), b.LeadEmail, b.Timestamp),
		ObjectID: providers.FirstOf(string(b.EmailID), b.LeadEmail, string(b.CampaignID)),
		Time:     t,
		Channel:  "email",
		Subject:  b.LeadEmail,
		Data: envelope.Data{
			ProviderType: b.EventType,
			Status:       status,
			Raw:          json.RawMessage(r.Body),
		},
	}
	if b.LeadEmail != "" {
		ev.Data.Contact = &envelope.Contact{Email: b.LeadEmail}
	}
	if b.CampaignID != "" || b.CampaignName != "" {
		ev.Data.Campaign = &envelope.Campaign{ID: string(b.CampaignID), Name: b.CampaignName, Step: string(b.Step)}
	}
	if m := message(b, typ, auto); m != nil {
		ev.Data.Message = m
	}
	if typ == envelope.TypeEmailBounced {
		ev.Data.Bounce = &envelope.Bounce{Kind: "unknown"} // Instantly does not say why
	}
	return []providers.Event{ev}, nil
}

func message(b payload, typ string, auto bool) *envelope.Message {
	if typ == envelope.TypeReplyReceived {
		text := providers.FirstOf(b.ReplyText, b.ReplyTextSnippet)
		return &envelope.Message{ID: string(b.EmailID), From: b.LeadEmail, To: b.EmailAccount,
			Subject: b.ReplySubject, Text: text, HTML: b.ReplyHTML, URL: b.UniboxURL, Auto: auto}
	}
	if b.EmailID == "" && b.EmailSubject == "" && b.EmailText == "" && b.EmailHTML == "" {
		return nil
	}
	return &envelope.Message{ID: string(b.EmailID), From: b.EmailAccount, To: b.LeadEmail,
		Subject: b.EmailSubject, Text: b.EmailText, HTML: b.EmailHTML, URL: b.UniboxURL}
}

// statuses are the lead status events, as their Data.Status.
var statuses = map[string]string{
	"lead_interested":        "interested",
	"lead_not_interested":    "not_interested",
	"lead_neutral":           "neutral",
	"lead_meeting_booked":    "meeting_booked",
	"lead_meeting_completed": "meeting_completed",
	"lead_closed":            "closed",
	"lead_out_of_office":     "out_of_office",
	"lead_wrong_person":      "wrong_person",
	"lead_no_show":           "no_show",
}

// keyType is the event type as the identity key names it. Instantly has two names for
// a click: its webhook guide says link_clicked, the event_type enum of its webhook API
// schema email_link_clicked. The key uses one, so one click posted under both is one
// event.
func keyType(t string) string {
	if t == "email_link_clicked" {
		return "link_clicked"
	}
	return t
}

// mapType maps an Instantly event type. An auto-reply is a reply.received with
// Message.Auto set, not a status change: it is an e-mail the lead's mailbox sent, and
// consumers that act on replies need it to tell it apart rather than miss it. A booked
// meeting stays one lead.status_changed (status meeting_booked): Instantly gives no
// meeting details to fill a meeting.booked. Both names of a click (see keyType) are
// email.clicked. account_error, campaign_completed, supersearch_enrichment_completed
// and custom labels are unmapped.
func mapType(t string) (typ, status string, auto bool) {
	switch t {
	case "email_sent":
		return envelope.TypeEmailSent, "", false
	case "email_opened":
		return envelope.TypeEmailOpened, "", false
	case "reply_received":
		return envelope.TypeReplyReceived, "", false
	case "auto_reply_received":
		return envelope.TypeReplyReceived, "", true
	case "link_clicked", "email_link_clicked":
		return envelope.TypeEmailClicked, "", false
	case "email_bounced":
		return envelope.TypeEmailBounced, "", false
	case "lead_unsubscribed":
		return envelope.TypeLeadUnsubscribed, "", false
	}
	if s, ok := statuses[t]; ok {
		return envelope.TypeLeadStatusChanged, s, false
	}
	return envelope.TypeUnmapped, "", false
}

// Sign sets the header the endpoint checks by default. Instantly itself sends the value
// the user typed into its custom header setting.
func Sign(method, url string, body []byte, secret string, now time.Time) (http.Header, []byte, error) {
	h := http.Header{}
	if secret != "" {
		h.Set(DefaultHeader, secret)
	}
	return h, body, nil
}
