package handler

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/broker"
	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/consumer"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/guard"
	"exacto.dev/pkg/platform/accounts"
	"exacto.dev/pkg/platform/hubspot"
	"exacto.dev/pkg/platform/instantly"
	"exacto.dev/pkg/platform/sandbox"
	"exacto.dev/pkg/platform/smartlead"
	"exacto.dev/pkg/providers/providertest"
	"exacto.dev/pkg/retry"
	"exacto.dev/pkg/stream"
)

const (
	tenant       = "acme"
	instCampaign = "019cc043-e398-7985-aef5-99101bec3adf"
)

// rig is the stopper on a real embedded JetStream against the platform sandbox.
type rig struct {
	t       *testing.T
	conn    *broker.Conn
	sb      *sandbox.Server
	handle  consumer.Handler
	clients accounts.Clients
	stored  sync.Map // event id -> storedEvent, for its status
}

func newRig(t *testing.T) *rig {
	t.Helper()
	conn := brokertest.Start(t, "")
	sb := sandbox.Start(t)
	clients := accounts.Clients{
		Instantly: instantly.New(instantly.Config{BaseURL: sb.URL, APIKey: sandbox.InstantlyKey, Timeout: 2 * time.Second}),
		Smartlead: smartlead.New(smartlead.Config{BaseURL: sb.URL, APIKey: sandbox.SmartleadKey, Timeout: 2 * time.Second}),
		HubSpot:   hubspot.New(hubspot.Config{BaseURL: sb.URL, Token: sandbox.HubSpotToken, Timeout: 2 * time.Second}),
	}
	d, err := consumer.NewDeriver(context.Background(), conn.JS)
	if err != nil {
		t.Fatal(err)
	}
	platforms := func(tn string) (accounts.Clients, bool) { return clients, tn == tenant }
	return &rig{t: t, conn: conn, sb: sb, clients: clients, handle: New(d, platforms, nil, nil)}
}

// run starts the stopper's consumer with the production subscription, its backoff
// shortened so that retries fit in a test.
func (r *rig) run() {
	r.t.Helper()
	nc, err := nats.Connect(r.conn.Embedded.ClientURL())
	if err != nil {
		r.t.Fatal(err)
	}
	sub, _ := stream.SubscriptionOf(stream.Stopper)
	sub.BackoffBase, sub.BackoffMax = 20*time.Millisecond, 200*time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		err := consumer.Run(ctx, consumer.Options{NC: nc, Sub: sub, Workers: 2, Handle: r.handle, Acts: Acts, Dependencies: Dependencies,
			Owner: func(string, string) string { return "ops@acme" }})
		if err != nil && ctx.Err() == nil { // stopped while binding: not a failure
			r.t.Error(err)
		}
	}()
	r.t.Cleanup(func() { cancel(); <-done; nc.Close() })
}

// event builds an envelope as the gateway would store it.
func event(provider, typ, key string, data envelope.Data) envelope.Envelope {
	now := time.Now().UTC()
	subject := ""
	if data.Contact != nil {
		subject = data.Contact.Email
	}
	if data.ProviderType == "" {
		data.ProviderType = typ
	}
	data.Raw = json.RawMessage(`{}`)
	return envelope.Envelope{SpecVersion: "1.0", ID: envelope.ID(tenant, provider, key), Source: envelope.Source(tenant, provider+"-main"),
		Type: typ, Subject: subject, Time: now, DataContentType: "application/json", Data: data,
		Tenant: tenant, Provider: provider, Endpoint: provider + "-main", ReceivedAt: now, Channel: "email",
		PayloadSHA256: strings.Repeat("0", 64), Signed: provider != Instantly && provider != Smartlead, AuthMethod: "test"}
}

func reply(provider, key, addr string) envelope.Envelope {
	return event(provider, envelope.TypeReplyReceived, key, envelope.Data{Contact: &envelope.Contact{Email: addr},
		Message: &envelope.Message{ID: key, Text: "Thanks, please stop emailing me."}})
}

func withCampaign(env envelope.Envelope, id string) envelope.Envelope {
	env.Data.Campaign = &envelope.Campaign{ID: id, Name: "Q4 outreach", Step: "1"}
	return env
}

// publish stores env on EXACTO_EVENTS; msgID, if set, replaces its Nats-Msg-Id (a
// provider redelivery the duplicate window does not catch).
func (r *rig) publish(env envelope.Envelope, msgID string) {
	r.t.Helper()
	msg, err := stream.EventMessage(context.Background(), env)
	if err != nil {
		r.t.Fatal(err)
	}
	if msgID != "" {
		msg.Header.Set(jetstream.MsgIDHeader, msgID)
	}
	ack, err := r.conn.JS.PublishMsg(context.Background(), msg)
	if err != nil {
		r.t.Fatal(err)
	}
	r.stored.Store(env.ID, storedEvent{env, ack.Sequence})
}

type storedEvent struct {
	env envelope.Envelope
	seq uint64
}

