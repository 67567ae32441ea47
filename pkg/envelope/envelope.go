// Package envelope defines the CloudEvents 1.0 envelope every stored event travels in,
// the canonical event types, and how an event's deterministic id is derived.
package envelope

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	fastjson "github.com/segmentio/encoding/json"
)

// Canonical event types. A provider event type that maps to none of them is stored as
// TypeUnmapped with its raw payload.
const (
	TypeReplyReceived      = "reply.received"
	TypeEmailSent          = "email.sent"
	TypeEmailDelivered     = "email.delivered"
	TypeEmailOpened        = "email.opened"
	TypeEmailClicked       = "email.clicked"
	TypeEmailBounced       = "email.bounced"
	TypeEmailComplained    = "email.complained" // a spam complaint (feedback loop)
	TypeLeadUnsubscribed   = "lead.unsubscribed"
	TypeLeadStatusChanged  = "lead.status_changed"
	TypeContactUpdated     = "contact.updated"
	TypeOpportunityCreated = "opportunity.created"
	TypeMeetingBooked      = "meeting.booked"
	TypeMeetingCancelled   = "meeting.cancelled"
	TypeMessageReceived    = "message.received"
	TypeMessageStatus      = "message.status"
	TypeUnmapped           = "unmapped"
)

// Types lists every canonical type, in the order the docs present them.
var Types = []string{
	TypeReplyReceived, TypeEmailSent, TypeEmailDelivered, TypeEmailOpened, TypeEmailClicked,
	TypeEmailBounced, TypeEmailComplained, TypeLeadUnsubscribed, TypeLeadStatusChanged, TypeContactUpdated,
	TypeOpportunityCreated, TypeMeetingBooked, TypeMeetingCancelled, TypeMessageReceived,
	TypeMessageStatus, TypeUnmapped,
}

// Authentication methods of an envelope (authmethod) that are not a provider's own.
const (
	// AuthDerived: a fact a worker established from another event (its cause).
	AuthDerived = "derived"
	// AuthSourceAPI: a fact read from the platform's own API (the reconciler's), over
	// Exacto's own credentials: it needs no confirmation at the source, it is the source.
	AuthSourceAPI = "source_api"
)

// Derived event types: facts the workers establish, published back onto the stream so
// that it stays the one history and a replay rebuilds everything.
const (
	TypeReplyClassified = "reply.classified"
	TypeSequenceStopped = "sequence.stopped"
	// TypeContactIdentified says that the ids in its contact name one person, as a
	// system of record told a worker (HubSpot's contact for an e-mail, or an id-only
	// contact's e-mail and phone): the link lives in the history, so a replay resolves
	// the same contacts.
	TypeContactIdentified = "contact.identified"
	// TypeEventUnconfirmed says that the unsigned event its cause names was not
	// confirmed at its source (pkg/confirm): no consumer acted on it, and the
	// projections do not count it. A person who confirms it publishes a signed copy.
	TypeEventUnconfirmed = "event.unconfirmed"
)

// DerivedTypes lists the derived types.
var DerivedTypes = []string{TypeReplyClassified, TypeSequenceStopped, TypeContactIdentified, TypeEventUnconfirmed}

// AllTypes is every type an envelope may carry: provider events, then derived ones.
var AllTypes = append(append([]string{}, Types...), DerivedTypes...)

