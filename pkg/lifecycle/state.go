package lifecycle

import (
	"cmp"
	"slices"

	"exacto.dev/pkg/envelope"
)

// State is one lifecycle (a contact in a campaign, or a contact): the set of facts
// seen, one per envelope id, in a canonical order. It is a join-semilattice under
// Merge (set union, then the same deterministic bound), so applying the same events in
// any order and with any duplicates gives the same State; everything else (status,
// flags, discrepancies, undecided pairs) is a function of the set, computed by View.
//
// The zero State is the empty lifecycle (status enrolled). State marshals to JSON as
// {"facts":[…]} with stable field names; unmarshalling gives back an equal State.
type State struct {
	Facts []Fact `json:"facts"`
}

// Bounds on the facts kept per group (a kind, or one property). When a group is full
// the greatest facts in lifecycle order are kept: the newest say what the state is,
// and the bound is a deterministic function of the set, so it never breaks
// commutativity. Terminal facts, opportunities and meetings are few and kept whole up
// to MaxFacts.
const (
	MaxFacts         = 64 // any group
	MaxOpens         = 8  // opens and clicks each: trackers fire them by the dozen
	MaxPropertyFacts = 8  // updates of one property
)

// FromEvent is the State of env alone; the empty State when the lifecycle ignores env.
func FromEvent(env envelope.Envelope) State {
	f, ok := fact(env)
	if !ok {
		return State{}
	}
	return State{Facts: []Fact{f}}
}

// Apply adds env to s: Merge(s, FromEvent(env)). It does not check which lifecycle env
// belongs to: Keys says that.
func Apply(s State, env envelope.Envelope) State {
	f, ok := fact(env)
	if !ok {
		return Merge(s, State{}) // FromEvent(env) is empty
	}
	if out, ok := insert(s, f); ok {
		return out
	}
	return Merge(s, State{Facts: []Fact{f}})
}

// maxInsert is the most facts insert checks s against; a larger state is merged.
const maxInsert = 32

// insert is Merge(s, {f}) without sorting s again, when s is as Merge leaves a state
// (each fact normalised, in cmpFact order, one per id, each group within its bound) and
// f's id is new to it: f goes in its place and its group, if it overflows, loses its
// least fact. ok is false, and nothing is made, when s is not such a state or holds f's
// id: Merge decides those. Every projected event goes through here, and the three sorts
// of Merge were most of applying one.
func insert(s State, f Fact) (State, bool) {
	facts := s.Facts
	if !isMerged(facts) {
		return State{}, false
	}
	f.Time, f.Received = norm(f.Time), norm(f.Received)
	at := len(facts) // where f goes
	inGroup := 1     // facts of f's group, f included
	for i, x := range facts {
		if x.ID == f.ID {
			return State{}, false
		}
		if at == len(facts) && cmpFact(f, x) < 0 {
			at = i
		}
		if sameGroup(x, f) {
			inGroup++
		}
	}
	out := make([]Fact, 0, len(facts)+1)
	out = append(append(append(out, facts[:at]...), f), facts[at:]...)
	if inGroup > limit(f) { // the group keeps its greatest: drop its least
		least := -1
		for i, x := range out {
			if sameGroup(x, f) && (least < 0 || cmpGroup(x, out[least]) < 0) {
				least = i
			}
		}
		out = slices.Delete(out, least, least+1)
	}
	return State{Facts: slices.Clip(out)}, true
}

// isMerged reports whether facts are as Merge leaves a state's: each normalised, in
// cmpFact order, one per id, each group within its bound. Up to maxInsert facts are
// checked; a longer list is reported as not.
func isMerged(facts []Fact) bool {
	if len(facts) > maxInsert {
		return false
	}
	for i, x := range facts {
		if x.Time != norm(x.Time) || x.Received != norm(x.Received) || (i > 0 && cmpFact(facts[i-1], x) >= 0) {
			return false
		}
		n := 0 // facts of x's group up to x
		for j := range i {
			if facts[j].ID == x.ID {
				return false
			}
			if sameGroup(facts[j], x) {
				n++
			}
		}
		if n >= limit(x) {
			return false
		}
	}
	return true
}

// sameGroup reports whether a and b are bounded together (group(a) == group(b)).
func sameGroup(a, b Fact) bool {
	return a.Kind == b.Kind && (a.Kind != KindProperty || a.Name == b.Name)
}

// Merge joins two states: commutative, associative and idempotent.
func Merge(a, b State) State {
	all := make([]Fact, 0, len(a.Facts)+len(b.Facts))
	all = append(append(all, a.Facts...), b.Facts...)
	for i := range all {
		all[i].Time, all[i].Received = norm(all[i].Time), norm(all[i].Received)
	}
	// One fact per envelope id: an id names one event, so copies are equal; if they
	// are not (a redelivery with another receivedat), the least in cmpFact is kept.
	slices.SortFunc(all, func(x, y Fact) int {
		if c := cmp.Compare(x.ID, y.ID); c != 0 {
			return c
		}
		return cmpFact(x, y)
	})
	all = slices.CompactFunc(all, func(x, y Fact) bool { return x.ID == y.ID })
	// Bound each group, keeping its greatest facts.
	slices.SortFunc(all, func(x, y Fact) int {
		if c := cmp.Compare(group(x), group(y)); c != 0 {
			return c
		}
		return -cmpGroup(x, y)
	})
	kept := all[:0]
	n := 0
	for i, f := range all {
		if i == 0 || group(f) != group(all[i-1]) {
			n = 0
		}
		if n++; n <= limit(f) {
			kept = append(kept, f)
		}
	}
	slices.SortFunc(kept, cmpFact)
	if len(kept) == 0 {
		return State{}
	}
	return State{Facts: slices.Clip(kept)}
}

func group(f Fact) string {
	if f.Kind == KindProperty {
		return string(f.Kind) + "|" + f.Name
	}
	return string(f.Kind)
}

func cmpGroup(a, b Fact) int {
	if a.Kind == KindProperty {
		if c := cmpProperty(a, b); c != 0 {
			return c
		}
	}
	return cmpFact(a, b)
}

func limit(f Fact) int {
	switch f.Kind {
	case KindOpened, KindClicked:
		return MaxOpens
	case KindProperty:
		return MaxPropertyFacts
	}
	return MaxFacts
}

// Effective is the view of a contact in a campaign that also knows what happened to
// the contact elsewhere (an opt-out, a bounce, an opportunity, a meeting): the merge of
// the campaign's state and the contact-level state.
//
// Most contacts' facts are all on one side (a campaign's sends and replies, or an
// opt-out with no campaign): when the other is empty and this one is as Merge leaves a
// state, it is the merge, returned as it is (its facts shared, not copied) without
// sorting it again.
func Effective(campaign, contact State) State {
	switch {
	case len(contact.Facts) == 0 && len(campaign.Facts) > 0 && isMerged(campaign.Facts):
		return campaign
	case len(campaign.Facts) == 0 && len(contact.Facts) > 0 && isMerged(contact.Facts):
		return contact
	}
	return Merge(campaign, contact)
}

// Status is s's status by precedence (see View).
func (s State) Status() Status { return s.View().Status }

// Seen reports whether s holds the event id.
func (s State) Seen(id string) bool {
	return slices.ContainsFunc(s.Facts, func(f Fact) bool { return f.ID == id })
}
