// Package standard verifies and normalises Standard Webhooks (spec v1.0.0), which Svix
// sends with svix- header names. The signature is HMAC-SHA256 over
// `webhook-id + "." + webhook-timestamp + "." + raw body`, keyed with the base64
// secret after its whsec_ prefix; webhook-signature lists `v1,<base64>` entries
// (several during a rotation).
package standard

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/providers"
	"exacto.dev/pkg/verify"
)

// Header names, and Svix's twins.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

var svix = map[string]string{HeaderID: "svix-id", HeaderTimestamp: "svix-timestamp", HeaderSignature: "svix-signature"}

// DefaultTolerance is the reference libraries' five minutes, past or future.
const DefaultTolerance = 5 * time.Minute

// Spec describes Standard Webhooks for the registry.
var Spec = providers.Spec{
	Name:       "standard",
	Signed:     true,
	AuthMethod: "hmac",
	SignsTime:  true,
	// the Standard Webhooks spec's example schedule ends 75 h 35 min after the first attempt (Svix's own, docs.svix.com/retries, at 27 h 35 min).
	RetryHorizon:     76 * time.Hour,
	SignatureHeaders: []string{HeaderSignature, svix[HeaderSignature]},
	NeedsSecret:      true,
	New:              New,
	Events:           sampleEvents,
	Sample:           Sample,
	Sign:             Sign,
}

type provider struct {
	keys      [][]byte
	tolerance time.Duration
}

// DecodeSecret turns `whsec_<base64>` (or bare base64) into the HMAC key.
func DecodeSecret(s string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "whsec_"))
	if err != nil || len(key) == 0 {
		return nil, fmt.Errorf("standard: a secret is whsec_ followed by base64")
	}
	return key, nil
}

// New builds the verifier of one endpoint; a secret that is not base64 refuses to start.
func New(cfg providers.Config) (providers.Provider, error) {
	p := &provider{tolerance: cfg.Tolerance}
	if p.tolerance == 0 {
		p.tolerance = DefaultTolerance
	}
	if len(cfg.Secrets) == 0 {
		return nil, fmt.Errorf("standard: no secret")
	}
	for i, s := range cfg.Secrets {
		key, err := DecodeSecret(s)
		if err != nil {
			return nil, fmt.Errorf("secret %d: %w", i+1, err)
		}
		p.keys = append(p.keys, key)
	}
	return p, nil
}

// header reads a Standard Webhooks header, or its svix- twin.
func header(h http.Header, name string) string {
	if v := h.Get(name); v != "" {
		return v
	}
	return h.Get(svix[name])
}

// Verify checks the signature with every secret, then the timestamp.
func (p *provider) Verify(r *providers.Request) error {
	id, ts, sigs := header(r.Header, HeaderID), header(r.Header, HeaderTimestamp), header(r.Header, HeaderSignature)
	if sigs == "" {
		return fmt.Errorf("%w: no %s header", providers.ErrMissingSignature, HeaderSignature)
	}
	if id == "" || ts == "" {
		return fmt.Errorf("%w: %s and %s are required", providers.ErrMissingSignature, HeaderID, HeaderTimestamp)
	}
	secs, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || secs < 0 || len(ts) > 12 {
		return fmt.Errorf("%w: %s is not unix seconds", providers.ErrBadSignature, HeaderTimestamp)
	}
	var candidates [][]byte
	for _, entry := range strings.Split(sigs, " ") {
		version, sig, ok := strings.Cut(entry, ",")
		if !ok || version != "v1" {
			continue // another scheme (v1a, …) or padding: skipped, as the spec says
		}
		if b, err := base64.StdEncoding.DecodeString(sig); err == nil {
			candidates = append(candidates, b)
		}
	}
	if len(candidates) == 0 {
		return fmt.Errorf("%w: no v1 signature", providers.ErrBadSignature)
	}
	expected := make([][]byte, len(p.keys))
	for i, k := range p.keys {
		expected[i] = verify.HMAC(sha256.New, k, []byte(id), []byte("."), []byte(ts), []byte("."), r.Body)
	}
	if !verify.AnyEqual(expected, candidates) {
		return fmt.Errorf("%w: no v1 matches any secret", providers.ErrBadSignature)
	}
	if err := verify.Within(time.Unix(secs, 0), r.Now, p.tolerance); err != nil {
		return err
	}
	r.TimeSigned = true
	return nil
}

