// Package calendly verifies and normalises Calendly webhooks (API v2):
// `Calendly-Webhook-Signature: t=<unix>,v1=<hex>`, HMAC-SHA256 over `t + "." + body`
// with the webhook subscription's signing key. invitee.created books a meeting,
// invitee.canceled cancels it.
package calendly

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/providers"
	"exacto.dev/pkg/verify"
)

// Header carries the signature.
const Header = "Calendly-Webhook-Signature"

// DefaultTolerance follows Calendly's guidance of a three-minute window.
const DefaultTolerance = 3 * time.Minute

// Spec describes Calendly for the registry.
var Spec = providers.Spec{
	Name:             "calendly",
	Signed:           true,
	AuthMethod:       "hmac",
	SignsTime:        true,
	SignatureHeaders: []string{Header},
	NeedsSecret:      true,
	New:              New,
	Events:           []string{"invitee.created", "invitee.canceled"},
	Sample:           Sample,
	Sign:             Sign,
}

type provider struct {
	keys      [][]byte
	tolerance time.Duration
}

// New builds the verifier of one endpoint.
func New(cfg providers.Config) (providers.Provider, error) {
	p := &provider{tolerance: cfg.Tolerance}
	if p.tolerance == 0 {
		p.tolerance = DefaultTolerance
	}
	if len(cfg.Secrets) == 0 {
		return nil, fmt.Errorf("calendly: no signing key")
	}
	for i, s := range cfg.Secrets {
		if s == "" {
			return nil, fmt.Errorf("calendly: signing key %d is empty", i+1)
		}
		p.keys = append(p.keys, []byte(s))
	}
	return p, nil
}

// Verify checks the signature with every key, then the timestamp.
func (p *provider) Verify(r *providers.Request) error {
	h := r.Header.Get(Header)
	if h == "" {
		return fmt.Errorf("%w: no %s header", providers.ErrMissingSignature, Header)
	}
	sig, err := verify.ParseTimed(h)
	if err != nil {
		return err
	}
	expected := make([][]byte, len(p.keys))
	for i, k := range p.keys {
		expected[i] = verify.HMAC(sha256.New, k, []byte(sig.Timestamp), []byte("."), r.Body)
	}
	if !verify.AnyEqual(expected, sig.Signatures) {
		return fmt.Errorf("%w: no v1 matches any signing key", providers.ErrBadSignature)
	}
	return verify.Within(sig.Time, r.Now, p.tolerance)
}

type delivery struct {
	Event     string    `json:"event"`
	CreatedAt time.Time `json:"created_at"`
	Payload   struct {
		URI            string `json:"uri"`
		Email          string `json:"email"`
		Name           string `json:"name"`
		Status         string `json:"status"`
		ScheduledEvent struct {
			URI       string    `json:"uri"`
			Name      string    `json:"name"`
			StartTime time.Time `json:"start_time"`
			EndTime   time.Time `json:"end_time"`
		} `json:"scheduled_event"`
		Cancellation *struct {
			Reason       string `json:"reason"`
			CanceledBy   string `json:"canceled_by"`
			CancelerType string `json:"canceler_type"`
		} `json:"cancellation"`
	} `json:"payload"`
}

// Events normalises the one event of a delivery. Identity is the event name and the
// invitee URI: booking and cancelling one invitee are two events, and a rescheduled
// meeting has a new invitee URI.
func (p *provider) Events(r *providers.Request) ([]providers.Event, error) {
	var d delivery
	if err := providers.Decode(r.Body, &d); err != nil {
		return nil, err
	}
	if d.Event == "" || d.CreatedAt.IsZero() {
		return nil, fmt.Errorf("%w: a delivery needs event and created_at", providers.ErrMalformed)
	}
	typ := envelope.TypeUnmapped
	switch d.Event {
	case "invitee.created":
		typ = envelope.TypeMeetingBooked
	case "invitee.canceled":
		typ = envelope.TypeMeetingCancelled
	}
	invitee := d.Payload.URI
	if typ != envelope.TypeUnmapped && invitee == "" {
		return nil, fmt.Errorf("%w: %s without payload.uri", providers.ErrMalformed, d.Event)
	}
	key := envelope.Key(d.Event, invitee)
	if invitee == "" { // an unmapped event without an invitee: its name and time
		key = envelope.Key(d.Event, d.CreatedAt.UTC().Format(time.RFC3339Nano))
	}
	ev := providers.Event{
		Type:            typ,
		ProviderType:    d.Event,
		Key:             key,
		ProviderEventID: invitee,
		ObjectID:        firstOf(d.Payload.ScheduledEvent.URI, invitee),
		Time:            d.CreatedAt.UTC(),
		Subject:         d.Payload.Email,
		Data:            envelope.Data{ProviderType: d.Event, Raw: json.RawMessage(r.Body)},
	}
	if d.Payload.Email != "" {
		ev.Data.Contact = &envelope.Contact{Email: d.Payload.Email, Name: d.Payload.Name}
	}
	if typ != envelope.TypeUnmapped {
		m := &envelope.Meeting{
			ID:        firstOf(d.Payload.ScheduledEvent.URI, invitee),
			Start:     d.Payload.ScheduledEvent.StartTime,
			End:       d.Payload.ScheduledEvent.EndTime,
			Invitee:   d.Payload.Email,
			EventType: d.Payload.ScheduledEvent.Name,
		}
		if c := d.Payload.Cancellation; c != nil {
			m.Reason = c.Reason
		}
		ev.Data.Meeting = m
	}
	return []providers.Event{ev}, nil
}

// Sign signs body at now exactly as Calendly does.
func Sign(method, url string, body []byte, secret string, now time.Time) (http.Header, []byte, error) {
	ts := strconv.FormatInt(now.Unix(), 10)
	mac := verify.HMAC(sha256.New, []byte(secret), []byte(ts), []byte("."), body)
	h := http.Header{}
	h.Set(Header, "t="+ts+",v1="+hex.EncodeToString(mac))
	return h, body, nil
}

func firstOf(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}