// status is the stopper's status of event id as the console tells it: its guard
// record, or completed once delivered where the handler does nothing (no record).
func (r *rig) status(id string) guard.Record {
	r.t.Helper()
	kv, err := r.conn.JS.KeyValue(context.Background(), stream.Guards)
	if err != nil {
		r.t.Fatal(err)
	}
	sub, _ := stream.SubscriptionOf(stream.Stopper)
	v, _ := r.stored.Load(id)
	st, _ := v.(storedEvent)
	rec, _, err := consumer.NewStatuses(r.conn.JS, kv).OfEvent(context.Background(), sub, st.env, st.seq)
	if err != nil {
		r.t.Fatal(err)
	}
	return rec
}

func (r *rig) waitFor(what string, cond func() bool) {
	r.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	r.t.Fatalf("timed out waiting for %s", what)
}

func (r *rig) waitStatus(id, want string) {
	r.t.Helper()
	r.waitFor(id+" "+want, func() bool { return r.status(id).Status == want })
}

// drained waits until the stopper has nothing pending or unacknowledged.
func (r *rig) drained() {
	r.t.Helper()
	r.waitFor("the stopper to drain", func() bool {
		c, err := r.conn.JS.Consumer(context.Background(), stream.Events, stream.Stopper)
		if err != nil {
			return false
		}
		info, err := c.Info(context.Background())
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	})
}

// read returns every message of stream name on subject.
func (r *rig) read(name, subject string) []*jetstream.RawStreamMsg {
	r.t.Helper()
	ctx := context.Background()
	st, err := r.conn.JS.Stream(ctx, name)
	if err != nil {
		r.t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			continue // deleted
		}
		if ok, _ := matches(subject, m.Subject); ok {
			out = append(out, m)
		}
	}
	return out
}

func matches(pattern, subject string) (bool, error) {
	p, s := strings.Split(pattern, "."), strings.Split(subject, ".")
	for i, tok := range p {
		if tok == ">" {
			return true, nil
		}
		if i >= len(s) || (tok != "*" && tok != s[i]) {
			return false, nil
		}
	}
	return len(p) == len(s), nil
}

// stopped is every sequence.stopped stored, validated against the schemas.
func (r *rig) stopped() []envelope.Envelope {
	r.t.Helper()
	var out []envelope.Envelope
	for _, m := range r.read(stream.Events, "events.*.*."+envelope.TypeSequenceStopped) {
		if err := providertest.Validate(m.Data); err != nil {
			r.t.Fatalf("%v\n%s", err, m.Data)
		}
		var env envelope.Envelope
		if err := json.Unmarshal(m.Data, &env); err != nil {
			r.t.Fatal(err)
		}
		out = append(out, env)
	}
	return out
}

func (r *rig) deadLetters() []consumer.DeadLetter {
	r.t.Helper()
	var out []consumer.DeadLetter
	for _, m := range r.read(stream.DLQ, "dlq.>") {
		var dl consumer.DeadLetter
		if err := json.Unmarshal(m.Data, &dl); err != nil {
			r.t.Fatal(err)
		}
		out = append(out, dl)
	}
	return out
}

func TestCause(t *testing.T) {
	contact := &envelope.Contact{Email: "ana@example.com"}
	cases := []struct {
		env  envelope.Envelope
		want string
	}{
		{envelope.Envelope{Type: envelope.TypeReplyReceived, Data: envelope.Data{Contact: contact, Message: &envelope.Message{}}}, causeReply},
		{envelope.Envelope{Type: envelope.TypeReplyReceived, Data: envelope.Data{Contact: contact, Message: &envelope.Message{Auto: true}}}, ""},
		{envelope.Envelope{Type: envelope.TypeMessageReceived, Data: envelope.Data{Contact: contact, Message: &envelope.Message{ID: "m"}}}, causeReply},
		{envelope.Envelope{Type: envelope.TypeMessageReceived, Data: envelope.Data{Contact: &envelope.Contact{Phone: "+34600000000"}, Message: &envelope.Message{ID: "m"}}}, ""},
		{envelope.Envelope{Type: envelope.TypeLeadUnsubscribed, Data: envelope.Data{Contact: contact}}, causeUnsubscribe},
		{envelope.Envelope{Type: envelope.TypeEmailComplained, Data: envelope.Data{Contact: contact}}, causeComplaint},
		{envelope.Envelope{Type: envelope.TypeEmailComplained, Data: envelope.Data{}}, ""},
		{envelope.Envelope{Type: envelope.TypeEmailBounced, Data: envelope.Data{Contact: contact, Bounce: &envelope.Bounce{Kind: "hard"}}}, causeBounce},
		{envelope.Envelope{Type: envelope.TypeEmailBounced, Data: envelope.Data{Contact: contact, Bounce: &envelope.Bounce{Kind: "unknown"}}}, causeBounce},
		{envelope.Envelope{Type: envelope.TypeEmailBounced, Data: envelope.Data{Contact: contact}}, causeBounce},
		{envelope.Envelope{Type: envelope.TypeEmailBounced, Data: envelope.Data{Contact: contact, Bounce: &envelope.Bounce{Kind: "soft"}}}, ""},
		{envelope.Envelope{Type: envelope.TypeEmailOpened, Data: envelope.Data{Contact: contact}}, ""},
		{envelope.Envelope{Type: envelope.TypeEmailDelivered, Data: envelope.Data{Contact: contact}}, ""},
		// A Smartlead event names its lead and campaign even without an e-mail.
		{envelope.Envelope{Type: envelope.TypeLeadUnsubscribed, Provider: Smartlead, Data: envelope.Data{Contact: &envelope.Contact{ExternalID: "5001"}, Campaign: &envelope.Campaign{ID: "42"}}}, causeUnsubscribe},
	}
	for _, c := range cases {
		got, skip := Cause(c.env)
		if got != c.want || (got == "") == (skip == "") {
			t.Errorf("%s %+v %+v: %q (%q), want %q", c.env.Type, c.env.Data.Message, c.env.Data.Bounce, got, skip, c.want)
		}
		if deps := Dependencies(c.env); (len(deps) > 0) != (c.want != "") {
			t.Errorf("%s: dependencies %v for cause %q", c.env.Type, deps, c.want)
		}
	}
	if got := SendingPlatforms(envelope.Envelope{Provider: "hubspot"}); len(got) != 2 {
		t.Errorf("hubspot event stops on %v, want both platforms", got)
	}
}

