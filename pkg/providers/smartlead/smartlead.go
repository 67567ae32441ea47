// Package smartlead verifies and normalises Smartlead webhooks.
//
// Each body carries the webhook's secret_key in clear. A delivery is authenticated by
// the endpoint's path token (checked by the gateway) and, when the endpoint lists
// secrets, by that body field. The secret is redacted from the stored raw payload.
//
// Smartlead documents a signature too, X-Smartlead-Signature: sha256=<hex HMAC-SHA256
// of the raw body>, but not where its signing secret comes from, and others report
// its webhooks unsigned by default. So it is optional: an endpoint with
// signing_secrets requires and verifies it (its events are then signed, authmethod
// hmac); one without ignores the header, its events unsigned.
package smartlead

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/mail"
	"strings"
	"time"

	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/providers"
	"exacto.dev/pkg/verify"
)

// SignatureHeader carries the optional signature: "sha256=" and the hex HMAC-SHA256 of
// the raw body with a signing secret.
const SignatureHeader = "X-Smartlead-Signature"

// Spec describes Smartlead for the registry. Signed is false: only endpoints with
// signing_secrets verify a signature (see Spec.Auth).
var Spec = providers.Spec{
	Name:       "smartlead",
	Signed:     false,
	AuthMethod: "secret_key",
	SignsTime:  false,
	// RetryHorizon: api.smartlead.ai/guides/webhook-integration: "will retry the webhook up to 3 times with exponential backoff", no horizon given: providers.DefaultRetryHorizon assumed.
	SignatureHeaders: []string{SignatureHeader},
	NeedsSecret:      false,
	New:              New,
	Events:           sampleEvents,
	Sample:           Sample,
	Sign:             Sign,
	SignOptional:     SignOptional,
	Redact:           Redact,
}

type provider struct {
	secrets verify.Shared
	// signature is nil without signing_secrets: the header is then ignored.
	signature *verify.BodyHMAC
}

// New builds the verifier of one endpoint.
func New(cfg providers.Config) (providers.Provider, error) {
	if cfg.SecretHeader != "" {
		return nil, fmt.Errorf("smartlead: secret_header does not apply: Smartlead sends its secret_key in the body")
	}
	secrets, err := verify.NewShared("smartlead", cfg.Secrets)
	if err != nil {
		return nil, err
	}
	p := &provider{secrets: secrets}
	if len(cfg.SigningSecrets) > 0 {
		keys, err := providers.Keys("smartlead signing_secrets", cfg.SigningSecrets)
		if err != nil {
			return nil, err
		}
		p.signature = &verify.BodyHMAC{Header: SignatureHeader, Keys: keys}
	}
	return p, nil
}

// Verify checks the signature when the endpoint has signing_secrets, then the body's
// secret_key when it has secrets. With neither, the path token alone authenticates the
// endpoint and the body is not read here.
func (p *provider) Verify(r *providers.Request) error {
	if p.signature != nil {
		if err := p.signature.Verify(r); err != nil {
			return err
		}
	}
	if len(p.secrets) == 0 {
		return nil
	}
	var b struct {
		SecretKey *string `json:"secret_key"`
	}
	if err := providers.Decode(r.Body, &b); err != nil {
		return err // wraps ErrMalformed: answered 400, not 401
	}
	if b.SecretKey == nil || *b.SecretKey == "" {
		return fmt.Errorf("%w: no secret_key in the body", providers.ErrMissingSignature)
	}
	if !p.secrets.Match(*b.SecretKey) {
		return fmt.Errorf("%w: secret_key", providers.ErrBadSecret)
	}
	return nil
}

type message struct {
	MessageID string `json:"message_id"`
	ID        string `json:"id"` // what the Link Clicked guide calls message_id
	HTML      string `json:"html"`
	Text      string `json:"text"`
	Time      string `json:"time"`
}

