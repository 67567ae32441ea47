// Package generic is a configurable HMAC verifier for signers Exacto has no package
// for. Config.Generic says where the signature is, how it is encoded, what is signed,
// and where each event's id, type and time are.
package generic

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/providers"
)

// Default is the configuration Sample and Sign use (Spec.Sign has no endpoint config),
// and a sensible one to copy. New never falls back to it: an endpoint without a generic
// block does not start.
var Default = providers.Generic{
	Header:          "X-Signature",
	Prefix:          "sha256=",
	Encoding:        "hex",
	Algorithm:       "sha256",
	Signed:          "{timestamp}.{body}",
	TimestampHeader: "X-Timestamp",
	IDField:         "id",
	TypeField:       "type",
	TimeField:       "created_at",
	Types: map[string]string{
		"reply.created":    envelope.TypeReplyReceived,
		"email.sent":       envelope.TypeEmailSent,
		"email.opened":     envelope.TypeEmailOpened,
		"email.bounced":    envelope.TypeEmailBounced,
		"email.complained": envelope.TypeEmailComplained,
		"contact.updated":  envelope.TypeContactUpdated,
	},
}

// Spec describes the generic verifier. SignsTime and SignatureHeaders describe Default:
// an endpoint's own block may sign no timestamp or use another header.
var Spec = providers.Spec{
	Name:       "generic",
	Signed:     true,
	AuthMethod: "hmac",
	SignsTime:  true,
	// RetryHorizon: a signer of its own: providers.DefaultRetryHorizon assumed (max_event_age sets it per endpoint).
	SignatureHeaders: []string{Default.Header},
	NeedsSecret:      true,
	New:              New,
	Events:           sampleEvents,
	Sample:           Sample,
	Sign:             Sign,
}

const defaultTolerance = 5 * time.Minute

// scheme is a validated Generic config.
type scheme struct {
	g        providers.Generic
	hash     func() hash.Hash
	size     int
	template []string // literals and placeholders ("{body}", …), in order
	events   []string // dotted paths, split
	id, typ  []string
	time     []string
}

type provider struct {
	scheme
	secrets   [][]byte
	tolerance time.Duration
}

// New validates the endpoint's generic block and secrets; every error names the field.
func New(cfg providers.Config) (providers.Provider, error) {
	if cfg.Generic == nil {
		return nil, errors.New("generic: the generic block is required (header, encoding, algorithm, type_field, time_field)")
	}
	s, err := compile(*cfg.Generic)
	if err != nil {
		return nil, err
	}
	if len(cfg.Secrets) == 0 {
		return nil, errors.New("generic: at least one secret (the HMAC key) is required")
	}
	p := &provider{scheme: s, tolerance: cfg.Tolerance}
	if p.tolerance <= 0 {
		p.tolerance = defaultTolerance
	}
	for i, sec := range cfg.Secrets {
		if sec == "" {
			return nil, fmt.Errorf("generic: secret %d is empty", i+1)
		}
		p.secrets = append(p.secrets, []byte(sec)) // the key is the secret's bytes as written
	}
	return p, nil
}

var placeholders = []string{"{body}", "{timestamp}", "{id}", "{method}", "{url}"}

