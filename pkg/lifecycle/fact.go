package lifecycle

import (
	"cmp"
	"strings"
	"time"

	"exacto.dev/pkg/envelope"
)

// Kind is what a fact says happened.
type Kind string

// Fact kinds.
const (
	KindSent             Kind = "sent"              // email.sent
	KindDelivered        Kind = "delivered"         // email.delivered
	KindOpened           Kind = "opened"            // email.opened
	KindClicked          Kind = "clicked"           // email.clicked
	KindReply            Kind = "reply"             // reply.received from a person, message.received
	KindAutoReply        Kind = "auto_reply"        // reply.received with message.auto
	KindClassified       Kind = "classified"        // reply.classified; Value is the label, Cause the reply
	KindStatus           Kind = "status"            // lead.status_changed; Value is the provider's status
	KindProperty         Kind = "property"          // contact.updated; Name is provider:property, Value its value
	KindOpportunity      Kind = "opportunity"       // opportunity.created; Name is its id
	KindMeetingBooked    Kind = "meeting_booked"    // meeting.booked; Name is the meeting id, Value the meeting it moves (rescheduled_from)
	KindMeetingCancelled Kind = "meeting_cancelled" // meeting.cancelled; Name is the meeting id
	KindMeetingMoved     Kind = "meeting_moved"     // meeting.cancelled with status rescheduled; Name is the meeting id
	KindUnsubscribed     Kind = "unsubscribed"      // lead.unsubscribed; email.complained with Value "complaint"
	KindBounce           Kind = "bounce"            // email.bounced; Value is hard, soft or unknown
	KindStopped          Kind = "stopped"           // sequence.stopped
	KindUnconfirmed      Kind = "unconfirmed"       // event.unconfirmed; Cause is the event its source did not confirm
)

// Fact is what the lifecycle keeps of one event: enough to order it and to know what it
// means, nothing more (no message bodies). A State is a set of facts.
type Fact struct {
	ID       string    `json:"id"`
	Type     string    `json:"type"`
	Kind     Kind      `json:"kind"`
	Time     time.Time `json:"time"`
	Version  string    `json:"version,omitempty"`
	Received time.Time `json:"received,omitzero"`
	Provider string    `json:"provider,omitempty"`
	Name     string    `json:"name,omitempty"`
	Value    string    `json:"value,omitempty"`
	Cause    string    `json:"cause,omitempty"`
}

// Key names one lifecycle: a contact in a campaign, or (Campaign "") the contact itself.
type Key struct {
	Tenant   string `json:"tenant"`
	Contact  string `json:"contact"`
	Campaign string `json:"campaign,omitempty"`
}

// String is a stable text form of k, usable as a map or table key.
func (k Key) String() string { return envelope.Key(k.Tenant, k.Contact, k.Campaign) }

// ContactLevel is k's contact-level key.
func (k Key) ContactLevel() Key { return Key{Tenant: k.Tenant, Contact: k.Contact} }

// fact builds the fact of env; ok is false for an event the lifecycle ignores
// (unmapped, message.status, a reply.classified without a label, …).
func fact(env envelope.Envelope) (Fact, bool) {
	d := env.Data
	f := Fact{ID: env.ID, Type: env.Type, Time: norm(env.Time), Version: env.Version,
		Received: norm(env.ReceivedAt), Provider: env.Provider}
	switch env.Type {
	case envelope.TypeEmailSent:
		f.Kind = KindSent
	case envelope.TypeEmailDelivered:
		f.Kind = KindDelivered
	case envelope.TypeEmailOpened:
		f.Kind = KindOpened
	case envelope.TypeEmailClicked:
		f.Kind = KindClicked
	case envelope.TypeReplyReceived:
		f.Kind = KindReply
		if d.Message != nil && d.Message.Auto {
			f.Kind = KindAutoReply
		}
	case envelope.TypeMessageReceived:
		f.Kind = KindReply
	case envelope.TypeReplyClassified:
		if d.Classification == nil || d.Classification.Label == "" {
			return Fact{}, false
		}
		f.Kind, f.Value, f.Cause = KindClassified, d.Classification.Label, d.Cause
	case envelope.TypeLeadStatusChanged:
		if d.Status == "" {
			return Fact{}, false
		}
		f.Kind, f.Value = KindStatus, d.Status
	case envelope.TypeContactUpdated:
		if d.Property == nil || d.Property.Name == "" {
			return Fact{}, false
		}
		f.Kind, f.Name, f.Value = KindProperty, env.Provider+":"+d.Property.Name, d.Property.Value
	case envelope.TypeOpportunityCreated:
		f.Kind = KindOpportunity
		if d.Opportunity != nil {
			f.Name = d.Opportunity.ID
		}
	case envelope.TypeMeetingBooked, envelope.TypeMeetingCancelled:
		switch {
		case env.Type == envelope.TypeMeetingBooked:
			f.Kind = KindMeetingBooked
		case d.Status == envelope.MeetingRescheduled:
			f.Kind = KindMeetingMoved // a reschedule: the meeting stands, at another time
		default:
			f.Kind = KindMeetingCancelled
		}
		f.Name = env.ID // no meeting id: the booking is its own meeting
		if d.Meeting != nil && d.Meeting.ID != "" {
			f.Name = d.Meeting.ID
		}
		if f.Kind == KindMeetingBooked && d.Meeting != nil && d.Meeting.RescheduledFrom != f.Name {
			f.Value = d.Meeting.RescheduledFrom
		}
	case envelope.TypeLeadUnsubscribed:
		f.Kind = KindUnsubscribed
	case envelope.TypeEmailComplained:
		// A spam complaint is an opt-out said louder: it dominates as an unsubscribe does.
		f.Kind, f.Value = KindUnsubscribed, "complaint"
	case envelope.TypeEmailBounced:
		f.Kind, f.Value = KindBounce, "unknown"
		if d.Bounce != nil && d.Bounce.Kind != "" {
			f.Value = d.Bounce.Kind
		}
	case envelope.TypeSequenceStopped:
		f.Kind = KindStopped
	case envelope.TypeEventUnconfirmed:
		if d.Cause == "" {
			return Fact{}, false
		}
		f.Kind, f.Cause = KindUnconfirmed, d.Cause
	default:
		return Fact{}, false
	}
	return f, true
}

