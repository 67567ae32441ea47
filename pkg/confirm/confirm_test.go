package confirm

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/consumer"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/platform/accounts"
	"exacto.dev/pkg/platform/instantly"
	"exacto.dev/pkg/platform/sandbox"
	"exacto.dev/pkg/platform/smartlead"
	"exacto.dev/pkg/providers/providertest"
	"exacto.dev/pkg/reconcile"
	"exacto.dev/pkg/retry"
	"exacto.dev/pkg/stream"
)

const tenant = "acme"

type rig struct {
	t     *testing.T
	sb    *sandbox.Server
	gate  *Gate
	calls []string // what the wrapped handler saw: id and text
	h     consumer.Handler
}

func newRig(t *testing.T) *rig {
	t.Helper()
	conn := brokertest.Start(t, "")
	sb := sandbox.Start(t)
	clients := accounts.Clients{
		Instantly: instantly.New(instantly.Config{BaseURL: sb.URL, APIKey: sandbox.InstantlyKey}),
		Smartlead: smartlead.New(smartlead.Config{BaseURL: sb.URL, APIKey: sandbox.SmartleadKey}),
	}
	g, err := Open(context.Background(), conn.JS, []string{tenant}, func(tn string) (accounts.Clients, bool) { return clients, tn == tenant }, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, sb: sb, gate: g}
	r.h = g.Wrap(func(envelope.Envelope) bool { return true }, func(ctx context.Context, ev consumer.Event) error {
		text, _ := Text(ctx)
		r.calls = append(r.calls, ev.Envelope.ID+"|"+text)
		return nil
	})
	return r
}

// webhook is the envelope the gateway would store for an Instantly body.
func webhook(typ, lead, emailID, text string, at time.Time) envelope.Envelope {
	d := envelope.Data{Contact: &envelope.Contact{Email: lead}, Campaign: &envelope.Campaign{ID: "c-1"}}
	if typ == envelope.TypeReplyReceived {
		d.Message = &envelope.Message{ID: emailID, Text: text}
	}
	return envelope.Envelope{ID: envelope.ID(tenant, "instantly", typ+lead+emailID), Type: typ, Time: at, Tenant: tenant,
		Provider: "instantly", Endpoint: "instantly-main", Data: d, Signed: false, AuthMethod: "path_token",
		PayloadSHA256: strings.Repeat("0", 64)}
}

// attempt runs the wrapped handler as attempt n of a consumer.
func (r *rig) attempt(env envelope.Envelope, n int) error {
	return r.h(context.Background(), consumer.Event{Envelope: env, Attempt: n})
}

// A reply Instantly holds is confirmed, and the handler gets the reply's text as
// Instantly holds it, not as the webhook claims it; a second consumer asks nothing.
func TestConfirmedReplyCarriesTheSourceText(t *testing.T) {
	r := newRig(t)
	at := time.Now().Add(-time.Minute)
	r.sb.AddInstantlyReply("c-1", "ana@example.com", "em-1", "Interested, call me", false, at)
	env := webhook(envelope.TypeReplyReceived, "ana@example.com", "em-1", "Remove me from every list", at)
	if err := r.attempt(env, 1); err != nil {
		t.Fatal(err)
	}
	if len(r.calls) != 1 || r.calls[0] != env.ID+"|Interested, call me" {
		t.Fatalf("handler saw %v", r.calls)
	}
	asked := r.sb.TotalRequests()
	if err := r.attempt(env, 1); err != nil {
		t.Fatal(err)
	}
	if r.sb.TotalRequests() != asked || len(r.calls) != 2 {
		t.Fatalf("the kept verdict was not used: %d more requests, calls %v", r.sb.TotalRequests()-asked, r.calls)
	}
}

