package lifecycle

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"exacto.dev/pkg/envelope"
)

var t0 = time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)

type opt func(*envelope.Envelope)

// ev is an event of contact a@example.com in campaign c1 at t0+at, received a second
// after it happened.
func ev(id, typ string, at time.Duration, opts ...opt) envelope.Envelope {
	e := envelope.Envelope{SpecVersion: "1.0", ID: id, Type: typ, Time: t0.Add(at), ReceivedAt: t0.Add(at + time.Second),
		Tenant: "t1", Provider: "instantly", Data: envelope.Data{ProviderType: typ,
			Contact: &envelope.Contact{Email: "a@example.com"}, Campaign: &envelope.Campaign{ID: "c1"}}}
	for _, o := range opts {
		o(&e)
	}
	return e
}

func withVersion(v string) opt { return func(e *envelope.Envelope) { e.Version = v } }
func received(at time.Duration) opt {
	return func(e *envelope.Envelope) { e.ReceivedAt = t0.Add(at) }
}
func provider(p string) opt { return func(e *envelope.Envelope) { e.Provider = p } }
func noCampaign() opt       { return func(e *envelope.Envelope) { e.Data.Campaign = nil } }
func status(s string) opt   { return func(e *envelope.Envelope) { e.Data.Status = s } }
func bounce(kind string) opt {
	return func(e *envelope.Envelope) { e.Data.Bounce = &envelope.Bounce{Kind: kind} }
}
func meeting(id string) opt {
	return func(e *envelope.Envelope) { e.Data.Meeting = &envelope.Meeting{ID: id} }
}
func movedFrom(id string) opt { // after meeting(…)
	return func(e *envelope.Envelope) { e.Data.Meeting.RescheduledFrom = id }
}
func opportunity(id string) opt {
	return func(e *envelope.Envelope) { e.Data.Opportunity = &envelope.Opportunity{ID: id} }
}
func auto() opt {
	return func(e *envelope.Envelope) { e.Data.Message = &envelope.Message{ID: "m", Auto: true} }
}
func property(n, v string) opt {
	return func(e *envelope.Envelope) { e.Data.Property = &envelope.Property{Name: n, Value: v} }
}
func label(l, cause string) opt {
	return func(e *envelope.Envelope) {
		e.Data.Classification = &envelope.Classification{Label: l}
		e.Data.Cause = cause
	}
}

func fold(events ...envelope.Envelope) State {
	var s State
	for _, e := range events {
		s = Apply(s, e)
	}
	return s
}

// both applies events in the given order and reversed, checks they agree, and returns
// the view.
func both(t *testing.T, events ...envelope.Envelope) View {
	t.Helper()
	a := fold(events...)
	rev := make([]envelope.Envelope, len(events))
	for i, e := range events {
		rev[len(events)-1-i] = e
	}
	b := fold(rev...)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("order changed the state:\n%+v\n%+v", a, b)
	}
	return a.View()
}

func discrepancyIDs(v View) []string {
	var ids []string
	for _, d := range v.Discrepancies {
		ids = append(ids, d.Event)
	}
	return ids
}

// The seed's cases.
func TestSeedReplyBeforeDelivered(t *testing.T) {
	// The reply arrives first; the older delivered arrives later. Also a delivered timed
	// after the reply (a late provider report): still no regression, no discrepancy.
	v := both(t,
		ev("sent", envelope.TypeEmailSent, 0),
		ev("reply", envelope.TypeReplyReceived, 2*time.Hour, received(2*time.Hour+time.Second)),
		ev("cls", envelope.TypeReplyClassified, 2*time.Hour+time.Minute, label("interested", "reply")),
		ev("delivered", envelope.TypeEmailDelivered, time.Minute, received(3*time.Hour)),
		ev("delivered-late", envelope.TypeEmailDelivered, 4*time.Hour),
	)
	if v.Status != Interested || !v.Replied {
		t.Fatalf("status %s replied %v, want interested, replied", v.Status, v.Replied)
	}
	if len(v.Discrepancies) != 0 || len(v.Undecided) != 0 {
		t.Fatalf("a late delivered is no discrepancy: %+v %+v", v.Discrepancies, v.Undecided)
	}
	// Without the classification: replied.
	v = both(t, ev("reply", envelope.TypeReplyReceived, 2*time.Hour), ev("delivered", envelope.TypeEmailDelivered, time.Minute, received(3*time.Hour)))
	if v.Status != Replied || v.StatusEvent != "reply" {
		t.Fatalf("got %s", v)
	}
}

