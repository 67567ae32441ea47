package hubspot

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	"exacto.dev/pkg/providers"
)

// sampleEvents lists the deliveries Sample builds, a contact property change first (the
// default of `exacto send`).
var sampleEvents = []string{"contact.propertyChange", "deal.creation", "batch"}

const (
	portalID = 62515
	appID    = 1160452
	contact  = 1246965
	deal     = 9482713650
)

// sample is one notification, its fields in the order HubSpot's examples give them.
type sample struct {
	EventID          uint64 `json:"eventId"`
	SubscriptionID   int    `json:"subscriptionId"`
	PortalID         int    `json:"portalId"`
	AppID            int    `json:"appId"`
	OccurredAt       int64  `json:"occurredAt"`
	SubscriptionType string `json:"subscriptionType"`
	AttemptNumber    int    `json:"attemptNumber"`
	ObjectID         int64  `json:"objectId"`
	PropertyName     string `json:"propertyName,omitempty"`
	PropertyValue    string `json:"propertyValue,omitempty"`
	ChangeSource     string `json:"changeSource"`
	ChangeFlag       string `json:"changeFlag,omitempty"`
	SourceID         string `json:"sourceId,omitempty"`
}

// Sample builds a realistic batch of event at now, shaped like the payload examples of
// HubSpot's webhooks guide. Event ids are derived from event and now, so the same
// arguments give the same bytes, as HubSpot's retry of a batch would (attemptNumber
// aside).
func Sample(event string, now time.Time, given ...providers.Lead) ([]byte, error) {
	// HubSpot's webhooks name a contact by its object id; an e-mail appears only as a
	// property's new value.
	if _, err := providers.SampleLead("hubspot", given, "", ""); err != nil {
		return nil, err
	}
	at := now.UnixMilli() - 1800
	n := func(i int, s sample) sample {
		s.EventID = sampleEventID(event, now, i)
		s.PortalID, s.AppID = portalID, appID
		s.OccurredAt = at + int64(i)*40
		return s
	}
	var batch []sample
	switch event {
	case "contact.propertyChange":
		batch = []sample{n(0, sample{SubscriptionID: 25, SubscriptionType: "contact.propertyChange", ObjectID: contact,
			PropertyName: "lifecyclestage", PropertyValue: "salesqualifiedlead", ChangeSource: "CRM_UI", SourceID: "userId:882761034"})}
	case "deal.creation":
		batch = []sample{n(0, sample{SubscriptionID: 31, SubscriptionType: "deal.creation", ObjectID: deal,
			ChangeSource: "CRM_UI", ChangeFlag: "CREATED", SourceID: "userId:882761034"})}
	case "batch":
		batch = []sample{
			n(0, sample{SubscriptionID: 22, SubscriptionType: "contact.creation", ObjectID: contact + 13,
				ChangeSource: "IMPORT", ChangeFlag: "CREATED"}),
			n(1, sample{SubscriptionID: 26, SubscriptionType: "contact.propertyChange", ObjectID: contact + 13,
				PropertyName: "email", PropertyValue: "lee.park@initech.example", ChangeSource: "IMPORT"}),
			n(2, sample{SubscriptionID: 27, SubscriptionType: "contact.propertyChange", ObjectID: contact,
				PropertyName: "hs_lead_status", PropertyValue: "CONNECTED", ChangeSource: "CRM_UI", SourceID: "userId:882761034"}),
			n(3, sample{SubscriptionID: 31, SubscriptionType: "deal.creation", ObjectID: deal + 1,
				ChangeSource: "CRM_UI", ChangeFlag: "CREATED", SourceID: "userId:882761034"}),
		}
	default:
		return nil, fmt.Errorf("hubspot: no sample for event %q (known: %v)", event, sampleEvents)
	}
	return json.Marshal(batch)
}

// sampleEventID is a 10-digit event id unique to event, now and i.
func sampleEventID(event string, now time.Time, i int) uint64 {
	h := sha256.Sum256([]byte(fmt.Sprintf("%s|%d|%d", event, now.UnixNano(), i)))
	return 1_000_000_000 + binary.BigEndian.Uint64(h[:8])%9_000_000_000
}