func compile(g providers.Generic) (scheme, error) {
	s := scheme{g: g}
	switch {
	case g.Header == "":
		return s, errors.New("generic.header: required (the header with the signature)")
	case !providers.ValidHeaderName(g.Header):
		return s, fmt.Errorf("generic.header: %q is not a valid header name", g.Header)
	}
	switch g.Encoding {
	case "hex", "base64":
	case "":
		return s, errors.New("generic.encoding: required: hex or base64")
	default:
		return s, fmt.Errorf("generic.encoding: %q is not hex or base64", g.Encoding)
	}
	switch g.Algorithm {
	case "sha256":
		s.hash, s.size = sha256.New, sha256.Size
	case "sha512":
		s.hash, s.size = sha512.New, sha512.Size
	case "":
		return s, errors.New("generic.algorithm: required: sha256 or sha512")
	default:
		return s, fmt.Errorf("generic.algorithm: %q is not sha256 or sha512", g.Algorithm)
	}
	if s.g.Signed == "" {
		s.g.Signed = "{body}"
	}
	var err error
	if s.template, err = parseTemplate(s.g.Signed); err != nil {
		return s, err
	}
	// What is checked must be signed: an unsigned timestamp or id could be rewritten by
	// whoever replays a captured delivery, defeating the tolerance or the dedup.
	for _, h := range []struct{ field, value, placeholder string }{
		{"timestamp_header", g.TimestampHeader, "{timestamp}"},
		{"id_header", g.IDHeader, "{id}"},
	} {
		used := slices.Contains(s.template, h.placeholder)
		switch {
		case h.value != "" && !providers.ValidHeaderName(h.value):
			return s, fmt.Errorf("generic.%s: %q is not a valid header name", h.field, h.value)
		case h.value != "" && !used:
			return s, fmt.Errorf("generic.%s: %s is not signed: add %s to generic.signed", h.field, h.value, h.placeholder)
		case h.value == "" && used:
			return s, fmt.Errorf("generic.signed: %s needs generic.%s", h.placeholder, h.field)
		}
	}
	for _, f := range []struct {
		name, value string
		required    bool
		dst         *[]string
	}{
		{"events_field", g.EventsField, false, &s.events},
		{"id_field", g.IDField, false, &s.id},
		{"type_field", g.TypeField, true, &s.typ},
		{"time_field", g.TimeField, true, &s.time},
	} {
		if f.value == "" {
			if f.required {
				return s, fmt.Errorf("generic.%s: required (a dotted path into each event)", f.name)
			}
			continue
		}
		parts := strings.Split(f.value, ".")
		if slices.Contains(parts, "") {
			return s, fmt.Errorf("generic.%s: %q is not a dotted path", f.name, f.value)
		}
		*f.dst = parts
	}
	keys := make([]string, 0, len(g.Types))
	for k := range g.Types {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if k == "" {
			return s, errors.New("generic.types: an empty provider type")
		}
		if v := g.Types[k]; !slices.Contains(envelope.Types, v) {
			return s, fmt.Errorf("generic.types[%q]: %q is not a canonical type (%s)", k, v, strings.Join(envelope.Types, ", "))
		}
	}
	return s, nil
}

// parseTemplate splits a signed template into literals and placeholders.
func parseTemplate(t string) ([]string, error) {
	var out []string
	for rest := t; rest != ""; {
		open := strings.IndexAny(rest, "{}")
		if open < 0 {
			out = append(out, rest)
			break
		}
		if open > 0 {
			out = append(out, rest[:open])
		}
		end := strings.IndexByte(rest[open:], '}')
		if rest[open] == '}' || end < 0 {
			return nil, fmt.Errorf("generic.signed: unbalanced brace in %q", t)
		}
		ph := rest[open : open+end+1]
		if !slices.Contains(placeholders, ph) {
			return nil, fmt.Errorf("generic.signed: unknown placeholder %q (want %s)", ph, strings.Join(placeholders, " "))
		}
		out = append(out, ph)
		rest = rest[open+end+1:]
	}
	if !slices.Contains(out, "{body}") {
		return nil, fmt.Errorf("generic.signed: %q does not sign {body}", t)
	}
	return out, nil
}

// content is what the sender signed.
func (s *scheme) content(r *providers.Request) []byte {
	var b []byte
	for _, part := range s.template {
		switch part {
		case "{body}":
			b = append(b, r.Body...)
		case "{timestamp}":
			b = append(b, strings.TrimSpace(r.Header.Get(s.g.TimestampHeader))...)
		case "{id}":
			b = append(b, strings.TrimSpace(r.Header.Get(s.g.IDHeader))...)
		case "{method}":
			b = append(b, r.Method...)
		case "{url}":
			b = append(b, r.URL...)
		default:
			b = append(b, part...)
		}
	}
	return b
}

func (s *scheme) mac(key, content []byte) []byte {
	m := hmac.New(s.hash, key)
	m.Write(content)
	return m.Sum(nil)
}

// Verify checks the timestamp (when configured) and the HMAC with every secret. Each
// value of the signature header is one signature, so a sender rolling its key can send
// both.
func (p *provider) Verify(r *providers.Request) error {
	var sigs []string
	for _, v := range r.Header.Values(p.g.Header) {
		if v = strings.TrimSpace(v); v != "" {
			sigs = append(sigs, v)
		}
	}
	if len(sigs) == 0 {
		return fmt.Errorf("%w: no %s header", providers.ErrMissingSignature, p.g.Header)
	}
	if h := p.g.TimestampHeader; h != "" {
		v := strings.TrimSpace(r.Header.Get(h))
		if v == "" {
			return fmt.Errorf("%w: no %s header", providers.ErrMissingSignature, h)
		}
		sec, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fmt.Errorf("%w: %s is not unix seconds", providers.ErrTimestamp, h)
		}
		if d := r.Now.Sub(time.Unix(sec, 0)); d > p.tolerance || d < -p.tolerance {
			return fmt.Errorf("%w: %s is %v from now (tolerance %v)", providers.ErrTimestamp, h, d.Round(time.Second), p.tolerance)
		}
		r.TimeSigned = true // the template signs it (New refuses a timestamp_header it leaves out)
	}
	if h := p.g.IDHeader; h != "" && strings.TrimSpace(r.Header.Get(h)) == "" {
		return fmt.Errorf("%w: no %s header", providers.ErrMissingSignature, h)
	}
	content := p.content(r)
	for _, key := range p.secrets {
		want := p.mac(key, content)
		for _, v := range sigs {
			if got := p.decode(v); got != nil && hmac.Equal(got, want) {
				return nil
			}
		}
	}
	return fmt.Errorf("%w: %s", providers.ErrBadSignature, p.g.Header)
}

