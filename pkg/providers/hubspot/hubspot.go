// Package hubspot verifies and normalises HubSpot webhooks (the webhooks API of an
// app: batches of CRM object events).
//
// Version 3 signatures (X-HubSpot-Signature-v3) sign the method, URL, body and a
// millisecond timestamp with HMAC-SHA256, checked against a 5-minute window. HubSpot
// sends the older X-HubSpot-Signature beside it (v1: SHA-256 of secret + body; v2:
// secret + method + URL + body), which signs no time: a captured delivery stripped of
// its v3 headers would verify for ever. So an endpoint takes v3 alone unless its
// signature_versions name the older ones (an app that sends no v3).
package hubspot

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"exacto.dev/pkg/providers"
)

// The headers HubSpot signs a request with.
const (
	HeaderV3        = "X-HubSpot-Signature-v3"
	HeaderTimestamp = "X-HubSpot-Request-Timestamp" // Unix milliseconds
	HeaderLegacy    = "X-HubSpot-Signature"         // v1 or v2, hex
	HeaderVersion   = "X-HubSpot-Signature-Version" // v1 or v2
)

// defaultTolerance is HubSpot's documented window: reject v3 requests older than 5
// minutes. Requests as far in the future are rejected too.
const defaultTolerance = 5 * time.Minute

// Spec describes HubSpot for the registry.
var Spec = providers.Spec{
	Name:       "hubspot",
	Signed:     true,
	AuthMethod: "hmac",
	SignsTime:  true,
	// developers.hubspot.com/docs/api/webhooks: "retried up to 10 times. These retries will be spread out over the next 24 hours".
	RetryHorizon:      24 * time.Hour,
	SignatureHeaders:  []string{HeaderV3, HeaderLegacy},
	SignatureVersions: Versions,
	NeedsSecret:       true,
	New:               New,
	Events:            sampleEvents,
	Sample:            Sample,
	Sign:              Sign,
}

type provider struct {
	secrets   [][]byte
	tolerance time.Duration
	takes     map[string]bool // the signature versions the endpoint takes
}

// Versions are the signature versions, newest first; DefaultVersions those an endpoint
// takes when its config names none.
var (
	Versions        = []string{"v3", "v2", "v1"}
	DefaultVersions = []string{"v3"}
)

// New builds the verifier of one endpoint; its secrets are the app's client secrets.
func New(cfg providers.Config) (providers.Provider, error) {
	if cfg.SecretHeader != "" {
		return nil, errors.New("hubspot: secret_header does not apply: HubSpot signs the request")
	}
	keys, err := providers.Keys("hubspot", cfg.Secrets)
	if err != nil {
		return nil, err
	}
	p := &provider{tolerance: cfg.Tolerance, secrets: keys, takes: map[string]bool{}}
	if p.tolerance <= 0 {
		p.tolerance = defaultTolerance
	}
	versions := cfg.SignatureVersions
	if len(versions) == 0 {
		versions = DefaultVersions
	}
	for _, v := range versions {
		if !slices.Contains(Versions, v) {
			return nil, fmt.Errorf("hubspot: signature_versions: unknown %q (known: %s)", v, strings.Join(Versions, ", "))
		}
		p.takes[v] = true
	}
	return p, nil
}

// Verify checks the v3 signature when the endpoint takes v3 and there is one. It never
// falls back to v1/v2 when a v3 signature fails: that would let a replay past the
// timestamp check. Without a v3 signature, the older one is checked only when the
// endpoint takes its version.
func (p *provider) Verify(r *providers.Request) error {
	if sig := r.Header.Get(HeaderV3); sig != "" && p.takes["v3"] {
		return p.verifyV3(r, sig)
	}
	if !p.takes["v1"] && !p.takes["v2"] {
		return fmt.Errorf("%w: no %s header (the endpoint takes v3 alone: signature_versions names older versions to take)",
			providers.ErrMissingSignature, HeaderV3)
	}
	sig := r.Header.Get(HeaderLegacy)
	if sig == "" {
		return fmt.Errorf("%w: no %s or %s header", providers.ErrMissingSignature, HeaderV3, HeaderLegacy)
	}
	got, err := hex.DecodeString(sig) // decoded, so upper-case hex compares equal
	if err != nil || len(got) != sha256.Size {
		return fmt.Errorf("%w: %s is not a hex SHA-256", providers.ErrBadSignature, HeaderLegacy)
	}
	version := providers.FirstOf(strings.ToLower(r.Header.Get(HeaderVersion)), "v1") // no header: v1
	if version != "v1" && version != "v2" {
		return fmt.Errorf("%w: unknown %s %.10q", providers.ErrBadSignature, HeaderVersion, version)
	}
	if !p.takes[version] {
		return fmt.Errorf("%w: a %s signature, which the endpoint does not take (signature_versions)", providers.ErrBadSignature, version)
	}
	match := 0
	for _, s := range p.secrets { // every secret is tried: no early exit to time
		want := legacy(version, s, r.Method, r.URL, r.Body)
		match |= subtle.ConstantTimeCompare(got, want)
	}
	if match != 1 {
		return fmt.Errorf("%w: %s %s", providers.ErrBadSignature, HeaderLegacy, version)
	}
	return nil
}

