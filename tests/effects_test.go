package tests

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/classify"
	"exacto.dev/pkg/consumer"
	"exacto.dev/pkg/guard"
	"exacto.dev/pkg/platform/instantly"
	"exacto.dev/pkg/platform/sandbox"
	"exacto.dev/pkg/retry"
	"exacto.dev/pkg/service"
	"exacto.dev/pkg/stream"
	"exacto.dev/pkg/suppression"
	classifier "exacto.dev/services/classifier/handler"
	crmwriter "exacto.dev/services/crmwriter/handler"
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
	if n := len(p.sb.Stops("priya@northwind.example")); n != 1 {
		t.Fatalf("%d stop calls at Instantly, want 1", n)
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
	if n := brokertest.Count(t, p.conn, stream.Events); n != 3+3 { // 3 replies + 3 sequence.stopped
		t.Fatalf("the stream holds %d events, want 6", n)
	}
}

// HubSpot commits the first write and then times out: the retry finds the note, so
// there is still one activity.
func TestHubSpotTimeoutAfterCommit(t *testing.T) {
	t.Parallel()
	p := startPipeline(t)
	p.sb.SetFault(sandbox.RouteHubSpotNoteUpsert, sandbox.Fault{TimeoutAfterCommit: 30 * time.Second, Count: 1})
	p.start(stream.CRMWriter, crmwriter.Run)
	id := p.post(instantlyEvent("reply_received", "ana@northwind.example", campaign, "em-1", "Can you send pricing?", time.Now()))[0]
	p.completedIn(60*time.Second, id, stream.CRMWriter)
	if n := len(p.notesFor(id)); n != 1 {
		t.Fatalf("%d notes after a timeout after commit", n)
	}
	if rec := p.status(stream.CRMWriter, id); rec.Attempts < 2 {
		t.Fatalf("completed in %d attempt(s): the timeout was not seen", rec.Attempts)
	}
}

// hubspotRoutes are every HubSpot route of the sandbox.
// (the property routes, asked once at the crmwriter's start, are left out).
var hubspotRoutes = []string{sandbox.RouteHubSpotNoteRead, sandbox.RouteHubSpotNoteUpsert, sandbox.RouteHubSpotNoteAssociate,
	sandbox.RouteHubSpotNoteSearch, sandbox.RouteHubSpotNoteUpdate,
	sandbox.RouteHubSpotContactCreate, sandbox.RouteHubSpotContactSearch, sandbox.RouteHubSpotContactGet, sandbox.RouteHubSpotContactUpdate}

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
	p.sb.SetFault(sandbox.RouteHubSpotNoteUpsert, sandbox.Fault{Status: 400, Count: 1})
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
	if n := p.sb.Requests(sandbox.RouteHubSpotNoteUpsert); n != 1 {
		t.Fatalf("%d note upserts: a permanent error was retried", n)
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
