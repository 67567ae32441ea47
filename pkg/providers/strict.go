package providers

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode"
	"unicode/utf8"
)

// checkStrict walks data as one JSON value with only white space around it, refusing
// an object that holds two equal keys (compared as decoded: "a" and "\u0061" are one
// key) or two keys that differ only in case, and nesting deeper than maxDepth.
// encoding/json matches a key to a field whatever its case and keeps the last:
// {"event_type":"email_opened","EVENT_TYPE":"lead_unsubscribed"} would be acted on as
// an unsubscribe while any case-sensitive reader of the stored payload saw an open.
// Keys are compared as encoding/json compares them (bytes.EqualFold: Unicode simple
// folding, so "K", "k" and the Kelvin sign are one key). It is the gateway's first
// look at every body, so it allocates nothing but for keys written with escapes and
// objects of many keys (encoding/json's Decoder.Token, which it replaces, boxed every
// token). Its errors wrap ErrMalformed.
func checkStrict(data []byte) error {
	var keys [2 * fewKeys][]byte // enough for most bodies' open objects, on the stack
	s := strictScan{data: data, keys: keys[:0]}
	s.space()
	if err := s.value(0); err != nil {
		return err
	}
	s.space()
	if s.i != len(data) {
		return fmt.Errorf("%w: data after the JSON value", ErrMalformed)
	}
	return nil
}

type strictScan struct {
	data []byte
	i    int
	keys [][]byte // the keys of the objects open now, innermost last
}

// fewKeys is how many keys an object holds before its keys are looked up in a map
// rather than compared one by one.
const fewKeys = 32

