package classify

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
)

// blindScore is the outcome of classifying a labelled set.
type blindScore struct {
	n, correct     int
	tp, fp, fn     map[string]int
	langN, langOK  map[string]int
	confusion      map[[2]string]int // {want, got} → count
	misses         []string
	unsafePositive []string // a positive reply predicted as a suppressing/declining label
}

func (s blindScore) precision(l string) float64 { return ratio(s.tp[l], s.tp[l]+s.fp[l]) }
func (s blindScore) recall(l string) float64    { return ratio(s.tp[l], s.tp[l]+s.fn[l]) }
func (s blindScore) accuracy() float64          { return ratio(s.correct, s.n) }
func (s blindScore) langAccuracy(lang string) float64 {
	return ratio(s.langOK[lang], s.langN[lang])
}

func score(t *testing.T, samples []sample) blindScore {
	t.Helper()
	c := New()
	s := blindScore{
		tp: map[string]int{}, fp: map[string]int{}, fn: map[string]int{},
		langN: map[string]int{}, langOK: map[string]int{}, confusion: map[[2]string]int{},
	}
	positive := []string{interested, meeting, info}
	harmful := []string{unsubscribe, bounce, notInterested}
	for _, x := range samples {
		r, err := c.Classify(context.Background(), x.Text, "")
		if err != nil {
			t.Fatal(err)
		}
		s.n++
		s.langN[x.Lang]++
		s.confusion[[2]string{x.Label, r.Label}]++
		if r.Label == x.Label {
			s.correct++
			s.langOK[x.Lang]++
			s.tp[x.Label]++
			continue
		}
		s.fp[r.Label]++
		s.fn[x.Label]++
		line := fmt.Sprintf("%s want %-19s got %-19s %.2f %q ev=%q", x.Lang, x.Label, r.Label, r.Confidence, short(x.Text), r.Evidence)
		s.misses = append(s.misses, line)
		if slices.Contains(positive, x.Label) && slices.Contains(harmful, r.Label) {
			s.unsafePositive = append(s.unsafePositive, line)
		}
	}
	return s
}

func (s blindScore) table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n%-20s %9s %6s %4s\n", "label", "precision", "recall", "n")
	for _, l := range Labels {
		fmt.Fprintf(&b, "%-20s %9.2f %6.2f %4d\n", l, s.precision(l), s.recall(l), s.tp[l]+s.fn[l])
	}
	for _, lang := range []string{"en", "es", "pt"} {
		fmt.Fprintf(&b, "accuracy %s %.3f (%d/%d)\n", lang, s.langAccuracy(lang), s.langOK[lang], s.langN[lang])
	}
	fmt.Fprintf(&b, "accuracy all %.3f (%d/%d)", s.accuracy(), s.correct, s.n)
	return b.String()
}

// TestBlind measures testdata/blind.jsonl: replies written from the taxonomy
// in doc.go before the rules were read, and never used to tune them. It is the
// honest estimate of how the classifier generalises. Never tune on it and never
// relabel it to match the classifier; if you do tune on a reply, move it to
// replies.jsonl and write a fresh one here.
//
// The individual misses are not logged by default, so that looking at the test
// output while changing the lexicons does not leak the blind set into them;
// set EXACTO_BLIND_MISSES=1 to list them (for error analysis after a change).
func TestBlind(t *testing.T) {
	samples := loadSamplesFrom(t, "testdata/blind.jsonl")

	// Coverage: ≥ 180 replies, a third per language, every label in every
	// language (≥ 4 per label and language).
	perLang := map[string]int{}
	cover := map[[2]string]int{}
	for _, x := range samples {
		if !slices.Contains(Labels, x.Label) {
			t.Fatalf("unknown label %q", x.Label)
		}
		perLang[x.Lang]++
		cover[[2]string{x.Lang, x.Label}]++
	}
	if len(samples) < 180 {
		t.Errorf("%d samples, want ≥ 180", len(samples))
	}
	for _, lang := range []string{"en", "es", "pt"} {
		if perLang[lang] < 60 {
			t.Errorf("%s: %d samples, want ≥ 60", lang, perLang[lang])
		}
		for _, l := range Labels {
			if n := cover[[2]string{lang, l}]; n < 4 {
				t.Errorf("%s/%s: %d samples, want ≥ 4", lang, l, n)
			}
		}
	}

	s := score(t, samples)
	t.Log(s.table())
	if os.Getenv("EXACTO_BLIND_MISSES") != "" {
		for _, m := range s.misses {
			t.Log("MISS " + m)
		}
	}

	// Safety: never suppress a person wrongly, never drop a positive reply.
	for _, l := range []string{unsubscribe, bounce} {
		if p := s.precision(l); p < 1 {
			t.Errorf("%s precision %.2f, want 1.00", l, p)
		}
	}
	for _, m := range s.unsafePositive {
		t.Errorf("positive reply dropped: %s", m)
	}

	// Floors: a little below what the rules measured (see blindFloors).
	if a := s.accuracy(); a < blindFloors.accuracy {
		t.Errorf("blind accuracy %.3f, want ≥ %.2f", a, blindFloors.accuracy)
	}
	for lang, f := range blindFloors.lang {
		if a := s.langAccuracy(lang); a < f {
			t.Errorf("blind %s accuracy %.3f, want ≥ %.2f", lang, a, f)
		}
	}
	for l, f := range blindFloors.recall {
		if r := s.recall(l); r < f {
			t.Errorf("blind %s recall %.2f, want ≥ %.2f", l, r, f)
		}
	}
	for l, f := range blindFloors.precision {
		if p := s.precision(l); p < f {
			t.Errorf("blind %s precision %.2f, want ≥ %.2f", l, p, f)
		}
	}
}

// blindFloors are set just below the figures measured on blind.jsonl; raise
// them when the rules improve, never lower them to make a change pass.
var blindFloors = struct {
	accuracy          float64
	lang              map[string]float64
	recall, precision map[string]float64
}{
	// Baseline, before any rule change: accuracy 0.834 (en 0.813, es 0.865,
	// pt 0.824). After generalising the lexicons from heldout.jsonl: 0.892
	// (en 0.880, es 0.905, pt 0.892); auto_reply precision fell from 1.00 to
	// 0.93 (a human "soporte técnico" reply read as a shared inbox).
	accuracy: 0.88,
	lang:     map[string]float64{"en": 0.86, "es": 0.89, "pt": 0.88},
	recall: map[string]float64{
		interested: 0.74, meeting: 0.85, info: 0.90, referral: 0.90,
		notInterested: 0.90, unsubscribe: 0.90, ooo: 0.78, auto: 0.85,
		bounce: 1, wrong: 0.80, unclear: 0.90,
	},
	precision: map[string]float64{
		interested: 0.90, meeting: 0.85, info: 0.85, referral: 0.90,
		notInterested: 0.95, ooo: 0.95, auto: 0.90, wrong: 0.95, unclear: 0.55,
	},
}