func TestSeedContactUpdatedV3ThenV2(t *testing.T) {
	hub := func(o ...opt) []opt { return append([]opt{provider("hubspot"), noCampaign()}, o...) }
	// v3 is seen first; v2, older, arrives later.
	v3 := ev("v3", envelope.TypeContactUpdated, time.Hour, hub(withVersion("3"), property("jobtitle", "CTO"))...)
	v2 := ev("v2", envelope.TypeContactUpdated, 30*time.Minute, hub(withVersion("2"), property("jobtitle", "CEO"), received(2*time.Hour))...)
	v := both(t, v3, v2)
	if p := v.Properties["hubspot:jobtitle"]; p.Value != "CTO" || p.Event != "v3" {
		t.Fatalf("property %+v, want v3's CTO", p)
	}
	if len(v.Discrepancies) != 1 || v.Discrepancies[0].Event != "v2" || v.Discrepancies[0].Against != "v3" || v.Discrepancies[0].Rule != Stale {
		t.Fatalf("want v2 stale against v3: %+v", v.Discrepancies)
	}
	// The older version never overwrites the newer one, even with a later clock.
	v2late := ev("v2", envelope.TypeContactUpdated, 2*time.Hour, hub(withVersion("2"), property("jobtitle", "CEO"), received(3*time.Hour))...)
	v = both(t, v3, v2late)
	if p := v.Properties["hubspot:jobtitle"]; p.Value != "CTO" {
		t.Fatalf("v2 with a later clock overwrote v3: %+v", p)
	}
	if got := discrepancyIDs(v); !reflect.DeepEqual(got, []string{"v2"}) {
		t.Fatalf("discrepancies %v", got)
	}
	// Versions compare as integers: v10 is newer than v9.
	v = both(t, ev("v10", envelope.TypeContactUpdated, 0, hub(withVersion("10"), property("x", "ten"))...),
		ev("v9", envelope.TypeContactUpdated, 0, hub(withVersion("9"), property("x", "nine"))...))
	if p := v.Properties["hubspot:x"]; p.Value != "ten" {
		t.Fatalf("v10 vs v9: %+v", p)
	}
	// In natural order (v2 received before v3) there is no discrepancy.
	v = both(t, ev("v2", envelope.TypeContactUpdated, 30*time.Minute, hub(withVersion("2"), property("jobtitle", "CEO"))...), v3)
	if len(v.Discrepancies) != 0 || v.Properties["hubspot:jobtitle"].Value != "CTO" {
		t.Fatalf("natural history: %+v", v)
	}
}

func TestSeedUnsubscribeThenScheduledFollowUp(t *testing.T) {
	unsub := ev("unsub", envelope.TypeLeadUnsubscribed, time.Hour)
	follow := ev("follow", envelope.TypeEmailSent, 25*time.Hour) // the scheduled step went out anyway
	v := both(t, ev("sent1", envelope.TypeEmailSent, 0), unsub, follow, ev("follow-delivered", envelope.TypeEmailDelivered, 25*time.Hour+time.Minute))
	if v.Status != Unsubscribed || !v.Unsubscribed {
		t.Fatalf("status %s", v.Status)
	}
	if got := discrepancyIDs(v); !reflect.DeepEqual(got, []string{"follow", "follow-delivered"}) {
		t.Fatalf("discrepancies %v, want the follow-up and its delivery", got)
	}
	d := v.Discrepancies[0]
	if d.State != Unsubscribed || d.Against != "unsub" || d.Target != Sent || d.Rule != Forbidden || !strings.Contains(d.Why, "after unsubscribed") {
		t.Fatalf("discrepancy %+v", d)
	}
	// The contact-level state has the opt-out: a send in another campaign is flagged in
	// its effective view.
	other := ev("other", envelope.TypeEmailSent, 26*time.Hour, func(e *envelope.Envelope) { e.Data.Campaign.ID = "c2" })
	states := map[string]State{}
	for _, e := range []envelope.Envelope{unsub, follow, other} {
		for _, k := range Keys(e) {
			states[k.String()] = Apply(states[k.String()], e)
		}
	}
	k := Key{Tenant: "t1", Contact: "email:a@example.com", Campaign: "c2"}
	eff := Effective(states[k.String()], states[k.ContactLevel().String()]).View()
	if eff.Status != Unsubscribed || !reflect.DeepEqual(discrepancyIDs(eff), []string{"other"}) {
		t.Fatalf("effective view of c2: %s %v", eff, discrepancyIDs(eff))
	}
}

