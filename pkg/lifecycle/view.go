package lifecycle

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// View is what a State means: the status and why, the flags a campaign projection
// counts, the latest contact properties, and what was not applied (Discrepancies) or
// cannot be ordered from the events alone (Undecided). It is a pure function of the
// State, so it is as order-independent as the State; it marshals with stable names.
type View struct {
	Status Status `json:"status"`
	// StatusEvent is the earliest event (in lifecycle order) leading to Status, Since
	// its time; empty for enrolled with no such event.
	StatusEvent string    `json:"status_event,omitempty"`
	Since       time.Time `json:"since,omitzero"`
	// Reached lists every status some fact led to, in precedence order.
	Reached []Status `json:"reached,omitempty"`

	Replied       bool `json:"replied"`        // a human replied (or a provider status/label says so)
	Unsubscribed  bool `json:"unsubscribed"`   // lead.unsubscribed or an unsubscribed status
	Bounced       bool `json:"bounced"`        // a hard or unclassified bounce
	SoftBounces   int  `json:"soft_bounces"`   // soft bounces: counted, not terminal
	Suppressed    bool `json:"suppressed"`     // do-not-contact
	MeetingBooked bool `json:"meeting_booked"` // a meeting is booked and not cancelled
	Opportunity   bool `json:"opportunity"`
	AutoReplies   int  `json:"auto_replies"` // automatic replies: no status of their own

	// LeadStatus is the provider's latest lead status (lead.status_changed), verbatim.
	LeadStatus      string `json:"lead_status,omitempty"`
	LeadStatusEvent string `json:"lead_status_event,omitempty"`
	// Properties are the contact's latest properties, keyed provider:name.
	Properties    map[string]Property `json:"properties,omitempty"`
	Meetings      []string            `json:"meetings,omitempty"`      // booked, not cancelled, not moved elsewhere
	Opportunities []string            `json:"opportunities,omitempty"` // opportunity ids
	// Rescheduled are the meetings moved to another time (a reschedule's cancellation,
	// or a booking naming them in rescheduled_from): the same meeting stands, under
	// the id of the booking that moved it once that has arrived.
	Rescheduled []string `json:"rescheduled,omitempty"`

	Discrepancies []Discrepancy `json:"discrepancies,omitempty"`
	Undecided     []Undecided   `json:"undecided,omitempty"`
}

// Property is a contact property's value and the update that set it.
type Property struct {
	Value   string    `json:"value"`
	Event   string    `json:"event"`
	Time    time.Time `json:"time"`
	Version string    `json:"version,omitempty"`
}

// Discrepancy is a fact the transition table did not let change the state: the event,
// the state that stopped it and the event holding that state, and why.
type Discrepancy struct {
	Event   string    `json:"event"`
	Type    string    `json:"type"`
	Time    time.Time `json:"time"`
	Target  Status    `json:"target,omitempty"` // what the event would have made the status
	State   Status    `json:"state,omitempty"`  // the status that forbade it
	Against string    `json:"against"`          // the event holding that status (or the newer update)
	Rule    Rule      `json:"rule"`
	Why     string    `json:"why"`
}

// Undecided is a pair of events whose order matters but is not known from the events
// (equal times, no versions to tell them apart). The state used a deterministic
// tie-break (envelope id); the projector asks the source of truth through the platform
// client before an effect depends on it, and logs what it found.
type Undecided struct {
	A   string `json:"a"` // the smaller envelope id
	B   string `json:"b"`
	Why string `json:"why"`
}

