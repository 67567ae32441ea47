// Package providers defines what every webhook provider package implements: verify a
// delivery over its raw bytes, split it into events and normalise each one. The
// registry of providers is pkg/providers/registry; the shared conformance suite every
// provider passes is pkg/providers/providertest.
package providers

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"exacto.dev/pkg/envelope"
)

// Rejections. Verify wraps one of the first four (answered 401); Events wraps
// ErrMalformed (answered 400). Messages never contain secrets or signatures.
var (
	ErrMissingSignature = errors.New("missing signature")
	ErrBadSignature     = errors.New("signature does not match")
	ErrTimestamp        = errors.New("timestamp outside tolerance")
	ErrBadSecret        = errors.New("secret does not match")
	ErrMalformed        = errors.New("malformed payload")
)

// Request is one webhook delivery as the verifier sees it.
type Request struct {
	Method string
	// URL is the full URL as the provider called it (scheme, host, path, query): the
	// endpoint's public_url when configured, else rebuilt from the request.
	URL    string
	Header http.Header
	Body   []byte // the raw bytes, exactly as received
	Now    time.Time
	// TimeSigned is set by Verify when the signature it verified covers a timestamp
	// within the scheme's tolerance: the delivery is no replay of an old capture,
	// whatever the age of the events it carries (a provider's manual resend).
	TimeSigned bool
}

// Config is what a provider needs from its endpoint's configuration. Secrets are
// already resolved from their env:/file: references; the provider decodes them.
type Config struct {
	Secrets   []string
	Tolerance time.Duration // 0 means the scheme's documented default
	// SecretHeader names the header carrying a static shared secret, for providers
	// without a signature (Instantly, Smartlead). Empty means the provider's default.
	SecretHeader string
	// SigningSecrets sign the body, for a provider whose signature is optional beside
	// its own secret (Smartlead's X-Smartlead-Signature): when set, the signature is
	// required and verified. Only for providers whose Spec has SignOptional.
	SigningSecrets []string
	// Generic configures the generic HMAC verifier; nil for other providers.
	Generic *Generic
	// SignatureVersions are the signature versions the endpoint takes, for a provider
	// with several (HubSpot: v3, v2, v1); empty: the provider's default.
	SignatureVersions []string
}

// Generic configures the generic HMAC verifier for providers not listed.
type Generic struct {
	Header          string            `yaml:"header"`           // header with the signature, e.g. X-Signature
	Prefix          string            `yaml:"prefix"`           // stripped before decoding, e.g. "sha256="
	Encoding        string            `yaml:"encoding"`         // hex | base64
	Algorithm       string            `yaml:"algorithm"`        // sha256 | sha512
	Signed          string            `yaml:"signed"`           // what is signed: "{body}" (default), or a template of {body} {timestamp} {id} {method} {url}
	TimestampHeader string            `yaml:"timestamp_header"` // unix seconds; checked against tolerance when set
	IDHeader        string            `yaml:"id_header"`        // header carrying the delivery's event id
	EventsField     string            `yaml:"events_field"`     // dotted path to an array of events; empty: the body is one event (or a top-level array)
	IDField         string            `yaml:"id_field"`         // dotted path to the event id within an event
	TypeField       string            `yaml:"type_field"`       // dotted path to the event type
	TimeField       string            `yaml:"time_field"`       // dotted path to the event time (RFC 3339 or unix seconds/ms)
	Types           map[string]string `yaml:"types"`            // provider type -> canonical type
}

// Provider verifies and normalises one endpoint's deliveries. It is built once per
// endpoint at start-up, so configuration errors surface before the gateway listens.
type Provider interface {
	// Verify checks the signature (and timestamp where the scheme signs one) over the
	// raw bytes with every active secret. It reads no store.
	Verify(r *Request) error
	// Events splits a verified delivery into its events, each normalised.
	Events(r *Request) ([]Event, error)
}

// Event is one provider event, normalised, before it is wrapped into an envelope.
type Event struct {
	Type         string // canonical type (envelope.Type…)
	ProviderType string // the provider's own type name
	// Key is what makes the event unique at the provider: its event id where it has
	// one, else envelope.Key of the documented fields that identify it. Never the
	// e-mail alone.
	Key             string
	ProviderEventID string
	ObjectID        string
	Version         string
	Time            time.Time
	Channel         string
	Subject         string // CloudEvents subject: the contact or object the event is about
	Data            envelope.Data
}

// Lead is whom a sample is about and in which campaign; an empty field keeps the
// sample's own. A provider whose deliveries carry no such field refuses it.
type Lead struct{ Email, Campaign string }

