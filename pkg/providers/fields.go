package providers

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Scalar accepts a JSON string, number or boolean and keeps its text; null is empty.
// Providers send ids and times as strings in one payload and numbers in the next.
type Scalar string

// UnmarshalJSON implements json.Unmarshaler.
func (s *Scalar) UnmarshalJSON(b []byte) error {
	switch {
	case string(b) == "null":
		*s = ""
	case len(b) > 0 && b[0] == '"':
		var v string
		if err := json.Unmarshal(b, &v); err != nil {
			return err
		}
		*s = Scalar(v)
	case string(b) == "true" || string(b) == "false" || len(b) > 0 && (b[0] == '-' || b[0] >= '0' && b[0] <= '9'):
		*s = Scalar(b)
	default:
		return fmt.Errorf("want a string, number or boolean, got %.20s", b)
	}
	return nil
}

// FirstOf returns the first non-empty string.
func FirstOf(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

// ValidHeaderName reports whether s is an RFC 9110 token, usable as a header name.
func ValidHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c > 126 || c <= 32 || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, c) {
			return false
		}
	}
	return true
}

// Keys turns an endpoint's secrets into HMAC keys, refusing none and empty ones: a
// signed provider without a secret must not start.
func Keys(provider string, secrets []string) ([][]byte, error) {
	if len(secrets) == 0 {
		return nil, fmt.Errorf("%s: a secret is required", provider)
	}
	keys := make([][]byte, len(secrets))
	for i, s := range secrets {
		if s == "" {
			return nil, fmt.Errorf("%s: secret %d is empty", provider, i+1)
		}
		keys[i] = []byte(s)
	}
	return keys, nil
}