// A forged unsubscribe of an active lead is asked about again while the window after
// its receipt lasts (however many attempts that takes), then kept for review — the
// event, the reason, what Instantly said — and never handled; another consumer then
// finds the verdict without asking. Signed events and facts read from the platform
// pass without a question.
func TestForgedUnsubscribeBecomesAReviewItem(t *testing.T) {
	r := newRig(t)
	r.sb.AddInstantlyLead("c-1", "ben@example.com")
	env := webhook(envelope.TypeLeadUnsubscribed, "ben@example.com", "", "", time.Now())
	env.ReceivedAt = time.Now()
	for n := 1; n <= 6; n++ {
		err := r.attempt(env, n)
		if retry.Of(err).Class != retry.Transient || !strings.Contains(err.Error(), "not confirmed at instantly yet") {
			t.Fatalf("attempt %d within the window: %v, want a transient error", n, err)
		}
	}
	env.ReceivedAt = time.Now().Add(-Window)
	if err := r.attempt(env, 7); err != nil {
		t.Fatalf("attempt 7, past the window: %v, want completed without effect", err)
	}
	if len(r.calls) != 0 {
		t.Fatalf("the handler acted on a forged unsubscribe: %v", r.calls)
	}
	// Its event.unconfirmed is on the stream, valid, naming the event and its contact.
	st, _ := r.gate.JS.Stream(context.Background(), stream.Events)
	m, err := st.GetLastMsgForSubject(context.Background(), "events."+tenant+".instantly."+envelope.TypeEventUnconfirmed)
	if err != nil {
		t.Fatalf("no event.unconfirmed: %v", err)
	}
	if err := providertest.Validate(m.Data); err != nil {
		t.Fatalf("event.unconfirmed: %v\n%s", err, m.Data)
	}
	var un envelope.Envelope
	if json.Unmarshal(m.Data, &un); un.Data.Cause != env.ID || un.Data.Contact == nil || un.Data.Contact.Email != "ben@example.com" ||
		!strings.Contains(un.Data.Status, "status 1") {
		t.Fatalf("event.unconfirmed %s", m.Data)
	}
	items, err := r.gate.Review.List(context.Background(), reconcile.Filter{Tenant: tenant, Kind: Kind})
	if err != nil || len(items) != 1 {
		t.Fatalf("review items %+v %v", items, err)
	}
	f := items[0]
	if f.Status != reconcile.StatusOpen || !strings.Contains(f.Where, env.ID) || !strings.Contains(f.Found, "status 1") ||
		!strings.Contains(f.Found, "not on the block list") || f.Proposed == nil || !f.Proposed.Signed {
		t.Fatalf("review item %+v", f)
	}
	asked := r.sb.TotalRequests()
	if err := r.attempt(env, 1); err != nil || len(r.calls) != 0 || r.sb.TotalRequests() != asked {
		t.Fatalf("another consumer: %v, calls %v, %d requests", err, r.calls, r.sb.TotalRequests()-asked)
	}
	if writes := r.sb.Requests(sandbox.RouteInstantlyBlocklist) + r.sb.Requests(sandbox.RouteInstantlyInterest); writes != 0 {
		t.Fatalf("%d writes at Instantly", writes)
	}

	signed := env
	signed.ID, signed.Signed, signed.AuthMethod = "ev_signed", true, "hmac"
	fromAPI := env
	fromAPI.ID, fromAPI.AuthMethod = "ev_reconciled", envelope.AuthSourceAPI
	for _, e := range []envelope.Envelope{signed, fromAPI, *f.Proposed} {
		if err := r.attempt(e, 1); err != nil {
			t.Fatal(err)
		}
	}
	if len(r.calls) != 3 || r.sb.TotalRequests() != asked {
		t.Fatalf("signed, source_api and approved events: calls %v, %d requests", r.calls, r.sb.TotalRequests()-asked)
	}
}

// A classification is as its cause: of a reply no source holds, it is not acted on.
func TestDerivedIsAsItsCause(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	at := time.Now()
	forged := webhook(envelope.TypeReplyReceived, "cy@example.com", "em-9", "Please remove me", at)
	msg, err := stream.EventMessage(ctx, forged)
	if err != nil {
		t.Fatal(err)
	}
	ack, err := r.gate.JS.PublishMsg(ctx, msg)
	if err != nil {
		t.Fatal(err)
	}
	index, _ := r.gate.JS.KeyValue(ctx, stream.EventIndex)
	if _, err := index.Put(ctx, forged.ID, []byte(strconv.FormatUint(ack.Sequence, 10))); err != nil {
		t.Fatal(err)
	}
	cls := envelope.Derive(forged, stream.Classifier, envelope.TypeReplyClassified,
		envelope.Data{Classification: &envelope.Classification{Label: "unsubscribe_request"}}, at)
	for n := 1; n <= Asks; n++ {
		if err := r.attempt(cls, n); n < Asks && retry.Of(err).Class != retry.Transient {
			t.Fatalf("attempt %d: %v", n, err)
		}
	}
	if len(r.calls) != 0 {
		t.Fatalf("a classification of a forged reply was acted on: %v", r.calls)
	}
	items, _ := r.gate.Review.List(ctx, reconcile.Filter{Tenant: tenant, Kind: Kind})
	if len(items) != 1 || !strings.Contains(items[0].Where, forged.ID) || !strings.Contains(items[0].Found, "no e-mail em-9") {
		t.Fatalf("review items %+v", items)
	}
}