func TestSeedOldSyncRecreatesOpportunityAsLead(t *testing.T) {
	hub := []opt{provider("hubspot"), noCampaign()}
	opp := ev("opp", envelope.TypeOpportunityCreated, 2*time.Hour, append(hub, opportunity("deal-1"))...)
	// The sync replays the contact's lifecycle stage "lead" from before the opportunity,
	// and it reaches the gateway after the opportunity did.
	sync := ev("sync", envelope.TypeLeadStatusChanged, time.Hour, append(hub, status("lead"), received(5*time.Hour))...)
	v := both(t, opp, sync)
	if v.Status != Opportunity || !v.Opportunity || !reflect.DeepEqual(v.Opportunities, []string{"deal-1"}) {
		t.Fatalf("status %s", v)
	}
	if len(v.Discrepancies) != 1 {
		t.Fatalf("discrepancies %+v", v.Discrepancies)
	}
	if d := v.Discrepancies[0]; d.Event != "sync" || d.State != Opportunity || d.Target != Enrolled || d.Rule != Stale || !strings.Contains(d.Why, "arrived after") {
		t.Fatalf("discrepancy %+v", d)
	}
	// A "new" lead status timed after the opportunity is forbidden outright.
	v = both(t, opp, ev("reopen", envelope.TypeLeadStatusChanged, 3*time.Hour, append(hub, status("NEW"))...))
	if v.Status != Opportunity || !reflect.DeepEqual(discrepancyIDs(v), []string{"reopen"}) {
		t.Fatalf("reopen: %s %v", v, discrepancyIDs(v))
	}
	// In natural history (lead first, received first) there is none.
	v = both(t, ev("lead", envelope.TypeLeadStatusChanged, time.Hour, append(hub, status("lead"))...), opp)
	if v.Status != Opportunity || len(v.Discrepancies) != 0 {
		t.Fatalf("natural history: %s %v", v, discrepancyIDs(v))
	}
}

