package tests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/classify"
	"exacto.dev/pkg/confirm"
	"exacto.dev/pkg/consumer"
	"exacto.dev/pkg/contacts"
	"exacto.dev/pkg/guard"
	"exacto.dev/pkg/lifecycle"
	"exacto.dev/pkg/platform/instantly"
	"exacto.dev/pkg/platform/sandbox"
	"exacto.dev/pkg/projection"
	"exacto.dev/pkg/providers/meta"
	smartleadhooks "exacto.dev/pkg/providers/smartlead"
	"exacto.dev/pkg/reconcile"
	"exacto.dev/pkg/retry"
	"exacto.dev/pkg/service"
	"exacto.dev/pkg/stream"
	"exacto.dev/pkg/suppression"
	classifier "exacto.dev/services/classifier/handler"
	crmwriter "exacto.dev/services/crmwriter/handler"
	projector "exacto.dev/services/projector/handler"
	stopper "exacto.dev/services/stopper/handler"
	suppressor "exacto.dev/services/suppressor/handler"
)

const campaign = "3c6e0b8a-9c0b-4f1e-8b2a-7d5e4f3a2b1c"

// The first case, end to end on the embedded server: a signed Instantly reply
// gives exactly one stop at the Instantly sandbox, one HubSpot activity with its owner
// and classification, and the reply completed in every consumer that takes it.
func TestReplyEndToEnd(t *testing.T) {
	t.Parallel()
	p := startPipeline(t)
	p.start(stream.Classifier, classifier.Run)
	p.start(stream.Stopper, stopper.Run)
	p.start(stream.CRMWriter, crmwriter.Run)
	p.start(stream.Suppressor, suppressor.Run)
	leadID := p.sb.AddInstantlyLead(campaign, "priya@northwind.example")

	id := p.post(instantlyEvent("reply_received", "priya@northwind.example", campaign, "em-1",
		"Yes, this is exactly what we need. I'm interested.", time.Now()))[0]
	p.completedIn(30*time.Second, id, stream.Classifier, stream.Stopper, stream.CRMWriter)
	classified := p.derived("reply.classified", id)
	if len(classified) != 1 {
		t.Fatalf("%d reply.classified for one reply", len(classified))
	}
	p.completedIn(30*time.Second, classified[0]["id"].(string), stream.CRMWriter, stream.Suppressor)

	lead, _ := p.sb.InstantlyLeadState(leadID)
	if lead.Status == sandbox.InstantlyActive {
		t.Fatalf("the lead is still active at Instantly: %+v", lead)
	}
	// One write stopped the lead: the stop for the reply, or — when the stopper took the
	// classification first — the raise to Interested, after which the reply finds the
	// lead stopped already.
	stops, raises := len(p.sb.Stops("priya@northwind.example")), len(p.sb.Raises("priya@northwind.example"))
	if stops > 1 || stops+raises == 0 {
		t.Fatalf("%d stop calls and %d raises at Instantly, want one stop or, without it, a raise", stops, raises)
	}
	// The interested reply ends Interested at Instantly, never Not Interested.
	eventually(t, 10*time.Second, "the lead labelled Interested", func() bool {
		l, _ := p.sb.InstantlyLeadState(leadID)
		return l.InterestStatus != nil && *l.InterestStatus == instantly.Interested
	})
	for _, st := range p.sb.Stops("priya@northwind.example") {
		if st.Interest == nil || *st.Interest == instantly.NotInterested {
			t.Fatalf("the stop labelled the lead %v", st.Interest)
		}
	}
	if s := p.derived("sequence.stopped", id); len(s) != 1 {
		t.Fatalf("%d sequence.stopped for one reply", len(s))
	}
	eventually(t, 10*time.Second, "the note carries the classification", func() bool {
		notes := p.notesFor(id)
		return len(notes) == 1 && contains(notes[0].Properties["hs_note_body"], "interested")
	})
	note := p.notesFor(id)[0]
	if note.Properties["hubspot_owner_id"] != "101" {
		t.Fatalf("owner %q, want 101 (interested replies)", note.Properties["hubspot_owner_id"])
	}
	if len(p.sb.Notes()) != 1 {
		t.Fatalf("%d HubSpot notes for one reply", len(p.sb.Notes()))
	}
	// An interested reply suppresses nobody.
	kv, _ := p.conn.JS.KeyValue(context.Background(), stream.Suppression)
	if _, ok, _ := suppression.New(kv).Lookup(context.Background(), "acme", "email:priya@northwind.example"); ok {
		t.Fatal("an interested reply suppressed its contact")
	}
	// A late open of an earlier e-mail undoes nothing.
	p.post(instantlyEvent("email_opened", "priya@northwind.example", campaign, "em-0", "", time.Now().Add(-time.Hour)))
	time.Sleep(500 * time.Millisecond)
	if lead, _ := p.sb.InstantlyLeadState(leadID); lead.Status == sandbox.InstantlyActive {
		t.Fatal("a late open reactivated the lead")
	}
}

