package providers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// tokenDecode is Decode as it was before checkStrict: encoding/json's Decoder.Token
// walking every value for duplicate keys and depth. It is the oracle checkStrict must
// agree with, input for input.
func tokenDecode(data []byte, v any) error {
	if !utf8.Valid(data) {
		return fmt.Errorf("%w: invalid UTF-8", ErrMalformed)
	}
	check := json.NewDecoder(bytes.NewReader(data))
	check.UseNumber()
	if err := tokenCheck(check, 0); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("%w: data after the JSON value", ErrMalformed)
	}
	return nil
}

func tokenCheck(dec *json.Decoder, depth int) error {
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return nil
	}
	if depth >= maxDepth {
		return fmt.Errorf("%w: nested deeper than %d", ErrMalformed, maxDepth)
	}
	var seen []string
	for dec.More() {
		if d == '{' {
			kt, err := dec.Token()
			if err != nil {
				return fmt.Errorf("%w: %v", ErrMalformed, err)
			}
			key, _ := kt.(string)
			for _, k := range seen { // equal under case folding, as encoding/json matches fields
				if strings.EqualFold(k, key) {
					return fmt.Errorf("%w: duplicate key", ErrMalformed)
				}
			}
			seen = append(seen, key)
		}
		if err := tokenCheck(dec, depth+1); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil {
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return nil
}

// sameAsTokenDecode fails t unless Decode and tokenDecode both refuse data (with
// ErrMalformed) or both take it and give the same value, and checkStrict alone takes
// exactly the valid JSON the token walk takes (Decode's later json.Unmarshal must not
// be what refuses).
func sameAsTokenDecode(t *testing.T, data []byte) {
	t.Helper()
	if utf8.Valid(data) {
		strict := checkStrict(data) == nil
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		walk := json.Valid(data) && tokenCheck(dec, 0) == nil
		if strict != walk {
			t.Fatalf("%q: checkStrict takes it: %v, the token walk and json.Valid: %v", data, strict, walk)
		}
	}
	var got, want any
	errGot, errWant := Decode(data, &got), tokenDecode(data, &want)
	switch {
	case (errGot == nil) != (errWant == nil):
		t.Fatalf("%q: Decode says %v, the token walk %v", data, errGot, errWant)
	case errGot != nil && !errors.Is(errGot, ErrMalformed):
		t.Fatalf("%q: %v does not wrap ErrMalformed", data, errGot)
	case errGot == nil && !reflect.DeepEqual(got, want):
		t.Fatalf("%q: Decode gives %#v, the token walk %#v", data, got, want)
	}
}

var strictCases = []string{
	`{}`, `[]`, `""`, `0`, `-0`, `1.5e+3`, `true`, `null`, ` {"a" : [1, 2.0, -3e4] } `,
	`{"a":1,"a":2}`, `{"a":1,"\u0061":2}`, `{"a":{"b":1,"b":2}}`, `[{"a":1},{"a":1}]`,
	`{"a":{"a":1},"b":{"a":1}}`, `{"\ud800":1,"\ufffd":2}`, `{"\ud800":1,"\udc00":2}`,
	`{"é":1,"\u00e9":2}`, `{"a\/b":1,"a/b":2}`, `{"A":1,"a":2}`, `{"É":1,"é":2}`, `{"\u212a":1,"k":2}`,
	`{"ſ":1,"S":2}`, `{"event_type":"email_opened","EVENT_TYPE":"lead_unsubscribed"}`, `{"a":{"Type":1,"type":2}}`,
	`{"a":1}x`, `{"a":1}{}`, `[1,]`, `{"a":1,}`, `{"a" 1}`, `{a:1}`, `{"a":}`, `[`, `{`,
	`"abc`, "\"a\x01b\"", "\"a\x1fb\"", `"\x"`, `"\u12g4"`, `01`, `-`, `1.`, `1e`, `.5`, `+1`, `tru`,
	`nul`, `True`, `[1 2]`, `[] []`, "\t[]\r\n", ``, ` `, `{"a":1}  ,`, `"\uD834\uDD1E"`,
	`{"a":"\"","b":"\\"}`, `{"":1,"":2}`, `[1e400]`, `{"a":1e400}`,
	strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth),
	strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1),
	strings.Repeat(`{"a":`, maxDepth) + "1" + strings.Repeat("}", maxDepth),
	strings.Repeat(`{"a":`, maxDepth+1) + "1" + strings.Repeat("}", maxDepth+1),
	manyKeys(200, -1), manyKeys(200, 150), manyKeys(fewKeys+1, fewKeys), manyKeys(fewKeys, fewKeys-1),
	upperKey(200, 150), upperKey(fewKeys+1, fewKeys), upperKey(fewKeys, 3),
}

// upperKey is manyKeys(n, -1) with the key of index dup written again upper-cased.
func upperKey(n, dup int) string {
	return strings.Replace(manyKeys(n, -1), `"end"`, fmt.Sprintf(`"K%d":0,"end"`, dup), 1)
}

// manyKeys is an object of n keys k0…, the key of index dup written again at its end
// (dup < 0: none); keys above fewKeys are looked up in a map.
func manyKeys(n, dup int) string {
	var b strings.Builder
	b.WriteString("{")
	for i := range n {
		fmt.Fprintf(&b, `"k%d":%d,`, i, i)
	}
	if dup >= 0 {
		fmt.Fprintf(&b, `"\u00%x%d":0,`, 'k', dup) // k written as an escape
	}
	b.WriteString(`"end":true}`)
	return b.String()
}

