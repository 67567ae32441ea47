// Package verify holds the pieces several signature schemes share: the Stripe-style
// `t=<unix>,v1=<hex>` header (Stripe, Calendly), constant-time comparison of an HMAC
// against any of several candidates, and the timestamp tolerance check.
package verify

import (
	"crypto/hmac"
	"encoding/hex"
	"fmt"
	"hash"
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
// entries without spaces, exactly one numeric t, at least one v1 of valid hex. Other
// keys (v0, future schemes) are skipped. Errors wrap providers.ErrMissingSignature
// (nothing usable) or providers.ErrBadSignature (malformed).
func ParseTimed(header string) (Timed, error) {
	var out Timed
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
			sig, err := hex.DecodeString(v) // accepts upper- and lower-case hex
			if err != nil || len(sig) == 0 {
				return Timed{}, fmt.Errorf("%w: v1 is not hex", providers.ErrBadSignature)
			}
			out.Signatures = append(out.Signatures, sig)
		}
	}
	if out.Timestamp == "" {
		return Timed{}, fmt.Errorf("%w: no t in the signature header", providers.ErrBadSignature)
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
