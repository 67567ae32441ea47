package classify

import (
	"context"
	"math"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// Result is one classification. Evidence lists the folded phrases that
// decided it (never nil, so the JSON always carries an array).
type Result struct {
	Label      string   `json:"label"`
	Confidence float64  `json:"confidence"`
	Evidence   []string `json:"evidence"`
	Language   string   `json:"language"`
	Action     string   `json:"action"`
	// When is when the reply says to come back, in its words ("Q3", "next month",
	// "Monday"): a follow_up_later's date, an out_of_office's return.
	When string `json:"when,omitempty"`
	// Also are the other things the reply asks that the label does not say, each
	// "label: evidence" (a referral beside an unsubscribe): the action follows the
	// label, and these are kept for a person.
	Also []string `json:"also,omitempty"`
}

// Classifier labels one reply. lang is "en", "es", "pt" (or a tag such as
// "pt-BR"); "" asks the classifier to detect it. Implementations must be safe
// for concurrent use; an external model can implement it later.
type Classifier interface {
	Classify(ctx context.Context, text string, lang string) (Result, error)
}

// The taxonomy; doc.go explains each label and its action.
const (
	interested    = "interested"
	meeting       = "meeting_request"
	info          = "information_request"
	referral      = "referral"
	notInterested = "not_interested"
	followUp      = "follow_up_later"
	unsubscribe   = "unsubscribe_request"
	ooo           = "out_of_office"
	auto          = "auto_reply"
	bounce        = "bounce_notice"
	wrong         = "wrong_person"
	unclear       = "unclear"
)

// Labels is the taxonomy, in documentation order.
var Labels = []string{interested, meeting, info, referral, followUp, notInterested, unsubscribe, ooo, auto, bounce, wrong, unclear}

// Suggested next actions. Nothing here books or sends; callers act on them.
const (
	ActionRouteToOwner  = "stop_and_route_to_owner"
	ActionBookMeeting   = "book_meeting_suggestion"
	ActionRouteReferral = "stop_and_contact_referral"
	ActionStop          = "stop_sequence"
	ActionFollowUpLater = "stop_and_follow_up_later"
	ActionSuppress      = "suppress"
	ActionPause         = "pause_until_return"
	ActionNone          = "none"
	ActionHumanReview   = "human_review"
)

var actions = map[string]string{
	interested:    ActionRouteToOwner,
	meeting:       ActionBookMeeting,
	info:          ActionRouteToOwner,
	referral:      ActionRouteReferral,
	followUp:      ActionFollowUpLater,
	notInterested: ActionStop,
	unsubscribe:   ActionSuppress,
	ooo:           ActionPause,
	auto:          ActionNone,
	bounce:        ActionSuppress,
	wrong:         ActionStop,
	unclear:       ActionHumanReview,
}

// DefaultThreshold is the confidence below which the action is human_review.
const DefaultThreshold = 0.6

// Option configures New.
type Option func(*rules)

// WithThreshold sets the confidence below which Action is human_review.
func WithThreshold(t float64) Option { return func(r *rules) { r.threshold = t } }

// New returns the deterministic, lexicon-based classifier.
func New(opts ...Option) Classifier {
	r := &rules{threshold: DefaultThreshold}
	for _, o := range opts {
		o(r)
	}
	return r
}

type rules struct{ threshold float64 }

type phrase struct {
	label  string
	weight float64
	toks   []string
}

// compiled is the lexicon, longest phrases first so they consume their words
// before any shorter phrase inside them can match.
var compiled = func() []phrase {
	var ps []phrase
	for _, g := range lexicon {
		for _, p := range strings.Split(g.phrases, "|") {
			if p == "" {
				continue
			}
			// fields, not tokenize: "*" must survive.
			ps = append(ps, phrase{g.label, g.weight, strings.Fields(fold(strings.ReplaceAll(p, "'", "")))})
		}
	}
	sort.SliceStable(ps, func(i, j int) bool { return len(ps[i].toks) > len(ps[j].toks) })
	return ps
}()

var (
	emailRe = regexp.MustCompile(`[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}`)
	// "3pm", "10:30", "15h", "às 10h" — a proposed time.
	timeRe = regexp.MustCompile(`(?i)\b\d{1,2}([:.h]\d{2})?\s?(am|pm|h|hs|hrs)\b|\b\d{1,2}:\d{2}\b`)
)

type tally struct {
	score    map[string]float64
	top      map[string]float64 // the heaviest single phrase per label
	evidence map[string][]string
	// noFollowUp: a follow-up phrase was negated ("don't reach out again"): no time
	// the reply names makes it a follow-up.
	noFollowUp bool
}

func (t *tally) add(label string, w float64, ev string) {
	if w <= 0 {
		return
	}
	t.score[label] += w
	t.top[label] = math.Max(t.top[label], w)
	for _, e := range t.evidence[label] {
		if e == ev {
			return
		}
	}
	t.evidence[label] = append(t.evidence[label], ev)
}

// match scores toks against the lexicon phrases of the allowed labels. A phrase is
// tried only where its first word is (first, then next), at every position only when
// it starts with a wildcard: the same matches, in the same order, as trying every
// phrase everywhere (a phrase's matches mark their words used for the phrases after it).
func match(toks []string, lang string, allow func(string) bool) *tally {
	t := &tally{score: map[string]float64{}, top: map[string]float64{}, evidence: map[string][]string{}}
	used := make([]bool, len(toks))
	first := make(map[string]int, len(toks)) // a word's first position
	next := make([]int, len(toks))           // the word's next position after i, or -1
	for i := len(toks) - 1; i >= 0; i-- {
		next[i] = -1
		if j, ok := first[toks[i]]; ok {
			next[i] = j
		}
		first[toks[i]] = i
	}
	for _, p := range compiled {
		if !allow(p.label) {
			continue
		}
		n := len(p.toks)
		try := func(i int) {
			if !matchAt(toks, used, i, p.toks) {
				return
			}
			for k := i; k < i+n; k++ {
				used[k] = true
			}
			t.matched(p, toks, i, lang)
		}
		if strings.HasSuffix(p.toks[0], "*") {
			for i := 0; i+n <= len(toks); i++ {
				try(i)
			}
			continue
		}
		if i, ok := first[p.toks[0]]; ok {
			for ; i >= 0 && i+n <= len(toks); i = next[i] {
				try(i)
			}
		}
	}
	return t
}

// matched counts phrase p found at toks[i:]: for its label, or, negated, as a no ("not
// interested"; "don't reach out again" is never a follow-up, whatever time it names).
func (t *tally) matched(p phrase, toks []string, i int, lang string) {
	n := len(p.toks)
	if p.label == followUp && followUpNegated(toks, i) {
		t.noFollowUp = true
		t.add(notInterested, p.weight, strings.Join(toks[max(0, i-2):i+n], " "))
		return
	}
	if neg := negatedAt(toks, i, lang); neg >= 0 && (p.label == interested || p.label == meeting || p.label == info) {
		w := p.weight
		if p.label != interested {
			w /= 2 // "can't do a call" is weaker than "not interested"
		}
		t.add(notInterested, w, strings.Join(toks[neg:i+n], " "))
		return
	}
	t.add(p.label, p.weight, strings.Join(toks[i:i+n], " "))
}

// followUpNegated says whether the follow-up phrase at toks[i] is forbidden right
// before it: "don't ping me again", "do not reach out", "never reach out". (Only right
// before: "not now, ping me in Q3" asks for the follow-up.)
func followUpNegated(toks []string, i int) bool {
	if i == 0 {
		return false
	}
	switch toks[i-1] {
	case "dont", "never", "nunca":
		return true
	case "not":
		return i >= 2 && (toks[i-2] == "do" || toks[i-2] == "please" || toks[i-2] == "will")
	}
	return false
}

func matchAt(toks []string, used []bool, i int, pat []string) bool {
	for k, want := range pat {
		got := toks[i+k]
		if used[i+k] || got == boundary {
			return false
		}
		switch {
		case want == "*":
		case strings.HasSuffix(want, "*") && len(want) > 1:
			if !strings.HasPrefix(got, want[:len(want)-1]) {
				return false
			}
		case got != want:
			return false
		}
	}
	return true
}

// negatedAt returns the index of a negator within negationWindow words before
// i in the same sentence, or -1.
func negatedAt(toks []string, i int, lang string) int {
	for k := i - 1; k >= 0 && k >= i-negationWindow; k-- {
		w := toks[k]
		if w == boundary {
			return -1
		}
		if !negators[w] || (w == "no" && lang == "pt") { // pt "no" = "in the"
			continue
		}
		if k+1 < len(toks) && negationBreakers[toks[k+1]] {
			return -1
		}
		return k
	}
	return -1
}

// strength maps a summed weight to (0,1): one decisive phrase (3) ≈ 0.86.
func strength(s float64) float64 { return 1 - math.Exp(-s/1.5) }

func (r *rules) Classify(ctx context.Context, text string, lang string) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	body := Strip(text)
	if body == "" {
		body = text
	}
	if err := CheckLanguage(lang); err != nil {
		return Result{}, err
	}
	if lang == "" {
		lang = DetectLanguage(body)
	} else {
		lang = normLang(lang)
	}
	res := r.decide(text, body, lang)
	if !slices.Contains(Supported, lang) && lang != "und" && !slices.Contains([]string{bounce, unsubscribe, ooo, auto}, res.Label) {
		// A language no lexicon reads: said by name, for a person to read. A bounce, an
		// opt-out ("unsubscribe" in any mail) and the automated replies are still acted on.
		return Result{Label: unclear, Evidence: []string{"written in " + Names[lang] + ", which the classifier does not read"},
			Language: lang, Action: ActionHumanReview}, nil
	}
	res.Language = lang
	// Rules are never certain: cap at 0.99 so a 0.99 threshold still reviews.
	res.Confidence = math.Round(math.Min(res.Confidence, 0.99)*100) / 100
	if res.Evidence == nil {
		res.Evidence = []string{}
	}
	res.Action = actions[res.Label]
	if res.Label == ooo { // a follow-up's When is decide's
		res.When = when(body, true)
	}
	if res.Confidence < r.threshold || res.Label == unclear {
		res.Action = ActionHumanReview
	}
	return res, nil
}