// Each event delivered five times, the gateway restarted in between: still one stop and
// one activity per reply.
func TestFiveDeliveriesAcrossGatewayRestarts(t *testing.T) {
	t.Parallel()
	p := startPipeline(t)
	p.start(stream.Stopper, stopper.Run)
	p.start(stream.CRMWriter, crmwriter.Run)
	leads := map[string]string{}
	var bodies [][]byte
	for i := range 3 {
		email := fmt.Sprintf("lead%d@northwind.example", i)
		leads[email] = p.sb.AddInstantlyLead(campaign, email)
		bodies = append(bodies, instantlyEvent("reply_received", email, campaign, fmt.Sprint("em-", i), "Can you send pricing?", time.Now()))
	}
	ids := map[string]bool{}
	for round := range 5 {
		for _, b := range bodies {
			ids[p.post(b)[0]] = true
		}
		if round == 1 || round == 3 {
			p.restartGateway()
		}
	}
	if len(ids) != 3 {
		t.Fatalf("%d distinct ids for 3 replies delivered 5 times", len(ids))
	}
	for id := range ids {
		p.completedIn(30*time.Second, id, stream.Stopper, stream.CRMWriter)
		if n := len(p.notesFor(id)); n != 1 {
			t.Fatalf("%d notes for %s", n, id)
		}
	}
	if n := p.sb.Requests(sandbox.RouteInstantlyInterest); n != 3 {
		t.Fatalf("%d stop calls for 3 replies", n)
	}
	if n := brokertest.Count(t, p.conn, stream.Events); n != 3+3+3 { // 3 replies, 3 sequence.stopped, 3 contact.identified
		t.Fatalf("the stream holds %d events, want 9", n)
	}
}

// HubSpot commits the first write and then times out: the retry finds the note by its
// key (no search, whose index lags), so there is still one activity.
func TestHubSpotTimeoutAfterCommit(t *testing.T) {
	t.Parallel()
	p := startPipeline(t)
	p.sb.SetNoteWriteFault(sandbox.Fault{TimeoutAfterCommit: 30 * time.Second, Count: 1})
	p.start(stream.CRMWriter, crmwriter.Run)
	id := p.post(instantlyEvent("reply_received", "ana@northwind.example", campaign, "em-1", "Can you send pricing?", time.Now()))[0]
	p.completedIn(60*time.Second, id, stream.CRMWriter)
	if n := len(p.notesFor(id)); n != 1 {
		t.Fatalf("%d notes after a timeout after commit", n)
	}
	if rec := p.status(stream.CRMWriter, id); rec.Attempts < 2 {
		t.Fatalf("completed in %d attempt(s): the timeout was not seen", rec.Attempts)
	}
	if n := p.sb.Requests(sandbox.RouteHubSpotNoteSearch) + p.sb.Requests(sandbox.RouteHubSpotContactSearch); n != 0 {
		t.Fatalf("%d searches: the note's key is read, never searched", n)
	}
}

