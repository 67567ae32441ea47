package privacy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"regexp"
	"slices"
	"strings"

	"exacto.dev/pkg/envelope"
)

// erasedText replaces what named a forgotten person inside someone else's text.
const erasedText = "[erased]"

// minWord is the shortest id or name matched as a whole string: a shorter one ("42",
// "Ana") is as likely someone else's value.
const minWord = 5

// Person is whom an erasure forgets, by everything the history names them by.
type Person struct {
	Tenant    string
	Anonymous string
	// Keys are their identity keys (the form of Keys); ContactIDs the contact
	// directory's ids of them, their merged ones too.
	Keys       []string
	ContactIDs []string

	emails []string        // each address, lower-cased, and with its @ escaped as JSON may
	phones []string        // digits
	words  []string        // ids and names matched as whole strings
	events map[string]bool // ids of the events about them (buckets keyed by event id)
}

// phoneLike finds what may be a phone number written in a text: digits with the
// separators people write between them.
var phoneLike = regexp.MustCompile(`\+?[0-9][0-9 ().\-]{5,}[0-9]`)

// NewPerson is tenant's person anonymous, known by keys (Keys' form) and to the
// contact directory by contactIDs.
func NewPerson(tenant, anonymous string, keys, contactIDs []string) *Person {
	p := &Person{Tenant: tenant, Anonymous: anonymous, ContactIDs: slices.Clone(contactIDs)}
	for _, k := range keys {
		p.addKey(k)
	}
	return p
}

func (p *Person) addKey(k string) {
	if k == "" || slices.Contains(p.Keys, k) {
		return
	}
	p.Keys = append(p.Keys, k)
	kind, value, _ := strings.Cut(k, ":")
	switch kind {
	case "email":
		p.emails = append(p.emails, value, strings.Replace(value, "@", `\u0040`, 1))
	case "phone":
		p.phones = append(p.phones, value)
	default: // kind:provider:id or subject:provider:subject: the id alone is what texts hold
		if _, id, ok := strings.Cut(value, ":"); ok {
			p.AddWord(id)
		}
	}
}

// AddWord adds a whole string that names the person (a name, an id).
func (p *Person) AddWord(w string) {
	if len(w) >= minWord && !slices.Contains(p.words, w) {
		p.words = append(p.words, w)
	}
}

// AddEvent notes env as an event about the person when it is: it names them by one of
// their keys, or an erasure of them stored it again.
func (p *Person) AddEvent(env *envelope.Envelope) {
	if env.ID == "" || !p.About(env) && (env.Erasure == "" || env.Erasure != p.Anonymous || env.Tenant != p.Tenant) {
		return
	}
	if p.events == nil {
		p.events = map[string]bool{}
	}
	p.events[env.ID] = true
}

// EventAbout reports whether the event id is one AddEvent noted.
func (p *Person) EventAbout(id string) bool { return p.events[id] }

// About reports whether env is about the person: it names them by one of their keys.
func (p *Person) About(env *envelope.Envelope) bool {
	if env.Tenant != p.Tenant {
		return false
	}
	for _, k := range Keys(env) {
		if slices.Contains(p.Keys, k) {
			return true
		}
	}
	return false
}

// Mentions reports whether data (a message, a value) may hold something naming the
// person: an address of theirs in any case, a phone number of theirs however written,
// one of their ids or names as a whole JSON string, one of their contact ids.
func (p *Person) Mentions(data []byte) bool {
	if len(p.emails) > 0 {
		low := asciiLower(string(data))
		for _, e := range p.emails {
			if len(addressAt(low, e)) > 0 {
				return true
			}
		}
	}
	for _, w := range p.words {
		if bytes.Contains(data, []byte(`"`+w+`"`)) {
			return true
		}
	}
	for _, id := range p.ContactIDs {
		if bytes.Contains(data, []byte(id)) {
			return true
		}
	}
	if len(p.phones) > 0 {
		for _, m := range phoneLike.FindAll(data, -1) {
			if p.phoneIn(string(m)) {
				return true
			}
		}
	}
	return false
}

// asciiLower is s with A-Z lower-cased, and nothing else changed: its offsets are s's.
func asciiLower(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'A' && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return r
	}, s)
}

// addressAt are the offsets in low (lower-cased) where the address e stands as a whole
// address: "ana@x.example" is not in "hana@x.example" nor in "ana@x.example.org", but
// is in "write to ana@x.example." and in "<ana@x.example>".
func addressAt(low, e string) []int {
	var out []int
	for from := 0; ; {
		i := strings.Index(low[from:], e)
		if i < 0 {
			return out
		}
		i += from
		j := i + len(e)
		before := i == 0 || !localChar(low[i-1])
		after := j == len(low) || !(domainChar(low[j]) || low[j] == '.' && j+1 < len(low) && domainChar(low[j+1]))
		if before && after {
			out = append(out, i)
		}
		from = i + 1
	}
}

func domainChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}
func localChar(c byte) bool { return domainChar(c) || strings.IndexByte(".%+", c) >= 0 }

