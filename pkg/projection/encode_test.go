package projection

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"

	"exacto.dev/pkg/lifecycle"
)

// encode writes the bytes json.Marshal writes, for random contact records and
// campaign shards: strings that need escaping (HTML, quotes, control characters,
// invalid UTF-8, non-ASCII), nil and empty lists and maps, zero times, times in other
// zones and with nanoseconds, and years and zones json.Marshal refuses (then encode
// refuses too).
func TestEncodeIsMarshal(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 12))
	strs := []string{"", "a", "email:ana@northwind.example", `q"uote`, `back\slash`, "<b>&amp;</b>", "tab\there", "nl\n", "\x00\x1f",
		"Ünïcødé ✓", "\xff\xfe", "\u2028\u2029", "ct_9b1921144c000e70c57dcd7fdf35a252"}
	str := func() string { return strs[r.IntN(len(strs))] }
	list := func() []string {
		switch r.IntN(4) {
		case 0:
			return nil
		case 1:
			return []string{}
		}
		l := make([]string, 1+r.IntN(4))
		for i := range l {
			l[i] = str()
		}
		return l
	}
	tm := func() time.Time {
		switch r.IntN(7) {
		case 5:
			return time.Date(2026, 12, 5, 9, 30, 0, 0, time.FixedZone("far", 24*3600+60)) // refused by json.Marshal
		case 0:
			return time.Time{}
		case 1:
			return time.Date(2026, 12, 5, 9, 30, 1, 123456789, time.FixedZone("X", 5*3600+1800))
		case 2:
			return time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) // refused by json.Marshal
		case 3:
			return time.Date(2026, 12, 5, 9, 30, 0, 0, time.Local)
		}
		return time.Unix(r.Int64N(2e9), r.Int64N(1e9)).UTC()
	}
	state := func() lifecycle.State {
		if r.IntN(5) == 0 {
			return lifecycle.State{}
		}
		facts := make([]lifecycle.Fact, r.IntN(4))
		for i := range facts {
			facts[i] = lifecycle.Fact{ID: str(), Type: str(), Kind: lifecycle.Kind(str()), Time: tm(), Version: str(), Received: tm(),
				Provider: str(), Name: str(), Value: str(), Cause: str()}
		}
		return lifecycle.State{Facts: facts}
	}
	refused := 0
	for trial := range 3000 {
		c := Contact{Tenant: str(), ContactID: str(), AccountID: str(), Keys: list(), Lifecycle: state()}
		if r.IntN(3) > 0 {
			c.External = map[string][]string{}
			for range r.IntN(4) {
				c.External[str()] = list()
			}
		}
		if r.IntN(3) > 0 {
			c.Campaigns = map[string]lifecycle.State{}
			for range r.IntN(4) {
				c.Campaigns[str()] = state()
			}
		}
		if r.IntN(3) > 0 {
			c.Views = map[string]uint64{}
			for range r.IntN(3) {
				c.Views[str()] = r.Uint64N(1 << 20)
			}
		}
		sh := Shard{Tenant: str(), Campaign: str()}
		if r.IntN(4) > 0 {
			sh.Members = map[string]Member{}
			for range r.IntN(5) {
				sh.Members[str()] = Member{Rev: r.Uint64N(1 << 40), Status: lifecycle.Status(str()), Replied: r.IntN(2) == 0, Bounced: r.IntN(2) == 0,
					Unsubscribed: r.IntN(2) == 0, MeetingBooked: r.IntN(2) == 0, Opportunity: r.IntN(2) == 0, Discrepancies: r.IntN(3) - 1, Undecided: r.IntN(3), Views: r.Uint64N(3)}
			}
		}
		for _, v := range []any{c, sh} {
			want, werr := json.Marshal(v)
			got, gerr := encode(v)
			if (werr != nil) != (gerr != nil) || string(got) != string(want) {
				t.Fatalf("trial %d: %#v\n encode %s (%v)\n json   %s (%v)", trial, v, got, gerr, want, werr)
			}
			if werr != nil {
				refused++
			}
		}
	}
	if refused == 0 {
		t.Fatal("no record had a time json.Marshal refuses")
	}
}

// A contact record encodes without reflection: a handful of allocations, where
// json.Marshal makes several per map entry.
func TestEncodeAllocatesLittle(t *testing.T) {
	at := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	f := lifecycle.Fact{ID: "ev_1", Type: "email.sent", Kind: "sent", Time: at, Provider: "instantly"}
	c := Contact{Tenant: "acme", ContactID: "ct_1", Keys: []string{"email:ana@northwind.example"},
		External:  map[string][]string{"campaign_id": {"instantly:c1"}, "message_id": {"m1", "m2"}},
		Lifecycle: lifecycle.State{Facts: []lifecycle.Fact{f, f}}, Campaigns: map[string]lifecycle.State{"instantly:c1": {Facts: []lifecycle.Fact{f, f, f}}}}
	ours := testing.AllocsPerRun(100, func() { _, _ = encode(c) })
	theirs := testing.AllocsPerRun(100, func() { _, _ = json.Marshal(c) })
	if ours > 4 || ours >= theirs {
		t.Fatalf("%.0f allocations to encode a contact record (json.Marshal: %.0f)", ours, theirs)
	}
}