// Replies waiting for the CRM writer (a backlog: each is claimed, not new) have their
// notes upserted together; HubSpot commits each upsert and never answers in time: each
// reply's retry finds its note by its key, so each still has one activity.
func TestHubSpotBatchTimeoutAfterCommit(t *testing.T) {
	t.Parallel()
	p := startPipeline(t)
	// The first upsert (alone) hangs, so the others come while it is in flight and go
	// together in the next, which hangs too.
	p.sb.SetFault(sandbox.RouteHubSpotNoteUpsert, sandbox.Fault{TimeoutAfterCommit: 30 * time.Second, Count: 2})
	ids := p.postInstantlyReplies(6, "batch")
	p.start(stream.CRMWriter, crmwriter.Run)
	retried := 0
	for _, id := range ids {
		p.completedIn(90*time.Second, id, stream.CRMWriter)
		if n := len(p.notesFor(id)); n != 1 {
			t.Errorf("%d notes for %s", n, id)
		}
		if p.status(stream.CRMWriter, id).Attempts >= 2 {
			retried++
		}
	}
	reqs, notes := p.sb.Requests(sandbox.RouteHubSpotNoteUpsert), p.sb.Inputs(sandbox.RouteHubSpotNoteUpsert)
	if reqs >= notes {
		t.Fatalf("%d upsert requests for %d notes: none carried two", reqs, notes)
	}
	if retried != len(ids) {
		t.Errorf("%d of %d replies took a second attempt, though every upsert of theirs timed out after commit", retried, len(ids))
	}
	t.Logf("%d upsert requests for %d notes, %d replies retried", reqs, notes, retried)
}

// hubspotRoutes are every HubSpot route of the sandbox.
// (the property routes, asked once at the crmwriter's start, are left out).
var hubspotRoutes = []string{sandbox.RouteHubSpotNoteRead, sandbox.RouteHubSpotNoteCreate, sandbox.RouteHubSpotNoteUpsert, sandbox.RouteHubSpotNoteAssociate,
	sandbox.RouteHubSpotNoteSearch, sandbox.RouteHubSpotNoteUpdate,
	sandbox.RouteHubSpotContactCreate, sandbox.RouteHubSpotContactSearch, sandbox.RouteHubSpotContactGet, sandbox.RouteHubSpotContactUpdate,
	sandbox.RouteHubSpotContactBatchRead, sandbox.RouteHubSpotContactBatchNew, sandbox.RouteHubSpotNoteBatchCreate, sandbox.RouteHubSpotNoteBatchUpdate}

func (p *pipeline) hubspotRequests() int {
	n := 0
	for _, r := range hubspotRoutes {
		n += p.sb.Requests(r)
	}
	return n
}

// A 429 with Retry-After: 3 → no call to HubSpot for 3 seconds, then success, nothing
// dead-lettered.
func TestHubSpotRetryAfter(t *testing.T) {
	t.Parallel()
	p := startPipeline(t)
	// The first HubSpot request of a reply reads its contact by e-mail.
	p.sb.SetFault(sandbox.RouteHubSpotContactGet, sandbox.Fault{Status: 429, RetryAfter: 3 * time.Second, Count: 1})
	p.start(stream.CRMWriter, crmwriter.Run)
	id := p.post(instantlyEvent("reply_received", "ana@northwind.example", campaign, "em-1", "Can you send pricing?", time.Now()))[0]
	eventually(t, 20*time.Second, "a first HubSpot call", func() bool { return p.hubspotRequests() > 0 })
	limited := time.Now()
	first := p.hubspotRequests()
	time.Sleep(2700 * time.Millisecond)
	if n := p.hubspotRequests(); n != first {
		t.Fatalf("%d HubSpot calls within %v of a 429 with Retry-After: 3", n-first, time.Since(limited))
	}
	p.completedIn(30*time.Second, id, stream.CRMWriter)
	if n := len(p.notesFor(id)); n != 1 {
		t.Fatalf("%d notes", n)
	}
	if dl := p.deadLetters(stream.CRMWriter); len(dl) != 0 {
		t.Fatalf("dead letters after a 429: %v", dl)
	}
}