// View computes what s means.
func (s State) View() View {
	v := View{Status: Enrolled}
	fs := confirmedFacts(s.Facts)
	// What retracts a fact: a cancellation of its meeting, a booking its meeting was
	// moved to (the meeting lives on in that booking), a label saying the reply was not
	// a person. A reschedule's cancellation retracts nothing: the meeting stands.
	cancelled, movedTo, auto := map[string]bool{}, map[string]bool{}, map[string]bool{}
	rescheduled := map[string]bool{}
	for _, f := range fs {
		switch {
		case f.Kind == KindMeetingCancelled:
			cancelled[f.Name] = true
		case f.Kind == KindMeetingMoved:
			rescheduled[f.Name] = true
		case f.Kind == KindMeetingBooked && f.Value != "":
			movedTo[f.Value], rescheduled[f.Value] = true, true
		case f.Kind == KindClassified && notHuman(f.Value):
			auto[f.Cause] = true
		}
	}
	targets := make([]Status, len(fs))
	reached := map[Status]bool{}
	var status *Fact
	props := map[string]int{}
	lead := -1
	for i := range fs {
		f := &fs[i]
		t := f.target()
		switch {
		case (f.Kind == KindMeetingBooked || f.Kind == KindMeetingMoved) && (cancelled[f.Name] || movedTo[f.Name]):
			t = ""
		case f.Kind == KindReply && auto[f.ID]:
			t = ""
		}
		targets[i] = t
		if t != "" {
			reached[t] = true
			// fs is in lifecycle order: the first fact of the highest status is its start.
			if status == nil || Precedence(t) > Precedence(v.Status) {
				v.Status, status = t, f
			}
		}
		switch f.Kind {
		case KindAutoReply:
			v.AutoReplies++
		case KindBounce:
			if f.Value == "soft" {
				v.SoftBounces++
			}
		case KindMeetingBooked, KindMeetingMoved:
			if t != "" {
				v.Meetings = append(v.Meetings, f.Name)
			}
		case KindOpportunity:
			if f.Name != "" {
				v.Opportunities = append(v.Opportunities, f.Name)
			}
		case KindStatus:
			lead = i // the latest in lifecycle order
		case KindProperty:
			if j, ok := props[f.Name]; !ok || cmpProperty(*f, fs[j]) > 0 {
				props[f.Name] = i
			}
		}
	}
	if status != nil {
		v.StatusEvent, v.Since = status.ID, status.Time
	}
	for _, st := range Statuses {
		if reached[st] {
			v.Reached = append(v.Reached, st)
		}
	}
	v.Replied = reached[Replied] || reached[Interested]
	v.Unsubscribed, v.Bounced, v.Suppressed = reached[Unsubscribed], reached[Bounced], reached[Suppressed]
	v.MeetingBooked, v.Opportunity = reached[MeetingBooked], reached[Opportunity]
	v.Meetings, v.Opportunities = uniq(v.Meetings), uniq(v.Opportunities)
	for m := range rescheduled {
		v.Rescheduled = append(v.Rescheduled, m)
	}
	v.Rescheduled = uniq(v.Rescheduled)
	if lead >= 0 {
		v.LeadStatus, v.LeadStatusEvent = fs[lead].Value, fs[lead].ID
	}
	if len(props) > 0 {
		v.Properties = map[string]Property{}
		for name, i := range props {
			f := fs[i]
			v.Properties[name] = Property{Value: f.Value, Event: f.ID, Time: f.Time, Version: f.Version}
		}
	}
	v.Discrepancies, v.Undecided = check(fs, targets, props)
	return v
}

func uniq(s []string) []string {
	slices.Sort(s)
	return slices.Compact(s)
}

