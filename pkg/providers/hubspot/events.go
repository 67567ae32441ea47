package hubspot

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/providers"
)

// event is one element of a webhooks API batch.
type event struct {
	EventID          providers.Scalar `json:"eventId"`
	SubscriptionID   providers.Scalar `json:"subscriptionId"`
	PortalID         providers.Scalar `json:"portalId"`
	AppID            providers.Scalar `json:"appId"`
	OccurredAt       providers.Scalar `json:"occurredAt"` // Unix milliseconds
	SubscriptionType string           `json:"subscriptionType"`
	EventType        string           `json:"eventType"` // what older docs call subscriptionType
	AttemptNumber    providers.Scalar `json:"attemptNumber"`
	ObjectID         providers.Scalar `json:"objectId"`
	ObjectTypeID     string           `json:"objectTypeId"` // generic object.* events: 0-1 contact, 0-3 deal…
	PropertyName     string           `json:"propertyName"`
	PropertyValue    providers.Scalar `json:"propertyValue"`
	ChangeSource     string           `json:"changeSource"`
}

// objectTypes names the standard objects of generic (object.*) subscriptions.
var objectTypes = map[string]string{"0-1": "contact", "0-2": "company", "0-3": "deal", "0-5": "ticket"}

// statusProperties are the contact properties that carry a lead's status.
var statusProperties = map[string]bool{"hs_lead_status": true, "lifecyclestage": true}

// optOutProperty is the contact property a full e-mail opt-out sets to true. HubSpot has
// no opt-out webhook; that the opt-out shows as a change of this property comes from a
// HubSpot employee on its community forum (assumed, see docs/platforms.md).
const optOutProperty = "hs_email_optout"

// Events splits a verified batch into its events, one per element.
func (p *provider) Events(r *providers.Request) ([]providers.Event, error) {
	items, err := providers.RawEvents(r.Body)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return nil, fmt.Errorf("%w: empty batch", providers.ErrMalformed)
	}
	evs := make([]providers.Event, 0, len(items))
	seen := make(map[string]bool, len(items))
	for i, raw := range items {
		ev, err := normalise(raw)
		if err != nil {
			return nil, fmt.Errorf("%w: event %d: %v", providers.ErrMalformed, i, err)
		}
		if !seen[ev.Key] { // one notification listed twice is one event
			seen[ev.Key] = true
			evs = append(evs, ev)
		}
	}
	return evs, nil
}

func normalise(raw json.RawMessage) (providers.Event, error) {
	var e event
	if err := json.Unmarshal(raw, &e); err != nil {
		return providers.Event{}, err
	}
	typ := providers.FirstOf(e.SubscriptionType, e.EventType)
	if e.EventID == "" || typ == "" {
		return providers.Event{}, errors.New("no eventId or subscriptionType")
	}
	ms, err := strconv.ParseInt(string(e.OccurredAt), 10, 64)
	at := time.UnixMilli(ms).UTC()
	if err != nil || ms <= 0 || at.Year() > 9999 {
		return providers.Event{}, errors.New("occurredAt is not Unix milliseconds")
	}
	object, action, _ := strings.Cut(typ, ".")
	if object == "object" && e.ObjectTypeID != "" { // generic format: the type is in objectTypeId
		object = providers.FirstOf(objectTypes[e.ObjectTypeID], e.ObjectTypeID)
	}
	id, value := string(e.ObjectID), string(e.PropertyValue)

	ev := providers.Event{
		Type:         envelope.TypeUnmapped,
		ProviderType: typ,
		// eventId is "not guaranteed to be unique" (HubSpot's webhooks guide), so the key
		// adds the account, the subscription, the object and the time. attemptNumber is
		// left out: it is what changes on a retry.
		Key:             envelope.Key(string(e.PortalID), string(e.SubscriptionID), string(e.EventID), id, string(e.OccurredAt)),
		ProviderEventID: string(e.EventID),
		ObjectID:        id,
		Version:         string(e.OccurredAt), // orders the updates of one object
		Time:            at,
		Channel:         "crm",
		Data:            envelope.Data{ProviderType: typ, Raw: raw},
	}
	if id != "" {
		ev.Subject = object + "/" + id
	}
	if e.PropertyName != "" {
		ev.Data.Property = &envelope.Property{Name: e.PropertyName, Value: value}
	}
	if object == "contact" && id != "" {
		ev.Data.Contact = &envelope.Contact{ExternalID: id}
		if e.PropertyName == "email" {
			ev.Data.Contact.Email = value
		}
	}
	switch {
	case object == "contact" && action == "propertyChange" && e.PropertyName == optOutProperty && strings.EqualFold(value, "true"):
		// Set back to false, it is a contact.updated below: nothing here resubscribes.
		ev.Type = envelope.TypeLeadUnsubscribed
	case object == "contact" && action == "propertyChange" && statusProperties[e.PropertyName]:
		ev.Type, ev.Data.Status = envelope.TypeLeadStatusChanged, value
	case object == "contact" && (action == "propertyChange" || action == "creation"):
		// A creation is the contact's first state: consumers upsert it like any update
		// (there is no contact.created type).
		ev.Type = envelope.TypeContactUpdated
	case object == "deal" && action == "creation":
		ev.Type, ev.Data.Opportunity = envelope.TypeOpportunityCreated, &envelope.Opportunity{ID: id}
	}
	return ev, nil
}