// HubSpot down for 30 s under a steady flow: the breaker opens (few calls reach it), no
// event is lost or dead-lettered, all complete after recovery.
func TestHubSpotOutage(t *testing.T) {
	t.Parallel()
	p := startPipeline(t)
	for _, r := range hubspotRoutes {
		p.sb.SetFault(r, sandbox.Fault{DownFor: 30 * time.Second})
	}
	down := time.Now()
	p.start(stream.CRMWriter, crmwriter.Run)
	var ids []string
	for i := 0; time.Since(down) < 20*time.Second; i++ { // one reply every 400 ms
		ids = append(ids, p.post(instantlyEvent("reply_received", fmt.Sprintf("lead%d@northwind.example", i), campaign, fmt.Sprint("em-", i), "Can you send pricing?", time.Now()))[0])
		time.Sleep(400 * time.Millisecond)
	}
	eventually(t, 40*time.Second, "the outage ends", func() bool { return time.Since(down) > 30*time.Second })
	during := p.hubspotRequests()
	if during >= len(ids) {
		t.Fatalf("%d HubSpot calls during the outage for %d replies: the breaker did not hold them", during, len(ids))
	}
	for _, id := range ids {
		p.completedIn(120*time.Second, id, stream.CRMWriter)
		if n := len(p.notesFor(id)); n != 1 {
			t.Fatalf("%d notes for %s", n, id)
		}
	}
	if dl := p.deadLetters(stream.CRMWriter); len(dl) != 0 {
		t.Fatalf("%d dead letters during an outage", len(dl))
	}
	t.Logf("%d replies during a 30 s outage; %d HubSpot calls while it was down", len(ids), during)
}

// An event HubSpot rejects with 400 is dead-lettered after one attempt, with the reason
// and the owner.
func TestHubSpotRejectsDeadLettersAtOnce(t *testing.T) {
	t.Parallel()
	p := startPipeline(t)
	p.sb.SetNoteWriteFault(sandbox.Fault{Status: 400, Count: 1})
	p.start(stream.CRMWriter, crmwriter.Run)
	id := p.post(instantlyEvent("reply_received", "ana@northwind.example", campaign, "em-1", "Can you send pricing?", time.Now()))[0]
	eventually(t, 30*time.Second, "the reply dead-lettered", func() bool { return p.status(stream.CRMWriter, id).Status == guard.DeadLetter })
	dl := p.deadLetters(stream.CRMWriter)
	if len(dl) != 1 {
		t.Fatalf("%d dead letters", len(dl))
	}
	d := dl[0]
	if d["event_id"] != id || d["attempt_count"] != float64(1) || d["class"] != "permanent" || d["owner"] != "sdr-team" || !contains(fmt.Sprint(d["error"]), "400") {
		t.Fatalf("dead letter: %v", d)
	}
	if n := p.sb.NoteWrites(); n != 1 {
		t.Fatalf("%d note writes: a permanent error was retried", n)
	}
}

// brokenModel fails every classification for good (a model that refuses its input).
type brokenModel struct{}

func (brokenModel) Classify(context.Context, string, string) (classify.Result, error) {
	return classify.Result{}, retry.Permanently("classifier", errors.New("the model refused the input"))
}

// A reply whose classification fails permanently: the sequence is stopped anyway, and
// the event is in the DLQ for the classifier.
func TestClassificationFailsSequenceStillStops(t *testing.T) {
	t.Parallel()
	p := startPipeline(t)
	p.start(stream.Classifier, func(ctx context.Context, env *service.Env, up func()) error {
		d, err := consumer.NewDeriver(ctx, env.Conn.JS)
		if err != nil {
			return err
		}
		return env.Consume(ctx, stream.Classifier, up, consumer.Options{Handle: classifier.New(d, brokenModel{})})
	})
	p.start(stream.Stopper, stopper.Run)
	leadID := p.sb.AddInstantlyLead(campaign, "ana@northwind.example")
	id := p.post(instantlyEvent("reply_received", "ana@northwind.example", campaign, "em-1", "Call me tomorrow.", time.Now()))[0]
	p.completedIn(30*time.Second, id, stream.Stopper)
	if lead, _ := p.sb.InstantlyLeadState(leadID); lead.Status == sandbox.InstantlyActive {
		t.Fatal("the sequence was not stopped")
	}
	eventually(t, 30*time.Second, "the reply in the classifier's DLQ", func() bool {
		dl := p.deadLetters(stream.Classifier)
		return len(dl) == 1 && dl[0]["event_id"] == id && dl[0]["class"] == "permanent"
	})
}