func (p *provider) verifyV3(r *providers.Request, sig string) error {
	ts := r.Header.Get(HeaderTimestamp)
	ms, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: %s is not Unix milliseconds", providers.ErrTimestamp, HeaderTimestamp)
	}
	got, err := base64.StdEncoding.DecodeString(sig)
	if err != nil || len(got) != sha256.Size {
		return fmt.Errorf("%w: %s is not a base64 HMAC-SHA256", providers.ErrBadSignature, HeaderV3)
	}
	match := false
	for _, s := range p.secrets {
		match = hmac.Equal(got, v3(s, r.Method, r.URL, r.Body, ts)) || match
	}
	if !match {
		return fmt.Errorf("%w: %s", providers.ErrBadSignature, HeaderV3)
	}
	// Checked after the signature, so that a forged request learns nothing of the window.
	if d := r.Now.Sub(time.UnixMilli(ms)); d > p.tolerance || d < -p.tolerance {
		return fmt.Errorf("%w: signed %v from now, tolerance %v", providers.ErrTimestamp, -d.Round(time.Second), p.tolerance)
	}
	r.TimeSigned = true
	return nil
}

// Sign signs a delivery as HubSpot signs a webhooks API request: v3, with the v1
// signature it still sends beside it.
func Sign(method, url string, body []byte, secret string, now time.Time) (http.Header, []byte, error) {
	if secret == "" {
		return nil, nil, errors.New("hubspot: signing needs the client secret")
	}
	ts := strconv.FormatInt(now.UnixMilli(), 10)
	h := http.Header{}
	h.Set(HeaderV3, base64.StdEncoding.EncodeToString(v3([]byte(secret), method, url, body, ts)))
	h.Set(HeaderTimestamp, ts)
	h.Set(HeaderLegacy, hex.EncodeToString(legacy("v1", []byte(secret), method, url, body)))
	h.Set(HeaderVersion, "v1")
	return h, body, nil
}

// v3 is HMAC-SHA256(secret, method + URI + body + timestamp), before base64.
func v3(secret []byte, method, url string, body []byte, ts string) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(method + SignedURI(url)))
	m.Write(body)
	m.Write([]byte(ts))
	return m.Sum(nil)
}

// legacy is SHA-256(secret + body) for v1, SHA-256(secret + method + URI + body) for v2;
// v2 takes the URI exactly as requested.
func legacy(version string, secret []byte, method, url string, body []byte) []byte {
	h := sha256.New()
	h.Write(secret)
	if version == "v2" {
		h.Write([]byte(method + url))
	}
	h.Write(body)
	return h.Sum(nil)
}

// uriDecoder decodes exactly the percent-encodings HubSpot's "Validating requests"
// page lists for v3, written as listed (upper-case hex); every other one stays encoded.
var uriDecoder = strings.NewReplacer(
	"%3A", ":", "%2F", "/", "%3F", "?", "%40", "@", "%21", "!", "%24", "$",
	"%27", "'", "%28", "(", "%29", ")", "%2A", "*", "%2C", ",", "%3B", ";",
)

// SignedURI is the form of url a v3 signature covers: the full URL HubSpot called,
// with the listed characters decoded.
func SignedURI(url string) string {
	return uriDecoder.Replace(url)
}