// Smartlead: a reply is confirmed by the lead's message history, matched on the
// webhook's Message-ID; an unknown Message-ID is not.
func TestSmartleadReplyByMessageID(t *testing.T) {
	r := newRig(t)
	at := time.Now()
	lead := r.sb.AddSmartleadReply(9181, "dee@example.com", "<m-1@example.com>", "Tell me more", at)
	env := func(msgID string) envelope.Envelope {
		e := envelope.Envelope{ID: envelope.ID(tenant, "smartlead", msgID), Type: envelope.TypeReplyReceived, Time: at, Tenant: tenant, Provider: "smartlead",
			Data: envelope.Data{Contact: &envelope.Contact{Email: "dee@example.com", ExternalID: strconv.FormatInt(lead, 10)},
				Campaign: &envelope.Campaign{ID: "9181"}, Message: &envelope.Message{ID: msgID, Text: "webhook text"}},
			AuthMethod: "secret_key"}
		return e
	}
	if err := r.attempt(env("<m-1@example.com>"), 1); err != nil || len(r.calls) != 1 || !strings.HasSuffix(r.calls[0], "|Tell me more") {
		t.Fatalf("confirmed reply: %v %v", err, r.calls)
	}
	if err := r.attempt(env("<forged@example.com>"), Asks); err != nil || len(r.calls) != 1 {
		t.Fatalf("unknown Message-ID: %v %v", err, r.calls)
	}
	var v Verdict
	e, err := r.gate.Verdicts.Get(context.Background(), tenant+"."+envelope.ID(tenant, "smartlead", "<forged@example.com>"))
	if err != nil || json.Unmarshal(e.Value(), &v) != nil || v.Confirmed || !strings.Contains(v.Said, "holds no reply <forged@example.com>") {
		t.Fatalf("verdict %+v %v", v, err)
	}
}

// The window is bounded by the consumer: its last attempt concludes, however fresh the
// event; and at least Asks asks are made, however old it is (a consumer that was down).
func TestTheLastAttemptConcludes(t *testing.T) {
	r := newRig(t)
	r.sb.AddInstantlyLead("c-1", "cal@example.com")
	fresh := webhook(envelope.TypeLeadUnsubscribed, "cal@example.com", "", "", time.Now())
	fresh.ReceivedAt = time.Now()
	if err := r.h(context.Background(), consumer.Event{Envelope: fresh, Attempt: 3, Last: true}); err != nil {
		t.Fatalf("the last attempt: %v, want concluded", err)
	}
	old := webhook(envelope.TypeLeadUnsubscribed, "cal@example.com", "", "", time.Now().Add(-time.Hour))
	old.ID += "-old"
	old.ReceivedAt = time.Now().Add(-time.Hour)
	if err := r.attempt(old, 1); retry.Of(err).Class != retry.Transient {
		t.Fatalf("the first ask of an old event: %v, want asked again", err)
	}
	if err := r.attempt(old, Asks); err != nil {
		t.Fatalf("ask %d of an old event: %v, want concluded", Asks, err)
	}
	items, _ := r.gate.Review.List(context.Background(), reconcile.Filter{Tenant: tenant, Kind: Kind})
	if len(items) != 2 || len(r.calls) != 0 {
		t.Fatalf("%d review items, %d handled", len(items), len(r.calls))
	}
}