func norm(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC().Round(0)
}

// target is the status f leads to by itself, "" for none. Context that can retract a
// fact (a cancelled meeting, a reply classified as automatic) is applied by the view.
func (f Fact) target() Status {
	switch f.Kind {
	case KindSent:
		return Sent
	case KindDelivered:
		return Delivered
	case KindOpened, KindClicked:
		return Opened
	case KindReply:
		return Replied
	case KindClassified:
		return LabelStatus(f.Value)
	case KindStatus:
		return ProviderStatus(f.Value)
	case KindOpportunity:
		return Opportunity
	case KindMeetingBooked, KindMeetingMoved:
		return MeetingBooked
	case KindUnsubscribed:
		return Unsubscribed
	case KindBounce:
		if f.Value == "soft" {
			return "" // the mailbox exists and may accept mail tomorrow
		}
		return Bounced
	case KindStopped:
		return Completed
	}
	return ""
}

// LabelStatus maps a classifier label (pkg/classify) to the status it leads to. A
// meeting request is interest, not a booking: only a meeting.booked (or a provider's
// meeting_booked status) books. Labels that say the "reply" was not a person
// (auto_reply, out_of_office, bounce_notice) also retract the reply they classify.
func LabelStatus(label string) Status {
	switch label {
	case "interested", "meeting_request", "information_request":
		return Interested
	case "unsubscribe_request":
		return Suppressed // as the suppressor does: do_not_contact
	case "bounce_notice":
		return Bounced // as the suppressor does
	}
	return "" // referral, follow_up_later, not_interested, wrong_person, unclear: the reply itself counts
}

// notHuman are the labels that say a reply was not written by the person.
func notHuman(label string) bool {
	return label == "auto_reply" || label == "out_of_office" || label == "bounce_notice"
}

// ProviderStatus maps a lead.status_changed status (Instantly's lead_* statuses,
// Smartlead's categories, HubSpot's hs_lead_status and lifecyclestage values) to a
// status; "" for statuses that say nothing about the lifecycle (out of office, …).
// Case, spaces and hyphens are folded ("Meeting Request" = meeting_request).
func ProviderStatus(status string) Status {
	s := strings.NewReplacer(" ", "_", "-", "_").Replace(strings.ToLower(strings.TrimSpace(status)))
	switch s {
	case "interested", "meeting_request", "information_request":
		return Interested
	case "meeting_booked", "meeting_completed", "no_show":
		// A no-show (Instantly's lead_no_show) still had a meeting booked: no opt-out
		// and no loss, the rep may book again; lead_status keeps the verbatim no_show.
		return MeetingBooked
	case "closed", "won", "closed_won", "closedwon", "opportunity", "open_deal", "customer", "evangelist":
		return Opportunity
	case "not_interested", "wrong_person", "unqualified", "closed_lost", "closedlost", "lost":
		return Completed
	case "neutral", "uncategorizable_by_ai":
		return Replied // set by the provider on a reply it could not place
	case "do_not_contact":
		return Suppressed
	case "unsubscribed":
		return Unsubscribed
	case "new", "open", "lead", "subscriber", "marketingqualifiedlead", "salesqualifiedlead",
		"in_progress", "attempted_to_contact", "connected", "bad_timing":
		return Enrolled // a (new) lead, in the CRM's words
	}
	return ""
}