// payload is the spec's recommended body: type, timestamp, data.
type payload struct {
	Type      string          `json:"type"`
	Timestamp time.Time       `json:"timestamp"`
	Data      json.RawMessage `json:"data"`
}

type contactData struct {
	ID         string `json:"id"`
	Email      string `json:"email"`
	Phone      string `json:"phone"`
	Name       string `json:"name"`
	CampaignID string `json:"campaign_id"`
	MessageID  string `json:"message_id"`
	Subject    string `json:"subject"`
	Text       string `json:"text"`
}

// Events normalises the one event of a delivery. webhook-id is the idempotency key
// the spec defines: stable across retries, unique per message. A type already named
// canonically (reply.received, lead.unsubscribed, contact.updated, …) is mapped as it
// says when its data has what that type requires; anything else is unmapped.
func (p *provider) Events(r *providers.Request) ([]providers.Event, error) {
	var b payload
	if err := providers.Decode(r.Body, &b); err != nil {
		return nil, err
	}
	id := header(r.Header, HeaderID)
	if id == "" {
		return nil, fmt.Errorf("%w: no %s", providers.ErrMalformed, HeaderID)
	}
	if b.Type == "" || b.Timestamp.IsZero() {
		return nil, fmt.Errorf("%w: a payload needs type and timestamp", providers.ErrMalformed)
	}
	ev := providers.Event{
		Type:            envelope.TypeUnmapped,
		ProviderType:    b.Type,
		Key:             id,
		ProviderEventID: id,
		Time:            b.Timestamp.UTC(),
		Data:            envelope.Data{ProviderType: b.Type, Raw: json.RawMessage(r.Body)},
	}
	var d contactData
	if len(b.Data) > 0 && json.Unmarshal(b.Data, &d) == nil {
		ev.ObjectID = d.ID
		// data.id names whatever the event is about; it is a contact's id only beside
		// the person's e-mail or phone (an invoice's id is not).
		if d.Email != "" || d.Phone != "" {
			ev.Data.Contact = &envelope.Contact{Email: d.Email, Phone: d.Phone, Name: d.Name, ExternalID: d.ID}
		}
		ev.Subject = providers.FirstOf(d.Email, d.ID)
		if d.CampaignID != "" {
			ev.Data.Campaign = &envelope.Campaign{ID: d.CampaignID}
		}
		if d.MessageID != "" || d.Text != "" {
			ev.Data.Message = &envelope.Message{ID: d.MessageID, Subject: d.Subject, Text: d.Text, From: d.Email}
		}
	}
	switch b.Type {
	case envelope.TypeReplyReceived, envelope.TypeLeadUnsubscribed, envelope.TypeContactUpdated:
		if envelope.Complete(b.Type, ev.Data) {
			ev.Type = b.Type
		}
	}
	return []providers.Event{ev}, nil
}

// Sign signs body at now as the reference libraries do. The message id is derived from
// the body, so a redelivery of the same body keeps its webhook-id, as the spec requires.
func Sign(method, url string, body []byte, secret string, now time.Time) (http.Header, []byte, error) {
	key, err := DecodeSecret(secret)
	if err != nil {
		return nil, nil, err
	}
	sum := sha256.Sum256(body)
	id := "msg_" + base64.RawURLEncoding.EncodeToString(sum[:15])
	ts := strconv.FormatInt(now.Unix(), 10)
	mac := verify.HMAC(sha256.New, key, []byte(id), []byte("."), []byte(ts), []byte("."), body)
	h := http.Header{}
	h.Set(HeaderID, id)
	h.Set(HeaderTimestamp, ts)
	h.Set(HeaderSignature, "v1,"+base64.StdEncoding.EncodeToString(mac))
	return h, body, nil
}