// decide applies the precedence: bounce_notice (on the raw text, since DSNs
// quote the original), then unsubscribe_request, then the automated labels
// if they outweigh every human one, then the best human label.
func (r *rules) decide(raw, body, lang string) Result {
	b := match(tokenize(raw), lang, func(l string) bool { return l == bounce })
	if s := b.score[bounce]; s >= 3 {
		return Result{Label: bounce, Confidence: strength(s), Evidence: b.evidence[bounce]}
	}

	toks := tokenize(body)
	t := match(toks, lang, func(l string) bool { return l != bounce })
	if words := nonBoundary(toks); len(words) <= 2 {
		if s, ok := sole[strings.Join(words, " ")]; ok {
			t.add(s.label, s.weight, strings.Join(words, " "))
		}
	}
	for _, e := range uniq(emailRe.FindAllString(body, -1)) {
		t.add(referral, 2, strings.ToLower(e))
		break // one address is enough to be a pointer
	}
	if m := timeRe.FindString(body); m != "" {
		t.add(meeting, 1.5, strings.ToLower(m))
	}
	// A no or a later that names a time ("not now, maybe Q3") is a timing objection;
	// the time found is a follow-up's When.
	later := ""
	if t.score[notInterested] > 0 || t.score[followUp] > 0 {
		later = when(body, false)
		if later != "" && !t.noFollowUp {
			t.add(followUp, 3, later)
		}
	}

	// Hints alone ("gdpr", "list") suppress only if nothing positive competes:
	// "Are you GDPR compliant? Send the price list" is a question, not an opt-out.
	if s := t.score[unsubscribe]; s >= 2 && (t.top[unsubscribe] >= 3 || s > math.Max(t.score[info], math.Max(t.score[meeting], t.score[interested]))) {
		// It dominates the action; a referral in the same mail is kept beside it.
		return Result{Label: unsubscribe, Confidence: strength(s), Evidence: t.evidence[unsubscribe], Also: t.also(unsubscribe, referral)}
	}

	// A wrong-person reply that names someone else is a referral.
	if t.score[referral] >= 2 && t.score[wrong] > 0 {
		t.score[referral] += t.score[wrong]
		t.evidence[referral] = append(t.evidence[referral], t.evidence[wrong]...)
		t.score[wrong] = 0
	}

	human, hs, second := "", 0.0, 0.0
	// Ties go to the cautious label; a timing objection before a plain no (the lead is
	// kept for later rather than dropped).
	for _, l := range []string{referral, wrong, followUp, notInterested, meeting, info, interested, unclear} {
		switch s := t.score[l]; {
		case s > hs:
			human, hs, second = l, s, hs
		case s > second:
			second = s
		}
	}

	machine := t.score[ooo] + t.score[auto]
	switch {
	case t.score[ooo] >= 3 && machine >= hs:
		return Result{Label: ooo, Confidence: strength(machine) * margin(machine, hs), Evidence: append(t.evidence[ooo], t.evidence[auto]...)}
	case t.score[auto] >= 2 && t.score[auto] > hs:
		return Result{Label: auto, Confidence: strength(machine) * margin(machine, hs), Evidence: append(t.evidence[auto], t.evidence[ooo]...)}
	}

	if human == unclear { // a hedge ("let me think") outweighs the rest
		return Result{Label: unclear, Confidence: strength(hs) * margin(hs, second), Evidence: t.evidence[unclear]}
	}
	if hs < 1 {
		var ev []string
		for _, l := range Labels {
			ev = append(ev, t.evidence[l]...)
		}
		// Nothing decisive: no confidence in any label, only the weak hints.
		return Result{Label: unclear, Confidence: 0, Evidence: ev}
	}
	if m := math.Max(second, machine); m > second {
		second = m
	}
	res := Result{Label: human, Confidence: strength(hs) * margin(hs, second), Evidence: t.evidence[human]}
	if human == followUp { // its score is above 0: later was looked for
		res.When = later
	}
	return res
}

// also is "label: evidence" of each of labels found with weight (2 or more) in a reply
// labelled winner.
func (t *tally) also(winner string, labels ...string) []string {
	var out []string
	for _, l := range labels {
		if l != winner && t.score[l] >= 2 {
			out = append(out, l+": "+strings.Join(t.evidence[l], ", "))
		}
	}
	return out
}

// margin discounts a win over a close runner-up: 1 when alone, 0.5 when tied.
func margin(top, second float64) float64 {
	if top <= 0 {
		return 0
	}
	return 0.5 + 0.5*math.Max(0, top-second)/top
}

func nonBoundary(toks []string) []string {
	var out []string
	for _, t := range toks {
		if t != boundary && t != "?" {
			out = append(out, t)
		}
	}
	return out
}

func uniq(xs []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range xs {
		if k := strings.ToLower(x); !seen[k] {
			seen[k] = true
			out = append(out, x)
		}
	}
	return out
}