func TestRules(t *testing.T) {
	for _, c := range []struct {
		name    string
		events  []envelope.Envelope
		status  Status
		discrep []string
	}{
		{"empty", nil, Enrolled, nil},
		{"sent", []envelope.Envelope{ev("s", envelope.TypeEmailSent, 0)}, Sent, nil},
		{"opened beats delivered", []envelope.Envelope{ev("o", envelope.TypeEmailOpened, time.Minute), ev("d", envelope.TypeEmailDelivered, 2*time.Minute)}, Opened, nil},
		{"clicked is opened", []envelope.Envelope{ev("c", envelope.TypeEmailClicked, 0)}, Opened, nil},
		{"soft bounce is not terminal", []envelope.Envelope{ev("s", envelope.TypeEmailSent, 0), ev("b", envelope.TypeEmailBounced, time.Minute, bounce("soft")), ev("s2", envelope.TypeEmailSent, time.Hour)}, Sent, nil},
		{"hard bounce then send", []envelope.Envelope{ev("b", envelope.TypeEmailBounced, time.Minute, bounce("hard")), ev("s2", envelope.TypeEmailSent, time.Hour)}, Bounced, []string{"s2"}},
		{"unknown bounce is hard", []envelope.Envelope{ev("b", envelope.TypeEmailBounced, time.Minute, bounce("unknown"))}, Bounced, nil},
		{"auto reply is no reply", []envelope.Envelope{ev("s", envelope.TypeEmailSent, 0), ev("r", envelope.TypeReplyReceived, time.Hour, auto()), ev("s2", envelope.TypeEmailSent, 2*time.Hour)}, Sent, nil},
		{"reply classified out of office is retracted", []envelope.Envelope{ev("s", envelope.TypeEmailSent, 0), ev("r", envelope.TypeReplyReceived, time.Hour), ev("c", envelope.TypeReplyClassified, time.Hour+time.Second, label("out_of_office", "r"))}, Sent, nil},
		{"chat message is a reply", []envelope.Envelope{ev("m", envelope.TypeMessageReceived, 0, noCampaign(), provider("meta"))}, Replied, nil},
		{"reply stops the sequence", []envelope.Envelope{ev("r", envelope.TypeReplyReceived, time.Hour), ev("s2", envelope.TypeEmailSent, 2*time.Hour)}, Replied, []string{"s2"}},
		{"send before the reply is fine", []envelope.Envelope{ev("s", envelope.TypeEmailSent, 0, received(3*time.Hour)), ev("r", envelope.TypeReplyReceived, time.Hour)}, Replied, nil},
		{"meeting request is interest, not a booking", []envelope.Envelope{ev("r", envelope.TypeReplyReceived, 0), ev("c", envelope.TypeReplyClassified, time.Second, label("meeting_request", "r"))}, Interested, nil},
		{"meeting booked", []envelope.Envelope{ev("r", envelope.TypeReplyReceived, 0), ev("m", envelope.TypeMeetingBooked, time.Hour, meeting("m1"))}, MeetingBooked, nil},
		{"meeting cancelled falls back", []envelope.Envelope{ev("r", envelope.TypeReplyReceived, 0), ev("m", envelope.TypeMeetingBooked, time.Hour, meeting("m1")), ev("x", envelope.TypeMeetingCancelled, 2*time.Hour, meeting("m1"))}, Replied, nil},
		{"rebooked meeting", []envelope.Envelope{ev("m", envelope.TypeMeetingBooked, time.Hour, meeting("m1")), ev("x", envelope.TypeMeetingCancelled, 2*time.Hour, meeting("m1")), ev("m2", envelope.TypeMeetingBooked, 3*time.Hour, meeting("m2"))}, MeetingBooked, nil},
		{"a reschedule's cancellation keeps the meeting", []envelope.Envelope{ev("r", envelope.TypeReplyReceived, 0), ev("m", envelope.TypeMeetingBooked, time.Hour, meeting("m1")), ev("x", envelope.TypeMeetingCancelled, 2*time.Hour, meeting("m1"), status(envelope.MeetingRescheduled))}, MeetingBooked, nil},
		{"a moved meeting cancelled later falls back", []envelope.Envelope{ev("r", envelope.TypeReplyReceived, 0), ev("m", envelope.TypeMeetingBooked, time.Hour, meeting("m1")), ev("x", envelope.TypeMeetingCancelled, 2*time.Hour, meeting("m1"), status(envelope.MeetingRescheduled)),
			ev("m2", envelope.TypeMeetingBooked, 2*time.Hour, meeting("m2"), movedFrom("m1")), ev("c", envelope.TypeMeetingCancelled, 3*time.Hour, meeting("m2"))}, Replied, nil},
		{"instantly statuses", []envelope.Envelope{ev("a", envelope.TypeLeadStatusChanged, 0, status("meeting_booked")), ev("b", envelope.TypeLeadStatusChanged, time.Hour, status("out_of_office"))}, MeetingBooked, nil},
		{"a no-show had a meeting booked, no opt-out", []envelope.Envelope{ev("a", envelope.TypeLeadStatusChanged, 0, status("meeting_booked")), ev("b", envelope.TypeLeadStatusChanged, time.Hour, status("no_show"))}, MeetingBooked, nil},
		{"a no-show alone", []envelope.Envelope{ev("r", envelope.TypeReplyReceived, 0), ev("b", envelope.TypeLeadStatusChanged, time.Hour, status("no_show"))}, MeetingBooked, nil},
		{"smartlead category", []envelope.Envelope{ev("a", envelope.TypeLeadStatusChanged, 0, status("Meeting Request"))}, Interested, nil},
		{"smartlead do not contact", []envelope.Envelope{ev("a", envelope.TypeLeadStatusChanged, 0, status("Do Not Contact")), ev("s", envelope.TypeEmailSent, time.Hour)}, Suppressed, []string{"s"}},
		{"unsubscribe request label suppresses", []envelope.Envelope{ev("r", envelope.TypeReplyReceived, 0), ev("c", envelope.TypeReplyClassified, time.Second, label("unsubscribe_request", "r"))}, Suppressed, nil},
		{"bounce notice label bounces", []envelope.Envelope{ev("r", envelope.TypeReplyReceived, 0), ev("c", envelope.TypeReplyClassified, time.Second, label("bounce_notice", "r"))}, Bounced, nil},
		{"not interested stays replied", []envelope.Envelope{ev("r", envelope.TypeReplyReceived, 0), ev("a", envelope.TypeLeadStatusChanged, time.Second, status("not_interested"))}, Replied, nil},
		{"sequence stopped without reply is completed", []envelope.Envelope{ev("s", envelope.TypeEmailSent, 0), ev("o", envelope.TypeEmailOpened, time.Minute), ev("x", envelope.TypeSequenceStopped, time.Hour), ev("s2", envelope.TypeEmailSent, 2*time.Hour)}, Completed, []string{"s2"}},
		{"unsubscribe dominates opportunity", []envelope.Envelope{ev("o", envelope.TypeOpportunityCreated, 0, opportunity("d")), ev("u", envelope.TypeLeadUnsubscribed, time.Hour)}, Unsubscribed, nil},
		{"unsubscribe dominates a later reply", []envelope.Envelope{ev("u", envelope.TypeLeadUnsubscribed, 0), ev("r", envelope.TypeReplyReceived, time.Hour)}, Unsubscribed, nil},
		{"unsubscribed beats bounced", []envelope.Envelope{ev("b", envelope.TypeEmailBounced, 0), ev("u", envelope.TypeLeadUnsubscribed, time.Hour)}, Unsubscribed, nil},
		{"ignored types", []envelope.Envelope{ev("x", envelope.TypeUnmapped, 0), ev("y", envelope.TypeMessageStatus, 0, status("read"))}, Enrolled, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := both(t, c.events...)
			if v.Status != c.status {
				t.Fatalf("status %s, want %s", v.Status, c.status)
			}
			if got := discrepancyIDs(v); !reflect.DeepEqual(got, c.discrep) {
				t.Fatalf("discrepancies %v, want %v: %+v", got, c.discrep, v.Discrepancies)
			}
		})
	}
}

