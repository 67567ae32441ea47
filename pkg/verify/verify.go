// Package verify holds the pieces several signature schemes share: the Stripe-style
// `t=<unix>,v1=<hex>` header (Stripe, Calendly), the `sha256=<hex>` HMAC of the body
// (Meta, Smartlead), constant-time comparison of an HMAC against any of several
// candidates, and the timestamp tolerance check.
package verify

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"hash"
	"net/http"
	"strconv"
	"strings"
	"time"

	"exacto.dev/pkg/providers"
)

// Timed is a parsed `t=<unix>,v1=<hex>[,v1=<hex>…]` header.
type Timed struct {
	Time       time.Time
	Timestamp  string   // t exactly as sent: it is part of the signed content
	Signatures [][]byte // every v1, decoded
}

// ParseTimed parses a Stripe-style signature header strictly: comma-separated key=value
// entries without spaces, exactly one numeric t, at least one v1 of valid hex (a v1
// that is not hex is skipped, as Stripe's libraries do). Other keys (v0, future
// schemes) are skipped. Errors wrap providers.ErrMissingSignature
// (nothing usable) or providers.ErrBadSignature (malformed).
func ParseTimed(header string) (Timed, error) {
	var out Timed
	sawV1 := false
	if header == "" {
		return out, fmt.Errorf("%w: empty signature header", providers.ErrMissingSignature)
	}
	for _, part := range strings.Split(header, ",") {
		k, v, ok := strings.Cut(part, "=")
		if !ok || k == "" || strings.ContainsAny(part, " \t") {
			return Timed{}, fmt.Errorf("%w: malformed signature header", providers.ErrBadSignature)
		}
		switch k {
		case "t":
			if out.Timestamp != "" {
				return Timed{}, fmt.Errorf("%w: more than one t in the signature header", providers.ErrBadSignature)
			}
			secs, err := strconv.ParseInt(v, 10, 64)
			if err != nil || secs < 0 || len(v) > 12 {
				return Timed{}, fmt.Errorf("%w: t is not unix seconds", providers.ErrBadSignature)
			}
			out.Timestamp, out.Time = v, time.Unix(secs, 0)
		case "v1":
			// Stripe's libraries skip a v1 they cannot read beside a good one.
			sawV1 = true
			if sig, err := hex.DecodeString(v); err == nil && len(sig) > 0 { // either case of hex
				out.Signatures = append(out.Signatures, sig)
			}
		}
	}
	if out.Timestamp == "" {
		return Timed{}, fmt.Errorf("%w: no t in the signature header", providers.ErrBadSignature)
	}
	if len(out.Signatures) == 0 && sawV1 {
		return Timed{}, fmt.Errorf("%w: no v1 is hex", providers.ErrBadSignature)
	}
	if len(out.Signatures) == 0 {
		return Timed{}, fmt.Errorf("%w: no v1 signature", providers.ErrMissingSignature)
	}
	return out, nil
}

// AnyEqual reports whether any candidate equals any expected MAC, comparing every pair
// in constant time (no early exit, so timing says nothing about which matched).
func AnyEqual(expected, candidates [][]byte) bool {
	match := false
	for _, e := range expected {
		for _, c := range candidates {
			if hmac.Equal(e, c) {
				match = true
			}
		}
	}
	return match
}

// Within checks that ts is no further than tol from now, in the past or the future.
func Within(ts, now time.Time, tol time.Duration) error {
	d := now.Sub(ts)
	if d > tol {
		return fmt.Errorf("%w: signed %v ago, tolerance %v", providers.ErrTimestamp, d.Round(time.Second), tol)
	}
	if d < -tol {
		return fmt.Errorf("%w: signed %v in the future, tolerance %v", providers.ErrTimestamp, (-d).Round(time.Second), tol)
	}
	return nil
}

