// Package meta verifies and normalises Meta webhooks: the WhatsApp Cloud API, Instagram
// messaging and Messenger, which share one delivery mechanism.
//
// Meta signs the raw body with the app secret (X-Hub-Signature-256: sha256=<hex>) and
// signs no timestamp, so a replay is caught only by the events' identity keys. A
// subscription is confirmed by a GET handshake answered with Handshake.
package meta

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"net/http"
	"net/url"
	"time"

	"exacto.dev/pkg/providers"
	"exacto.dev/pkg/verify"
)

// SignatureHeader carries the body's HMAC-SHA256, hex, after "sha256=".
const SignatureHeader = "X-Hub-Signature-256"

// Spec describes Meta for the registry.
var Spec = providers.Spec{
	Name:       "meta",
	Signed:     true,
	AuthMethod: "hmac",
	SignsTime:  false,
	// WhatsApp Cloud API webhooks overview: "retried with decreasing frequency until the request succeeds, for up to 7 days" (Graph API webhooks: 36 hours; Messenger disables the subscription after 1 hour): the longest of the products.
	RetryHorizon:     7 * 24 * time.Hour,
	SignatureHeaders: []string{SignatureHeader},
	NeedsSecret:      true,
	New:              New,
	Events:           sampleEvents,
	Sample:           Sample,
	Sign:             Sign,
}

type provider struct{ verify.BodyHMAC }

// New builds the verifier of one endpoint; its secrets are the app secrets, newest
// and previous during a rotation. Meta signs the body as sent, with non-ASCII
// characters \u-escaped, so it is verified over the raw bytes, never re-encoded.
func New(cfg providers.Config) (providers.Provider, error) {
	if cfg.SecretHeader != "" {
		return nil, errors.New("meta: secret_header does not apply: Meta signs the body")
	}
	keys, err := providers.Keys("meta", cfg.Secrets)
	if err != nil {
		return nil, err
	}
	return &provider{verify.BodyHMAC{Header: SignatureHeader, Keys: keys}}, nil
}

// Sign signs body as Meta does; url, method and now play no part in the scheme.
func Sign(method, url string, body []byte, secret string, now time.Time) (http.Header, []byte, error) {
	if secret == "" {
		return nil, nil, errors.New("meta: signing needs the app secret")
	}
	return verify.SignBody(SignatureHeader, secret, body), body, nil
}

// Handshake answers Meta's GET subscription request
// (?hub.mode=subscribe&hub.verify_token=…&hub.challenge=…): it returns the challenge to
// send back as a text/plain 200 when the token is one of verifyTokens, compared in
// constant time. Anything else is refused (ok false), and the caller answers 403.
func Handshake(query url.Values, verifyTokens []string) (challenge string, ok bool) {
	token, challenge := query.Get("hub.verify_token"), query.Get("hub.challenge")
	if query.Get("hub.mode") != "subscribe" || token == "" || challenge == "" {
		return "", false
	}
	got := sha256.Sum256([]byte(token)) // digests: equal lengths, so the length does not leak
	match := 0
	for _, t := range verifyTokens {
		if t == "" {
			continue
		}
		want := sha256.Sum256([]byte(t))
		match |= subtle.ConstantTimeCompare(got[:], want[:])
	}
	if match != 1 {
		return "", false
	}
	return challenge, true
}