// An Instantly reply stops the lead with one write and one sequence.stopped, however
// often it is delivered.
func TestInstantlyReplyStopsOnce(t *testing.T) {
	r := newRig(t)
	id := r.sb.AddInstantlyLead(instCampaign, "jordan@example.com")
	r.run()
	env := withCampaign(reply(Instantly, "r1", "Jordan@Example.com"), instCampaign)
	r.publish(env, "")
	r.publish(env, "provider-retry-1") // past the duplicate window: a second delivery
	r.publish(env, "provider-retry-2")
	r.waitStatus(env.ID, guard.Completed)
	r.drained()
	if n := r.sb.Requests(sandbox.RouteInstantlyInterest); n != 1 {
		t.Fatalf("%d stop calls, want 1", n)
	}
	// The campaign's subsequences are read once by the stop (before the value is given
	// and when its enrolment is awaited), the retries skipped by the guard read nothing.
	if n := r.sb.Requests(sandbox.RouteInstantlySubsequences); n != 1 {
		t.Fatalf("%d reads of the subsequences, want 1", n)
	}
	l, _ := r.sb.InstantlyLeadState(id)
	labels := r.sb.InstantlyLabels()
	if len(labels) != 1 || labels[0].Label != StopLabel || labels[0].Kind != instantly.KindNeutral {
		t.Fatalf("labels %+v, want the one neutral stop label", labels)
	}
	if l.Status != sandbox.InstantlyCompleted || l.InterestStatus == nil || *l.InterestStatus != labels[0].InterestStatus {
		t.Fatalf("lead after the stop: %+v, want completed with the neutral label (never Not Interested)", l)
	}
	if b := r.sb.Blocklist(); len(b) != 0 {
		t.Fatalf("a reply blocked %v", b)
	}
	// The handler run again (a worker resumed after a crash): it reads, finds the lead
	// stopped, writes nothing and derives the same event.
	if err := r.handle(context.Background(), consumer.Event{Envelope: env, Attempt: 2, Resumed: true}); err != nil {
		t.Fatal(err)
	}
	if n := r.sb.Requests(sandbox.RouteInstantlyInterest); n != 1 {
		t.Fatalf("%d stop calls after a rerun, want 1", n)
	}
	st := r.stopped()
	if len(st) != 1 {
		t.Fatalf("%d sequence.stopped, want 1", len(st))
	}
	s := st[0]
	if s.Data.Cause != env.ID || s.Data.Status != StatusStopped || s.Provider != Instantly || s.Data.Contact.ExternalID != id ||
		s.Data.Campaign == nil || s.Data.Campaign.ID != instCampaign {
		t.Fatalf("sequence.stopped: %+v %+v", s, s.Data)
	}
}

// A campaign's subsequences are read once for the replies of its leads within
// subsequenceTTL, and again after it: a subsequence made meanwhile is watched for.
func TestSubsequencesReadOnceAWhile(t *testing.T) {
	defer func(ttl time.Duration) { subsequenceTTL = ttl }(subsequenceTTL)
	subsequenceTTL = 300 * time.Millisecond
	r := newRig(t)
	stop := func(i int) {
		t.Helper()
		addr := fmt.Sprintf("lead%d@example.com", i)
		r.sb.AddInstantlyLead(instCampaign, addr)
		env := withCampaign(reply(Instantly, fmt.Sprint("r-ttl-", i), addr), instCampaign)
		if err := r.handle(context.Background(), consumer.Event{Envelope: env, Attempt: 1}); err != nil {
			t.Fatalf("reply %d: %v", i, err)
		}
	}
	stop(1)
	stop(2)
	if n, stops := r.sb.Requests(sandbox.RouteInstantlySubsequences), r.sb.Requests(sandbox.RouteInstantlyInterest); n != 1 || stops != 2 {
		t.Fatalf("two replies of one campaign: %d reads of its subsequences, %d stops; want 1 and 2", n, stops)
	}
	time.Sleep(subsequenceTTL)
	stop(3)
	if n := r.sb.Requests(sandbox.RouteInstantlySubsequences); n != 2 {
		t.Fatalf("a reply after the TTL: %d reads of the subsequences, want 2", n)
	}
}

