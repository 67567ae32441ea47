package verify

import (
	"errors"
	"testing"
	"time"

	"exacto.dev/pkg/providers"
)

func TestParseTimed(t *testing.T) {
	got, err := ParseTimed("t=1492774577,v1=00ff,v0=abcd,v1=AB12")
	if err != nil {
		t.Fatal(err)
	}
	if got.Timestamp != "1492774577" || !got.Time.Equal(time.Unix(1492774577, 0)) || len(got.Signatures) != 2 || got.Signatures[1][0] != 0xab {
		t.Fatalf("parsed %+v", got)
	}
	// An unreadable v1 beside a good one is skipped (stripe-go: "should be ignored").
	if got, err := ParseTimed("t=1,v1=bad_signature,v1=00ff"); err != nil || len(got.Signatures) != 1 {
		t.Fatalf("unreadable v1 beside a good one: %v %+v", err, got)
	}
	for header, want := range map[string]error{
		"":                      providers.ErrMissingSignature,
		"t=1":                   providers.ErrMissingSignature,
		"t=1,v0=00":             providers.ErrMissingSignature,
		"v1=00":                 providers.ErrBadSignature,
		"t=1,t=2,v1=00":         providers.ErrBadSignature,
		"t=-1,v1=00":            providers.ErrBadSignature,
		"t=1e9,v1=00":           providers.ErrBadSignature,
		"t=1,v1=0g":             providers.ErrBadSignature,
		"t=1,v1=":               providers.ErrBadSignature,
		"t=1, v1=00":            providers.ErrBadSignature,
		"t=1,v1=00,":            providers.ErrBadSignature,
		"t=1;v1=00":             providers.ErrBadSignature,
		"t=9999999999999,v1=00": providers.ErrBadSignature,
	} {
		if _, err := ParseTimed(header); !errors.Is(err, want) {
			t.Errorf("%q: got %v, want %v", header, err, want)
		}
	}
}

func TestWithin(t *testing.T) {
	now := time.Unix(1000, 0)
	for d, ok := range map[time.Duration]bool{0: true, 299 * time.Second: true, 300 * time.Second: true, 301 * time.Second: false, -301 * time.Second: false, -300 * time.Second: true} {
		err := Within(now.Add(-d), now, 5*time.Minute)
		if (err == nil) != ok || (err != nil && !errors.Is(err, providers.ErrTimestamp)) {
			t.Errorf("skew %v: %v", d, err)
		}
	}
}

func TestAnyEqual(t *testing.T) {
	a, b, c := []byte{1, 2}, []byte{3, 4}, []byte{1, 2}
	if !AnyEqual([][]byte{a, b}, [][]byte{{9}, c}) || AnyEqual([][]byte{a}, [][]byte{b, {1}}) || AnyEqual(nil, [][]byte{a}) {
		t.Fatal("AnyEqual")
	}
}

func FuzzParseTimed(f *testing.F) {
	for _, s := range []string{"t=1492774577,v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd", "t=,v1=", "t=1,v1=00,v1=ff,v0=", ",,,", "t=1=2,v1=00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, header string) {
		got, err := ParseTimed(header)
		if err == nil && (got.Timestamp == "" || len(got.Signatures) == 0) {
			t.Fatalf("accepted %q without t or v1", header)
		}
	})
}