// Envelope is a CloudEvents 1.0 event in JSON structured mode. Extension attributes
// carry what Exacto knows of the delivery; Data carries the normalised event and its raw
// provider payload.
type Envelope struct {
	SpecVersion     string    `json:"specversion"`
	ID              string    `json:"id"`
	Source          string    `json:"source"`
	Type            string    `json:"type"`
	Subject         string    `json:"subject,omitempty"`
	Time            time.Time `json:"time"`
	DataContentType string    `json:"datacontenttype"`
	Data            Data      `json:"data"`

	// Extension attributes (CloudEvents names: lower-case letters and digits only).
	Tenant          string    `json:"tenant"`
	Provider        string    `json:"provider"`
	Endpoint        string    `json:"endpoint"`
	ProviderEventID string    `json:"providereventid,omitempty"`
	ObjectID        string    `json:"objectid,omitempty"`
	Version         string    `json:"version,omitempty"`
	Channel         string    `json:"channel,omitempty"`
	ReceivedAt      time.Time `json:"receivedat"`
	PayloadSHA256   string    `json:"payloadsha256"`
	// Signed says a signature over the delivery's body was verified (authmethod hmac):
	// always for the signed providers, for Smartlead only at an endpoint with
	// signing_secrets. Consumers confirm unsigned events (Instantly, Smartlead
	// otherwise) at the source before an irreversible action.
	Signed     bool   `json:"signed"`
	AuthMethod string `json:"authmethod"`
	// Erasure, on an event about a forgotten person (`exacto forget`, pkg/privacy), is
	// their anonymous id: nothing else of them is left in it, and no consumer acts on it.
	Erasure string `json:"erasure,omitempty"`
	// Compacted, on an event the tenant's retention rewrote, says its raw payload and
	// free texts are gone; what the projections count of it stays.
	Compacted bool `json:"compacted,omitempty"`
}

// Data is the normalised content of an event. Which fields are set depends on the type;
// schemas/ says which each type requires.
type Data struct {
	ProviderType string       `json:"provider_type"`
	Contact      *Contact     `json:"contact,omitempty"`
	Campaign     *Campaign    `json:"campaign,omitempty"`
	Message      *Message     `json:"message,omitempty"`
	Status       string       `json:"status,omitempty"`
	Bounce       *Bounce      `json:"bounce,omitempty"`
	Property     *Property    `json:"property,omitempty"`
	Meeting      *Meeting     `json:"meeting,omitempty"`
	Opportunity  *Opportunity `json:"opportunity,omitempty"`
	// Classification is set on reply.classified: what the classifier made of a reply.
	Classification *Classification `json:"classification,omitempty"`
	// Cause is the id of the event a derived event was derived from.
	Cause string `json:"cause,omitempty"`
	// Raw is this event's own provider payload, byte for byte (for a batch, its element).
	Raw json.RawMessage `json:"raw"`
}

// Classification is a reply's label with the evidence that decided it. It suggests a
// next action; it never takes one.
type Classification struct {
	Label      string   `json:"label"`
	Confidence float64  `json:"confidence"`
	Evidence   []string `json:"evidence"`
	Language   string   `json:"language"`
	Action     string   `json:"action"`
	Classifier string   `json:"classifier"` // which classifier and version decided
	// When is when the reply says to come back, in its words (follow_up_later,
	// out_of_office); Also what else it asks that the label does not say.
	When string   `json:"when,omitempty"`
	Also []string `json:"also,omitempty"`
}

// Contact identifies the person an event is about, by every id the provider gave.
type Contact struct {
	Email      string `json:"email,omitempty"`
	Phone      string `json:"phone,omitempty"`
	Name       string `json:"name,omitempty"`
	ExternalID string `json:"external_id,omitempty"`
	// Anonymous, alone, names a person who was forgotten (pkg/privacy): a keyed hash
	// of their identity, the same in every event about them, and nothing else.
	Anonymous string `json:"anonymous,omitempty"`
}

// Campaign is the sequence or campaign the event belongs to.
type Campaign struct {
	ID   string `json:"id,omitempty"`
	Name string `json:"name,omitempty"`
	Step string `json:"step,omitempty"`
}

// Message is an e-mail or chat message sent or received.
type Message struct {
	ID        string `json:"id,omitempty"`
	InReplyTo string `json:"in_reply_to,omitempty"`
	From      string `json:"from,omitempty"`
	To        string `json:"to,omitempty"`
	Subject   string `json:"subject,omitempty"`
	Text      string `json:"text,omitempty"`
	HTML      string `json:"html,omitempty"`
	Kind      string `json:"kind,omitempty"` // text, image, … for chat messages
	URL       string `json:"url,omitempty"`  // a clicked link, or where the message is shown
	Auto      bool   `json:"auto,omitempty"` // an automatic reply (out of office)
}

