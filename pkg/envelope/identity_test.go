package envelope

import (
	"strings"
	"testing"
)

func TestCheckIdentity(t *testing.T) {
	for _, d := range []Data{
		{},
		{Contact: &Contact{Email: "ana+news@example.com", Phone: "+1 (555) 010-0000", Name: "José Ñúñez 👨‍👩‍👧", ExternalID: "hubspot:51"}},
		{Contact: &Contact{Email: "用户@例子.广告"}, Campaign: &Campaign{ID: "c-1"}, Message: &Message{ID: "wamid.HBgLMTY1MDM4Nzk0MzkVAgARGBJBRkM0", Text: "line one\nline two\t\x00"}},
		{Contact: &Contact{Email: strings.Repeat("a", 64) + "@" + strings.Repeat("b", 255)}},
		{Contact: &Contact{Email: "\ufeffana@example.com", Phone: "+1\u200b555 0100"}}, // a CSV import's leftovers: junk, no attack
		{Contact: &Contact{Name: "\u202bשרה\u202c"}},                                   // a name's own direction
	} {
		if err := d.CheckIdentity(); err != nil {
			t.Errorf("%+v: %v, want it taken", d.Contact, err)
		}
	}
	for _, c := range []struct {
		d    Data
		want string
	}{
		{Data{Contact: &Contact{Email: "ana\x00@example.com"}}, "contact.email: control character U+0000 at byte 3"},
		{Data{Contact: &Contact{Email: "ana@example.com\r\nBcc: eve@example.com"}}, "contact.email: control character U+000D"},
		{Data{Contact: &Contact{Email: "ana@exam\u0085ple.com"}}, "control character U+0085"},
		{Data{Contact: &Contact{Email: "ana\u202e@example.com"}}, "contact.email: bidirectional control U+202E"},
		{Data{Contact: &Contact{ExternalID: "lead\u2066-1"}}, "contact.external_id: bidirectional control U+2066"},
		{Data{Contact: &Contact{Phone: "+1555\x7f0100"}}, "contact.phone: control character U+007F"},
		{Data{Contact: &Contact{Phone: strings.Repeat("5", 65)}}, "contact.phone: 65 bytes, over the 64"},
		{Data{Contact: &Contact{Name: "Ana\x1b[31m"}}, "contact.name: control character U+001B"},
		{Data{Contact: &Contact{ExternalID: "lead\x00-1"}}, "contact.external_id: control character"},
		{Data{Contact: &Contact{Email: strings.Repeat("a", 321)}}, "contact.email: 321 bytes, over the 320"},
		{Data{Campaign: &Campaign{ID: "c-1\n"}}, "campaign.id: control character"},
		{Data{Message: &Message{ID: strings.Repeat("m", 513)}}, "message.id: 513 bytes"},
	} {
		if err := c.d.CheckIdentity(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v %+v %+v: %v, want an error saying %q", c.d.Contact, c.d.Campaign, c.d.Message, err, c.want)
		}
	}
}

// Every event of every delivery is checked: the check allocates nothing.
func TestCheckIdentityAllocatesNothing(t *testing.T) {
	d := Data{Contact: &Contact{Email: "ana@example.com", Phone: "+15550100000", Name: "Ana", ExternalID: "hubspot:51"},
		Campaign: &Campaign{ID: "c-1"}, Message: &Message{ID: "m-1"}}
	if n := testing.AllocsPerRun(100, func() {
		if err := d.CheckIdentity(); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("%.0f allocations a check, want none", n)
	}
}
