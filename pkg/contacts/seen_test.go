package contacts

import (
	"maps"
	"slices"
	"testing"
)

// firstByCopy is First as it was written before it shared s's ids: every call copies.
func firstByCopy(s Seen) Seen {
	out := Seen{External: map[string]string{}}
	for k, v := range s.External {
		if !slices.Contains(identifying[:], k) {
			out.External[k] = v
		}
	}
	switch {
	case Key("email", s.Email) != "":
		out.Email = s.Email
	case Key("phone", s.Phone) != "":
		out.Phone = s.Phone
	default:
		for _, kind := range identifying {
			if v := s.External[kind]; v != "" {
				out.External[kind] = v
				break
			}
		}
	}
	return out
}

// everySeen is every Seen of a few e-mails, phones and ids (valid, invalid, absent),
// each kind of id absent, empty or set.
func everySeen() []Seen {
	var out []Seen
	var ids func(i int, m map[string]string)
	ids = func(i int, m map[string]string) {
		if i == len(Kinds) {
			for _, email := range []string{"", " ", "Ana@Example.com"} {
				for _, phone := range []string{"", "12", "+14155550100"} {
					out = append(out, Seen{Email: email, Phone: phone, External: maps.Clone(m)})
				}
			}
			return
		}
		ids(i+1, m)
		for _, v := range []string{"", "x:" + Kinds[i]} {
			m[Kinds[i]] = v
			ids(i+1, m)
			delete(m, Kinds[i])
		}
	}
	ids(0, map[string]string{})
	return append(out, Seen{Email: "ana@example.com"}) // no ids at all
}

// First, sharing s's ids when it drops none of them, says what copying them said.
func TestFirstIsFirstByCopy(t *testing.T) {
	for _, s := range everySeen() {
		got, want := s.First(), firstByCopy(s)
		if got.Email != want.Email || got.Phone != want.Phone || !maps.Equal(got.External, want.External) {
			t.Fatalf("First(%+v) = %+v, want %+v", s, got, want)
		}
		if len(got.Keys()) > 1 {
			t.Fatalf("First(%+v) has keys %v, want at most one", s, got.Keys())
		}
	}
}

func TestFirstOfOneKeySharesItsIDs(t *testing.T) {
	s := Seen{Email: "ana@example.com", External: map[string]string{CampaignID: "instantly:c1", MessageID: "m1"}}
	f := s.First()
	f.External["probe"] = "x" // the same map: seen through s
	if s.External["probe"] != "x" {
		t.Fatal("First of a Seen with one key copied its ids")
	}
	two := Seen{Email: "ana@example.com", External: map[string]string{SendingPlatformContactID: "instantly:l1"}}
	if f := two.First(); len(f.External) != 0 || len(two.External) != 1 {
		t.Fatalf("First of two keys: %+v (from %+v), want the lead id dropped from a copy", f, two)
	}
}

// Two Seen with one Identity have the same keys.
func TestIdentityNamesTheKeys(t *testing.T) {
	keys := map[Identity][]string{}
	for _, s := range everySeen() {
		k, ok := keys[s.Identity()]
		if !ok {
			keys[s.Identity()] = s.Keys()
		} else if !slices.Equal(k, s.Keys()) {
			t.Fatalf("%+v: keys %v, another Seen of its Identity %v", s, s.Keys(), k)
		}
	}
}
