package classify

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
)

type sample struct {
	Text  string `json:"text"`
	Lang  string `json:"lang"`
	Label string `json:"label"`
}

func loadSamples(t testing.TB) []sample { return loadSamplesFrom(t, "testdata/replies.jsonl") }

func loadSamplesFrom(t testing.TB, path string) []sample {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []sample
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		var s sample
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			t.Fatalf("line %d: %v", n, err)
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestDataset checks the labelled set's coverage, then measures the
// classifier on it: per-label precision/recall, overall accuracy.
func TestDataset(t *testing.T) {
	samples := loadSamples(t)
	perLang := map[string]int{}
	cover := map[[2]string]int{}
	for _, s := range samples {
		if !slices.Contains(Labels, s.Label) {
			t.Fatalf("unknown label %q", s.Label)
		}
		perLang[s.Lang]++
		cover[[2]string{s.Lang, s.Label}]++
	}
	if len(samples) < 150 {
		t.Errorf("%d samples, want ≥ 150", len(samples))
	}
	for _, lang := range []string{"en", "es", "pt"} {
		if perLang[lang] < 45 {
			t.Errorf("%s: %d samples, want ≥ 45", lang, perLang[lang])
		}
		for _, l := range Labels {
			if n := cover[[2]string{lang, l}]; n < 3 {
				t.Errorf("%s/%s: %d samples, want ≥ 3", lang, l, n)
			}
		}
	}

	acc, recall, langAcc := evaluate(t, samples)
	if acc < 0.95 {
		t.Errorf("accuracy %.3f, want ≥ 0.95", acc)
	}
	for _, l := range []string{unsubscribe, bounce} {
		if recall[l] < 0.95 {
			t.Errorf("%s recall %.2f, want ≥ 0.95", l, recall[l])
		}
	}
	if langAcc < 0.9 {
		t.Errorf("language detection %.3f, want ≥ 0.90", langAcc)
	}
}

// TestHeldOut measures heldout.jsonl. Its misses (0.576 accuracy) were used
// to generalise the lexicons, so it is tuning data now and its score no longer
// estimates anything: TestBlind (testdata/blind.jsonl) is the honest figure.
func TestHeldOut(t *testing.T) {
	samples := loadSamplesFrom(t, "testdata/heldout.jsonl")
	acc, recall, _ := evaluate(t, samples)
	if acc < heldOutFloor {
		t.Errorf("held-out accuracy %.3f, want ≥ %.2f", acc, heldOutFloor)
	}
	for _, l := range []string{unsubscribe, bounce} {
		if recall[l] < 0.95 {
			t.Errorf("%s recall %.2f, want ≥ 0.95", l, recall[l])
		}
	}
}

// heldOutFloor: the rules reached 0.576 when these replies were written
// (misses all fell to unclear, i.e. to human review) and 1.00 after they
// were used for tuning.
const heldOutFloor = 0.97

// evaluate classifies samples, logs misses and a per-label table, and returns
// accuracy, recall per label and language-detection accuracy.
func evaluate(t *testing.T, samples []sample) (float64, map[string]float64, float64) {
	t.Helper()
	c := New()
	tp, fp, fn := map[string]int{}, map[string]int{}, map[string]int{}
	correct, langOK := 0, 0
	for _, s := range samples {
		r, err := c.Classify(context.Background(), s.Text, "")
		if err != nil {
			t.Fatal(err)
		}
		if r.Language == s.Lang {
			langOK++
		} else {
			t.Logf("LANG want %s got %s %q", s.Lang, r.Language, short(s.Text))
		}
		if r.Label == s.Label {
			correct++
			tp[s.Label]++
			continue
		}
		fp[r.Label]++
		fn[s.Label]++
		t.Logf("MISS want %-19s got %-19s %.2f %q ev=%q", s.Label, r.Label, r.Confidence, short(s.Text), r.Evidence)
	}
	recall := map[string]float64{}
	var b strings.Builder
	fmt.Fprintf(&b, "\n%-20s %9s %6s %4s\n", "label", "precision", "recall", "n")
	for _, l := range Labels {
		recall[l] = ratio(tp[l], tp[l]+fn[l])
		fmt.Fprintf(&b, "%-20s %9.2f %6.2f %4d\n", l, ratio(tp[l], tp[l]+fp[l]), recall[l], tp[l]+fn[l])
	}
	acc := ratio(correct, len(samples))
	fmt.Fprintf(&b, "accuracy %.3f (%d/%d); language detection %.3f", acc, correct, len(samples), ratio(langOK, len(samples)))
	t.Log(b.String())
	return acc, recall, ratio(langOK, len(samples))
}

func ratio(a, b int) float64 {
	if b == 0 {
		return 1
	}
	return float64(a) / float64(b)
}

func short(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if r := []rune(s); len(r) > 70 {
		return string(r[:70]) + "…"
	}
	return s
}

func TestStrip(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"en gmail", "Sounds good.\n\nOn Tue, Mar 4, 2025 at 9:12 AM Tom <tom@x.com> wrote:\n> are you interested?", "Sounds good."},
		{"en wrapped header", "Yes please\n\nOn Tue, Mar 4, 2025 at 9:12 AM Tom Rivers <tom@exacto.dev>\nwrote:\n> hi", "Yes please"},
		{"es gmail", "Me interesa.\n\nEl lun, 3 mar 2025 a las 9:10, Tomás <t@x.com> escribió:\n> ¿Te interesa?", "Me interesa."},
		{"pt gmail", "Tenho interesse.\n\nEm seg., 3 de mar. de 2025 às 09:10, Tomás <t@x.com> escreveu:\n> Tem interesse?", "Tenho interesse."},
		{"outlook original", "Not now.\n\n-----Original Message-----\nFrom: Tom\nSent: Monday\nSubject: hi\n\nInterested?", "Not now."},
		{"outlook headers", "No gracias\n\nDe: Tomás <t@x.com>\nEnviado el: lunes, 2 de junio de 2025\nPara: Ana\nAsunto: hola", "No gracias"},
		{"pt outlook", "Agora não\n________________________________\nDe: Tomás\nEnviada em: segunda-feira\nAssunto: oi", "Agora não"},
		{"signature delimiter", "Let's talk Tuesday.\n-- \nJohn Doe\nCEO", "Let's talk Tuesday."},
		{"iphone en", "ok, call me\n\nSent from my iPhone", "ok, call me"},
		{"iphone es", "dale\n\nEnviado desde mi iPhone", "dale"},
		{"iphone pt", "bora\n\nEnviado do meu iPhone", "bora"},
		{"valediction", "Not a fit for us.\n\nBest regards,\nBen Smith\nHead of Sales", "Not a fit for us."},
		{"disclaimer", "Send pricing.\nThis email and any attachments are confidential. If you are not the intended recipient, delete it.", "Send pricing."},
		{"bottom posting", "> are you interested?\nyes", "yes"},
		{"no quote", "Hola, ¿qué tal?", "Hola, ¿qué tal?"},
	} {
		if got := Strip(tc.in); got != tc.want {
			t.Errorf("%s: Strip = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestDetectLanguage(t *testing.T) {
	for in, want := range map[string]string{
		"I'm not interested, please remove me":       "en",
		"Hola, no me interesa, gracias":              "es",
		"Olá, não tenho interesse, obrigado":         "pt",
		"¿Podemos hablar mañana por la tarde?":       "es",
		"Podemos conversar amanhã à tarde?":          "pt",
		"Estoy de vacaciones hasta el lunes":         "es",
		"Estou de férias até segunda":                "pt",
		"Sounds good, let's talk next week":          "en",
		"ok":                                         "und",
		"👍":                                          "und",
		"":                                           "und",
		"Me mandas precios y una presentación":       "es",
		"Me manda a tabela de preços e apresentação": "pt",
	} {
		if got := DetectLanguage(in); got != want {
			t.Errorf("DetectLanguage(%q) = %q, want %q", in, got, want)
		}
	}
}

func classify(t *testing.T, c Classifier, text string) Result {
	t.Helper()
	r, err := c.Classify(context.Background(), text, "")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestNegation(t *testing.T) {
	c := New()
	for text, want := range map[string]string{
		"I'm interested":                                interested,
		"I'm not interested":                            notInterested,
		"we are not really interested at the moment":    notInterested,
		"Me interesa":                                   interested,
		"No me interesa":                                notInterested,
		"no estamos interesados":                        notInterested,
		"Tenho interesse":                               interested,
		"Não tenho interesse":                           notInterested,
		"nao estamos interessados":                      notInterested,
		"No problem, I'm interested!":                   interested,
		"Not interested. Remove me from your list.":     unsubscribe,
		"I'm not sure":                                  unclear,
		"It went to my spam folder, but I'm interested": interested,
		"Esto es spam":                                  unsubscribe,
	} {
		if got := classify(t, c, text); got.Label != want {
			t.Errorf("%q: got %s %v, want %s", text, got.Label, got.Evidence, want)
		}
	}
}

func TestPrecedence(t *testing.T) {
	c := New()
	// A DSN that quotes an outbound e-mail full of positive words.
	r := classify(t, c, "Undeliverable: quick call?\n\nDelivery has failed.\n\n> Interested in a quick call Tuesday? Reply STOP to unsubscribe.")
	if r.Label != bounce || r.Action != ActionSuppress {
		t.Errorf("bounce: got %+v", r)
	}
	r = classify(t, c, "Interested in principle, but unsubscribe me from this sequence.")
	if r.Label != unsubscribe {
		t.Errorf("unsubscribe: got %+v", r)
	}
	r = classify(t, c, "Automatic reply: I am out of the office until Monday.")
	if r.Label != ooo || r.Action != ActionPause {
		t.Errorf("ooo: got %+v", r)
	}
	r = classify(t, c, "Automatic reply: we have received your message. Ticket number 1234.")
	if r.Label != auto {
		t.Errorf("auto: got %+v", r)
	}
	r = classify(t, c, "Wrong person, try ana@acme.com")
	if r.Label != referral {
		t.Errorf("referral: got %+v", r)
	}
}

func TestThreshold(t *testing.T) {
	weak := "yes" // a bare "yes" is positive but weak
	r := classify(t, New(), weak)
	if r.Label != interested || r.Confidence >= DefaultThreshold || r.Action != ActionHumanReview {
		t.Errorf("default threshold: got %+v", r)
	}
	r = classify(t, New(WithThreshold(0.1)), weak)
	if r.Action != ActionRouteToOwner {
		t.Errorf("threshold 0.1: got %+v", r)
	}
	r = classify(t, New(WithThreshold(1)), "Please remove me from your list, this is spam.")
	if r.Label != unsubscribe || r.Action != ActionHumanReview {
		t.Errorf("threshold 1: got %+v", r)
	}
	if r := classify(t, New(), "ok"); r.Label != unclear || r.Action != ActionHumanReview {
		t.Errorf("unclear: got %+v", r)
	}
}

func TestDeterminism(t *testing.T) {
	c := New()
	for _, s := range loadSamples(t) {
		a, _ := c.Classify(context.Background(), s.Text, "")
		for range 3 {
			b, _ := c.Classify(context.Background(), s.Text, "")
			if !slices.Equal(a.Evidence, b.Evidence) || a.Label != b.Label || a.Confidence != b.Confidence || a.Action != b.Action || a.Language != b.Language {
				t.Fatalf("%q: %+v then %+v", short(s.Text), a, b)
			}
		}
	}
}

func TestResultJSON(t *testing.T) {
	r := classify(t, New(), "ok")
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	keys := []string{}
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if want := []string{"action", "confidence", "evidence", "label", "language"}; !slices.Equal(keys, want) {
		t.Errorf("keys %v, want %v", keys, want)
	}
	if _, ok := m["evidence"].([]any); !ok {
		t.Errorf("evidence is %T, want an array: %s", m["evidence"], b)
	}
}

func TestLanguageArgument(t *testing.T) {
	c := New()
	r, _ := c.Classify(context.Background(), "ok", "pt-BR")
	if r.Language != "pt" {
		t.Errorf("got %q", r.Language)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Classify(ctx, "hi", ""); err == nil {
		t.Error("cancelled context: want error")
	}
}

func FuzzClassify(f *testing.F) {
	for _, s := range []string{"", "STOP", "not interested", "Não tenho interesse", "¿Cuánto cuesta?", "👍", "> quoted\nOn x wrote:", "--", "\xff\xfe", "no no no no interested", "Undeliverable: 550 5.1.1"} {
		f.Add(s, "")
	}
	f.Add("hola", "es")
	f.Add("oi", "pt-BR")
	c := New()
	f.Fuzz(func(t *testing.T, text, lang string) {
		r, err := c.Classify(context.Background(), text, lang)
		if err != nil {
			t.Fatal(err)
		}
		if r.Confidence < 0 || r.Confidence > 1 {
			t.Errorf("confidence %v", r.Confidence)
		}
		if !slices.Contains(Labels, r.Label) {
			t.Errorf("label %q", r.Label)
		}
		if r.Action == "" || r.Evidence == nil {
			t.Errorf("incomplete %+v", r)
		}
		if !slices.Contains([]string{"en", "es", "pt", "und"}, r.Language) {
			t.Errorf("language %q", r.Language)
		}
	})
}

func BenchmarkClassify(b *testing.B) {
	samples := loadSamples(b)
	c := New()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, err := c.Classify(context.Background(), samples[i%len(samples)].Text, ""); err != nil {
			b.Fatal(err)
		}
	}
}

func ExampleNew() {
	r, _ := New().Classify(context.Background(), "No me interesa, gracias.\n\nEl lun, 3 mar 2025 a las 9:10, Tomás <t@x.com> escribió:\n> ¿Te interesa una llamada?", "")
	b, _ := json.Marshal(r)
	fmt.Println(string(b))
	// Output: {"label":"not_interested","confidence":0.86,"evidence":["no me interesa"],"language":"es","action":"stop_sequence"}
}

// TestGeneralisedRules pins the rule families added from the held-out misses
// and the safety fix that keeps a compliance question ("GDPR", "list") from
// being read as an opt-out. These sentences are tuning data, not an estimate.
func TestGeneralisedRules(t *testing.T) {
	c := New()
	for text, want := range map[string]string{
		"Is it GDPR compliant? Do you have a feature list?":                   info,
		"Are you LGPD compliant? Send me the price list":                      info,
		"¿Cumplen con el RGPD? Mándame la lista de precios":                   info,
		"Vocês estão em conformidade com a LGPD? Manda a lista de preços":     info,
		"GDPR. Delete my data.":                                               unsubscribe,
		"Thanks but what's your pricing?":                                     info,
		"Gracias pero ¿cuál es el precio?":                                    info,
		"I'm traveling through Friday, let's talk Monday at 10am":             meeting,
		"Estou viajando até sexta, podemos falar segunda às 10h?":             meeting,
		"Sai da reunião agora, me liga às 15h?":                               meeting,
		"Not the right time, we're mid-migration.":                            notInterested, // no time named: a no
		"No bandwidth right now, ping me in the fall":                         followUp,
		"Agora não dá, me procura no ano que vem":                             followUp,
		"Interesting. Not for now though.":                                    notInterested,
		"Hi Tom, I'm on PTO until the 20th. Let's reconnect after.":           ooo,
		"Olá, estou de atestado médico até quarta-feira.":                     ooo,
		"I have nothing to do with marketing, that's Joe's team (joe@x.com)":  referral,
		"Don't respond to this thread, I'm adding my boss Karen who decides.": referral,
		"Just checking in on this":                                            unclear,
	} {
		if got := classify(t, c, text); got.Label != want {
			t.Errorf("%q: got %s %v, want %s", text, got.Label, got.Evidence, want)
		}
	}
}

// A reply in a language no lexicon reads is said to be so, by name, and goes to a
// person; a language asked for that the classifier does not read is refused.
func TestUnreadLanguagesGoToAPerson(t *testing.T) {
	c := New()
	for text, lang := range map[string]string{
		"Bonjour, merci pour votre message, mais nous ne sommes pas intéressés pour le moment.": "fr",
		"Hallo, vielen Dank für Ihre Nachricht, aber wir haben kein Interesse.":                 "de",
	} {
		res, err := c.Classify(context.Background(), text, "")
		if err != nil || res.Language != lang || res.Label != unclear || res.Action != ActionHumanReview ||
			len(res.Evidence) != 1 || !strings.Contains(res.Evidence[0], "written in "+Names[lang]) {
			t.Errorf("%s: %+v %v", lang, res, err)
		}
	}
	for _, tag := range []string{"fr", "de-AT", "xx"} {
		if _, err := c.Classify(context.Background(), "Not interested.", tag); err == nil || !strings.Contains(err.Error(), "(it reads English, Spanish and Portuguese: en, es, pt)") {
			t.Errorf("--lang %s: %v", tag, err)
		}
	}
	if err := CheckLanguage("fr"); err == nil || !strings.HasPrefix(err.Error(), "the classifier does not read French") {
		t.Errorf("fr: %v", err)
	}
	for _, tag := range []string{"", "en", "pt-BR", "ES"} {
		if err := CheckLanguage(tag); err != nil {
			t.Errorf("%q: %v", tag, err)
		}
	}
}

// A timing objection keeps the lead for later, with when the reply says; an
// out-of-office says when it returns; an unsubscribe that also names someone to talk
// to keeps the referral beside it (the unsubscribe decides the action).
func TestWhatAPersonWouldKeep(t *testing.T) {
	c := New()
	for text, want := range map[string]struct{ label, when, action string }{
		"Not now, ping me in Q3.":                                                        {followUp, "q3", ActionFollowUpLater},
		"We're busy with a migration, reach out again next month.":                       {followUp, "next month", ActionFollowUpLater},
		"No budget this year. Try me again in January 2027.":                             {followUp, "in january 2027", ActionFollowUpLater},
		"Ahora no, escríbeme en septiembre.":                                             {followUp, "en septiembre", ActionFollowUpLater},
		"Agora não. Me procure daqui a 3 meses.":                                         {followUp, "daqui a 3 meses", ActionFollowUpLater},
		"I am out of the office until Monday, December 14 with limited access to email.": {ooo, "monday", ActionPause},
		"Estaré fuera de la oficina hasta el 12/01. Saludos.":                            {ooo, "12/01", ActionPause},
	} {
		got := classify(t, c, text)
		if got.Label != want.label || got.When != want.when || got.Action != want.action {
			t.Errorf("%q: got %s when %q action %s %v, want %s when %q", text, got.Label, got.When, got.Action, got.Evidence, want.label, want.when)
		}
	}
	got := classify(t, c, "Please remove me from your list. You should talk to Lee (lee.park@initech.example), she runs partnerships.")
	if got.Label != unsubscribe || got.Action != ActionSuppress || len(got.Also) != 1 || !strings.HasPrefix(got.Also[0], "referral: ") || !strings.Contains(got.Also[0], "lee.park@initech.example") {
		t.Errorf("unsubscribe with a referral: %+v", got)
	}
	if got := classify(t, c, "Not interested, please stop emailing me."); got.Label != unsubscribe || len(got.Also) != 0 || got.When != "" {
		t.Errorf("a plain unsubscribe: %+v", got)
	}
}

// The review's cases: a negated follow-up is a no; a French or German opt-out or bounce
// is still acted on; short English replies are not French or German; no false dates.
func TestFollowUpsAndDatesFromTheReview(t *testing.T) {
	c := New()
	for text, want := range map[string]string{
		"Do not reach out again.":                          notInterested,
		"Never reach out again":                            notInterested,
		"Don't ping me again":                              notInterested,
		"Please don't reach out again next year or ever":   notInterested,
		"No thanks, not right now.":                        notInterested,
		"Not now. Not ever.":                               notInterested,
		"Merci de me retirer de votre liste. Unsubscribe.": unsubscribe,
		"Bitte keine E-Mails mehr. Unsubscribe":            unsubscribe,
	} {
		if got := classify(t, c, text); got.Label != want {
			t.Errorf("%q: got %s %v, want %s", text, got.Label, got.Evidence, want)
		}
	}
	for _, text := range []string{"Plus one", "One moment", "Moment", "Est. 3pm works", "Termin ok", "Zeit?"} {
		if got := classify(t, c, text); got.Language == "fr" || got.Language == "de" {
			t.Errorf("%q read as %s", text, got.Language)
		}
	}
	for text, want := range map[string]string{
		"Not now, we may revisit this in March.":                           "in march",
		"Out of office until further notice, I may not reply. Back Monday": "",
		"We march on with our own tool; ping me in Q4":                     "q4",
		"Estou de férias perto do mar, volto dia 10":                       "10",
		"É a segunda vez que escrevem. Agora não, mais pra frente.":        "",
		"We're a 24/7 shop. Try again in 2 months":                         "in 2 months",
	} {
		label := followUp
		if strings.Contains(text, "office") || strings.Contains(text, "férias") {
			label = ooo
		}
		if got := when(text, label == ooo); got != want {
			t.Errorf("%q: when %q, want %q", text, got, want)
		}
	}
}