// A lead already stopped (Instantly's own stop on reply) gets no write at all.
func TestAlreadyStoppedNoWrite(t *testing.T) {
	r := newRig(t)
	r.sb.AddInstantlyLead(instCampaign, "kim@example.com")
	interested := instantly.Interested
	if err := r.clients.Instantly.SetInterest(context.Background(), instCampaign, "kim@example.com", &interested); err != nil {
		t.Fatal(err)
	}
	before := r.sb.Requests(sandbox.RouteInstantlyInterest)
	r.run()
	env := withCampaign(reply(Instantly, "r2", "kim@example.com"), instCampaign)
	r.publish(env, "")
	r.waitStatus(env.ID, guard.Completed)
	if n := r.sb.Requests(sandbox.RouteInstantlyInterest); n != before {
		t.Fatalf("%d stop calls for a stopped lead", n-before)
	}
	if n := r.sb.Requests(sandbox.RouteInstantlyLeadList); n != 1 {
		t.Fatalf("%d lead reads, want 1", n)
	}
	if st := r.stopped(); len(st) != 1 || st[0].Data.Status != StatusAlreadyStopped {
		t.Fatalf("sequence.stopped: %+v", st)
	}
}

// A lead the platform does not have is a dead letter at once, with the reason.
func TestAbsentLeadDeadLettered(t *testing.T) {
	r := newRig(t)
	r.sb.AddInstantlyLead("another-campaign", "lee@example.com") // not in the event's campaign
	r.run()
	env := withCampaign(reply(Instantly, "r3", "lee@example.com"), instCampaign)
	r.publish(env, "")
	r.waitStatus(env.ID, guard.DeadLetter)
	dls := r.deadLetters()
	if len(dls) != 1 {
		t.Fatalf("%d dead letters", len(dls))
	}
	dl := dls[0]
	if dl.EventID != env.ID || dl.Attempts != 1 || dl.Class != "permanent" || dl.Consumer != stream.Stopper ||
		!strings.Contains(dl.Error, "absent at instantly") || !strings.Contains(dl.Error, instCampaign) {
		t.Fatalf("dead letter: %+v", dl)
	}
	if n := r.sb.Requests(sandbox.RouteInstantlyInterest); n != 0 {
		t.Fatalf("%d stop calls", n)
	}
	if st := r.stopped(); len(st) != 0 {
		t.Fatalf("%d sequence.stopped for an absent lead", len(st))
	}
}

// A Smartlead reply pauses the lead in the reply's campaign only.
func TestSmartleadReplyPauses(t *testing.T) {
	r := newRig(t)
	lead := r.sb.AddSmartleadLead(42, "luis@example.com")
	r.sb.AddSmartleadLead(43, "luis@example.com")
	r.run()
	env := reply(Smartlead, "r4", "luis@example.com")
	env.Data.Contact.ExternalID = strconv.FormatInt(lead, 10)
	env = withCampaign(env, "42")
	r.publish(env, "")
	r.waitStatus(env.ID, guard.Completed)
	if m, _ := r.sb.SmartleadLeadState(42, lead); m.Status != "PAUSED" {
		t.Fatalf("campaign 42: %+v", m)
	}
	if m, _ := r.sb.SmartleadLeadState(43, lead); m.Status != "STARTED" {
		t.Fatalf("campaign 43 touched: %+v", m)
	}
	if n := r.sb.Requests(sandbox.RouteSmartleadPause); n != 1 {
		t.Fatalf("%d pause calls", n)
	}
	if n := r.sb.Requests(sandbox.RouteSmartleadUnsubscribeAll); n != 0 {
		t.Fatalf("a reply unsubscribed (%d calls)", n)
	}
	if st := r.stopped(); len(st) != 1 || st[0].Data.Status != StatusStopped || st[0].Data.Contact.ExternalID != env.Data.Contact.ExternalID {
		t.Fatalf("sequence.stopped: %+v", st)
	}
}

