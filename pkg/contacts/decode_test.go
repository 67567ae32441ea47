package contacts

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
)

// randomRecord is a record with strings json.Marshal escapes or replaces (quotes,
// backslashes, <>&, control characters, invalid UTF-8), lists and maps nil, empty or
// full, and times in other zones, to the nanosecond, or zero.
func randomRecord(r *rand.Rand) Record {
	pick := func() string {
		plain := []string{"", "ct_0a1b", "email:ana@northwind.example", "hubspot:42", "Zoë", "日本"}
		odd := []string{"a\"b", `a\b`, "<x>&y", "tab\there", "\x00nul", "bad\xffutf8", "\u2028sep"}
		if r.IntN(40) == 0 {
			return odd[r.IntN(len(odd))]
		}
		return plain[r.IntN(len(plain))]
	}
	list := func() []string {
		switch r.IntN(4) {
		case 0:
			return nil
		case 1:
			return []string{}
		}
		out := make([]string, 1+r.IntN(3))
		for i := range out {
			out[i] = pick()
		}
		return out
	}
	rec := Record{ContactID: pick(), AccountID: pick(), Keys: list(), Emails: list(), Phones: list(), Merged: list(), MergedInto: pick()}
	switch r.IntN(3) {
	case 0:
	case 1:
		rec.External = map[string][]string{}
	default:
		rec.External = map[string][]string{}
		for range 1 + r.IntN(3) {
			rec.External[pick()] = list()
		}
	}
	switch r.IntN(3) {
	case 0:
	case 1:
		rec.Updated = time.Date(2026, 12, 5, 10, 4, 5, r.IntN(1e9), time.UTC)
	default:
		rec.Updated = time.Date(2026, 12, 5, 10, 4, 5, 0, time.FixedZone("X", 3600*(r.IntN(25)-12)))
	}
	return rec
}

// decodedAlike decodes data both ways and fails unless both give the same record, or both an
// error; it reports whether the fast path read it.
func decodedAlike(t *testing.T, data []byte) (fast bool) {
	t.Helper()
	var want, got Record
	werr := json.Unmarshal(data, &want)
	gerr := decodeRecord(data, &got)
	if (werr == nil) != (gerr == nil) || (werr == nil && !reflect.DeepEqual(got, want)) {
		t.Fatalf("%s:\ndecodeRecord %+v, %v\njson.Unmarshal %+v, %v", data, got, gerr, want, werr)
	}
	var r Record
	return (&recordScan{b: data}).record(&r)
}

// decodeRecord gives what json.Unmarshal gives: for records as json.Marshal writes
// them, and for their JSON respelled in every way the fast path leaves to
// json.Unmarshal. It fails if the fast path is never taken (everything fell back) or
// if it takes what it should not.
func TestDecodeRecordIsUnmarshal(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 12))
	fast := 0
	for range 3000 {
		data, err := json.Marshal(randomRecord(r))
		if err != nil {
			t.Fatal(err)
		}
		if decodedAlike(t, data) {
			fast++
		}
	}
	if fast < 300 || fast == 3000 {
		t.Fatalf("the fast path read %d records of 3000", fast)
	}
	plain := `{"contact_id":"ct_1","account_id":"ac_1","keys":["email:ana@x.example"],"emails":["ana@x.example"],` +
		`"external":{"crm_contact_id":["hubspot:1"],"campaign_id":[]},"merged":["ct_0"],"updated":"2026-12-05T10:04:05.123Z"}`
	if !decodedAlike(t, []byte(plain)) {
		t.Fatal("a plain record was not read by the fast path")
	}
	for _, data := range []string{
		strings.Replace(plain, `"contact_id"`, `"Contact_ID"`, 1),    // another case: json matches it
		strings.Replace(plain, `"keys":`, `"keys" :`, 1),             // a space
		strings.Replace(plain, `{"contact_id"`, ` {"contact_id"`, 1), // a space first
		plain + " ",  // a space after
		plain + "{}", // something after
		strings.Replace(plain, `"merged":["ct_0"]`, `"merged":null`, 1),                       // a null
		strings.Replace(plain, `"ac_1"`, `"ac_1","account_id":"ac_2"`, 1),                     // a key twice: json takes the last
		strings.Replace(plain, `"campaign_id":[]`, `"campaign_id":[],"campaign_id":["c"]`, 1), // a kind twice
		strings.Replace(plain, `"merged":`, `"external":{"message_id":["m1"]},"merged":`, 1),  // external twice: json merges the maps
		strings.Replace(plain, `"ct_1"`, "\"ct\xff1\"", 1),                                    // invalid UTF-8: json makes it U+FFFD
		strings.Replace(plain, `ana@x`, `ana\u0040x`, 1),                                      // an escape
		strings.Replace(plain, `"ct_1"`, `"ct\u00e9"`, 1),                                     // an escaped letter
		strings.Replace(plain, `"merged":["ct_0"],`, `"unknown":1,"merged":["ct_0"],`, 1),     // a field records do not have
		strings.Replace(plain, `.123Z`, `.123+01:00`, 1),                                      // a zone
		strings.Replace(plain, `2026-12-05T10:04:05.123Z`, `yesterday`, 1),                    // not a time
		strings.Replace(plain, `"ct_1"`, `1`, 1),                                              // a number for a string
		strings.Replace(plain, `["ct_0"]`, `["ct_0",]`, 1),                                    // a trailing comma
		strings.Replace(plain, "ct_1", "ct\x011", 1),                                          // a raw control character: json refuses it
		strings.Replace(plain, `"keys":[`, `"keys":["x"],"keys":[`, 1),                        // a list twice: json keeps the last
		plain[:len(plain)-1], // cut short
		`{}`, `null`, `[]`, ``, `{"keys":["a"`,
	} {
		decodedAlike(t, []byte(data))
	}
}

// The fast path makes the strings and lists a record holds, not a reflection's worth.
func TestDecodeRecordAllocatesLittle(t *testing.T) {
	data, err := json.Marshal(Record{ContactID: "ct_1", AccountID: "ac_1", Keys: []string{"email:ana@x.example"},
		Emails: []string{"ana@x.example"}, External: map[string][]string{CampaignID: {"instantly:c1"}, MessageID: {"m1", "m2"}},
		Updated: time.Date(2026, 12, 5, 10, 4, 5, 0, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	n := testing.AllocsPerRun(100, func() {
		var r Record
		if err := decodeRecord(data, &r); err != nil {
			t.Fatal(err)
		}
	})
	std := testing.AllocsPerRun(100, func() {
		var r Record
		if err := json.Unmarshal(data, &r); err != nil {
			t.Fatal(err)
		}
	})
	if n > 17 || n >= std {
		t.Fatalf("decodeRecord allocates %.0f times, json.Unmarshal %.0f", n, std)
	}
}