func (s *strictScan) space() {
	for s.i < len(s.data) {
		switch s.data[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *strictScan) fail(what string) error {
	if s.i >= len(s.data) {
		return fmt.Errorf("%w: unexpected end of JSON input", ErrMalformed)
	}
	return fmt.Errorf("%w: invalid character %q %s at byte %d", ErrMalformed, s.data[s.i], what, s.i)
}

func (s *strictScan) value(depth int) error {
	if s.i >= len(s.data) {
		return s.fail("")
	}
	switch c := s.data[s.i]; {
	case c == '{' || c == '[':
		if depth >= maxDepth {
			return fmt.Errorf("%w: nested deeper than %d", ErrMalformed, maxDepth)
		}
		if c == '{' {
			return s.object(depth)
		}
		return s.array(depth)
	case c == '"':
		_, err := s.str()
		return err
	case c == '-' || c >= '0' && c <= '9':
		return s.number()
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	}
	return s.fail("looking for a value")
}

func (s *strictScan) object(depth int) error {
	s.i++ // '{'
	first := len(s.keys)
	defer func() { s.keys = s.keys[:first] }()
	var many map[string]string // once the object has more than fewKeys keys: folded key -> key
	s.space()
	if s.i < len(s.data) && s.data[s.i] == '}' {
		s.i++
		return nil
	}
	for {
		if s.i >= len(s.data) || s.data[s.i] != '"' {
			return s.fail("looking for an object key")
		}
		raw, err := s.str()
		if err != nil {
			return err
		}
		key := raw[1 : len(raw)-1]
		if bytes.IndexByte(key, '\\') >= 0 { // decoded as encoding/json decodes it
			var k string
			if err := json.Unmarshal(raw, &k); err != nil {
				return fmt.Errorf("%w: %v", ErrMalformed, err)
			}
			key = []byte(k)
		}
		if many != nil {
			folded := string(appendFolded(nil, key))
			if k, ok := many[folded]; ok {
				return duplicate([]byte(k), key)
			}
			many[folded] = string(key)
		} else {
			for _, k := range s.keys[first:] {
				if bytes.EqualFold(k, key) {
					return duplicate(k, key)
				}
			}
			s.keys = append(s.keys, key)
			if len(s.keys)-first > fewKeys {
				many = make(map[string]string, 2*fewKeys)
				for _, k := range s.keys[first:] {
					many[string(appendFolded(nil, k))] = string(k)
				}
			}
		}
		s.space()
		if s.i >= len(s.data) || s.data[s.i] != ':' {
			return s.fail("after an object key")
		}
		s.i++
		s.space()
		if more, err := s.member(depth, '}'); !more || err != nil {
			return err
		}
	}
}

// member reads a container's value and what follows it: a comma (more to come) or
// the container's closing byte.
func (s *strictScan) member(depth int, closing byte) (more bool, err error) {
	if err := s.value(depth + 1); err != nil {
		return false, err
	}
	s.space()
	switch {
	case s.i < len(s.data) && s.data[s.i] == ',':
		s.i++
		s.space()
		return true, nil
	case s.i < len(s.data) && s.data[s.i] == closing:
		s.i++
		return false, nil
	}
	return false, s.fail("after a value in an object or array")
}

// duplicate is the error for key, found after an earlier key of its object equal to it
// or differing only in case.
func duplicate(earlier, key []byte) error {
	if bytes.Equal(earlier, key) {
		return fmt.Errorf("%w: duplicate key %q", ErrMalformed, truncate(string(key), 40))
	}
	return fmt.Errorf("%w: keys %q and %q differ only in case (a decoder that ignores case would take one for the other)",
		ErrMalformed, truncate(string(earlier), 40), truncate(string(key), 40))
}

// appendFolded appends key folded as encoding/json folds a name (fold.go): two keys
// fold alike exactly when bytes.EqualFold holds of them.
func appendFolded(out, key []byte) []byte {
	for i := 0; i < len(key); {
		if c := key[i]; c < utf8.RuneSelf {
			if 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			out = append(out, c)
			i++
			continue
		}
		r, n := utf8.DecodeRune(key[i:])
		out = utf8.AppendRune(out, foldRune(r))
		i += n
	}
	return out
}

// foldRune is the least rune of r's fold orbit.
func foldRune(r rune) rune {
	for {
		r2 := unicode.SimpleFold(r)
		if r2 <= r {
			return r2
		}
		r = r2
	}
}

func (s *strictScan) array(depth int) error {
	s.i++ // '['
	s.space()
	if s.i < len(s.data) && s.data[s.i] == ']' {
		s.i++
		return nil
	}
	for {
		if more, err := s.member(depth, ']'); !more || err != nil {
			return err
		}
	}
}

// str reads a string and returns it with its quotes, as written. data is valid UTF-8
// (Decode checks it first), so only control characters and escapes need a look.
func (s *strictScan) str() ([]byte, error) {
	start := s.i
	s.i++ // '"'
	for s.i < len(s.data) {
		c := s.data[s.i]
		switch {
		case c == '"':
			s.i++
			return s.data[start:s.i], nil
		case c < 0x20:
			return nil, s.fail("in a string")
		case c == '\\':
			s.i++
			if s.i >= len(s.data) {
				return nil, s.fail("")
			}
			switch s.data[s.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i++
			case 'u':
				s.i++
				for range 4 {
					if s.i >= len(s.data) || !isHex(s.data[s.i]) {
						return nil, s.fail("in a \\u escape")
					}
					s.i++
				}
			default:
				return nil, s.fail("in a string escape")
			}
		default:
			s.i++
		}
	}
	return nil, s.fail("")
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func (s *strictScan) number() error {
	if s.data[s.i] == '-' {
		s.i++
	}
	switch {
	case s.i < len(s.data) && s.data[s.i] == '0':
		s.i++
	case s.i < len(s.data) && s.data[s.i] >= '1' && s.data[s.i] <= '9':
		s.digits()
	default:
		return s.fail("in a number")
	}
	if s.i < len(s.data) && s.data[s.i] == '.' {
		s.i++
		if !s.digits() {
			return s.fail("after a decimal point")
		}
	}
	if s.i < len(s.data) && (s.data[s.i] == 'e' || s.data[s.i] == 'E') {
		s.i++
		if s.i < len(s.data) && (s.data[s.i] == '+' || s.data[s.i] == '-') {
			s.i++
		}
		if !s.digits() {
			return s.fail("in an exponent")
		}
	}
	return nil
}

// digits reads one or more digits; false when there was none.
func (s *strictScan) digits() bool {
	start := s.i
	for s.i < len(s.data) && s.data[s.i] >= '0' && s.data[s.i] <= '9' {
		s.i++
	}
	return s.i > start
}

func (s *strictScan) literal(word string) error {
	if !bytes.HasPrefix(s.data[s.i:], []byte(word)) {
		return s.fail("in a literal")
	}
	s.i += len(word)
	return nil
}