func (p *Person) phoneIn(s string) bool {
	digits := strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return r
		}
		return -1
	}, s)
	for _, ph := range p.phones {
		if strings.Contains(digits, ph) {
			return true
		}
	}
	return false
}

// scrub is s with what names the person replaced.
func (p *Person) scrub(s string) string {
	if slices.Contains(p.words, s) {
		return erasedText
	}
	for _, e := range p.emails {
		if at := addressAt(asciiLower(s), e); len(at) > 0 {
			var b strings.Builder
			prev := 0
			for _, i := range at {
				b.WriteString(s[prev:i])
				b.WriteString(erasedText)
				prev = i + len(e)
			}
			b.WriteString(s[prev:])
			s = b.String()
		}
	}
	if len(p.phones) > 0 {
		s = phoneLike.ReplaceAllStringFunc(s, func(m string) string {
			if p.phoneIn(m) {
				return erasedText
			}
			return m
		})
	}
	return s
}

// Rewrite makes env keep nothing of the person: an event about them is anonymized
// (Anonymize: it carries the erasure's anonymous id, and no consumer acts on it), in
// any other every text that names them has it replaced (it is still someone else's
// event, acted on as before). It reports whether env changed.
func (p *Person) Rewrite(env *envelope.Envelope) bool {
	if p.About(env) {
		Anonymize(env, p.Anonymous)
		return true
	}
	changed := false
	for _, s := range texts(env) {
		if next := p.scrub(*s); next != *s {
			*s, changed = next, true
		}
	}
	if raw, ok := p.scrubJSON(env.Data.Raw); ok {
		env.Data.Raw = raw
		sum := sha256.Sum256(raw)
		env.PayloadSHA256 = hex.EncodeToString(sum[:])
		changed = true
	}
	return changed
}

// owns reports whether data (a bucket's value) is the person's own: it holds one of
// their identity keys as a JSON string, or one of their contact ids.
func (p *Person) owns(data []byte) bool {
	for _, k := range p.Keys {
		if bytes.Contains(data, []byte(`"`+k+`"`)) {
			return true
		}
	}
	for _, id := range p.ContactIDs {
		if bytes.Contains(data, []byte(id)) {
			return true
		}
	}
	return false
}

// scrubValue is a bucket's JSON value with what names the person replaced in place
// (the value keeps its fields and their order), or nil when the replacing would not
// leave valid JSON.
func (p *Person) scrubValue(data []byte) []byte {
	out := []byte(p.scrub(string(data)))
	for _, w := range p.words {
		out = bytes.ReplaceAll(out, []byte(`"`+w+`"`), []byte(`"`+erasedText+`"`))
	}
	if !json.Valid(out) {
		return nil
	}
	return out
}

// texts are the strings of env that may hold someone's words or ids.
func texts(env *envelope.Envelope) []*string {
	d := &env.Data
	out := []*string{&env.Subject, &env.ObjectID, &d.Status}
	if c := d.Contact; c != nil {
		out = append(out, &c.Email, &c.Phone, &c.Name, &c.ExternalID)
	}
	if c := d.Campaign; c != nil {
		out = append(out, &c.Name)
	}
	if m := d.Message; m != nil {
		out = append(out, &m.From, &m.To, &m.Subject, &m.Text, &m.HTML, &m.URL)
	}
	if b := d.Bounce; b != nil {
		out = append(out, &b.Reason)
	}
	if pr := d.Property; pr != nil {
		out = append(out, &pr.Value)
	}
	if m := d.Meeting; m != nil {
		out = append(out, &m.Invitee, &m.Reason)
	}
	if o := d.Opportunity; o != nil {
		out = append(out, &o.Name)
	}
	if c := d.Classification; c != nil {
		for i := range c.Evidence {
			out = append(out, &c.Evidence[i])
		}
		for i := range c.Also { // a referral's address beside an unsubscribe
			out = append(out, &c.Also[i])
		}
		out = append(out, &c.When)
	}
	return out
}

// scrubJSON is raw with every string (and key) that names the person scrubbed, and
// whether anything was.
func (p *Person) scrubJSON(raw json.RawMessage) (json.RawMessage, bool) {
	if len(raw) == 0 || !p.Mentions(raw) {
		return raw, false
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return Erased, true // not JSON: nothing of it can be kept safely
	}
	changed := false
	var walk func(v any) any
	walk = func(v any) any {
		switch t := v.(type) {
		case string:
			if s := p.scrub(t); s != t {
				changed = true
				return s
			}
		case []any:
			for i := range t {
				t[i] = walk(t[i])
			}
		case map[string]any:
			for k, x := range t {
				if nk := p.scrub(k); nk != k {
					delete(t, k)
					k, changed = nk, true
				}
				t[k] = walk(x)
			}
		}
		return v
	}
	v = walk(v)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return Erased, true
	}
	out := bytes.TrimRight(buf.Bytes(), "\n")
	switch {
	case p.Mentions(out):
		return Erased, true // named where scrub cannot reach: keep none of it
	case !changed:
		return raw, false
	}
	return out, true
}