// decode reads one signature; nil if it is not one.
func (s *scheme) decode(v string) []byte {
	if len(v) < len(s.g.Prefix) || !strings.EqualFold(v[:len(s.g.Prefix)], s.g.Prefix) {
		return nil
	}
	v = v[len(s.g.Prefix):]
	var b []byte
	var err error
	if s.g.Encoding == "hex" {
		b, err = hex.DecodeString(v)
	} else {
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
			if b, err = enc.DecodeString(v); err == nil {
				break
			}
		}
	}
	if err != nil || len(b) != s.size {
		return nil
	}
	return b
}

// Events splits the delivery into its events: the array at events_field, else a
// top-level array, else the body as one event.
func (p *provider) Events(r *providers.Request) ([]providers.Event, error) {
	var root json.RawMessage
	if err := providers.Decode(r.Body, &root); err != nil {
		return nil, err
	}
	list := root
	if p.events != nil {
		var ok bool
		if list, ok = lookup(root, p.events); !ok {
			return nil, fmt.Errorf("%w: no %s", providers.ErrMalformed, p.g.EventsField)
		}
	}
	var items []json.RawMessage
	if list[0] == '[' || p.events != nil {
		if err := json.Unmarshal(list, &items); err != nil {
			return nil, fmt.Errorf("%w: %s is not an array of events", providers.ErrMalformed, orBody(p.g.EventsField))
		}
	} else {
		items = []json.RawMessage{list}
	}
	if len(items) == 0 {
		return nil, fmt.Errorf("%w: no events", providers.ErrMalformed)
	}
	headerID := ""
	if p.g.IDHeader != "" {
		headerID = strings.TrimSpace(r.Header.Get(p.g.IDHeader))
	}
	evs := make([]providers.Event, 0, len(items))
	for i, raw := range items {
		ev, err := p.event(raw)
		if err != nil {
			return nil, fmt.Errorf("%w: event %d: %v", providers.ErrMalformed, i, err)
		}
		// Identity: the event's id field; else the delivery's signed id header (in a
		// batch, with the event's position, stable because a retry re-sends the same
		// bytes); else the type, the time and the SHA-256 of the event's own JSON,
		// which a retry repeats exactly and another event does not.
		switch {
		case ev.ProviderEventID != "":
			ev.Key = ev.ProviderEventID
		case headerID != "" && len(items) == 1:
			ev.Key, ev.ProviderEventID = headerID, headerID
		case headerID != "":
			ev.Key = envelope.Key(headerID, strconv.Itoa(i))
		default:
			sum := sha256.Sum256(raw)
			ev.Key = envelope.Key(ev.ProviderType, ev.Time.UTC().Format(time.RFC3339Nano), hex.EncodeToString(sum[:]))
		}
		evs = append(evs, ev)
	}
	return evs, nil
}

func (p *provider) event(raw json.RawMessage) (providers.Event, error) {
	typ, err := leaf(raw, p.typ)
	if err != nil || typ == "" {
		return providers.Event{}, fmt.Errorf("no %s", p.g.TypeField)
	}
	ts, err := leaf(raw, p.time)
	if err != nil || ts == "" {
		return providers.Event{}, fmt.Errorf("no %s", p.g.TimeField)
	}
	t, err := parseTime(ts)
	if err != nil {
		return providers.Event{}, fmt.Errorf("%s: %v", p.g.TimeField, err)
	}
	id := ""
	if p.id != nil {
		if id, err = leaf(raw, p.id); err != nil {
			return providers.Event{}, fmt.Errorf("%s: %v", p.g.IDField, err)
		}
	}
	data := canonicalData(raw)
	data.ProviderType, data.Raw = typ, raw
	canonical, ok := p.g.Types[typ]
	if !ok || !envelope.Complete(canonical, data) {
		canonical = envelope.TypeUnmapped
	}
	return providers.Event{
		Type:            canonical,
		ProviderType:    typ,
		ProviderEventID: id,
		Time:            t,
		Data:            data,
	}, nil
}