// An unsubscribe after a follow-up was scheduled: the contact is suppressed, blocked
// and stopped, and the follow-up's events make no platform call that could resume it.
func TestUnsubscribeAfterScheduledFollowUp(t *testing.T) {
	t.Parallel()
	p := startPipeline(t)
	p.start(stream.Stopper, stopper.Run)
	p.start(stream.CRMWriter, crmwriter.Run)
	p.start(stream.Suppressor, suppressor.Run)
	leadID := p.sb.AddInstantlyLead(campaign, "ana@northwind.example")
	unsub := time.Now()
	id := p.post(instantlyEvent("lead_unsubscribed", "ana@northwind.example", campaign, "", "", unsub))[0]
	p.completedIn(30*time.Second, id, stream.Stopper, stream.Suppressor)
	kv, _ := p.conn.JS.KeyValue(context.Background(), stream.Suppression)
	if e, ok, _ := suppression.New(kv).Lookup(context.Background(), "acme", "email:ana@northwind.example"); !ok || e.Reason != suppressor.Unsubscribed {
		t.Fatalf("not suppressed: %+v %v", e, ok)
	}
	if bl := p.sb.Blocklist(); len(bl) != 1 || bl[0] != "ana@northwind.example" {
		t.Fatalf("instantly block list %v", bl)
	}
	calls := p.sb.TotalRequests()
	// The follow-up that was scheduled before the unsubscribe goes out and is reported.
	for _, typ := range []string{"email_sent", "email_opened"} {
		p.post(instantlyEvent(typ, "ana@northwind.example", campaign, "em-follow-up", "", unsub.Add(time.Minute)))
	}
	time.Sleep(time.Second)
	if n := p.sb.TotalRequests(); n != calls {
		t.Fatalf("%d platform calls after the follow-up's events", n-calls)
	}
	if lead, _ := p.sb.InstantlyLeadState(leadID); lead.Status == sandbox.InstantlyActive {
		t.Fatalf("the lead is active again: %+v", lead)
	}
}

