package envelope

import (
	"fmt"
	"unicode"
)

// Bounds of the fields that name a person or a platform's object: an e-mail address
// is at most 320 bytes (RFC 5321: 64 of local part, @, 255 of domain), a phone number
// (E.164: 15 digits) leaves room for any way of writing one, and every provider id
// seen is under 200 bytes.
const (
	maxEmail = 320
	maxPhone = 64
	maxName  = 512
	maxID    = 512
)

// CheckIdentity refuses the fields of d that name someone or something (the contact's
// e-mail, phone, name and external id; the campaign's and the message's id) when no
// person or platform could hold them: a control character (NUL, a line break in an
// address that is sent on to a platform's block list, a header to inject), a
// bidirectional control in an address or id (a right-to-left override that makes one
// address show as another), or a length past the bounds above. Other invisible
// characters (a byte-order mark left by a CSV import, a zero-width space) are junk a
// CRM may hold, not an attack: taken. The gateway keeps an event that fails as
// unmapped: stored, never acted on (pkg/ingest).
func (d Data) CheckIdentity() error {
	type field struct {
		name, v string
		max     int
		named   bool // a person's name: bidirectional text is a name's right
	}
	var fields [6]field // on the stack: every event of every delivery passes here
	if c := d.Contact; c != nil {
		fields[0], fields[1] = field{"contact.email", c.Email, maxEmail, false}, field{"contact.phone", c.Phone, maxPhone, false}
		fields[2], fields[3] = field{"contact.name", c.Name, maxName, true}, field{"contact.external_id", c.ExternalID, maxID, false}
	}
	if c := d.Campaign; c != nil {
		fields[4] = field{"campaign.id", c.ID, maxID, false}
	}
	if m := d.Message; m != nil {
		fields[5] = field{"message.id", m.ID, maxID, false}
	}
	for _, f := range fields {
		if err := checkIdentityField(f.v, f.max, f.named); err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
	}
	return nil
}

// bidi reports whether r overrides or isolates the text's direction (U+202A to U+202E,
// U+2066 to U+2069): an address holding one shows as another.
func bidi(r rune) bool { return r >= 0x202A && r <= 0x202E || r >= 0x2066 && r <= 0x2069 }

func checkIdentityField(v string, max int, named bool) error {
	if len(v) > max {
		return fmt.Errorf("%d bytes, over the %d any real one takes", len(v), max)
	}
	for i, r := range v {
		switch {
		case unicode.IsControl(r):
			return fmt.Errorf("control character %U at byte %d", r, i)
		case bidi(r) && !named:
			return fmt.Errorf("bidirectional control %U at byte %d", r, i)
		}
	}
	return nil
}
