package lifecycle

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"exacto.dev/pkg/envelope"
)

// Shuffles is how many orders of each generated history are checked.
const Shuffles = 1000

// genHistory draws 1–40 events over two contacts and three campaigns (one of them
// none), with coarse times (so ties happen), optional versions, arrival delays and
// duplicates (exact copies and redeliveries with another receivedat).
func genHistory(t *rapid.T) []envelope.Envelope {
	types := []string{envelope.TypeEmailSent, envelope.TypeEmailDelivered, envelope.TypeEmailOpened, envelope.TypeEmailClicked,
		envelope.TypeReplyReceived, envelope.TypeEmailBounced, envelope.TypeLeadUnsubscribed, envelope.TypeLeadStatusChanged,
		envelope.TypeContactUpdated, envelope.TypeOpportunityCreated, envelope.TypeMeetingBooked, envelope.TypeMeetingCancelled,
		envelope.TypeMessageReceived, envelope.TypeReplyClassified, envelope.TypeSequenceStopped, envelope.TypeUnmapped}
	n := rapid.IntRange(1, 40).Draw(t, "n")
	var events []envelope.Envelope
	var replies []string
	for i := range n {
		if len(events) > 0 && rapid.IntRange(0, 5).Draw(t, "dup") == 0 {
			d := events[rapid.IntRange(0, len(events)-1).Draw(t, "which")]
			if rapid.Bool().Draw(t, "redelivery") {
				d.ReceivedAt = d.ReceivedAt.Add(time.Duration(rapid.IntRange(1, 60).Draw(t, "later")) * time.Minute)
			}
			events = append(events, d)
			continue
		}
		typ := rapid.SampledFrom(types).Draw(t, "type")
		at := time.Duration(rapid.IntRange(0, 12).Draw(t, "time")) * 10 * time.Minute
		e := ev(fmt.Sprintf("ev%02d", i), typ, at, received(at+time.Duration(rapid.IntRange(0, 8).Draw(t, "delay"))*10*time.Minute))
		e.Version = rapid.SampledFrom([]string{"", "", "1", "2", "3", "10"}).Draw(t, "version")
		e.Provider = rapid.SampledFrom([]string{"instantly", "hubspot"}).Draw(t, "provider")
		e.Data.Contact.Email = rapid.SampledFrom([]string{"a@example.com", "b@example.com"}).Draw(t, "contact")
		if c := rapid.SampledFrom([]string{"c1", "c2", ""}).Draw(t, "campaign"); c == "" {
			e.Data.Campaign = nil
		} else {
			e.Data.Campaign.ID = c
		}
		switch typ {
		case envelope.TypeEmailBounced:
			e.Data.Bounce = &envelope.Bounce{Kind: rapid.SampledFrom([]string{"hard", "soft", "unknown"}).Draw(t, "bounce")}
		case envelope.TypeReplyReceived:
			replies = append(replies, e.ID)
			if rapid.IntRange(0, 4).Draw(t, "auto") == 0 {
				auto()(&e)
			}
		case envelope.TypeReplyClassified:
			cause := "unknown"
			if len(replies) > 0 {
				cause = rapid.SampledFrom(replies).Draw(t, "cause")
			}
			label(rapid.SampledFrom([]string{"interested", "meeting_request", "not_interested", "unsubscribe_request",
				"out_of_office", "bounce_notice", "auto_reply", "unclear"}).Draw(t, "label"), cause)(&e)
		case envelope.TypeLeadStatusChanged:
			e.Data.Status = rapid.SampledFrom([]string{"lead", "NEW", "interested", "meeting_booked", "closed", "not_interested",
				"out_of_office", "Do Not Contact", "opportunity", "no_show"}).Draw(t, "status")
		case envelope.TypeContactUpdated:
			e.Data.Property = &envelope.Property{Name: rapid.SampledFrom([]string{"city", "jobtitle"}).Draw(t, "prop"),
				Value: rapid.SampledFrom([]string{"x", "y", "z"}).Draw(t, "value")}
		case envelope.TypeOpportunityCreated:
			e.Data.Opportunity = &envelope.Opportunity{ID: rapid.SampledFrom([]string{"d1", "d2"}).Draw(t, "deal")}
		case envelope.TypeMeetingBooked:
			// Some bookings move another meeting (a reschedule), or name their own.
			e.Data.Meeting = &envelope.Meeting{ID: rapid.SampledFrom([]string{"m1", "m2"}).Draw(t, "meeting"),
				RescheduledFrom: rapid.SampledFrom([]string{"", "", "m1", "m2"}).Draw(t, "from")}
		case envelope.TypeMeetingCancelled:
			e.Data.Meeting = &envelope.Meeting{ID: rapid.SampledFrom([]string{"m1", "m2"}).Draw(t, "meeting")}
			e.Data.Status = rapid.SampledFrom([]string{"", envelope.MeetingRescheduled}).Draw(t, "cancel")
		}
		events = append(events, e)
	}
	return events
}