// A Calendly reschedule is one moved meeting, never a cancellation: its booking b0, the
// old invitee's cancellation x (status rescheduled) and the new invitee's booking b1
// (rescheduled_from the old meeting) may arrive in any order, and whichever of them
// have arrived, the contact has a meeting booked; all of them show the one new meeting,
// the old one rescheduled.
func TestRescheduleInAnyOrder(t *testing.T) {
	r := ev("r", envelope.TypeReplyReceived, 0)
	b0 := ev("b0", envelope.TypeMeetingBooked, time.Hour, meeting("m-old"))
	x := ev("x", envelope.TypeMeetingCancelled, 2*time.Hour, meeting("m-old"), status(envelope.MeetingRescheduled))
	b1 := ev("b1", envelope.TypeMeetingBooked, 2*time.Hour, meeting("m-new"), movedFrom("m-old"))
	for _, order := range permutations([]envelope.Envelope{r, b0, x, b1}) {
		var s State
		for _, e := range order {
			s = Apply(s, e)
			if v := s.View(); (s.Seen("b0") || s.Seen("x") || s.Seen("b1")) && (v.Status != MeetingBooked || !v.MeetingBooked) {
				t.Fatalf("after %s of %v: %s, want meeting_booked", e.ID, ids(order), v)
			}
		}
		v := s.View()
		if !reflect.DeepEqual(v.Meetings, []string{"m-new"}) || !reflect.DeepEqual(v.Rescheduled, []string{"m-old"}) || len(v.Discrepancies) != 0 {
			t.Fatalf("%v: meetings %v rescheduled %v discrepancies %+v", ids(order), v.Meetings, v.Rescheduled, v.Discrepancies)
		}
	}
	// The moved meeting cancelled for real afterwards: in any order, no meeting stands.
	c := ev("c", envelope.TypeMeetingCancelled, 3*time.Hour, meeting("m-new"))
	for _, order := range permutations([]envelope.Envelope{r, b0, x, b1, c}) {
		if v := fold(order...).View(); v.Status != Replied || v.MeetingBooked || len(v.Meetings) != 0 {
			t.Fatalf("%v: %s meetings %v", ids(order), v, v.Meetings)
		}
	}
	// The old booking and the new one without the cancellation: still one meeting.
	if v := both(t, b0, b1); !reflect.DeepEqual(v.Meetings, []string{"m-new"}) {
		t.Fatalf("b0 and b1: meetings %v", v.Meetings)
	}
}

// permutations are every order of es.
func permutations(es []envelope.Envelope) [][]envelope.Envelope {
	if len(es) <= 1 {
		return [][]envelope.Envelope{append([]envelope.Envelope(nil), es...)}
	}
	var out [][]envelope.Envelope
	for i := range es {
		rest := append(append([]envelope.Envelope(nil), es[:i]...), es[i+1:]...)
		for _, p := range permutations(rest) {
			out = append(out, append([]envelope.Envelope{es[i]}, p...))
		}
	}
	return out
}