// One person is one contact whatever order their keys arrive in. Each of six people is
// known to HubSpot by e-mail and phone, and is met three ways: a HubSpot webhook naming
// the contact by its HubSpot id alone, an Instantly reply by e-mail, and a WhatsApp
// message by phone; each person gets one of the six orders, every event handled before
// the next. The crmwriter asks HubSpot who an id-only contact is and links the phone it
// holds; the projector merges what those links join. In the end each person is one
// contact, found by any of the three keys, with the reply on it; the live projection
// equals a rebuild from the stream; `exacto contact show <phone>` finds them.
func TestOnePersonWhateverKeyArrivesFirst(t *testing.T) {
	t.Parallel()
	p := startPipeline(t)
	p.start(stream.CRMWriter, crmwriter.Run)
	p.start(stream.Projector, projector.Run)
	orders := [][3]int{{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}}
	type person struct{ email, phone, hubspotID string }
	people := make([]person, len(orders))
	base := time.Now().Add(-time.Hour)
	send := func(i, what int) {
		who, at := people[i], base.Add(time.Duration(i*3+what)*time.Minute)
		switch what {
		case 0: // HubSpot: the contact's lifecycle stage changed, named by id alone
			p.postSigned("hubspot", fmt.Appendf(nil, `[{"eventId":%d,"subscriptionId":27,"portalId":62515,"appId":1160452,"occurredAt":%d,`+
				`"subscriptionType":"contact.propertyChange","attemptNumber":0,"objectId":%s,"propertyName":"lifecyclestage",`+
				`"propertyValue":"opportunity","changeSource":"CRM_UI"}]`, 4000000000+i, at.UnixMilli(), who.hubspotID))
		case 1: // Instantly: a reply by e-mail
			p.post(instantlyEvent("reply_received", who.email, campaign, fmt.Sprint("em-id-", i), "Can you send pricing?", at))
		case 2: // WhatsApp: a message from the phone
			b, err := meta.Sample("message", at)
			if err != nil {
				t.Fatal(err)
			}
			p.postSigned("meta", bytes.ReplaceAll(b, []byte("16505551234"), []byte(who.phone)))
		}
	}
	for i := range people {
		people[i].email = fmt.Sprintf("person%d@northwind.example", i)
		people[i].phone = fmt.Sprintf("1650555%04d", i)
		people[i].hubspotID = p.sb.AddContact(people[i].email, map[string]string{"phone": fmt.Sprintf("+1 (650) 555-%04d", i)})
	}
	for round := range 3 {
		for i, order := range orders {
			send(i, order[round])
		}
		// Each event handled, and what the crmwriter learned projected, before the next.
		settled(t, p.conn.JS, stream.CRMWriter)
		settled(t, p.conn.JS, stream.Projector)
	}
	ctx := context.Background()
	stores, err := projection.Open(ctx, p.conn.JS, "", 1)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := contacts.Open(ctx, p.conn.JS)
	if err != nil {
		t.Fatal(err)
	}
	r := projection.Reader{Stores: stores, Dir: dir}
	for i, who := range people {
		byEmail, ok, err := r.ContactByKey(ctx, "acme", "email", who.email)
		if err != nil || !ok {
			t.Fatalf("order %v: no contact for %s: %v", orders[i], who.email, err)
		}
		for _, key := range [][2]string{{"phone", who.phone}, {contacts.CRMContactID, "hubspot:" + who.hubspotID}} {
			c, ok, err := r.ContactByKey(ctx, "acme", key[0], key[1])
			if err != nil || !ok || c.ContactID != byEmail.ContactID {
				t.Fatalf("order %v: %s:%s is contact %q (found %v, %v), the e-mail's is %q", orders[i], key[0], key[1], c.ContactID, ok, err, byEmail.ContactID)
			}
		}
		if !byEmail.Replied() || !slices.Contains(byEmail.Keys, "phone:"+who.phone) {
			t.Fatalf("order %v: the contact %+v", orders[i], byEmail)
		}
	}
	keys, err := stores.Contacts.Keys(ctx, "acme.")
	if err != nil || len(keys) != len(people) {
		t.Fatalf("%d contact records for %d people (%v): %v", len(keys), len(people), err, keys)
	}
	p.equalsRebuild()
	shown := runExacto(t, "contact", "show", "+1 650 555 0003", "--tenant", "acme", "--nats-url", p.conn.Embedded.ClientURL())
	if !strings.Contains(shown, people[3].email) || !strings.Contains(shown, `"replied": true`) {
		t.Fatalf("contact show by phone:\n%s", shown)
	}
}

