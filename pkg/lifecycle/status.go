package lifecycle

import (
	"fmt"
	"strings"
)

// Status is where a contact stands in a campaign. Statuses are ranked by Precedence:
// the status of a State is the highest-ranked status any of its facts leads to.
type Status string

// The statuses, lowest precedence first.
const (
	Enrolled      Status = "enrolled"       // in the campaign, nothing sent yet (or a CRM "new lead")
	Sent          Status = "sent"           // an e-mail of the sequence was sent
	Delivered     Status = "delivered"      // the provider reports it delivered
	Opened        Status = "opened"         // opened or clicked
	Completed     Status = "completed"      // the sequence ended without a positive answer
	Replied       Status = "replied"        // a human replied (e-mail or chat)
	Interested    Status = "interested"     // the reply is positive (or asks for a meeting or information)
	MeetingBooked Status = "meeting_booked" // a meeting is booked and not cancelled
	Opportunity   Status = "opportunity"    // a deal/opportunity exists
	Suppressed    Status = "suppressed"     // do-not-contact (asked to be left alone, CRM flag)
	Bounced       Status = "bounced"        // a hard (or unclassified) bounce
	Unsubscribed  Status = "unsubscribed"   // the person opted out
)

// Statuses lists every status in precedence order, lowest first.
var Statuses = []Status{Enrolled, Sent, Delivered, Opened, Completed, Replied, Interested,
	MeetingBooked, Opportunity, Suppressed, Bounced, Unsubscribed}

// Precedence ranks s: a higher rank wins. Unknown statuses rank -1.
func Precedence(s Status) int {
	for i, x := range Statuses {
		if x == s {
			return i
		}
	}
	return -1
}

// Terminal reports whether s ends all contact: nothing may be sent after it.
func Terminal(s Status) bool { return s == Unsubscribed || s == Bounced || s == Suppressed }

// Rule is what the lifecycle does with a fact leading to status To while a fact
// holding status From is known.
type Rule string

const (
	// Allowed: To is applied (it ranks at least as high as From).
	Allowed Rule = "allowed"
	// Absorbed: To ranks lower; it is not applied and that is normal (a late
	// `delivered` after a reply): no discrepancy.
	Absorbed Rule = "absorbed"
	// Forbidden: To ranks lower and must not happen after From. Not applied; a
	// discrepancy when the fact is timed after From's fact.
	Forbidden Rule = "forbidden"
	// Stale: Forbidden, and also a discrepancy when the fact is older than From's
	// but reached the gateway after it (an old sync replaying an earlier state).
	Stale Rule = "stale"
)

// Transition is one cell of the transition table.
type Transition struct {
	From Status `json:"from"`
	To   Status `json:"to"`
	Rule Rule   `json:"rule"`
	Why  string `json:"why"`
}

// exceptions are the cells that are not simply "higher precedence is applied, lower is
// absorbed". Everything else follows from Precedence.
var exceptions = func() []Transition {
	var t []Transition
	for _, from := range []Status{Unsubscribed, Bounced, Suppressed} {
		for _, to := range []Status{Enrolled, Sent, Delivered} {
			t = append(t, Transition{from, to, Forbidden, "nothing is sent to, or re-enrolled, after " + string(from)})
		}
	}
	for _, from := range []Status{Completed, Replied, Interested, MeetingBooked, Opportunity} {
		t = append(t, Transition{from, Sent, Forbidden, "the sequence is stopped once " + string(from) + ": a later send is a follow-up that should not have gone out"})
	}
	t = append(t, Transition{Opportunity, Enrolled, Stale, "an opportunity is never reopened as a new lead, not even by an older sync that arrives late"})
	return t
}()

// Table is the full transition table, one cell per (From, To) pair in precedence
// order. The docs render it (MarkdownTable) and the tests read it.
var Table = func() []Transition {
	var t []Transition
	for _, from := range Statuses {
		for _, to := range Statuses {
			t = append(t, cell(from, to))
		}
	}
	return t
}()

var table = func() map[[2]Status]Transition {
	m := map[[2]Status]Transition{}
	for _, c := range Table {
		m[[2]Status{c.From, c.To}] = c
	}
	return m
}()

func cell(from, to Status) Transition {
	for _, e := range exceptions {
		if e.From == from && e.To == to {
			return e
		}
	}
	if Precedence(to) >= Precedence(from) {
		return Transition{from, to, Allowed, "ranks at least as high"}
	}
	return Transition{from, to, Absorbed, "ranks lower: kept as history, no regression"}
}

// RuleFor is the table's rule for a fact leading to to while from is known.
func RuleFor(from, to Status) Rule {
	if c, ok := table[[2]Status{from, to}]; ok {
		return c.Rule
	}
	return Absorbed
}

// MarkdownTable renders Table as a matrix: rows are the known status (From), columns
// the status a new fact leads to (To); A allowed, · absorbed, F forbidden, S stale.
func MarkdownTable() string {
	var b strings.Builder
	b.WriteString("| from \\ to |")
	for _, to := range Statuses {
		fmt.Fprintf(&b, " %s |", to)
	}
	b.WriteString("\n| --- |")
	for range Statuses {
		b.WriteString(" :-: |")
	}
	b.WriteString("\n")
	short := map[Rule]string{Allowed: "A", Absorbed: "·", Forbidden: "F", Stale: "S"}
	for _, from := range Statuses {
		fmt.Fprintf(&b, "| **%s** |", from)
		for _, to := range Statuses {
			fmt.Fprintf(&b, " %s |", short[RuleFor(from, to)])
		}
		b.WriteString("\n")
	}
	return b.String()
}