func ids(es []envelope.Envelope) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.ID)
	}
	return out
}

func TestUndecided(t *testing.T) {
	// Same time, no version: whether the send came after the opt-out is unknown.
	v := both(t, ev("u", envelope.TypeLeadUnsubscribed, time.Hour), ev("s", envelope.TypeEmailSent, time.Hour))
	if v.Status != Unsubscribed || len(v.Discrepancies) != 0 {
		t.Fatalf("%s %+v", v, v.Discrepancies)
	}
	if len(v.Undecided) != 1 || v.Undecided[0].A != "s" || v.Undecided[0].B != "u" || !v.Undecided[0].Involves("u") {
		t.Fatalf("undecided %+v", v.Undecided)
	}
	// Versions decide a tie: no question to ask.
	v = both(t, ev("u", envelope.TypeLeadUnsubscribed, time.Hour, withVersion("5")), ev("s", envelope.TypeEmailSent, time.Hour, withVersion("6")))
	if len(v.Undecided) != 0 || !reflect.DeepEqual(discrepancyIDs(v), []string{"s"}) {
		t.Fatalf("versions: %+v %+v", v.Undecided, v.Discrepancies)
	}
	// Two property values at the same time without versions.
	v = both(t, ev("p1", envelope.TypeContactUpdated, 0, noCampaign(), property("city", "Lima")),
		ev("p2", envelope.TypeContactUpdated, 0, noCampaign(), property("city", "Quito")))
	if len(v.Undecided) != 1 || v.Properties["instantly:city"].Event != "p2" {
		t.Fatalf("properties: %+v %+v", v.Undecided, v.Properties)
	}
	// Two lead statuses at the same time.
	v = both(t, ev("a", envelope.TypeLeadStatusChanged, 0, status("interested")), ev("b", envelope.TypeLeadStatusChanged, 0, status("not_interested")))
	if len(v.Undecided) != 1 || v.LeadStatus != "not_interested" {
		t.Fatalf("statuses: %+v %q", v.Undecided, v.LeadStatus)
	}
	// The projector learns what an Apply revealed.
	before := fold(ev("u", envelope.TypeLeadUnsubscribed, time.Hour)).View()
	after := Apply(fold(ev("u", envelope.TypeLeadUnsubscribed, time.Hour)), ev("s", envelope.TypeEmailSent, time.Hour)).View()
	if n := NewUndecided(before, after); len(n) != 1 {
		t.Fatalf("new undecided %+v", n)
	}
	after = Apply(fold(ev("u", envelope.TypeLeadUnsubscribed, time.Hour)), ev("s", envelope.TypeEmailSent, 2*time.Hour)).View()
	if n := NewDiscrepancies(before, after); len(n) != 1 || n[0].Event != "s" {
		t.Fatalf("new discrepancies %+v", n)
	}
}

func TestVersionOrder(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"", "1", -1}, {"2", "10", -1}, {"010", "10", 0}, {"99999999999999999999999", "100000000000000000000000", -1},
		{"10", "a", -1}, {"a", "b", -1}, {"2026-01-02", "2026-01-10", -1},
	} {
		if got := cmpVersion(c.a, c.b); got != c.want {
			t.Errorf("cmpVersion(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
		if got := cmpVersion(c.b, c.a); got != -c.want {
			t.Errorf("cmpVersion(%q, %q) = %d, want %d", c.b, c.a, got, -c.want)
		}
	}
}

func TestKeys(t *testing.T) {
	k := func(c string) Key { return Key{Tenant: "t1", Contact: "email:a@example.com", Campaign: c} }
	for _, c := range []struct {
		env  envelope.Envelope
		want []Key
	}{
		{ev("s", envelope.TypeEmailSent, 0), []Key{k("c1")}},
		{ev("r", envelope.TypeReplyReceived, 0), []Key{k("c1")}},
		{ev("u", envelope.TypeLeadUnsubscribed, 0), []Key{k("c1"), k("")}},
		{ev("b", envelope.TypeEmailBounced, 0, bounce("hard")), []Key{k("c1"), k("")}},
		{ev("c", envelope.TypeReplyClassified, 0, label("unsubscribe_request", "r")), []Key{k("c1"), k("")}},
		{ev("c", envelope.TypeReplyClassified, 0, label("interested", "r")), []Key{k("c1")}},
		{ev("st", envelope.TypeLeadStatusChanged, 0, status("closed")), []Key{k("c1"), k("")}},
		{ev("p", envelope.TypeContactUpdated, 0, noCampaign(), property("a", "b")), []Key{k("")}},
		{ev("m", envelope.TypeMeetingBooked, 0, noCampaign(), meeting("m")), []Key{k("")}},
		{ev("x", envelope.TypeUnmapped, 0), nil},
		{ev("n", envelope.TypeEmailSent, 0, func(e *envelope.Envelope) { e.Data.Contact = nil }), nil},
	} {
		if got := Keys(c.env); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s %s: keys %v, want %v", c.env.ID, c.env.Type, got, c.want)
		}
	}
}