// An unsubscribe stops the sequence on either platform; the address goes on the
// platforms' own lists by the suppressor, never by the stopper (one writer per list).
func TestUnsubscribeStops(t *testing.T) {
	r := newRig(t)
	instLead := r.sb.AddInstantlyLead(instCampaign, "ines@example.com")
	slLead := r.sb.AddSmartleadLead(42, "olga@example.com")
	r.run()
	inst := withCampaign(event(Instantly, envelope.TypeLeadUnsubscribed, "u1", envelope.Data{Contact: &envelope.Contact{Email: "ines@example.com"}}), instCampaign)
	sl := withCampaign(event(Smartlead, envelope.TypeLeadUnsubscribed, "u2", envelope.Data{
		Contact: &envelope.Contact{Email: "olga@example.com", ExternalID: strconv.FormatInt(slLead, 10)}}), "42")
	r.publish(inst, "")
	r.publish(sl, "")
	r.waitStatus(inst.ID, guard.Completed)
	r.waitStatus(sl.ID, guard.Completed)

	if b := r.sb.Blocklist(); len(b) != 0 {
		t.Fatalf("the stopper wrote the instantly block list %v", b)
	}
	if n := len(r.sb.Stops("ines@example.com")); n != 1 {
		t.Fatalf("%d instantly stops", n)
	}
	if l, _ := r.sb.InstantlyLeadState(instLead); l.Status == sandbox.InstantlyActive {
		t.Fatalf("instantly lead still active: %+v", l)
	}
	if r.sb.SmartleadUnsubscribedAll(slLead) {
		t.Fatal("the stopper unsubscribed the smartlead lead globally")
	}
	if m, _ := r.sb.SmartleadLeadState(42, slLead); m.Status != "PAUSED" {
		t.Fatalf("smartlead lead: %+v", m)
	}
	if n := len(r.stopped()); n != 2 {
		t.Fatalf("%d sequence.stopped, want 2", n)
	}
}

// An out-of-office, a soft bounce and a chat message with only a phone stop nothing
// and call no platform; a contact of another provider found on no platform is read,
// never written, and not dead-lettered.
func TestNoStop(t *testing.T) {
	r := newRig(t)
	r.run()
	auto := withCampaign(reply(Instantly, "a1", "ooo@example.com"), instCampaign)
	auto.Data.Message.Auto = true
	soft := withCampaign(event(Smartlead, envelope.TypeEmailBounced, "b1", envelope.Data{Contact: &envelope.Contact{Email: "full@example.com", ExternalID: "5001"},
		Bounce: &envelope.Bounce{Kind: "soft", Reason: "mailbox full"}}), "42")
	chat := event("meta", envelope.TypeMessageReceived, "w1", envelope.Data{Contact: &envelope.Contact{Phone: "+34600000000"},
		Message: &envelope.Message{ID: "wamid.1", Text: "Hola"}})
	for _, env := range []envelope.Envelope{auto, soft, chat} {
		r.publish(env, "")
	}
	for _, env := range []envelope.Envelope{auto, soft, chat} {
		r.waitStatus(env.ID, guard.Completed)
	}
	if n := r.sb.TotalRequests(); n != 0 {
		t.Fatalf("%d platform calls for events that stop nothing", n)
	}
	unknown := event("hubspot", envelope.TypeLeadUnsubscribed, "h1", envelope.Data{Contact: &envelope.Contact{Email: "nobody@example.com"}})
	r.publish(unknown, "")
	r.waitStatus(unknown.ID, guard.Completed)
	// The events that stop nothing have no outcome (Acts); the one published after them
	// has, once its own is stored.
	told := func() map[string]bool {
		out := map[string]bool{}
		for _, m := range r.read(stream.Outcomes, "outcomes.stopper.>") {
			var o consumer.Outcome
			if err := json.Unmarshal(m.Data, &o); err != nil {
				t.Fatal(err)
			}
			out[o.EventID] = true
		}
		return out
	}
	r.waitFor("the outcome of "+unknown.ID, func() bool { return told()[unknown.ID] })
	for _, env := range []envelope.Envelope{auto, soft, chat} {
		if told()[env.ID] {
			t.Fatalf("an outcome of %s, which stops nothing", env.Type)
		}
	}
	writes := r.sb.Requests(sandbox.RouteInstantlyInterest) + r.sb.Requests(sandbox.RouteInstantlyBlocklist) +
		r.sb.Requests(sandbox.RouteSmartleadPause) + r.sb.Requests(sandbox.RouteSmartleadUnsubscribeAll)
	if writes != 0 || r.sb.Requests(sandbox.RouteInstantlyLeadList) != 1 || r.sb.Requests(sandbox.RouteSmartleadLeadByEmail) != 1 {
		t.Fatalf("writes %d, instantly reads %d, smartlead reads %d", writes,
			r.sb.Requests(sandbox.RouteInstantlyLeadList), r.sb.Requests(sandbox.RouteSmartleadLeadByEmail))
	}
	if n := len(r.stopped()); n != 0 {
		t.Fatalf("%d sequence.stopped", n)
	}
	if n := len(r.deadLetters()); n != 0 {
		t.Fatalf("%d dead letters", n)
	}
}

// A 429 with Retry-After is retried after it, never dead-lettered, and the stop is
// still made once.
func TestRateLimitedRetried(t *testing.T) {
	r := newRig(t)
	r.sb.AddInstantlyLead(instCampaign, "rita@example.com")
	r.sb.SetFault(sandbox.RouteInstantlyInterest, sandbox.Fault{Status: 429, RetryAfter: time.Second, Count: 1})
	r.run()
	env := withCampaign(reply(Instantly, "r5", "rita@example.com"), instCampaign)
	start := time.Now()
	r.publish(env, "")
	r.waitStatus(env.ID, guard.Completed)
	took := time.Since(start)
	if rec := r.status(env.ID); rec.Attempts != 2 {
		t.Fatalf("%d attempts, want 2", rec.Attempts)
	}
	// The backoff is 20ms here: only the Retry-After explains a second's wait.
	if took < 900*time.Millisecond {
		t.Fatalf("retried after %v, inside the Retry-After", took)
	}
	if n := r.sb.Requests(sandbox.RouteInstantlyInterest); n != 2 { // the 429, then the stop
		t.Fatalf("%d stop calls", n)
	}
	if n := len(r.sb.Stops("rita@example.com")); n != 1 {
		t.Fatalf("%d stops accepted", n)
	}
	if n := len(r.deadLetters()); n != 0 {
		t.Fatalf("%d dead letters", n)
	}
	if n := len(r.stopped()); n != 1 {
		t.Fatalf("%d sequence.stopped", n)
	}
}