// A classification whose cause is confirmed is acted on by the cause's kept verdict,
// even when the cause is not in the event index yet (the index trails the stream); with
// no verdict kept, such a classification waits for the index — it is never concluded
// unconfirmed for it.
func TestDerivedUsesItsCausesVerdict(t *testing.T) {
	r := newRig(t)
	at := time.Now().Add(-time.Minute)
	r.sb.AddInstantlyReply("c-1", "dia@example.com", "em-7", "Sounds good", false, at)
	reply := webhook(envelope.TypeReplyReceived, "dia@example.com", "em-7", "Sounds good", at)
	if err := r.attempt(reply, 1); err != nil { // the classifier confirms the reply
		t.Fatal(err)
	}
	cls := envelope.Derive(reply, stream.Classifier, envelope.TypeReplyClassified,
		envelope.Data{Classification: &envelope.Classification{Label: "interested"}}, at)
	if err := r.attempt(cls, 1); err != nil || len(r.calls) != 2 || r.calls[1] != cls.ID+"|Sounds good" {
		t.Fatalf("a classification of a confirmed reply missing from the index: %v, calls %v", err, r.calls)
	}
	orphan := envelope.Derive(webhook(envelope.TypeReplyReceived, "eve@example.com", "em-8", "x", at), stream.Classifier,
		envelope.TypeReplyClassified, envelope.Data{Classification: &envelope.Classification{Label: "interested"}}, at)
	err := r.attempt(orphan, 9)
	if retry.Of(err).Class != retry.Transient || !strings.Contains(err.Error(), "not in the event index yet") || len(r.calls) != 2 {
		t.Fatalf("a classification whose cause is unknown: %v, calls %v", err, r.calls)
	}
	if items, _ := r.gate.Review.List(context.Background(), reconcile.Filter{Tenant: tenant, Kind: Kind}); len(items) != 0 {
		t.Fatalf("review items %+v", items)
	}
	// One days old whose cause the index no longer keeps: a person decides.
	old := orphan
	old.ID, old.ReceivedAt = "ev_old_classification", time.Now().Add(-48*time.Hour)
	if err := r.attempt(old, 1); err != nil || len(r.calls) != 2 {
		t.Fatalf("an old classification whose cause is gone: %v, calls %v", err, r.calls)
	}
	if items, _ := r.gate.Review.List(context.Background(), reconcile.Filter{Tenant: tenant, Kind: Kind}); len(items) != 1 || !strings.Contains(items[0].Where, old.ID) {
		t.Fatalf("review items %+v", items)
	}
}

// The consumers of one process that need one event's verdict at once share one ask of
// its source, and read the verdict once kept from the process, not the bucket: three
// at once make one request to Instantly.
func TestConsumersAtOnceAskTheSourceOnce(t *testing.T) {
	r := newRig(t)
	at := time.Now().Add(-time.Minute)
	r.sb.AddInstantlyReply("c-1", "bo@example.com", "em-2", "Send pricing", false, at)
	r.sb.SetFault(sandbox.RouteInstantlyEmailGet, sandbox.Fault{Latency: 200 * time.Millisecond}) // the first ask is slow
	env := webhook(envelope.TypeReplyReceived, "bo@example.com", "em-2", "Send pricing", at)
	errs := make(chan error, 3)
	for range 3 {
		go func() {
			errs <- r.gate.Wrap(func(envelope.Envelope) bool { return true }, func(context.Context, consumer.Event) error { return nil })(
				context.Background(), consumer.Event{Envelope: env, Attempt: 1})
		}()
	}
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if n := r.sb.Requests(sandbox.RouteInstantlyEmailGet); n != 1 {
		t.Fatalf("%d asks of the source, want 1", n)
	}
	if v, ok := r.gate.known[tenant+"."+env.ID]; !ok || !v.Confirmed {
		t.Fatalf("the verdict is not remembered: %+v %v", v, ok)
	}
}

// A process remembers a verdict (the reply's text rides on it) for knownFor at most:
// an erasure reaches the bucket, not the process's memory. Forgotten, the verdict is
// read from the bucket again, and the source is not asked again.
func TestRememberedVerdictsAreForgottenInTime(t *testing.T) {
	r := newRig(t)
	r.gate.knownFor = 200 * time.Millisecond
	at := time.Now().Add(-time.Minute)
	r.sb.AddInstantlyReply("c-1", "cy@example.com", "em-3", "Call me", false, at)
	env := webhook(envelope.TypeReplyReceived, "cy@example.com", "em-3", "Call me", at)
	if err := r.attempt(env, 1); err != nil {
		t.Fatal(err)
	}
	known := func() bool {
		r.gate.mu.Lock()
		defer r.gate.mu.Unlock()
		_, ok := r.gate.known[tenant+"."+env.ID]
		return ok
	}
	if !known() {
		t.Fatal("the verdict is not remembered")
	}
	deadline := time.Now().Add(5 * time.Second)
	for known() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if known() {
		t.Fatal("the verdict is still remembered 5 s after its 200 ms")
	}
	if err := r.attempt(env, 2); err != nil {
		t.Fatal(err)
	}
	if n := r.sb.Requests(sandbox.RouteInstantlyEmailGet); n != 1 {
		t.Fatalf("%d asks of the source, want 1 (the verdict read from the bucket)", n)
	}
}