// HMAC computes one MAC of parts, concatenated, with key.
func HMAC(newHash func() hash.Hash, key []byte, parts ...[]byte) []byte {
	m := hmac.New(newHash, key)
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

// TimedHMAC is the Stripe-style scheme Stripe and Calendly share: a header
// `t=<unix>,v1=<hex>[,v1=…]` with HMAC-SHA256 over `t + "." + raw body`.
type TimedHMAC struct {
	Header    string
	Keys      [][]byte
	Tolerance time.Duration
}

// Verify checks the signature with every key, then the timestamp: a stale delivery
// signed with a wrong key is a signature error, not a clock one.
func (s TimedHMAC) Verify(r *providers.Request) error {
	h := r.Header.Get(s.Header)
	if h == "" {
		return fmt.Errorf("%w: no %s header", providers.ErrMissingSignature, s.Header)
	}
	sig, err := ParseTimed(h)
	if err != nil {
		return err
	}
	expected := make([][]byte, len(s.Keys))
	for i, k := range s.Keys {
		expected[i] = HMAC(sha256.New, k, []byte(sig.Timestamp), []byte("."), r.Body)
	}
	if !AnyEqual(expected, sig.Signatures) {
		return fmt.Errorf("%w: no v1 matches any secret", providers.ErrBadSignature)
	}
	if err := Within(sig.Time, r.Now, s.Tolerance); err != nil {
		return err
	}
	r.TimeSigned = true
	return nil
}

// SignTimed returns the header that signs body at now with secret, as Stripe does.
func SignTimed(header, secret string, body []byte, now time.Time) http.Header {
	ts := strconv.FormatInt(now.Unix(), 10)
	mac := HMAC(sha256.New, []byte(secret), []byte(ts), []byte("."), body)
	h := http.Header{}
	h.Set(header, "t="+ts+",v1="+hex.EncodeToString(mac))
	return h
}

// BodyHMAC is the scheme Meta and Smartlead share: a header `sha256=<hex>` holding the
// HMAC-SHA256 of the raw body. It signs no time, so a replay is caught only by the
// events' identity keys.
type BodyHMAC struct {
	Header string
	Keys   [][]byte
}

// Verify checks the header over the raw bytes with every key (no early exit). The
// prefix's case is not significant, and the hex is decoded, so upper-case hex
// compares equal.
func (s BodyHMAC) Verify(r *providers.Request) error {
	h := r.Header.Get(s.Header)
	if h == "" {
		return fmt.Errorf("%w: no %s header", providers.ErrMissingSignature, s.Header)
	}
	const prefix = "sha256="
	if len(h) < len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
		return fmt.Errorf("%w: %s is not sha256=<hex>", providers.ErrBadSignature, s.Header)
	}
	got, err := hex.DecodeString(h[len(prefix):])
	if err != nil || len(got) != sha256.Size {
		return fmt.Errorf("%w: %s is not sha256=<hex>", providers.ErrBadSignature, s.Header)
	}
	expected := make([][]byte, len(s.Keys))
	for i, k := range s.Keys {
		expected[i] = HMAC(sha256.New, k, r.Body)
	}
	if !AnyEqual(expected, [][]byte{got}) {
		return fmt.Errorf("%w: %s", providers.ErrBadSignature, s.Header)
	}
	return nil
}

// SignBody returns the header that signs body with secret, as BodyHMAC checks it.
func SignBody(header, secret string, body []byte) http.Header {
	h := http.Header{}
	h.Set(header, "sha256="+hex.EncodeToString(HMAC(sha256.New, []byte(secret), body)))
	return h
}

// Shared holds the SHA-256 digests of static shared secrets (Instantly's header,
// Smartlead's secret_key): compared digest to digest in constant time, so neither
// content nor length leaks, and every secret is tried (no early exit).
type Shared [][32]byte

// NewShared digests secrets; none is allowed (the path token alone then
// authenticates), an empty one is not.
func NewShared(provider string, secrets []string) (Shared, error) {
	var s Shared
	for i, v := range secrets {
		if v == "" {
			return nil, fmt.Errorf("%s: secret %d is empty", provider, i+1)
		}
		s = append(s, sha256.Sum256([]byte(v)))
	}
	return s, nil
}

// Match reports whether got is one of the secrets.
func (s Shared) Match(got string) bool {
	d := sha256.Sum256([]byte(got))
	match := 0
	for _, want := range s {
		match |= subtle.ConstantTimeCompare(d[:], want[:])
	}
	return match == 1
}