// A reply through a provider that sends nothing stops the contact on every platform
// where it is a lead, in every campaign.
func TestOtherProviderStopsEverywhere(t *testing.T) {
	r := newRig(t)
	instLead := r.sb.AddInstantlyLead(instCampaign, "max@example.com")
	slLead := r.sb.AddSmartleadLead(42, "max@example.com")
	r.sb.AddSmartleadLead(43, "max@example.com")
	r.run()
	env := reply("standard", "s1", "max@example.com")
	r.publish(env, "")
	r.waitStatus(env.ID, guard.Completed)
	if l, _ := r.sb.InstantlyLeadState(instLead); l.Status != sandbox.InstantlyCompleted {
		t.Fatalf("instantly lead: %+v", l)
	}
	for _, cid := range []int64{42, 43} {
		if m, _ := r.sb.SmartleadLeadState(cid, slLead); m.Status != "PAUSED" {
			t.Fatalf("smartlead campaign %d: %+v", cid, m)
		}
	}
	if n := r.sb.Requests(sandbox.RouteInstantlyInterest); n != 1 {
		t.Fatalf("%d instantly stops", n)
	}
	if n := r.sb.Requests(sandbox.RouteSmartleadPause); n != 2 {
		t.Fatalf("%d smartlead pauses", n)
	}
	st := r.stopped()
	if len(st) != 1 || st[0].Provider != "standard" || st[0].Data.Contact.ExternalID != "" {
		t.Fatalf("sequence.stopped: %+v", st)
	}
}

// An unknown tenant is a permanent error: no retry can configure it.
func TestUnknownTenant(t *testing.T) {
	r := newRig(t)
	env := reply(Instantly, "t1", "a@example.com")
	env.Tenant = "nobody"
	err := r.handle(context.Background(), consumer.Event{Envelope: env, Attempt: 1})
	if err == nil || !strings.Contains(err.Error(), "not configured") || retry.Of(err).Class != retry.Permanent {
		t.Fatalf("err = %v", err)
	}
	if n := r.sb.TotalRequests(); n != 0 {
		t.Fatalf("%d platform calls", n)
	}
}

// A stop that timed out after Instantly accepted it (the outcome unknown) is retried;
// the retry reads the lead, finds it stopped and does not write again.
func TestStopTimedOutAfterCommitNotRepeated(t *testing.T) {
	r := newRig(t)
	r.sb.AddInstantlyLead(instCampaign, "tom@example.com")
	r.sb.SetFault(sandbox.RouteInstantlyInterest, sandbox.Fault{TimeoutAfterCommit: 5 * time.Second, Count: 1})
	r.run()
	env := withCampaign(reply(Instantly, "r6", "tom@example.com"), instCampaign)
	r.publish(env, "")
	r.waitStatus(env.ID, guard.Completed)
	if rec := r.status(env.ID); rec.Attempts != 2 {
		t.Fatalf("%d attempts, want 2", rec.Attempts)
	}
	if n := r.sb.Requests(sandbox.RouteInstantlyInterest); n != 1 {
		t.Fatalf("%d stop calls, want 1", n)
	}
	if st := r.stopped(); len(st) != 1 || st[0].Data.Status != StatusStopped {
		t.Fatalf("sequence.stopped: %+v", st)
	}
}

// A spam complaint (email.complained, here from a generic signer that names no
// platform) stops the contact everywhere, as an unsubscribe does.
func TestComplaintStops(t *testing.T) {
	r := newRig(t)
	lead := r.sb.AddInstantlyLead(instCampaign, "cora@example.com")
	r.run()
	env := event("generic", envelope.TypeEmailComplained, "c1", envelope.Data{Contact: &envelope.Contact{Email: "Cora@Example.com"}})
	if cause, _ := Cause(env); cause != causeComplaint {
		t.Fatalf("cause %q", cause)
	}
	r.publish(env, "")
	r.publish(env, "provider-retry-1")
	r.waitStatus(env.ID, guard.Completed)
	r.drained()
	if n := len(r.sb.Stops("cora@example.com")); n != 1 {
		t.Fatalf("%d instantly stops, want 1", n)
	}
	if l, _ := r.sb.InstantlyLeadState(lead); l.Status == sandbox.InstantlyActive {
		t.Fatalf("lead still active: %+v", l)
	}
	if n := len(r.stopped()); n != 1 {
		t.Fatalf("%d sequence.stopped, want 1", n)
	}
}