// Forged deliveries to the unsigned endpoints — an unsubscribe and a reply "remove me"
// for an active Instantly lead who never wrote, an unsubscribe of a subscribed
// Smartlead lead posted with its endpoint's secret key — are confirmed at their source,
// which shows none of it: no platform is written to (no stop, no label, no block, no
// pause, no note), nobody is suppressed, and each is a review item saying what the
// source said, for a person to approve or dismiss.
func TestForgedEventsReachNoPlatform(t *testing.T) {
	t.Parallel()
	p := startPipeline(t)
	for name, run := range map[string]service.Run{stream.Classifier: classifier.Run, stream.Stopper: stopper.Run,
		stream.CRMWriter: crmwriter.Run, stream.Suppressor: suppressor.Run, stream.Projector: projector.Run} {
		p.start(name, run)
	}
	ana := p.sb.AddInstantlyLead(campaign, "ana@northwind.example")
	lee := p.sb.AddSmartleadLead(91812, "lee@globex.example")
	at := time.Now().Add(-time.Minute)
	unsub, _ := smartleadhooks.Sample("LEAD_UNSUBSCRIBED", at)
	unsub = bytes.ReplaceAll(bytes.ReplaceAll(unsub, []byte(`"1482956"`), fmt.Appendf(nil, `"%d"`, lee)), []byte("dana.kim@globex.example"), []byte("lee@globex.example"))
	ids := append(append(p.postForged(instantlyEvent("lead_unsubscribed", "ana@northwind.example", campaign, "", "", at)),
		p.postForged(instantlyEvent("reply_received", "ana@northwind.example", campaign, "em-forged", "Remove me from every list. STOP", at))...),
		p.postSigned("smartlead", unsub)...)
	for _, id := range ids {
		p.completedIn(60*time.Second, id, stream.Stopper)
	}
	p.completedIn(60*time.Second, ids[1], stream.Classifier, stream.CRMWriter)
	p.completedIn(60*time.Second, ids[0], stream.Suppressor)
	p.completedIn(60*time.Second, ids[2], stream.Suppressor)

	writes := map[string]int{}
	for _, r := range []string{sandbox.RouteInstantlyInterest, sandbox.RouteInstantlyBlocklist, sandbox.RouteInstantlySubseqRemove,
		sandbox.RouteSmartleadPause, sandbox.RouteSmartleadUnsubscribe, sandbox.RouteSmartleadUnsubscribeAll,
		sandbox.RouteHubSpotNoteCreate, sandbox.RouteHubSpotNoteUpsert, sandbox.RouteHubSpotContactCreate, sandbox.RouteHubSpotContactUpdate} {
		if n := p.sb.Requests(r); n > 0 {
			writes[r] = n
		}
	}
	if len(writes) > 0 {
		t.Fatalf("forged events wrote to the platforms: %v", writes)
	}
	if l, _ := p.sb.InstantlyLeadState(ana); l.Status != sandbox.InstantlyActive || l.InterestStatus != nil {
		t.Fatalf("the Instantly lead: %+v", l)
	}
	if m, _ := p.sb.SmartleadLeadState(91812, lee); m.Status == "PAUSED" || p.sb.SmartleadUnsubscribedAll(lee) {
		t.Fatalf("the Smartlead lead: %+v", m)
	}
	kv, _ := p.conn.JS.KeyValue(context.Background(), stream.Suppression)
	for _, who := range []string{"email:ana@northwind.example", "email:lee@globex.example"} {
		if _, ok, _ := suppression.New(kv).Lookup(context.Background(), "acme", who); ok {
			t.Fatalf("%s suppressed by a forgery", who)
		}
	}
	if n := len(p.read(stream.Events, "events.*.*.sequence.stopped")); n != 0 {
		t.Fatalf("%d sequence.stopped for forgeries", n)
	}
	q, err := reconcile.OpenQueue(context.Background(), p.conn.JS)
	if err != nil {
		t.Fatal(err)
	}
	items, err := q.List(context.Background(), reconcile.Filter{Tenant: "acme", Kind: confirm.Kind})
	if err != nil || len(items) != 3 {
		t.Fatalf("%d review items (%v), want one per forgery: %+v", len(items), err, items)
	}
	for _, f := range items {
		if f.Status != reconcile.StatusOpen || !slices.ContainsFunc(ids, func(id string) bool { return strings.Contains(f.Where, id) }) ||
			f.Proposed == nil || !strings.Contains(f.Found, "says:") {
			t.Fatalf("review item %+v", f)
		}
	}
	// The projections count none of it: each forgery's event.unconfirmed retracts it,
	// and a rebuild from the stream says the same.
	if n := len(p.read(stream.Events, "events.*.*.event.unconfirmed")); n != 3 {
		t.Fatalf("%d event.unconfirmed for 3 forgeries", n)
	}
	settled(t, p.conn.JS, stream.Projector)
	stores, err := projection.Open(context.Background(), p.conn.JS, "", 1)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := contacts.Open(context.Background(), p.conn.JS)
	if err != nil {
		t.Fatal(err)
	}
	r := projection.Reader{Stores: stores, Dir: dir}
	for _, who := range []string{"ana@northwind.example", "lee@globex.example"} {
		c, found, err := r.ContactByEmail(context.Background(), "acme", who)
		if v := c.View(); err != nil || !found || c.Replied() || v.Unsubscribed || v.Status == lifecycle.Unsubscribed {
			t.Fatalf("%s in the projection (found %v): %s (replied %v): %v", who, found, v, c.Replied(), err)
		}
	}
	p.equalsRebuild()
}