// payload holds the fields of Smartlead's webhook guide ("new fields"), and the
// deprecated ones it still sends, used when the new one is absent.
type payload struct {
	EventType      string `json:"event_type"`
	EventTimestamp string `json:"event_timestamp"`
	// Deprecated times, the only ones in older payloads.
	TimeSent    string `json:"time_sent"`
	TimeOpened  string `json:"time_opened"`
	TimeClicked string `json:"time_clicked"`
	TimeReplied string `json:"time_replied"`
	CreatedAt   string `json:"created_at"`

	CampaignID     providers.Scalar `json:"campaign_id"`
	CampaignName   string           `json:"campaign_name"`
	StatsID        providers.Scalar `json:"stats_id"`
	SequenceNumber providers.Scalar `json:"sequence_number"`
	LeadID         providers.Scalar `json:"lead_id"`
	SLEmailLeadID  providers.Scalar `json:"sl_email_lead_id"`
	SLLeadEmail    string           `json:"sl_lead_email"`
	ToEmail        string           `json:"to_email"`
	ToName         string           `json:"to_name"`
	FromEmail      string           `json:"from_email"`
	LeadEmail      string           `json:"lead_email"` // deprecated: to_email
	LeadName       string           `json:"lead_name"`  // deprecated: to_name
	LeadData       *struct {
		Email string `json:"email"`
	} `json:"lead_data"`
	Subject string `json:"subject"`

	ReplyMessage  *message `json:"reply_message"`
	SentMessage   *message `json:"sent_message"`
	BounceMessage *message `json:"bounce_message"`
	MessageID     string   `json:"message_id"`   // deprecated: reply_message / sent_message .message_id
	PreviewText   string   `json:"preview_text"` // deprecated: reply_message.text
	ReplyBody     string   `json:"reply_body"`   // deprecated: reply_message.html
	// Untracked replies name the people as "Name <address>".
	SenderDetail    string `json:"sender_detail"`
	RecipientDetail string `json:"recipient_detail"`

	LinkDetails json.RawMessage `json:"link_details"`
	LinkClicked json.RawMessage `json:"link_clicked"` // deprecated: link_details

	LeadCategory *struct {
		NewName string `json:"new_name"`
	} `json:"lead_category"`
	Category string `json:"category"` // deprecated: lead_category.new_name

	AppURL            string `json:"app_url"`
	UIMasterInboxLink string `json:"ui_master_inbox_link"` // deprecated: app_url
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
	ts := providers.FirstOf(b.EventTimestamp, b.TimeReplied, b.TimeSent, b.TimeOpened, b.TimeClicked, b.CreatedAt)
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return nil, fmt.Errorf("%w: no event_timestamp in RFC 3339", providers.ErrMalformed)
	}
	typ := types[b.EventType]
	if typ == "" {
		typ = envelope.TypeUnmapped
	}
	lead := providers.FirstOf(b.SLLeadEmail, b.ToEmail, b.LeadEmail, address(b.SenderDetail))
	if lead == "" && b.LeadData != nil {
		lead = b.LeadData.Email
	}
	reply := typ == envelope.TypeReplyReceived
	replyID := ""
	if reply {
		replyID = providers.FirstOf(b.ReplyMessage.id(), b.MessageID)
	}
	sentID := b.SentMessage.id()
	if !reply {
		sentID = providers.FirstOf(sentID, b.MessageID)
	}
	link := firstLink(b.LinkDetails, b.LinkClicked)
	status := ""
	if typ == envelope.TypeLeadStatusChanged {
		status = b.Category
		if b.LeadCategory != nil && b.LeadCategory.NewName != "" {
			status = b.LeadCategory.NewName
		}
	}

	ev := providers.Event{
		Type:         typ,
		ProviderType: b.EventType,
		Key:          key(b, replyID, lead, ts, status, link),
		ObjectID:     providers.FirstOf(replyID, sentID, string(b.StatsID), lead),
		Time:         t,
		Channel:      "email",
		Subject:      lead,
		Data: envelope.Data{
			ProviderType: b.EventType,
			Status:       status,
			// Raw is the body with secret_key's value redacted: the raw payload is
			// stored and replayed, and secrets are never stored.
			Raw: json.RawMessage(Redact(r.Body)),
		},
	}
	if lead != "" {
		ev.Data.Contact = &envelope.Contact{Email: lead, Name: providers.FirstOf(b.ToName, b.LeadName),
			ExternalID: providers.FirstOf(string(b.SLEmailLeadID), string(b.LeadID))}
	}
	if b.CampaignID != "" || b.CampaignName != "" {
		ev.Data.Campaign = &envelope.Campaign{ID: string(b.CampaignID), Name: b.CampaignName, Step: string(b.SequenceNumber)}
	}
	url := providers.FirstOf(b.AppURL, b.UIMasterInboxLink)
	switch {
	case reply:
		m := &envelope.Message{ID: replyID, InReplyTo: b.SentMessage.id(), Subject: b.Subject, URL: url,
			From: providers.FirstOf(address(b.SenderDetail), b.ToEmail, b.SLLeadEmail),
			To:   providers.FirstOf(address(b.RecipientDetail), b.FromEmail)}
		if b.ReplyMessage != nil {
			m.Text, m.HTML = b.ReplyMessage.Text, b.ReplyMessage.HTML
		}
		m.Text, m.HTML = providers.FirstOf(m.Text, b.PreviewText), providers.FirstOf(m.HTML, b.ReplyBody)
		ev.Data.Message = m
	case typ != envelope.TypeLeadStatusChanged && typ != envelope.TypeUnmapped && (sentID != "" || b.Subject != ""):
		m := &envelope.Message{ID: sentID, From: b.FromEmail, To: providers.FirstOf(b.ToEmail, b.LeadEmail), Subject: b.Subject, URL: url}
		if b.SentMessage != nil {
			m.Text, m.HTML = b.SentMessage.Text, b.SentMessage.HTML
		}
		if typ == envelope.TypeEmailClicked && link != "" {
			m.URL = link
		}
		ev.Data.Message = m
	}
	if typ == envelope.TypeEmailBounced {
		// Smartlead forwards the bounce e-mail but does not classify it.
		ev.Data.Bounce = &envelope.Bounce{Kind: "unknown", Reason: firstLine(b.BounceMessage.text(), 200)}
	}
	return []providers.Event{ev}, nil
}