// project applies events in order to the lifecycles Keys names, as the projector does.
func project(events []envelope.Envelope) map[string]State {
	states := map[string]State{}
	for _, e := range events {
		for _, k := range Keys(e) {
			states[k.String()] = Apply(states[k.String()], e)
		}
	}
	return states
}

func views(states map[string]State) map[string]View {
	vs := map[string]View{}
	for k, s := range states {
		vs[k] = s.View()
	}
	return vs
}

func mustJSON(t interface{ Fatal(...any) }, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The same set of events, in any order and with any duplicates, gives the same states,
// the same JSON, and the same views (status, discrepancies, undecided pairs).
func TestPropertyShuffledHistoriesAgree(t *testing.T) {
	total, withDiscrepancies, withUndecided := 0, 0, 0
	rapid.Check(t, func(t *rapid.T) {
		events := genHistory(t)
		want := project(events)
		wantJSON, wantViews := mustJSON(t, want), views(want)
		wantViewsJSON := mustJSON(t, wantViews)
		for _, v := range wantViews {
			if len(v.Discrepancies) > 0 {
				withDiscrepancies++
			}
			if len(v.Undecided) > 0 {
				withUndecided++
			}
		}
		rng := rand.New(rand.NewPCG(rapid.Uint64().Draw(t, "seed"), 1))
		order := append([]envelope.Envelope(nil), events...)
		for i := range Shuffles {
			rng.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
			got := project(order)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("shuffle %d: states differ\n got %s\nwant %s", i, mustJSON(t, got), wantJSON)
			}
			// Views and JSON are functions of equal states; spot-check them all the same.
			if i%50 == 0 {
				if g := mustJSON(t, got); g != wantJSON {
					t.Fatalf("shuffle %d: JSON differs\n got %s\nwant %s", i, g, wantJSON)
				}
				if gv := views(got); !reflect.DeepEqual(gv, wantViews) || mustJSON(t, gv) != wantViewsJSON {
					t.Fatalf("shuffle %d: views differ", i)
				}
			}
			total++
		}
	})
	t.Logf("%d shuffled projections checked; %d lifecycles with discrepancies, %d with undecided pairs", total, withDiscrepancies, withUndecided)
}

// genState is the state of a few generated events of one lifecycle (keys ignored:
// Merge is defined on any two states). Three states drawn apart must not give one id
// to two different events, as the gateway never does: each event's id is made from its
// content (all but its arrival time, so a redelivery keeps its id).
func genState(t *rapid.T) State {
	var s State
	for _, e := range genHistory(t) {
		content := e
		content.ID, content.ReceivedAt = "", time.Time{}
		e.ID = envelope.ID("t", "gen", mustJSONEnv(content))
		s = Apply(s, e)
	}
	return s
}

func mustJSONEnv(e envelope.Envelope) string {
	b, err := json.Marshal(e)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func TestPropertyMergeLaws(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a, b, c := genState(t), genState(t), genState(t)
		eq := func(what string, x, y State) {
			if !reflect.DeepEqual(x, y) || mustJSON(t, x) != mustJSON(t, y) || !reflect.DeepEqual(x.View(), y.View()) {
				t.Fatalf("%s does not hold:\n%s\n%s", what, mustJSON(t, x), mustJSON(t, y))
			}
		}
		eq("commutativity", Merge(a, b), Merge(b, a))
		eq("associativity", Merge(Merge(a, b), c), Merge(a, Merge(b, c)))
		eq("idempotence", Merge(a, a), a)
		eq("idempotence of a join", Merge(Merge(a, b), b), Merge(a, b))
		eq("identity", Merge(a, State{}), a)
		var back State
		if err := json.Unmarshal([]byte(mustJSON(t, a)), &back); err != nil {
			t.Fatal(err)
		}
		eq("JSON round trip", back, a)
	})
}