// SampleLead is the lead a Sample was given, each empty field given its default; an
// error names a field set that provider's deliveries do not carry (an empty default
// means it carries none).
func SampleLead(provider string, given []Lead, email, campaign string) (Lead, error) {
	l := Lead{Email: email, Campaign: campaign}
	if len(given) > 1 {
		return l, fmt.Errorf("%s: a sample is about one lead", provider)
	}
	if len(given) == 0 {
		return l, nil
	}
	g := given[0]
	switch {
	case g.Email != "" && email == "":
		return l, fmt.Errorf("%s: its deliveries name no lead by e-mail (--email does not apply)", provider)
	case g.Campaign != "" && campaign == "":
		return l, fmt.Errorf("%s: its deliveries carry no campaign (--campaign does not apply)", provider)
	}
	if g.Email != "" {
		l.Email = g.Email
	}
	if g.Campaign != "" {
		l.Campaign = g.Campaign
	}
	return l, nil
}

// Seed is what a sample's ids derive from beside the event and its time: "" for the
// provider's own lead (its samples keep the ids they always had), so that another lead
// or campaign at the same time is another event, not a retry.
func (l Lead) Seed(own Lead) string {
	if l == own {
		return ""
	}
	return "|" + l.Email + "|" + l.Campaign
}

// Name is how a sample names its lead: own for the provider's own lead, else one made
// from the address (ana.souza@x → Ana Souza), never the own lead's name on another.
func (l Lead) Name(own Lead, ownName string) string {
	if l.Email == own.Email {
		return ownName
	}
	local, _, _ := strings.Cut(l.Email, "@")
	parts := strings.FieldsFunc(local, func(r rune) bool { return r == '.' || r == '_' || r == '-' || r == '+' })
	for i, p := range parts {
		parts[i] = strings.ToUpper(p[:1]) + p[1:]
	}
	return strings.Join(parts, " ")
}

// ID is a sample's id for its lead at a platform: own for the provider's own lead, else
// one derived from the address, so that another lead is another record there too.
func (l Lead) ID(own Lead, ownID string, digits bool) string {
	if l.Email == own.Email {
		return ownID
	}
	sum := sha256.Sum256([]byte(l.Email))
	if digits {
		return strconv.FormatUint(1_000_000+binary.BigEndian.Uint64(sum[:8])%9_000_000, 10)
	}
	return hex.EncodeToString(sum[:6])
}

// Spec describes one provider for the registry.
type Spec struct {
	Name string
	// Signed says whether the scheme signs the body with a secret. Unsigned providers
	// rely on the path token and optional shared secrets (and, for one with
	// SignOptional, an optional signature); their events are marked unsigned in the
	// envelope, unless that signature was verified, so consumers confirm them at the
	// source.
	Signed bool
	// AuthMethod names how deliveries with a secret are authenticated, for the
	// envelope: hmac, secret_key or header_secret. An unsigned provider's endpoint
	// without secrets is authenticated by its path token alone (see Auth).
	AuthMethod string
	// SignsTime says whether the scheme signs a timestamp checked against a tolerance.
	SignsTime bool
	// RetryHorizon is how long the provider retries a delivery that was not answered
	// 2xx, as its documentation says; 0 when it says nothing (DefaultRetryHorizon is
	// then assumed). An event older than that (and StaleGrace) is no retry: a replay.
	RetryHorizon time.Duration
	// SignatureHeaders are the headers whose absence means an unsigned delivery.
	SignatureHeaders []string
	// SignatureVersions are the versions of the scheme an endpoint may name in its
	// signature_versions (HubSpot's); nil for a provider with one.
	SignatureVersions []string
	// NeedsSecret says whether an endpoint without a secret must refuse to start.
	NeedsSecret bool
	New         func(Config) (Provider, error)
	// Events lists the event names Sample accepts, the first being the default of
	// `exacto send`.
	Events []string
	// Sample builds a realistic body of the named event, as the provider would post it,
	// about the lead given (at most one; `exacto send --email --campaign`) or its own.
	Sample func(event string, now time.Time, lead ...Lead) ([]byte, error)
	// Sign signs a delivery exactly as the provider would: it returns the headers to
	// send and the body (changed only by providers that carry their secret in it).
	Sign func(method, url string, body []byte, secret string, now time.Time) (http.Header, []byte, error)
	// SignOptional, for a provider whose signature over the body is optional beside its
	// own secret (Smartlead), returns the headers that sign the final body with one of
	// an endpoint's signing_secrets. nil for the others: they take no signing_secrets.
	SignOptional func(body []byte, signingSecret string) http.Header
	// Redact removes a secret the provider carries in the body (Smartlead's
	// secret_key), leaving every other byte as it is; nil for providers that carry
	// none. Whatever keeps a body (an event's raw payload, the quarantine) keeps it
	// redacted.
	Redact func(body []byte) []byte
}