// check finds the discrepancies and undecided pairs of fs (in lifecycle order, with
// their targets). Each is a function of the set alone.
func check(fs []Fact, targets []Status, props map[string]int) ([]Discrepancy, []Undecided) {
	var ds []Discrepancy
	und := map[[2]string]string{}
	pair := func(a, b, why string) {
		if b < a {
			a, b = b, a
		}
		if _, ok := und[[2]string{a, b}]; !ok {
			und[[2]string{a, b}] = why
		}
	}
	for i, f := range fs {
		t := targets[i]
		if t == "" {
			continue
		}
		var best *Discrepancy
		for j, g := range fs {
			d := targets[j]
			if i == j || d == "" {
				continue
			}
			rule := RuleFor(d, t)
			if rule != Forbidden && rule != Stale {
				continue
			}
			var why string
			switch {
			case !decided(f, g):
				pair(f.ID, g.ID, fmt.Sprintf("%s (%s) and %s (%s) at the same time %s with no version to order them: %s",
					f.Type, f.ID, g.Type, g.ID, stamp(f.Time), table[[2]Status{d, t}].Why))
				continue
			case cmpOrder(f, g) > 0:
				why = fmt.Sprintf("%s at %s is after %s at %s (%s): %s", f.Type, stamp(f.Time), d, stamp(g.Time), g.Type, table[[2]Status{d, t}].Why)
			case rule == Stale && f.arrival().After(g.arrival()):
				why = fmt.Sprintf("%s at %s is older than %s at %s (%s) but arrived after it (%s > %s): %s", f.Type, stamp(f.Time), d,
					stamp(g.Time), g.Type, stamp(f.arrival()), stamp(g.arrival()), table[[2]Status{d, t}].Why)
			default:
				continue
			}
			c := Discrepancy{Event: f.ID, Type: f.Type, Time: f.Time, Target: t, State: d, Against: g.ID, Rule: rule, Why: why}
			// One per event: against the highest-ranked status, then its earliest fact.
			if best == nil || Precedence(d) > Precedence(best.State) {
				best = &c
			}
		}
		if best != nil {
			ds = append(ds, *best)
		}
	}
	// Property updates: an update older than the current value that reached the
	// gateway after it is stale; two updates that cannot be ordered are undecided.
	for _, f := range fs {
		if f.Kind != KindProperty {
			continue
		}
		cur := fs[props[f.Name]]
		if cur.ID == f.ID || cur.Value == f.Value {
			continue
		}
		switch {
		case !propertyDecided(f, cur):
			pair(f.ID, cur.ID, fmt.Sprintf("contact.updated %s = %q (%s) and = %q (%s) cannot be ordered: same time, no comparable versions",
				f.Name, f.Value, f.ID, cur.Value, cur.ID))
		case f.arrival().After(cur.arrival()):
			ds = append(ds, Discrepancy{Event: f.ID, Type: f.Type, Time: f.Time, Against: cur.ID, Rule: Stale,
				Why: fmt.Sprintf("contact.updated %s %s is older than %s already seen (%s): an older version never overwrites a newer one",
					f.Name, version(f), version(cur), cur.ID)})
		}
	}
	// Lead statuses: the latest verbatim status needs an order.
	var last *Fact
	for i := range fs {
		if fs[i].Kind == KindStatus {
			last = &fs[i]
		}
	}
	if last != nil {
		for _, f := range fs {
			if f.Kind == KindStatus && f.ID != last.ID && f.Value != last.Value && !decided(f, *last) {
				pair(f.ID, last.ID, fmt.Sprintf("lead.status_changed to %q (%s) and to %q (%s) at the same time %s with no version to order them",
					f.Value, f.ID, last.Value, last.ID, stamp(f.Time)))
			}
		}
	}
	slices.SortFunc(ds, func(a, b Discrepancy) int {
		if c := a.Time.Compare(b.Time); c != 0 {
			return c
		}
		return cmp.Compare(a.Event, b.Event)
	})
	var us []Undecided
	for k, why := range und {
		us = append(us, Undecided{A: k[0], B: k[1], Why: why})
	}
	slices.SortFunc(us, func(a, b Undecided) int {
		return cmp.Or(cmp.Compare(a.A, b.A), cmp.Compare(a.B, b.B))
	})
	return ds, us
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func version(f Fact) string {
	if f.Version == "" {
		return "at " + stamp(f.Time)
	}
	return "v" + f.Version
}

// Discrepancies are the events of s the table did not let change the state.
func (s State) Discrepancies() []Discrepancy { return s.View().Discrepancies }

// Undecided are the pairs of events of s the projector must order by asking the source.
func (s State) Undecided() []Undecided { return s.View().Undecided }

// NewDiscrepancies are the discrepancies of after that before did not have: what an
// Apply revealed, for the projector to log and count.
func NewDiscrepancies(before, after View) []Discrepancy {
	seen := map[string]bool{}
	for _, d := range before.Discrepancies {
		seen[d.Event] = true
	}
	var out []Discrepancy
	for _, d := range after.Discrepancies {
		if !seen[d.Event] {
			out = append(out, d)
		}
	}
	return out
}

// NewUndecided are the undecided pairs of after that before did not have.
func NewUndecided(before, after View) []Undecided {
	seen := map[[2]string]bool{}
	for _, u := range before.Undecided {
		seen[[2]string{u.A, u.B}] = true
	}
	var out []Undecided
	for _, u := range after.Undecided {
		if !seen[[2]string{u.A, u.B}] {
			out = append(out, u)
		}
	}
	return out
}

// Involves reports whether the undecided pair names the event id.
func (u Undecided) Involves(id string) bool { return u.A == id || u.B == id }

// Counts aggregates views for a campaign (or any set of lifecycles).
type Counts struct {
	Contacts      int            `json:"contacts"`
	ByStatus      map[Status]int `json:"by_status"`
	Replies       int            `json:"replies"`
	Bounces       int            `json:"bounces"`
	Unsubscribes  int            `json:"unsubscribes"`
	Meetings      int            `json:"meetings"`
	Opportunities int            `json:"opportunities"`
	Discrepancies int            `json:"discrepancies"`
	Undecided     int            `json:"undecided"`
}

// Add counts one contact's view.
func (c *Counts) Add(v View) {
	if c.ByStatus == nil {
		c.ByStatus = map[Status]int{}
	}
	c.Contacts++
	c.ByStatus[v.Status]++
	for _, x := range []struct {
		on bool
		n  *int
	}{{v.Replied, &c.Replies}, {v.Bounced, &c.Bounces}, {v.Unsubscribed, &c.Unsubscribes},
		{v.MeetingBooked, &c.Meetings}, {v.Opportunity, &c.Opportunities}} {
		if x.on {
			*x.n++
		}
	}
	c.Discrepancies += len(v.Discrepancies)
	c.Undecided += len(v.Undecided)
}

// String is a one-line summary, for logs.
func (v View) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s", v.Status)
	if v.StatusEvent != "" {
		fmt.Fprintf(&b, " since %s (%s)", stamp(v.Since), v.StatusEvent)
	}
	if n := len(v.Discrepancies); n > 0 {
		fmt.Fprintf(&b, ", %d discrepancies", n)
	}
	if n := len(v.Undecided); n > 0 {
		fmt.Fprintf(&b, ", %d undecided", n)
	}
	return b.String()
}

// confirmedFacts are facts less those of events their source did not confirm (and of
// what was derived from them), and less the facts that say so: nothing acted on such an
// event, and nothing counts it. Their copies a person approves are events of their own.
func confirmedFacts(fs []Fact) []Fact {
	unconfirmed := map[string]bool{}
	for _, f := range fs {
		if f.Kind == KindUnconfirmed {
			unconfirmed[f.Cause] = true
		}
	}
	if len(unconfirmed) == 0 {
		return fs
	}
	return slices.DeleteFunc(slices.Clone(fs), func(f Fact) bool {
		return f.Kind == KindUnconfirmed || unconfirmed[f.ID] || (f.Cause != "" && unconfirmed[f.Cause])
	})
}