// Bounce says why a message was not delivered.
type Bounce struct {
	Kind   string `json:"kind,omitempty"` // hard | soft | unknown
	Reason string `json:"reason,omitempty"`
}

// Property is one changed field of a contact or lead.
type Property struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Meeting is a booked or cancelled meeting.
type Meeting struct {
	ID        string    `json:"id"`
	Start     time.Time `json:"start,omitzero"`
	End       time.Time `json:"end,omitzero"`
	Invitee   string    `json:"invitee,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	EventType string    `json:"event_type,omitempty"`
	// RescheduledFrom, on a meeting.booked, is the id of the meeting this booking moves
	// to a new time (a reschedule): the same meeting, not a second one.
	RescheduledFrom string `json:"rescheduled_from,omitempty"`
}

// MeetingRescheduled is the Data.Status of a meeting.cancelled that moved the meeting
// to another time: the meeting stands, it is no cancellation.
const MeetingRescheduled = "rescheduled"

// Opportunity is a deal or opportunity in a CRM or sending platform.
type Opportunity struct {
	ID     string `json:"id"`
	Name   string `json:"name,omitempty"`
	Stage  string `json:"stage,omitempty"`
	Amount string `json:"amount,omitempty"`
}

// Derive builds the envelope of a fact worker established about from: same tenant,
// provider, contact and subject, its own deterministic id (so deriving twice is one
// event), and the time it was established.
func Derive(from Envelope, worker, typ string, data Data, now time.Time) Envelope {
	data.Cause = from.ID
	if data.Contact == nil {
		data.Contact = from.Data.Contact
	}
	if data.Campaign == nil {
		data.Campaign = from.Data.Campaign
	}
	return Envelope{
		SpecVersion: "1.0", ID: ID(from.Tenant, "exacto", Key(worker, typ, from.ID)),
		Source: WorkerSource(from.Tenant, worker), Type: typ, Subject: from.Subject,
		Time: now.UTC(), DataContentType: "application/json", Data: data,
		Tenant: from.Tenant, Provider: from.Provider, Endpoint: from.Endpoint,
		ObjectID: from.ObjectID, Channel: from.Channel, ReceivedAt: now.UTC(),
		PayloadSHA256: from.PayloadSHA256, Signed: from.Signed, AuthMethod: AuthDerived,
	}
}

// WorkerSource is the source of the events worker derives for tenant.
func WorkerSource(tenant, worker string) string { return "/tenants/" + tenant + "/workers/" + worker }

// ID derives an event's envelope id from its tenant, provider and identity key (the
// provider's event id, or the documented fields that make it unique). The same provider
// event always gets the same id, on every gateway replica and after every restart. The
// endpoint is left out on purpose: one provider account posting the same event to two
// endpoints of a tenant (a URL migration) is still one event.
func ID(tenant, provider, key string) string {
	h := sha256.New()
	for _, part := range []string{tenant, provider, key} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	return "ev_" + hex.EncodeToString(h.Sum(nil)[:16])
}

// Key joins the parts that make an event unique into an identity key. Parts are
// length-prefixed so that no two different part lists give the same key.
func Key(parts ...string) string {
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(strconv.Itoa(len(p)))
		b.WriteByte(':')
		b.WriteString(p)
		b.WriteByte('|')
	}
	return b.String()
}

// StreamSubject is the JetStream subject an envelope is stored under:
// events.<tenant>.<provider>.<type>, the type keeping its dots.
func (e *Envelope) StreamSubject() string {
	return "events." + e.Tenant + "." + e.Provider + "." + e.Type
}

// Source is the CloudEvents source of events from one endpoint of a tenant.
func Source(tenant, endpoint string) string {
	return "/tenants/" + tenant + "/endpoints/" + endpoint
}

// Complete reports whether d has what events of type typ require (the same rules as
// schemas/data/<type>.schema.json). Providers whose senders name the type themselves
// (Standard Webhooks, generic signers) map an event to typ only when it is complete,
// and keep it unmapped otherwise: a "reply" without a contact is no reply to act on.
func Complete(typ string, d Data) bool {
	contact := d.Contact != nil && (d.Contact.Email != "" || d.Contact.Phone != "" || d.Contact.ExternalID != "")
	switch typ {
	case TypeReplyReceived:
		return contact && d.Message != nil
	case TypeEmailSent, TypeEmailDelivered, TypeEmailOpened, TypeEmailClicked, TypeEmailBounced, TypeEmailComplained, TypeLeadUnsubscribed:
		return contact
	case TypeLeadStatusChanged:
		return d.Status != ""
	case TypeContactUpdated:
		return contact || d.Property != nil
	case TypeOpportunityCreated:
		return d.Opportunity != nil && d.Opportunity.ID != ""
	case TypeMeetingBooked:
		return d.Meeting != nil && d.Meeting.ID != ""
	case TypeMeetingCancelled:
		return d.Meeting != nil && d.Meeting.ID != "" && (d.Status == "" || d.Status == MeetingRescheduled)
	case TypeMessageReceived:
		return d.Message != nil && d.Message.ID != ""
	case TypeMessageStatus:
		return d.Message != nil && d.Status != ""
	case TypeUnmapped:
		return d.ProviderType != ""
	case TypeReplyClassified:
		return d.Classification != nil && d.Classification.Label != "" && d.Cause != ""
	case TypeSequenceStopped:
		return contact && d.Cause != ""
	case TypeContactIdentified:
		return d.Contact != nil && d.Contact.ExternalID != "" && (d.Contact.Email != "" || d.Contact.Phone != "") && d.Cause != ""
	case TypeEventUnconfirmed:
		return d.Cause != "" && d.Status != ""
	}
	return false
}

// AnonymousKey starts the contact key of a forgotten person.
const AnonymousKey = "anonymous:"

// Rewritten reports whether e was made by an erasure or the retention (pkg/privacy): an
// event about a forgotten person, or one stored again in place of its original. The
// projector counts it; no consumer acts on it.
func (e *Envelope) Rewritten() bool { return e.Erasure != "" || e.Compacted }

// ContactKey names the person an event is about, for serialising a consumer's work on
// one contact: the e-mail (case-folded, plus-alias kept: "a+x@" and "a@" stay two keys
// here, matched later by the projector), else the phone, else the provider's contact
// id, else the CloudEvents subject. Empty when the event names no one.
func (e *Envelope) ContactKey() string {
	if c := e.Data.Contact; c != nil {
		switch {
		case c.Anonymous != "":
			return AnonymousKey + c.Anonymous
		case c.Email != "":
			return "email:" + strings.ToLower(strings.TrimSpace(c.Email))
		case c.Phone != "":
			return "phone:" + strings.TrimPrefix(strings.TrimSpace(c.Phone), "+")
		case c.ExternalID != "":
			return "id:" + e.Provider + ":" + c.ExternalID
		}
	}
	if e.Subject != "" {
		return "subject:" + e.Provider + ":" + e.Subject
	}
	return ""
}

// Decode decodes a stored envelope: what encoding/json would, with a faster decoder
// (github.com/segmentio/encoding/json, a drop-in one). Every consumer decodes every
// event it takes, and a replay millions: with encoding/json that was a fifth of a
// replay's time. Only for envelopes Exacto stored itself (a webhook's body is read
// strictly, by encoding/json, at the gateway).
func Decode(data []byte, env *Envelope) error {
	return fastjson.Unmarshal(data, env)
}