func TestDecodeIsTheTokenWalk(t *testing.T) {
	for _, c := range strictCases {
		sameAsTokenDecode(t, []byte(c))
	}
	for _, c := range []struct {
		body, want string
	}{
		{`{"a":1,"\u0061":2}`, "duplicate key"},
		{manyKeys(200, 150), "duplicate key"},
		{manyKeys(fewKeys+1, fewKeys), "duplicate key"},
		{`{"event_type":"email_opened","EVENT_TYPE":"lead_unsubscribed"}`, `keys "event_type" and "EVENT_TYPE" differ only in case`},
		{`{"type":"a","\u0054ype":"b"}`, `keys "type" and "Type" differ only in case`},
		{upperKey(200, 150), `keys "k150" and "K150" differ only in case`},
		{`{"\u212a":1,"k":2}`, "differ only in case"},
		{strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1), "nested deeper"},
		{`{"a":1} x`, "data after the JSON value"},
		{"\"a\x01b\"", "invalid character"},
	} {
		var v any
		if err := Decode([]byte(c.body), &v); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Decode(%.40q) = %v, want an error saying %q", c.body, err, c.want)
		}
	}
	samples, _ := filepath.Glob("*/testdata/*.json")
	if len(samples) < 10 {
		t.Fatalf("%d provider samples found, want the testdata of every provider", len(samples))
	}
	rng := rand.New(rand.NewPCG(15, 16))
	var corpus [][]byte
	for _, f := range samples {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		corpus = append(corpus, b)
	}
	for range 300 {
		corpus = append(corpus, randomJSON(rng, 0))
	}
	for _, c := range strictCases {
		corpus = append(corpus, []byte(c))
	}
	accepted := 0
	for i := range 20000 {
		b := bytes.Clone(corpus[i%len(corpus)])
		for range rng.IntN(4) {
			b = mutate(rng, b)
		}
		sameAsTokenDecode(t, b)
		if checkStrict(b) == nil && utf8.Valid(b) {
			accepted++
		}
	}
	if accepted < 2000 || accepted > 18000 {
		t.Fatalf("%d of 20000 inputs taken: the mix tests too little of one side", accepted)
	}
}

var jsonBits = []string{`{`, `}`, `[`, `]`, `,`, `:`, `"`, `\`, `\u0061`, `\ud800`, ` `, `-`, `.`, `e`, `0`, `1`, `"a"`, `"a":1,`, "\x00", "\x1f", "\x7f", "é", `true`, `n`}

func mutate(rng *rand.Rand, b []byte) []byte {
	i := 0
	if len(b) > 0 {
		i = rng.IntN(len(b))
	}
	bit := jsonBits[rng.IntN(len(jsonBits))]
	switch rng.IntN(3) {
	case 0: // insert
		return append(b[:i:i], append([]byte(bit), b[i:]...)...)
	case 1: // delete
		if len(b) == 0 {
			return b
		}
		return append(b[:i:i], b[i+1:]...)
	default: // replace
		if len(b) == 0 {
			return []byte(bit)
		}
		return append(b[:i:i], append([]byte(bit), b[i+1:]...)...)
	}
}

// randomJSON is a value whose objects often repeat a key, in various spellings.
func randomJSON(rng *rand.Rand, depth int) []byte {
	keys := []string{`"a"`, `"\u0061"`, `"b"`, `"A"`, `"é"`, `"\u00e9"`, `"É"`, `""`, `"a\/b"`, `"a/b"`, `"k"`, `"\u212a"`, `"ſ"`, `"S"`}
	ws := func() string { return []string{"", " ", "\n\t"}[rng.IntN(3)] }
	switch k := rng.IntN(8); {
	case k == 0 && depth < 6:
		var b bytes.Buffer
		b.WriteString("{" + ws())
		for i := range rng.IntN(4) {
			if i > 0 {
				b.WriteString("," + ws())
			}
			b.WriteString(keys[rng.IntN(len(keys))] + ws() + ":" + ws())
			b.Write(randomJSON(rng, depth+1))
		}
		return append(b.Bytes(), ws()+"}"...)
	case k == 1 && depth < 6:
		var b bytes.Buffer
		b.WriteString("[")
		for i := range rng.IntN(4) {
			if i > 0 {
				b.WriteString(",")
			}
			b.Write(randomJSON(rng, depth+1))
		}
		return append(b.Bytes(), "]"...)
	case k == 2:
		return []byte([]string{"0", "-1.25", "3e2", "-0.0E-7", "123456789012345678901234567890"}[rng.IntN(5)])
	case k == 3:
		return []byte([]string{"true", "false", "null"}[rng.IntN(3)])
	default:
		return []byte([]string{`"x"`, `"\"q\""`, `"\u00e9\ud83d\ude00"`, `"tab\there"`, `"é"`, `""`}[rng.IntN(6)])
	}
}

func FuzzDecode(f *testing.F) {
	for _, c := range strictCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, data []byte) { sameAsTokenDecode(t, data) })
}

// The gateway runs checkStrict on every body: it must not allocate for a payload
// whose keys have no escapes.
func TestCheckStrictAllocatesNothing(t *testing.T) {
	body, err := os.ReadFile("instantly/testdata/reply_received.json")
	if err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() {
		if err := checkStrict(body); err != nil {
			t.Fatal(err)
		}
	}); n > 1 {
		t.Fatalf("checkStrict allocates %.0f times per body, want at most 1", n)
	}
}

// BenchmarkDecode: a reply webhook's body through Decode, against the token walk it
// replaced (`make bench` does not run it; go test -bench Decode ./pkg/providers).
func BenchmarkDecode(b *testing.B) {
	body, err := os.ReadFile("instantly/testdata/reply_received.json")
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		decode func([]byte, any) error
	}{{"strict", Decode}, {"token walk", tokenDecode}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var v map[string]any
				if err := c.decode(body, &v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