// key identifies the event; Smartlead sends no event id. A reply is identified by its
// RFC 5322 Message-ID, unique to the e-mail (the campaign is added since one e-mail can
// be reported in two campaigns of the account). Any other event is identified by what
// it happened to (the sent e-mail's stats_id, the lead, the campaign step) and when:
// the same lead opens, clicks or changes category more than once, so the lead e-mail is
// never enough, and the time tells repeats apart. webhook_id is left out on purpose: it
// names the subscription, not the event, so two webhooks reporting one event agree.
// FIRST_EMAIL_SENT reports the same sending as EMAIL_SENT and gets the same key.
func key(b payload, replyID, lead, ts, status, link string) string {
	typ := b.EventType
	if typ == "FIRST_EMAIL_SENT" {
		typ = "EMAIL_SENT"
	}
	if replyID != "" {
		return envelope.Key(typ, string(b.CampaignID), replyID)
	}
	return envelope.Key(typ, string(b.CampaignID), string(b.StatsID), lead, string(b.SequenceNumber), ts, status, link)
}

var types = map[string]string{
	"EMAIL_SENT":            envelope.TypeEmailSent,
	"FIRST_EMAIL_SENT":      envelope.TypeEmailSent,
	"EMAIL_OPEN":            envelope.TypeEmailOpened,
	"EMAIL_LINK_CLICK":      envelope.TypeEmailClicked,
	"EMAIL_REPLY":           envelope.TypeReplyReceived,
	"UNTRACKED_REPLIES":     envelope.TypeReplyReceived, // a reply no campaign lead matched: still a reply
	"EMAIL_BOUNCE":          envelope.TypeEmailBounced,
	"LEAD_UNSUBSCRIBED":     envelope.TypeLeadUnsubscribed,
	"LEAD_CATEGORY_UPDATED": envelope.TypeLeadStatusChanged,
}

