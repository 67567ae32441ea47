// Package jsonenc appends JSON values byte for byte as encoding/json writes them, for
// the records written on every event (guards, projections), where json.Marshal's
// reflection (and, for maps, its sorting through reflect) was a sizeable share of the
// CPU. Each type that uses it is tested against json.Marshal.
package jsonenc

import (
	"encoding/json"
	"time"
)

// String appends s as a JSON string, escaped as encoding/json escapes it.
func String(b []byte, s string) []byte {
	if plain(s) { // ids, statuses, most text: nothing to escape
		return append(append(append(b, '"'), s...), '"')
	}
	q, err := json.Marshal(s)
	if err != nil {
		panic(err) // a string always marshals
	}
	return append(b, q...)
}

// plain reports whether encoding/json writes s as it is between quotes: printable
// ASCII without the characters it escapes (quote, backslash, and <, > and & for HTML).
func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// Time appends t as time.Time.MarshalJSON writes it (RFC 3339 with nanoseconds,
// quoted); false (b as it was) for a time that method refuses: a year outside 0 to
// 9999, or a zone 24 hours or more from UTC.
func Time(b []byte, t time.Time) ([]byte, bool) {
	if y := t.Year(); y < 0 || y > 9999 {
		return b, false
	}
	if _, offset := t.Zone(); offset <= -24*3600 || offset >= 24*3600 {
		return b, false
	}
	return append(t.AppendFormat(append(b, '"'), time.RFC3339Nano), '"'), true
}

// Strings appends a list of strings as encoding/json writes a []string (nil: null).
func Strings(b []byte, list []string) []byte {
	if list == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, s := range list {
		if i > 0 {
			b = append(b, ',')
		}
		b = String(b, s)
	}
	return append(b, ']')
}