// Applying a prefix, storing the state (as JSON, as the projector does), then applying
// the rest gives the state of applying everything; so does merging the two halves'
// states.
func TestPropertyPrefixThenRest(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		events := genHistory(t)
		cut := rapid.IntRange(0, len(events)).Draw(t, "cut")
		var s State
		for _, e := range events[:cut] {
			s = Apply(s, e)
		}
		var stored State
		if err := json.Unmarshal([]byte(mustJSON(t, s)), &stored); err != nil {
			t.Fatal(err)
		}
		rest := stored
		var tail State
		for _, e := range events[cut:] {
			rest = Apply(rest, e)
			tail = Apply(tail, e)
		}
		all := fold(events...)
		if !reflect.DeepEqual(rest, all) || !reflect.DeepEqual(Merge(s, tail), all) {
			t.Fatalf("prefix then rest differs from all:\n%s\n%s", mustJSON(t, rest), mustJSON(t, all))
		}
	})
}

// Apply's fast path (insert) gives what Merge gives: on every state a history makes,
// and on states no Merge made (facts out of order, an id twice, a group over its bound,
// a time not in UTC), where it must leave the work to Merge.
func TestPropertyApplyIsMerge(t *testing.T) {
	var inserted, merged, took, sorted int
	rapid.Check(t, func(t *rapid.T) {
		events := genHistory(t)
		// Opens and property updates enough to fill their groups past the bound.
		for i := range rapid.IntRange(0, 24).Draw(t, "more") {
			at := time.Duration(rapid.IntRange(0, 12).Draw(t, "at")) * 10 * time.Minute
			e := ev(fmt.Sprintf("more%02d", i), rapid.SampledFrom([]string{envelope.TypeEmailOpened, envelope.TypeContactUpdated}).Draw(t, "kind"), at)
			if e.Type == envelope.TypeContactUpdated {
				e.Data.Property = &envelope.Property{Name: "city", Value: "x"}
			}
			events = slices.Insert(events, rapid.IntRange(0, len(events)).Draw(t, "where"), e)
		}
		raw := rapid.Bool().Draw(t, "raw") // facts added as they came, not merged
		var s State
		for _, env := range events {
			if raw && rapid.IntRange(0, 3).Draw(t, "raw fact") == 0 {
				if f, ok := fact(env); ok {
					switch rapid.IntRange(0, 5).Draw(t, "twist") {
					case 0:
						f.Time = f.Time.In(time.FixedZone("X", 3600))
					case 1:
						f.Received = f.Received.In(time.FixedZone("X", 3600))
					case 2:
						if len(s.Facts) > 0 { // a copy of one it holds, received again
							f = s.Facts[rapid.IntRange(0, len(s.Facts)-1).Draw(t, "copy")]
							f.Received = f.Received.Add(time.Minute)
						}
					case 3: // a group filled past its bound
						for i := range MaxOpens + 1 {
							o := f
							o.ID, o.Kind, o.Type = fmt.Sprintf("%s-open%d", f.ID, i), KindOpened, envelope.TypeEmailOpened
							s.Facts = append(s.Facts, o)
						}
					}
					s.Facts = append(slices.Clone(s.Facts), f)
					if rapid.Bool().Draw(t, "ordered") { // in order, but maybe an id twice or a group over its bound
						slices.SortFunc(s.Facts, cmpFact)
					}
					continue
				}
			}
			got, want := Apply(s, env), Merge(s, FromEvent(env))
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("Apply(%v, %s) = %v, Merge gives %v", s.Facts, env.ID, got.Facts, want.Facts)
			}
			// Effective with one side empty takes s as it is when Merge would leave it so.
			alone := Merge(s, State{})
			if a, b := Effective(s, State{}), Effective(State{}, s); !reflect.DeepEqual(a, alone) || !reflect.DeepEqual(b, alone) {
				t.Fatalf("Effective of %v and nothing = %v and %v, Merge gives %v", s.Facts, a.Facts, b.Facts, alone.Facts)
			}
			if isMerged(s.Facts) {
				took++
			} else {
				sorted++
			}
			if f, ok := fact(env); ok {
				if _, ok := insert(s, f); ok {
					inserted++
				} else {
					merged++
				}
			}
			if !raw || rapid.IntRange(0, 3).Draw(t, "merged") == 0 {
				s = want
			}
		}
	})
	if inserted == 0 || merged == 0 || took == 0 || sorted == 0 {
		t.Fatalf("insert took %d events and left %d to Merge, Effective took %d states as they were and sorted %d: every path must be checked",
			inserted, merged, took, sorted)
	}
}