// contactWide reports whether f concerns the contact in every campaign, so that it
// also feeds the contact-level state.
func (f Fact) contactWide() bool {
	switch f.Kind {
	case KindUnsubscribed, KindBounce, KindProperty, KindOpportunity, KindMeetingBooked, KindMeetingCancelled, KindMeetingMoved,
		KindUnconfirmed: // wherever its cause may have landed
		return true
	}
	t := f.target()
	return Terminal(t) || t == Opportunity
}

// Keys says which lifecycles env feeds: its contact in its campaign when it names one,
// and the contact itself when it names no campaign or says something about the contact
// in every campaign (opt-out, bounce, suppression, opportunity, meeting, property).
// None when env names no contact or the lifecycle ignores its type.
func Keys(env envelope.Envelope) []Key {
	f, ok := fact(env)
	contact := env.ContactKey()
	if !ok || contact == "" {
		return nil
	}
	var keys []Key
	campaign := ""
	if env.Data.Campaign != nil {
		campaign = env.Data.Campaign.ID
	}
	if campaign != "" {
		keys = append(keys, Key{Tenant: env.Tenant, Contact: contact, Campaign: campaign})
	}
	if campaign == "" || f.contactWide() {
		keys = append(keys, Key{Tenant: env.Tenant, Contact: contact})
	}
	return keys
}

// cmpVersion orders versions totally: none < integers (numerically, any length) <
// other strings (byte-wise). Integers that differ only by leading zeros are equal.
func cmpVersion(a, b string) int {
	ca, cb := versionClass(a), versionClass(b)
	if ca != cb {
		return cmp.Compare(ca, cb)
	}
	if ca == 1 {
		a, b = strings.TrimLeft(a, "0"), strings.TrimLeft(b, "0")
		if len(a) != len(b) {
			return cmp.Compare(len(a), len(b))
		}
	}
	return strings.Compare(a, b)
}

func versionClass(v string) int {
	if v == "" {
		return 0
	}
	for _, c := range []byte(v) {
		if c < '0' || c > '9' {
			return 2
		}
	}
	return 1
}

// cmpOrder is the lifecycle's order of facts: event time, then version, then
// envelope id (only a tie-break: see decided). Property updates of one property
// compare version first (see cmpProperty).
func cmpOrder(a, b Fact) int {
	if c := a.Time.Compare(b.Time); c != 0 {
		return c
	}
	if c := cmpVersion(a.Version, b.Version); c != 0 {
		return c
	}
	return strings.Compare(a.ID, b.ID)
}

// decided reports whether the order of a and b is known from the events themselves:
// their times differ, or both carry versions that differ. Otherwise cmpOrder's answer
// is a deterministic tie-break and the projector should ask the source of truth.
func decided(a, b Fact) bool {
	return !a.Time.Equal(b.Time) || (a.Version != "" && b.Version != "" && cmpVersion(a.Version, b.Version) != 0)
}

// cmpProperty orders updates of one property: the provider's version first (an older
// version never overwrites a newer one, whatever the clocks say), then time, then id.
// Unversioned updates rank below versioned ones of the same property.
func cmpProperty(a, b Fact) int {
	if c := cmpVersion(a.Version, b.Version); c != 0 {
		return c
	}
	if c := a.Time.Compare(b.Time); c != 0 {
		return c
	}
	return strings.Compare(a.ID, b.ID)
}

// propertyDecided is decided for updates of one property: both versioned and
// different, or both unversioned at different times.
func propertyDecided(a, b Fact) bool {
	switch {
	case a.Version != "" && b.Version != "":
		return cmpVersion(a.Version, b.Version) != 0 || !a.Time.Equal(b.Time)
	case a.Version == "" && b.Version == "":
		return !a.Time.Equal(b.Time)
	}
	return false
}

// cmpFact is a total order over every field, so that picking "the least" of two facts
// is always the same answer.
func cmpFact(a, b Fact) int {
	if c := cmpOrder(a, b); c != 0 {
		return c
	}
	for _, p := range [][2]string{{a.Type, b.Type}, {string(a.Kind), string(b.Kind)}, {a.Provider, b.Provider},
		{a.Name, b.Name}, {a.Value, b.Value}, {a.Cause, b.Cause}, {a.Version, b.Version}} {
		if c := strings.Compare(p[0], p[1]); c != 0 {
			return c
		}
	}
	return a.Received.Compare(b.Received)
}

// arrival is when f reached the gateway; its event time when that is unknown (an event
// cannot arrive before it happened).
func (f Fact) arrival() time.Time {
	if f.Received.IsZero() {
		return f.Time
	}
	return f.Received
}