// A campaign that stops on reply stops the lead itself: the stopper writes nothing,
// and waits (a few attempts) for Instantly to show it when the webhook came first.
func TestStopOnReplyCampaignOnlyConfirmed(t *testing.T) {
	r := newRig(t)
	r.sb.SetInstantlyCampaign(instCampaign, true, false)
	id := r.sb.AddInstantlyLead(instCampaign, "noor@example.com")
	r.run()
	env := withCampaign(reply(Instantly, "r7", "noor@example.com"), instCampaign)
	r.publish(env, "")
	r.waitFor("a first attempt waiting for Instantly", func() bool { return r.status(env.ID).Attempts >= 1 })
	r.sb.UpdateInstantlyLead(id, func(l *sandbox.InstantlyLead) { l.Status = sandbox.InstantlyCompleted }) // Instantly's own stop
	r.waitStatus(env.ID, guard.Completed)
	if n := r.sb.Requests(sandbox.RouteInstantlyInterest); n != 0 {
		t.Fatalf("%d interest writes to a lead its campaign stops itself", n)
	}
	if l, _ := r.sb.InstantlyLeadState(id); l.InterestStatus != nil {
		t.Fatalf("the lead was labelled: %+v", l)
	}
	if st := r.stopped(); len(st) != 1 {
		t.Fatalf("%d sequence.stopped", len(st))
	}
}

// A classified reply raises the lead's label: interested to Interested, a meeting
// request to Meeting Booked; never lower (Meeting Booked stays), never for a negative
// label, never over a person's negative value (Out of Office is raised); and a
// subsequence keyed on the value, entered by Instantly's background job a moment after
// the value, is left before it sends anything.
func TestClassifiedRaisesTheLabel(t *testing.T) {
	r := newRig(t)
	ana := r.sb.AddInstantlyLead(instCampaign, "ana@example.com")
	ben := r.sb.AddInstantlyLead(instCampaign, "ben@example.com")
	cai := r.sb.AddInstantlyLead(instCampaign, "cai@example.com")
	dov := r.sb.AddInstantlyLead(instCampaign, "dov@example.com")
	eva := r.sb.AddInstantlyLead(instCampaign, "eva@example.com")
	fay := r.sb.AddInstantlyLead(instCampaign, "fay@example.com")
	booked, notInterested, away := instantly.MeetingBooked, instantly.NotInterested, instantly.OutOfOffice
	r.sb.UpdateInstantlyLead(cai, func(l *sandbox.InstantlyLead) { l.InterestStatus = &booked })
	r.sb.UpdateInstantlyLead(eva, func(l *sandbox.InstantlyLead) { l.InterestStatus = &notInterested }) // a person's decision
	r.sb.UpdateInstantlyLead(fay, func(l *sandbox.InstantlyLead) { l.InterestStatus = &away })
	r.sb.AddInstantlySubsequence(instCampaign, 300*time.Millisecond, instantly.Interested)
	r.run()
	cls := func(addr, label string) envelope.Envelope {
		rep := withCampaign(reply(Instantly, "c-"+addr, addr), instCampaign)
		return envelope.Derive(rep, stream.Classifier, envelope.TypeReplyClassified,
			envelope.Data{Classification: &envelope.Classification{Label: label, Confidence: 0.9}}, time.Now())
	}
	events := []envelope.Envelope{cls("ana@example.com", "interested"), cls("ben@example.com", "meeting_request"),
		cls("cai@example.com", "interested"), cls("dov@example.com", "not_interested"),
		cls("eva@example.com", "interested"), cls("fay@example.com", "interested")}
	for _, e := range events {
		r.publish(e, "")
	}
	for _, e := range events {
		r.waitStatus(e.ID, guard.Completed)
	}
	want := map[string]*int{ana: ptr(instantly.Interested), ben: ptr(instantly.MeetingBooked), cai: ptr(instantly.MeetingBooked), dov: nil,
		eva: ptr(instantly.NotInterested), fay: ptr(instantly.Interested)}
	for id, v := range want {
		l, _ := r.sb.InstantlyLeadState(id)
		if (v == nil) != (l.InterestStatus == nil) || (v != nil && *v != *l.InterestStatus) || l.SubsequenceID != "" {
			t.Errorf("lead %s (%s): %+v, want interest %v and no subsequence", id, l.Email, l, deref(v))
		}
	}
	// Past the enrolment job and the subsequence's first step after it.
	time.Sleep(sandbox.DefaultInstantlyJobDelay + 500*time.Millisecond)
	if sends := r.sb.InstantlySubsequenceSends(); len(sends) != 0 {
		t.Fatalf("subsequence steps sent to %v", sends)
	}
	for id := range want {
		if l, _ := r.sb.InstantlyLeadState(id); l.SubsequenceID != "" {
			t.Fatalf("lead %s is in subsequence %s", l.Email, l.SubsequenceID)
		}
	}
	if n := r.sb.Requests(sandbox.RouteInstantlySubseqRemove); n != 2 {
		t.Fatalf("%d removals from a subsequence, want 2 (Interested starts it: ana, fay)", n)
	}
}

func ptr(v int) *int { return &v }