// DefaultRetryHorizon is assumed of a provider whose documentation gives no retry
// horizon: longer than any documented one (Stripe's three days).
const DefaultRetryHorizon = 3 * 24 * time.Hour

// StaleGrace is added to a retry horizon: a provider's queue behind, clocks apart.
const StaleGrace = 24 * time.Hour

// MaxEventAge is how old an event of the provider may be when it arrives: override
// when an endpoint sets max_event_age, else the retry horizon and StaleGrace.
func (s Spec) MaxEventAge(override time.Duration) time.Duration {
	if override > 0 {
		return override
	}
	return cmp.Or(s.RetryHorizon, DefaultRetryHorizon) + StaleGrace
}

// RedactBody is body without the secret the provider carries in it, if any.
func (s Spec) RedactBody(body []byte) []byte {
	if s.Redact == nil {
		return body
	}
	return s.Redact(body)
}

// Auth is the envelope's authmethod for an endpoint of this provider configured with
// cfg: hmac when its deliveries are signed (always, for a signed provider; with
// signing_secrets, for an unsigned one), path_token for an unsigned one without
// secrets, else the provider's own method.
func (s Spec) Auth(cfg Config) string {
	switch {
	case len(cfg.SigningSecrets) > 0:
		return "hmac"
	case !s.Signed && len(cfg.Secrets) == 0:
		return "path_token"
	}
	return s.AuthMethod
}

// Example builds a signed, realistic delivery of spec's event to url: for `exacto send`
// and for tests.
func Example(spec Spec, event, secret, url string, now time.Time) (*http.Request, error) {
	body, err := spec.Sample(event, now)
	if err != nil {
		return nil, err
	}
	h, body, err := spec.Sign(http.MethodPost, url, body, secret, now)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	for k, vs := range h {
		req.Header[k] = vs
	}
	if req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	return req, nil
}

// Envelope wraps a normalised event into the stored envelope.
func (e Event) Envelope(spec Spec, tenant, endpoint, authMethod string, received time.Time, payloadSHA256 string) envelope.Envelope {
	if c := e.Data.Contact; c != nil && c.Email == "" && c.Phone == "" && c.ExternalID == "" {
		e.Data.Contact = nil // names no one: no contact (the raw payload keeps what it had)
	}
	if o := e.Data.Opportunity; o != nil && o.ID == "" {
		e.Data.Opportunity = nil // an opportunity without an id cannot be told apart
	}
	if m := e.Data.Meeting; m != nil && m.ID == "" {
		e.Data.Meeting = nil // nor a meeting
	}
	typ := e.Type
	if !envelope.Complete(typ, e.Data) {
		// A mapped type without what it requires (a click or a reply naming no one) is
		// no such event to act on: kept whole, as unmapped, never half an event.
		typ = envelope.TypeUnmapped
	}
	if typ == envelope.TypeUnmapped && e.Data.ProviderType == "" {
		e.Data.ProviderType = "unknown" // the payload named no type we could read
	}
	return envelope.Envelope{
		SpecVersion:     "1.0",
		ID:              envelope.ID(tenant, spec.Name, e.Key),
		Source:          envelope.Source(tenant, endpoint),
		Type:            typ,
		Subject:         e.Subject,
		Time:            e.Time.UTC(),
		DataContentType: "application/json",
		Data:            e.Data,
		Tenant:          tenant,
		Provider:        spec.Name,
		Endpoint:        endpoint,
		ProviderEventID: e.ProviderEventID,
		ObjectID:        e.ObjectID,
		Version:         e.Version,
		Channel:         e.Channel,
		ReceivedAt:      received.UTC(),
		PayloadSHA256:   payloadSHA256,
		Signed:          authMethod == "hmac", // a signature over the body was verified
		AuthMethod:      authMethod,
	}
}

// RawEvents splits a JSON array body into its elements, byte for byte.
func RawEvents(body []byte) ([]json.RawMessage, error) {
	var items []json.RawMessage
	if err := Decode(body, &items); err != nil {
		return nil, err
	}
	return items, nil
}

// Decode parses JSON strictly, as every provider must before trusting a payload:
// valid UTF-8, no duplicate object keys (two parsers could disagree on which wins), one
// value and nothing after it. Its errors wrap ErrMalformed.
func Decode(data []byte, v any) error {
	if !utf8.Valid(data) {
		return fmt.Errorf("%w: invalid UTF-8", ErrMalformed)
	}
	if err := checkStrict(data); err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return nil
}

// maxDepth bounds nesting: no provider payload nests this deep, and a hostile one
// should cost nothing to refuse.
const maxDepth = 64

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
