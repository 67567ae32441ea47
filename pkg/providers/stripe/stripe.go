// Package stripe verifies and normalises Stripe-style webhooks: Stripe itself and the
// many signers that copied its scheme. `Stripe-Signature: t=<unix>,v1=<hex>[,v1=…]` is
// HMAC-SHA256 over `t + "." + raw body`, keyed with the whole endpoint secret string
// (whsec_… included); several v1 entries appear while a secret is rolled.
package stripe

import (
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
const Header = "Stripe-Signature"

// DefaultTolerance is Stripe's own libraries' default.
const DefaultTolerance = 5 * time.Minute

// Spec describes Stripe-style signing for the registry.
var Spec = providers.Spec{
	Name:       "stripe",
	Signed:     true,
	AuthMethod: "hmac",
	SignsTime:  true,
	// docs.stripe.com/webhooks: "for up to three days with an exponential back off in live mode".
	RetryHorizon:     3 * 24 * time.Hour,
	SignatureHeaders: []string{Header},
	NeedsSecret:      true,
	New:              New,
	Events:           sampleEvents,
	Sample:           Sample,
	Sign:             Sign,
}

type provider struct{ verify.TimedHMAC }

// New builds the verifier of one endpoint.
func New(cfg providers.Config) (providers.Provider, error) {
	keys, err := providers.Keys("stripe", cfg.Secrets)
	if err != nil {
		return nil, err
	}
	p := &provider{verify.TimedHMAC{Header: Header, Keys: keys, Tolerance: cfg.Tolerance}}
	if p.Tolerance == 0 {
		p.Tolerance = DefaultTolerance
	}
	return p, nil
}

type event struct {
	ID      string `json:"id"`
	Type    string `json:"type"`
	Created int64  `json:"created"`
	Data    struct {
		Object json.RawMessage `json:"object"`
	} `json:"data"`
}

type customer struct {
	ID     string `json:"id"`
	Object string `json:"object"`
	Email  string `json:"email"`
	Name   string `json:"name"`
	Phone  string `json:"phone"`
}

// Events normalises the one event of a delivery. Stripe's own types mean nothing to an
// outbound pipeline except customers (contact.updated); signers that reuse the scheme
// with canonical type names (reply.received, …) are mapped as they say. Everything else
// is unmapped, kept whole.
func (p *provider) Events(r *providers.Request) ([]providers.Event, error) {
	var e event
	if err := providers.Decode(r.Body, &e); err != nil {
		return nil, err
	}
	if e.ID == "" || e.Type == "" || e.Created <= 0 {
		return nil, fmt.Errorf("%w: an event needs id, type and created", providers.ErrMalformed)
	}
	ev := providers.Event{
		Type:            mapType(e.Type),
		ProviderType:    e.Type,
		Key:             e.ID,
		ProviderEventID: e.ID,
		Time:            time.Unix(e.Created, 0).UTC(),
		Version:         strconv.FormatInt(e.Created, 10),
		Data:            envelope.Data{ProviderType: e.Type, Raw: json.RawMessage(r.Body)},
	}
	var obj customer
	if len(e.Data.Object) > 0 && json.Unmarshal(e.Data.Object, &obj) == nil {
		ev.ObjectID, ev.Subject = obj.ID, obj.ID
		// Only a customer's id is a contact's id: an invoice's (in_…) is not.
		if obj.Object == "customer" {
			ev.Data.Contact = &envelope.Contact{Email: obj.Email, Phone: obj.Phone, Name: obj.Name, ExternalID: obj.ID}
		} else if obj.Email != "" || obj.Phone != "" {
			ev.Data.Contact = &envelope.Contact{Email: obj.Email, Phone: obj.Phone, Name: obj.Name}
		}
	}
	if ev.Type == envelope.TypeContactUpdated && ev.Data.Contact == nil {
		ev.Type = envelope.TypeUnmapped
	}
	return []providers.Event{ev}, nil
}

func mapType(t string) string {
	switch t {
	case "customer.created", "customer.updated":
		return envelope.TypeContactUpdated
	}
	for _, c := range envelope.Types {
		if c == t && (c == envelope.TypeContactUpdated || c == envelope.TypeUnmapped || c == envelope.TypeLeadUnsubscribed) {
			return c // canonical types whose data a generic object can fill
		}
	}
	return envelope.TypeUnmapped
}

// Sign signs body at now exactly as Stripe does.
func Sign(method, url string, body []byte, secret string, now time.Time) (http.Header, []byte, error) {
	return verify.SignTimed(Header, secret, body, now), body, nil
}
