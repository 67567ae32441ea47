package contacts

import (
	"encoding/json"
	"unicode/utf8"
)

// decodeRecord is json.Unmarshal(data, r) for a zero r. A record as put writes one
// (json.Marshal: known fields, no spaces, strings without escapes) is read without
// reflection; anything else — an escape, a space, a null, a key in another case or
// twice, something after the end — is left to json.Unmarshal, so both give the same
// record or both an error (TestDecodeRecordIsUnmarshal). Naming a contact reads its
// record, and encoding/json's reflection was half of that.
func decodeRecord(data []byte, r *Record) error {
	if (&recordScan{b: data}).record(r) {
		return nil
	}
	*r = Record{}
	return json.Unmarshal(data, r)
}

// recordScan reads a record's JSON from b at i; each method reports false, having
// read what it may, when b is not as json.Marshal writes a Record.
type recordScan struct {
	b []byte
	i int
}

func (s *recordScan) byte(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// raw is the next string's bytes, quotes left out: valid UTF-8, no escape, no control
// character (which json.Marshal would have escaped).
func (s *recordScan) raw() ([]byte, bool) {
	if !s.byte('"') {
		return nil, false
	}
	start := s.i
	for ; s.i < len(s.b); s.i++ {
		switch c := s.b[s.i]; {
		case c == '"':
			v := s.b[start:s.i]
			s.i++
			return v, utf8.Valid(v)
		case c == '\\' || c < 0x20:
			return nil, false
		}
	}
	return nil, false
}

func (s *recordScan) str() (string, bool) {
	v, ok := s.raw()
	return string(v), ok
}

// strs is a list of strings; json.Unmarshal makes [] an empty list, not nil.
func (s *recordScan) strs() ([]string, bool) {
	if !s.byte('[') {
		return nil, false
	}
	out := []string{}
	if s.byte(']') {
		return out, true
	}
	for {
		v, ok := s.str()
		if !ok {
			return nil, false
		}
		out = append(out, v)
		if s.byte(']') {
			return out, true
		}
		if !s.byte(',') {
			return nil, false
		}
	}
}

// object reads {"key":value,...}, value read by field, each key once.
func (s *recordScan) object(field func(key []byte) bool) bool {
	if !s.byte('{') {
		return false
	}
	if s.byte('}') {
		return true
	}
	for {
		k, ok := s.raw()
		if !ok || !s.byte(':') || !field(k) {
			return false
		}
		if s.byte('}') {
			return true
		}
		if !s.byte(',') {
			return false
		}
	}
}

// record reads r's fields. A key given twice ends as json.Unmarshal leaves it (the
// last), but for external, whose maps json.Unmarshal would merge: that is left to it.
func (s *recordScan) record(r *Record) bool {
	ok := s.object(func(key []byte) bool {
		var ok bool
		switch string(key) {
		case "contact_id":
			r.ContactID, ok = s.str()
		case "account_id":
			r.AccountID, ok = s.str()
		case "keys":
			r.Keys, ok = s.strs()
		case "emails":
			r.Emails, ok = s.strs()
		case "phones":
			r.Phones, ok = s.strs()
		case "merged":
			r.Merged, ok = s.strs()
		case "merged_into":
			r.MergedInto, ok = s.str()
		case "updated":
			start := s.i
			_, ok = s.raw()
			ok = ok && r.Updated.UnmarshalJSON(s.b[start:s.i]) == nil
		case "external":
			if r.External != nil {
				return false
			}
			r.External = map[string][]string{}
			ok = s.object(func(kind []byte) bool {
				ids, ok := s.strs()
				r.External[string(kind)] = ids
				return ok
			})
		}
		return ok
	})
	return ok && s.i == len(s.b) // nothing after the record
}
