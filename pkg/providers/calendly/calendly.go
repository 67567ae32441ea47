// Package calendly verifies and normalises Calendly webhooks (API v2):
// `Calendly-Webhook-Signature: t=<unix>,v1=<hex>`, HMAC-SHA256 over `t + "." + body`
// with the webhook subscription's signing key. invitee.created books a meeting,
// invitee.canceled cancels it.
//
// A reschedule fires both, in either order, per invitee: invitee.canceled of the old
// invitee with rescheduled true (and new_invitee), and invitee.created of the new one
// with old_invitee. It is one moved meeting: the cancel is a meeting.cancelled with
// status rescheduled, and the booking a meeting.booked whose rescheduled_from names
// the old meeting; the lifecycle reads the pair as a move, never as a cancellation.
package calendly

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
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
	Name:       "calendly",
	Signed:     true,
	AuthMethod: "hmac",
	SignsTime:  true,
	// developer.calendly.com/api-docs/overview/webhooks/webhook-errors: "it will continue to try to deliver for 24 hours".
	RetryHorizon:     24 * time.Hour,
	SignatureHeaders: []string{Header},
	NeedsSecret:      true,
	New:              New,
	Events:           []string{"invitee.created", "invitee.canceled"},
	Sample:           Sample,
	Sign:             Sign,
}

type provider struct{ verify.TimedHMAC }

// New builds the verifier of one endpoint.
func New(cfg providers.Config) (providers.Provider, error) {
	keys, err := providers.Keys("calendly", cfg.Secrets)
	if err != nil {
		return nil, err
	}
	p := &provider{verify.TimedHMAC{Header: Header, Keys: keys, Tolerance: cfg.Tolerance}}
	if p.Tolerance == 0 {
		p.Tolerance = DefaultTolerance
	}
	return p, nil
}

type delivery struct {
	Event     string    `json:"event"`
	CreatedAt time.Time `json:"created_at"`
	Payload   struct {
		URI            string `json:"uri"`
		Event          string `json:"event"` // the scheduled event's URI, also in early v2 payloads without scheduled_event
		Email          string `json:"email"`
		Name           string `json:"name"`
		Status         string `json:"status"`
		Rescheduled    bool   `json:"rescheduled"`
		OldInvitee     string `json:"old_invitee"` // on the invitee.created of a reschedule
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
		ObjectID:        providers.FirstOf(d.Payload.ScheduledEvent.URI, d.Payload.Event, invitee),
		Time:            d.CreatedAt.UTC(),
		Subject:         d.Payload.Email,
		Data:            envelope.Data{ProviderType: d.Event, Raw: json.RawMessage(r.Body)},
	}
	if d.Payload.Email != "" {
		ev.Data.Contact = &envelope.Contact{Email: d.Payload.Email, Name: d.Payload.Name}
	}
	if typ != envelope.TypeUnmapped {
		m := &envelope.Meeting{
			ID:        providers.FirstOf(d.Payload.ScheduledEvent.URI, d.Payload.Event, invitee),
			Start:     d.Payload.ScheduledEvent.StartTime,
			End:       d.Payload.ScheduledEvent.EndTime,
			Invitee:   d.Payload.Email,
			EventType: d.Payload.ScheduledEvent.Name,
		}
		if c := d.Payload.Cancellation; c != nil {
			m.Reason = c.Reason
		}
		if typ == envelope.TypeMeetingBooked && d.Payload.OldInvitee != "" {
			m.RescheduledFrom = meetingOf(d.Payload.OldInvitee)
		}
		if typ == envelope.TypeMeetingCancelled && d.Payload.Rescheduled {
			ev.Data.Status = envelope.MeetingRescheduled
		}
		ev.Data.Meeting = m
	}
	return []providers.Event{ev}, nil
}

// meetingOf is the meeting an invitee belongs to: the scheduled event's URI, which
// prefixes the invitee's (/scheduled_events/{event_uuid}/invitees/{invitee_uuid}, the
// invitee's API route). An invitee URI of another shape is kept whole: it then names
// no meeting we know, and the reschedule is not linked.
func meetingOf(invitee string) string {
	if event, _, ok := strings.Cut(invitee, "/invitees/"); ok && event != "" {
		return event
	}
	return invitee
}

// Sign signs body at now exactly as Calendly does.
func Sign(method, url string, body []byte, secret string, now time.Time) (http.Header, []byte, error) {
	return verify.SignTimed(Header, secret, body, now), body, nil
}