func deref(p *int) any {
	if p == nil {
		return nil
	}
	return *p
}

// When Instantly accepts the stop but keeps the lead active (the v2 reference never
// says a status completes a sequence), the stopper gives up after ConfirmWait with a
// dead letter that says so, instead of retrying for ever.
func TestUnconfirmedStopIsBounded(t *testing.T) {
	defer func(w time.Duration) { ConfirmWait = w }(ConfirmWait)
	ConfirmWait = 400 * time.Millisecond
	r := newRig(t)
	r.sb.SetInstantlyLabelsKeepActive(true)
	r.sb.AddInstantlyLead(instCampaign, "eli@example.com")
	r.run()
	env := withCampaign(reply(Instantly, "r8", "eli@example.com"), instCampaign)
	r.publish(env, "")
	r.waitStatus(env.ID, guard.DeadLetter)
	dls := r.deadLetters()
	sub, _ := stream.SubscriptionOf(stream.Stopper)
	if len(dls) != 1 || dls[0].Attempts >= sub.MaxDeliver || !strings.Contains(dls[0].Error, "still shows the lead active") {
		t.Fatalf("dead letters: %+v (given up by time, before attempt %d)", dls, sub.MaxDeliver)
	}
	if n := r.sb.Requests(sandbox.RouteInstantlyInterest); n != dls[0].Attempts {
		t.Fatalf("%d interest writes in %d attempts, want one per attempt (the last too: only a write is waited for)", n, dls[0].Attempts)
	}
}

// A lead past the 10,000th row of a large Smartlead campaign is paused in a few calls:
// no campaign is paged.
func TestSmartleadLeadDeepInACampaign(t *testing.T) {
	r := newRig(t)
	r.sb.AddSmartleadLeads(42, 10500, "bulk.example")
	at := time.Now().Add(-10 * time.Second)
	lead := r.sb.AddSmartleadReply(42, "deep@example.com", "<deep-1@example.com>", "Stop please", at)
	r.run()
	env := withCampaign(reply(Smartlead, "r9", "deep@example.com"), "42")
	env.Time = at
	env.Data.Contact.ExternalID = strconv.FormatInt(lead, 10)
	before := r.sb.TotalRequests()
	r.publish(env, "")
	r.waitStatus(env.ID, guard.Completed)
	if m, _ := r.sb.SmartleadLeadState(42, lead); m.Status != "PAUSED" {
		t.Fatalf("lead: %+v", m)
	}
	if calls := r.sb.TotalRequests() - before; calls > 3 {
		t.Fatalf("%d Smartlead calls to pause one lead, want at most 3", calls)
	}
	if n := r.sb.Requests(sandbox.RouteSmartleadCampaignLeads); n != 1 {
		t.Fatalf("%d campaign listings, want the one filtered confirmation", n)
	}
}

// An event whose first attempt was long ago (Instantly's breaker held it for minutes)
// is stopped on the attempt that reaches Instantly: only a write is waited for.
func TestLateFirstWriteIsNotGivenUp(t *testing.T) {
	r := newRig(t)
	lead := r.sb.AddInstantlyLead(instCampaign, "late@example.com")
	env := withCampaign(reply(Instantly, "r-late", "late@example.com"), instCampaign)
	err := r.handle(context.Background(), consumer.Event{Envelope: env, Attempt: 6, FirstAttempt: time.Now().Add(-10 * time.Minute)})
	if err != nil {
		t.Fatalf("the first attempt that reaches Instantly: %v", err)
	}
	if l, _ := r.sb.InstantlyLeadState(lead); l.Status == sandbox.InstantlyActive || r.sb.Requests(sandbox.RouteInstantlyInterest) != 1 {
		t.Fatalf("lead %+v after %d writes", l, r.sb.Requests(sandbox.RouteInstantlyInterest))
	}
}

// A classification that raises no label is logged at debug, not at info (one line a
// reply); an event of another type that stops nothing still is at info.
func TestNothingToStopOfAClassificationIsDebug(t *testing.T) {
	var out bytes.Buffer
	h := New(nil, nil, nil, slog.New(slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: slog.LevelInfo})))
	rep := withCampaign(reply(Instantly, "c-nolabel", "noa@example.com"), instCampaign)
	cl := envelope.Derive(rep, stream.Classifier, envelope.TypeReplyClassified,
		envelope.Data{Classification: &envelope.Classification{Label: "not_interested", Confidence: 0.9}}, time.Now())
	if _, ok := classifiedLabel(cl); ok {
		t.Fatal("the test's classification raises a label")
	}
	if err := h(context.Background(), consumer.Event{Envelope: cl}); err != nil {
		t.Fatal(err)
	}
	if out.Len() != 0 {
		t.Errorf("a classification that raises no label logged at info: %s", out.String())
	}
	auto := reply(Instantly, "r-auto", "noa@example.com")
	auto.Data.Message.Auto = true
	if err := h(context.Background(), consumer.Event{Envelope: auto}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `"msg":"nothing to stop"`) {
		t.Errorf("an automatic reply logged %q, want its nothing to stop at info", out.String())
	}
}