// canonicalData reads the fields of envelope.Data (contact, message, status, …) that a
// sender speaking Exacto's shape puts in the event itself or under its "data" object.
// Fields of another shape are ignored; the raw payload keeps everything.
func canonicalData(raw json.RawMessage) envelope.Data {
	var d envelope.Data
	if inner, ok := lookup(raw, []string{"data"}); ok && json.Unmarshal(inner, &d) == nil && !empty(d) {
		return usable(d)
	}
	var top envelope.Data
	if json.Unmarshal(raw, &top) == nil {
		return usable(top)
	}
	return envelope.Data{}
}

// usable drops the parts of d that name nothing (a property without a name, a meeting
// or an opportunity without an id) and what only Exacto derives (a classification, a
// cause), and reads a bounce kind it does not know as unknown: the raw payload keeps
// them as sent, the envelope's schema would refuse them.
func usable(d envelope.Data) envelope.Data {
	if d.Property != nil && d.Property.Name == "" {
		d.Property = nil
	}
	if d.Meeting != nil && d.Meeting.ID == "" {
		d.Meeting = nil
	}
	if d.Opportunity != nil && d.Opportunity.ID == "" {
		d.Opportunity = nil
	}
	if b := d.Bounce; b != nil && b.Kind != "" && b.Kind != "hard" && b.Kind != "soft" && b.Kind != "unknown" {
		c := *b
		c.Kind = "unknown"
		d.Bounce = &c
	}
	d.Classification, d.Cause = nil, ""
	return d
}

func empty(d envelope.Data) bool {
	return d.Contact == nil && d.Message == nil && d.Status == "" && d.Property == nil && d.Meeting == nil && d.Opportunity == nil && d.Campaign == nil && d.Bounce == nil
}

// lookup follows a dotted path of object keys; null counts as absent.
func lookup(raw json.RawMessage, path []string) (json.RawMessage, bool) {
	for _, key := range path {
		var obj map[string]json.RawMessage
		if json.Unmarshal(raw, &obj) != nil {
			return nil, false
		}
		var ok bool
		if raw, ok = obj[key]; !ok {
			return nil, false
		}
	}
	return raw, string(raw) != "null"
}

// leaf reads the string or number at path; "" when absent.
func leaf(raw json.RawMessage, path []string) (string, error) {
	v, ok := lookup(raw, path)
	if !ok {
		return "", nil
	}
	switch c := v[0]; {
	case c == '"':
		var s string
		err := json.Unmarshal(v, &s)
		return s, err
	case c == '-' || c >= '0' && c <= '9':
		return string(v), nil
	}
	return "", errors.New("not a string or a number")
}

// parseTime reads RFC 3339, or unix seconds (with an optional fraction) or
// milliseconds, as a number or a string of digits.
func parseTime(s string) (time.Time, error) {
	var t time.Time
	whole, frac, dotted := strings.Cut(s, ".")
	if n, err := strconv.ParseInt(whole, 10, 64); err == nil && (!dotted || digits(frac)) {
		switch {
		case n <= 0:
			return t, errors.New("not after 1970")
		case dotted:
			ns, _ := strconv.Atoi((frac + "000000000")[:9])
			t = time.Unix(n, int64(ns))
		case n >= 1e11: // milliseconds: as seconds it would be after the year 5000
			t = time.UnixMilli(n)
		default:
			t = time.Unix(n, 0)
		}
	} else if t, err = time.Parse(time.RFC3339Nano, s); err != nil {
		return t, errors.New("not RFC 3339 or unix seconds")
	}
	if t.Year() > 9999 {
		return time.Time{}, errors.New("after the year 9999")
	}
	return t.UTC(), nil
}

func digits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func orBody(field string) string {
	if field == "" {
		return "the body"
	}
	return field
}

// Sign signs a delivery as a sender configured like Default does.
func Sign(method, url string, body []byte, secret string, now time.Time) (http.Header, []byte, error) {
	return SignWith(Default, method, url, body, secret, now)
}

// SignWith signs a delivery as a sender configured like g does (an endpoint's own
// generic: block).
func SignWith(g providers.Generic, method, url string, body []byte, secret string, now time.Time) (http.Header, []byte, error) {
	s, err := compile(g)
	if err != nil {
		return nil, nil, err
	}
	h := http.Header{}
	if s.g.TimestampHeader != "" {
		h.Set(s.g.TimestampHeader, strconv.FormatInt(now.Unix(), 10))
	}
	if s.g.IDHeader != "" {
		sum := sha256.Sum256(body)
		h.Set(s.g.IDHeader, "msg_"+hex.EncodeToString(sum[:12]))
	}
	mac := s.mac([]byte(secret), s.content(&providers.Request{Method: method, URL: url, Header: h, Body: body}))
	sig := hex.EncodeToString(mac)
	if s.g.Encoding == "base64" {
		sig = base64.StdEncoding.EncodeToString(mac)
	}
	h.Set(s.g.Header, s.g.Prefix+sig)
	return h, body, nil
}