func TestTable(t *testing.T) {
	if len(Table) != len(Statuses)*len(Statuses) {
		t.Fatalf("table has %d cells", len(Table))
	}
	for _, c := range Table {
		up := Precedence(c.To) >= Precedence(c.From)
		if up != (c.Rule == Allowed) {
			t.Errorf("%s → %s is %s: only transitions up the precedence are applied", c.From, c.To, c.Rule)
		}
		if c.Why == "" {
			t.Errorf("%s → %s has no reason", c.From, c.To)
		}
	}
	for _, term := range []Status{Unsubscribed, Bounced, Suppressed} {
		if RuleFor(term, Sent) != Forbidden {
			t.Errorf("a send after %s must be forbidden", term)
		}
	}
	if RuleFor(Replied, Delivered) != Absorbed || RuleFor(Opportunity, Enrolled) != Stale {
		t.Error("seed rules changed")
	}
}

// The docs render the same table.
func TestDocsRenderTable(t *testing.T) {
	doc, err := os.ReadFile("../../docs/lifecycle.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), MarkdownTable()) {
		t.Fatalf("docs/lifecycle.md does not contain the transition table; render it with MarkdownTable():\n%s", MarkdownTable())
	}
	for _, c := range exceptions {
		if !strings.Contains(string(doc), c.Why) {
			t.Errorf("docs/lifecycle.md does not give the reason %q", c.Why)
		}
	}
}

func TestJSONRoundTrip(t *testing.T) {
	s := fold(ev("s", envelope.TypeEmailSent, 0, withVersion("1")), ev("u", envelope.TypeLeadUnsubscribed, time.Hour),
		ev("p", envelope.TypeContactUpdated, 0, noCampaign(), property("a", "b"), received(0)))
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var back State
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(s, back) {
		t.Fatalf("round trip changed the state:\n%+v\n%+v", s, back)
	}
	if !strings.Contains(string(b), `"facts":[{"id":"p","type":"contact.updated","kind":"property"`) {
		t.Fatalf("json %s", b)
	}
	if _, err := json.Marshal(s.View()); err != nil {
		t.Fatal(err)
	}
	var zero State
	b, _ = json.Marshal(zero)
	var z State
	if err := json.Unmarshal(b, &z); err != nil || !reflect.DeepEqual(z, zero) || z.Status() != Enrolled {
		t.Fatalf("zero state %s", b)
	}
}

func TestCounts(t *testing.T) {
	var c Counts
	c.Add(fold(ev("r", envelope.TypeReplyReceived, 0)).View())
	c.Add(fold(ev("u", envelope.TypeLeadUnsubscribed, 0), ev("s", envelope.TypeEmailSent, time.Hour)).View())
	c.Add(fold(ev("b", envelope.TypeEmailBounced, 0)).View())
	c.Add(fold(ev("m", envelope.TypeMeetingBooked, 0, meeting("m"))).View())
	want := Counts{Contacts: 4, ByStatus: map[Status]int{Replied: 1, Unsubscribed: 1, Bounced: 1, MeetingBooked: 1},
		Replies: 1, Bounces: 1, Unsubscribes: 1, Meetings: 1, Discrepancies: 1}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("counts %+v, want %+v", c, want)
	}
}

func TestBounds(t *testing.T) {
	var events []envelope.Envelope
	for i := range 3 * MaxOpens {
		events = append(events, ev("o"+string(rune('a'+i)), envelope.TypeEmailOpened, time.Duration(i)*time.Minute))
	}
	s := fold(events...)
	if len(s.Facts) != MaxOpens || s.Facts[len(s.Facts)-1].ID != events[len(events)-1].ID {
		t.Fatalf("kept %d opens", len(s.Facts))
	}
	if !s.Seen(events[len(events)-1].ID) || s.Seen(events[0].ID) {
		t.Fatal("the newest opens are kept")
	}
}