// Sign writes secret into the body's secret_key, where Smartlead carries it; the body
// is otherwise unchanged, so the same body and secret always give the same bytes.
func Sign(method, url string, body []byte, secret string, now time.Time) (http.Header, []byte, error) {
	if secret == "" {
		return http.Header{}, body, nil
	}
	v, err := json.Marshal(secret)
	if err != nil {
		return nil, nil, err
	}
	out, err := setSecret(body, v)
	if err != nil {
		return nil, nil, err
	}
	return http.Header{}, out, nil
}

// SignOptional signs the final body (secret_key filled in) with signingSecret as
// X-Smartlead-Signature.
func SignOptional(body []byte, signingSecret string) http.Header {
	return verify.SignBody(SignatureHeader, signingSecret, body)
}

// Redact returns body with the value of its top-level secret_key replaced by
// "REDACTED", every other byte unchanged. A body that is not a JSON object is returned
// as it is.
func Redact(body []byte) []byte {
	start, end, ok := secretSpan(body)
	if !ok {
		return body
	}
	return splice(body, start, end, []byte(`"REDACTED"`))
}

// setSecret replaces secret_key's value by v, or adds secret_key first in the object.
func setSecret(body, v []byte) ([]byte, error) {
	if start, end, ok := secretSpan(body); ok {
		return splice(body, start, end, v), nil
	}
	i := bytes.IndexByte(body, '{')
	if i < 0 || len(bytes.TrimSpace(body[:i])) > 0 {
		return nil, fmt.Errorf("smartlead: the body is not a JSON object")
	}
	field := append(append([]byte(`"secret_key":`), v...), ',')
	if len(bytes.TrimSpace(body[i+1:])) > 0 && bytes.TrimSpace(body[i+1:])[0] == '}' {
		field = field[:len(field)-1] // an empty object takes no comma
	}
	return splice(body, i+1, i+1, field), nil
}

// secretSpan finds the byte range of the top-level secret_key value, however its key
// is spelled in case: Verify's decoder takes "Secret_Key" (or "ſecret_key") for it
// too. Decode refuses a body with two such keys, so there is at most one.
func secretSpan(body []byte) (start, end int, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return 0, 0, false
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return 0, 0, false
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return 0, 0, false
		}
		if k, _ := k.(string); strings.EqualFold(k, "secret_key") {
			end := int(dec.InputOffset())
			return end - len(v), end, true
		}
	}
	return 0, 0, false
}

func splice(b []byte, start, end int, with []byte) []byte {
	out := make([]byte, 0, len(b)-(end-start)+len(with))
	return append(append(append(out, b[:start]...), with...), b[end:]...)
}

func (m *message) id() string {
	if m == nil {
		return ""
	}
	return providers.FirstOf(m.MessageID, m.ID)
}

func (m *message) text() string {
	if m == nil {
		return ""
	}
	return m.Text
}

// firstLink reads a clicked link given as a string or a list of strings.
func firstLink(raws ...json.RawMessage) string {
	for _, raw := range raws {
		var s string
		if json.Unmarshal(raw, &s) == nil && s != "" {
			return s
		}
		var list []string
		if json.Unmarshal(raw, &list) == nil && len(list) > 0 && list[0] != "" {
			return list[0]
		}
	}
	return ""
}

// address extracts the e-mail address of "Name <address>"; "" if there is none.
func address(s string) string {
	if s == "" {
		return ""
	}
	if a, err := mail.ParseAddress(s); err == nil {
		return a.Address
	}
	return ""
}

func firstLine(s string, max int) string {
	for _, line := range strings.Split(s, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			if r := []rune(line); len(r) > max {
				return string(r[:max])
			}
			return line
		}
	}
	return ""
}