// Two replies in a campaign whose subsequences start on Interested, Meeting Booked and
// Not Interested: the interested one ends Interested, the meeting request Meeting
// Booked, neither was ever labelled Not Interested, and neither is left in a
// subsequence (Instantly's job enrols them a moment after the label; the stopper takes
// them out before the first step).
// A reply in a campaign that stops on reply is stopped by Instantly alone: no write.
func TestRepliesEndLabelledAsClassified(t *testing.T) {
	t.Parallel()
	p := startPipeline(t)
	p.start(stream.Classifier, classifier.Run)
	p.start(stream.Stopper, stopper.Run)
	// A subsequence sends its first step some time after the lead enters it (its delay,
	// and the campaign's sending window): 10 s here.
	for _, v := range []int{instantly.Interested, instantly.MeetingBooked, instantly.NotInterested} {
		p.sb.AddInstantlySubsequence(campaign, 10*time.Second, v)
	}
	const selfStopping = "7d1f0c2e-4b5a-4c3d-9e8f-1a2b3c4d5e6f"
	p.sb.SetInstantlyCampaign(selfStopping, true, false)
	leads := map[string]string{}
	for _, e := range []string{"ivy@northwind.example", "max@northwind.example"} {
		leads[e] = p.sb.AddInstantlyLead(campaign, e)
	}
	own := p.sb.AddInstantlyLead(selfStopping, "oli@northwind.example")
	now := time.Now()
	ids := append(append(p.post(instantlyEvent("reply_received", "ivy@northwind.example", campaign, "em-ivy", "Yes, I'm interested. This is exactly what we need.", now)),
		p.post(instantlyEvent("reply_received", "max@northwind.example", campaign, "em-max", "Happy to chat. Can we book a call Thursday afternoon? Send me an invite.", now))...),
		p.post(instantlyEvent("reply_received", "oli@northwind.example", selfStopping, "em-oli", "Thanks, we're all set for now.", now))...)
	for _, id := range ids {
		p.completedIn(60*time.Second, id, stream.Stopper, stream.Classifier)
		for _, c := range p.derived("reply.classified", id) {
			p.completedIn(60*time.Second, c["id"].(string), stream.Stopper)
		}
	}
	want := map[string]int{"ivy@northwind.example": instantly.Interested, "max@northwind.example": instantly.MeetingBooked}
	for e, v := range want {
		l, _ := p.sb.InstantlyLeadState(leads[e])
		if l.InterestStatus == nil || *l.InterestStatus != v || l.Status == sandbox.InstantlyActive {
			t.Fatalf("%s at Instantly: %+v, want stopped at %d", e, l, v)
		}
		for _, st := range append(p.sb.Stops(e), p.sb.Raises(e)...) {
			if st.Interest != nil && *st.Interest == instantly.NotInterested {
				t.Fatalf("%s was labelled Not Interested", e)
			}
		}
	}
	// Past any enrolment job: no lead is left in a subsequence, so none will be sent to.
	time.Sleep(sandbox.DefaultInstantlyJobDelay + 200*time.Millisecond)
	if sends := p.sb.InstantlySubsequenceSends(); len(sends) != 0 {
		t.Fatalf("subsequence steps sent to %v", sends)
	}
	for e, id := range leads {
		if l, _ := p.sb.InstantlyLeadState(id); l.SubsequenceID != "" {
			t.Fatalf("%s is in subsequence %s", e, l.SubsequenceID)
		}
	}
	if l, _ := p.sb.InstantlyLeadState(own); l.Status == sandbox.InstantlyActive || len(p.sb.Stops("oli@northwind.example")) != 0 {
		t.Fatalf("the self-stopping campaign's lead: %+v, %d writes", l, len(p.sb.Stops("oli@northwind.example")))
	}
	if s := p.derived("sequence.stopped", ids[2]); len(s) != 1 {
		t.Fatalf("%d sequence.stopped for the self-stopped reply", len(s))
	}
}
