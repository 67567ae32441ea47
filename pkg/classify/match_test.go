package classify

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// matchEverywhere is match as it was written before it looked phrases up by their
// first word: every phrase tried at every position (each found one counted as match
// counts it).
func matchEverywhere(toks []string, lang string, allow func(string) bool) *tally {
	t := &tally{score: map[string]float64{}, top: map[string]float64{}, evidence: map[string][]string{}}
	used := make([]bool, len(toks))
	for _, p := range compiled {
		if !allow(p.label) {
			continue
		}
		n := len(p.toks)
		for i := 0; i+n <= len(toks); i++ {
			if !matchAt(toks, used, i, p.toks) {
				continue
			}
			for k := i; k < i+n; k++ {
				used[k] = true
			}
			t.matched(p, toks, i, lang)
		}
	}
	return t
}

// match scores every text as trying every phrase everywhere did: the samples of
// testdata, and random texts made of the lexicon's own words (phrases inside phrases,
// repeated, negated, cut by sentence ends), in every language and for either set of
// labels a classification asks about.
func TestMatchIsMatchEverywhere(t *testing.T) {
	var texts [][]string
	for _, f := range []string{"testdata/replies.jsonl", "testdata/heldout.jsonl", "testdata/blind.jsonl"} {
		for _, s := range loadSamplesFrom(t, f) {
			texts = append(texts, tokenize(s.Text))
		}
	}
	var words []string
	for _, p := range compiled {
		for _, w := range p.toks {
			words = append(words, strings.TrimSuffix(w, "*")+map[bool]string{true: "s", false: ""}[strings.HasSuffix(w, "*")])
		}
	}
	for n := range negators {
		words = append(words, n)
	}
	words = append(words, boundary, boundary, "the", "a", "we")
	r := rand.New(rand.NewPCG(1, 2))
	for range 1500 {
		toks := make([]string, 1+r.IntN(40))
		for i := range toks {
			toks[i] = words[r.IntN(len(words))]
		}
		texts = append(texts, toks)
	}
	allows := []func(string) bool{func(l string) bool { return l == bounce }, func(l string) bool { return l != bounce }}
	matched := 0
	for _, toks := range texts {
		for _, lang := range []string{"en", "es", "pt", "und"} {
			for _, allow := range allows {
				got, want := match(toks, lang, allow), matchEverywhere(toks, lang, allow)
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("%q (%s):\n by first word %+v\n everywhere    %+v", toks, lang, got, want)
				}
				matched += len(want.score)
			}
		}
	}
	if matched < 10000 {
		t.Fatalf("only %d labels scored over every text: the texts match too little to test match", matched)
	}
}