// A spam complaint dominates as an unsubscribe does: a later send is a discrepancy.
func TestComplaintIsAnOptOut(t *testing.T) {
	complaint := ev("complaint", envelope.TypeEmailComplained, time.Hour)
	v := both(t, ev("sent1", envelope.TypeEmailSent, 0), complaint, ev("follow", envelope.TypeEmailSent, 25*time.Hour))
	if v.Status != Unsubscribed || !v.Unsubscribed {
		t.Fatalf("status %s", v.Status)
	}
	if got := discrepancyIDs(v); !reflect.DeepEqual(got, []string{"follow"}) {
		t.Fatalf("discrepancies %v, want the follow-up", got)
	}
}

// An event its source did not confirm counts for nothing, in whatever order its
// event.unconfirmed arrives; the copy a person approves (an event of its own) counts.
// In the campaign view and the contact-wide one alike: an unconfirmed opt-out opts no one
// out anywhere.
func TestUnconfirmedCountsForNothing(t *testing.T) {
	sent := ev("s", envelope.TypeEmailSent, 0)
	forged := ev("r", envelope.TypeReplyReceived, time.Hour)
	unsub := ev("u", envelope.TypeLeadUnsubscribed, 2*time.Hour)
	not := func(id, cause string) envelope.Envelope {
		return ev(id, envelope.TypeEventUnconfirmed, 3*time.Hour, func(e *envelope.Envelope) { e.Data.Cause, e.Data.Status = cause, "not found" })
	}
	for _, order := range permutations([]envelope.Envelope{sent, forged, unsub, not("n1", "r"), not("n2", "u")}) {
		v := fold(order...).View()
		if v.Status != Sent || v.Replied || v.Unsubscribed {
			t.Fatalf("%v: %s", ids(order), v)
		}
	}
	if !slices.ContainsFunc(Keys(not("n2", "u")), func(k Key) bool { return k.Campaign == "" }) {
		t.Fatal("an event.unconfirmed does not reach the contact-wide lifecycle")
	}
	approved := ev("r-approved", envelope.TypeReplyReceived, time.Hour)
	if v := fold(sent, forged, not("n1", "r"), approved).View(); v.Status != Replied {
		t.Fatalf("the approved copy: %s", v)
	}
}

// A property's group, full, keeps its greatest updates by version first: the one insert
// drops is the least by version (cmpProperty), here the newest by time, not the least
// in cmpFact's time order. And a state of more than maxInsert facts is merged, alike.
func TestApplyTrimsAPropertyByVersion(t *testing.T) {
	var s State
	var evs []envelope.Envelope
	for i := range MaxPropertyFacts {
		evs = append(evs, ev(fmt.Sprintf("p%d", i), envelope.TypeContactUpdated, time.Duration(i)*time.Minute,
			property("city", fmt.Sprint(i)), withVersion(fmt.Sprint(10+i))))
	}
	// Newer than all by time, older than all by version: the least of the group.
	evs = append(evs, ev("late", envelope.TypeContactUpdated, time.Hour, property("city", "old"), withVersion("1")))
	for _, e := range evs {
		s = Apply(s, e)
	}
	if len(s.Facts) != MaxPropertyFacts || slices.ContainsFunc(s.Facts, func(f Fact) bool { return f.ID == "late" }) {
		t.Fatalf("facts %v: want the %d versioned updates, without the one of version 1", s.Facts, MaxPropertyFacts)
	}
	for i := range maxInsert + 1 { // past the size insert checks
		s = Apply(s, ev(fmt.Sprintf("o%02d", i), envelope.TypeEmailSent, time.Duration(i)*time.Second))
	}
	before := len(s.Facts)
	next := ev("x", envelope.TypeEmailDelivered, 2*time.Hour)
	if _, ok := insert(s, FromEvent(next).Facts[0]); ok || before <= maxInsert {
		t.Fatalf("a state of %d facts went through insert", before)
	}
	if got, want := Apply(s, next), Merge(s, FromEvent(next)); !reflect.DeepEqual(got, want) {
		t.Fatalf("Apply = %v, Merge gives %v", got.Facts, want.Facts)
	}
}
