package handler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"exacto.dev/pkg/broker"
	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/consumer"
	"exacto.dev/pkg/contacts"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/guard"
	"exacto.dev/pkg/platform/hubspot"
	"exacto.dev/pkg/platform/sandbox"
	"exacto.dev/pkg/retry"
	"exacto.dev/pkg/stream"
)

// route is the tests' routing: smartlead replies match no rule; an "interested"
// label goes to 88, every other instantly reply to 77.
func route(tenant, provider, campaign, label string) string {
	switch {
	case tenant != "acme" || provider == "smartlead":
		return ""
	case label == "interested":
		return "88"
	}
	return "77"
}

// written records what OnWritten heard.
type written struct {
	mu  sync.Mutex
	all []Written
}

func (w *written) hook(_ context.Context, _ envelope.Envelope, res Written) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.all = append(w.all, res)
	return nil
}

func (w *written) get() []Written {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Written(nil), w.all...)
}

type fixture struct {
	sb   *sandbox.Server
	hs   *hubspot.Client
	conn *broker.Conn
	out  *written
	h    consumer.Handler
}

// setup starts a sandbox and a handler over it; baseURL, if set, is where the
// client sends HubSpot requests instead (a recording proxy).
func setup(t *testing.T, baseURL ...string) *fixture {
	t.Helper()
	f := &fixture{sb: sandbox.Start(t), out: &written{}}
	u := f.sb.URL
	if len(baseURL) > 0 {
		u = baseURL[0]
	}
	f.hs = hubspot.New(hubspot.Config{BaseURL: u, Token: sandbox.HubSpotToken, Timeout: 500 * time.Millisecond})
	notePropertyMade(t, f.hs)
	f.h = New(Options{
		HubSpot: func(tenant string) (*hubspot.Client, bool) { return f.hs, tenant == "acme" },
		Route:   route, OnWritten: f.out.hook,
	})
	return f
}

// notePropertyMade makes the portal's note property, as Run does at start-up.
func notePropertyMade(t *testing.T, hs *hubspot.Client) {
	t.Helper()
	if err := EnsureProperty(context.Background(), []string{"acme"}, func(string) *hubspot.Client { return hs }, nil); err != nil {
		t.Fatal(err)
	}
}

// run starts the crmwriter's consumer on an embedded NATS with fast retries.
func (f *fixture) run(t *testing.T) {
	t.Helper()
	f.conn = brokertest.Start(t, "")
	nc, err := nats.Connect(f.conn.Embedded.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	sub, _ := stream.SubscriptionOf(stream.CRMWriter)
	sub.AckWait, sub.MaxDeliver, sub.BackoffBase, sub.BackoffMax = 5*time.Second, 6, 50*time.Millisecond, 300*time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		err := consumer.Run(ctx, consumer.Options{NC: nc, Sub: sub, Workers: 2, Handle: f.h,
			Dependencies: consumer.On(Dependency), Owner: func(tenant, typ string) string { return "sales-ops@" + tenant }})
		if err != nil && ctx.Err() == nil { // stopped while binding: not a failure
			t.Error(err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done; nc.Close() })
}

func (f *fixture) publish(t *testing.T, envs ...envelope.Envelope) {
	t.Helper()
	for _, env := range envs {
		msg, err := stream.EventMessage(context.Background(), env)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.conn.JS.PublishMsg(context.Background(), msg); err != nil {
			t.Fatal(err)
		}
	}
}

func (f *fixture) status(t *testing.T, id string) guard.Record {
	t.Helper()
	kv, err := f.conn.JS.KeyValue(context.Background(), stream.Guards)
	if err != nil {
		t.Fatal(err)
	}
	rec, _, err := guard.Status(context.Background(), kv, stream.CRMWriter, id)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func (f *fixture) waitDone(t *testing.T, ids ...string) {
	t.Helper()
	waitFor(t, "completion", func() bool {
		for _, id := range ids {
			if f.status(t, id).Status != guard.Completed {
				return false
			}
		}
		return true
	})
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

func reply(n int, email string) envelope.Envelope {
	return envelope.Envelope{
		SpecVersion: "1.0", ID: envelope.ID("acme", "instantly", fmt.Sprint("reply-", n)),
		Source: envelope.Source("acme", "instantly-main"), Type: envelope.TypeReplyReceived,
		Time: time.Date(2026, 12, 2, 10, n%60, 0, 0, time.UTC), Tenant: "acme", Provider: "instantly", Endpoint: "instantly-main",
		ReceivedAt: time.Now().UTC(),
		Data: envelope.Data{ProviderType: "reply_received",
			Contact:  &envelope.Contact{Email: email, Name: "Ada Lovelace"},
			Campaign: &envelope.Campaign{ID: "camp-1", Name: "Q4 outreach"},
			Message:  &envelope.Message{From: email, Subject: "Re: hello", Text: "Sounds good <b>call me</b>\nAda"}},
	}
}

func classified(r envelope.Envelope, label string) envelope.Envelope {
	return envelope.Derive(r, stream.Classifier, envelope.TypeReplyClassified, envelope.Data{
		ProviderType: envelope.TypeReplyClassified,
		Classification: &envelope.Classification{Label: label, Confidence: 0.92, Evidence: []string{"sounds good", "call me"},
			Language: "en", Action: "book_meeting", Classifier: "rules/1"},
	}, time.Now())
}

func noteOf(t *testing.T, sb *sandbox.Server, ext string) sandbox.Object {
	t.Helper()
	var hits []sandbox.Object
	for _, n := range sb.Notes() {
		if n.Properties[hubspot.ExternalIDProperty] == ext {
			hits = append(hits, n)
		}
	}
	if len(hits) != 1 {
		t.Fatalf("%d notes with %s=%s, want 1", len(hits), hubspot.ExternalIDProperty, ext)
	}
	return hits[0]
}

func noDeadLetters(t *testing.T, conn *broker.Conn) {
	t.Helper()
	if n := brokertest.Count(t, conn, stream.DLQ); n != 0 {
		t.Fatalf("%d dead letters", n)
	}
}

// A reply is one note keyed by its event id, on the contact it created, with the
// routed owner; handled again, it is still one note.
func TestReplyWritesOneNote(t *testing.T) {
	f := setup(t)
	f.run(t)
	r := reply(1, "Ada@Example.com")
	f.publish(t, r)
	f.waitDone(t, r.ID)

	contacts := f.sb.Contacts()
	if len(contacts) != 1 {
		t.Fatalf("%d contacts, want 1", len(contacts))
	}
	c := contacts[0]
	if p := c.Properties; p["email"] != "ada@example.com" || p["firstname"] != "Ada" || p["lastname"] != "Lovelace" || p["hubspot_owner_id"] != "77" {
		t.Errorf("contact properties: %v", p)
	}
	n := noteOf(t, f.sb, r.ID)
	if len(n.Associations) != 1 || n.Associations[0].ToID != c.ID || n.Associations[0].TypeID != hubspot.NoteToContact {
		t.Errorf("associations: %+v", n.Associations)
	}
	p := n.Properties
	if p["hubspot_owner_id"] != "77" || p["hs_timestamp"] != "2026-12-02T10:01:00.000Z" {
		t.Errorf("note properties: %v", p)
	}
	body := p["hs_note_body"]
	for _, want := range []string{"instantly", "Q4 outreach", "Re: hello", "Sounds good &lt;b&gt;call me&lt;/b&gt;<br>Ada", "Exacto classification:</strong> pending"} {
		if !strings.Contains(body, want) {
			t.Errorf("body lacks %q: %s", want, body)
		}
	}
	if strings.Contains(body, "<b>") {
		t.Errorf("reply text not escaped: %s", body)
	}
	if got := f.out.get(); len(got) != 1 || got[0].NoteID != n.ID || got[0].ContactID != c.ID || !got[0].Created || got[0].ExternalID != r.ID {
		t.Errorf("OnWritten heard %+v", got)
	}

	// The same reply again (a redelivery after the guard's record expired, a replay).
	if err := f.h(context.Background(), consumer.Event{Envelope: r, Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	if k := f.sb.NotesWithExternalID(r.ID); k != 1 || f.sb.Requests(sandbox.RouteHubSpotNoteUpsert) != 1 || len(f.sb.Contacts()) != 1 {
		t.Fatalf("after a repeat: %d notes, %d upserts, %d contacts", k, f.sb.Requests(sandbox.RouteHubSpotNoteUpsert), len(f.sb.Contacts()))
	}
	if got := f.out.get(); len(got) != 2 || got[1].NoteID != n.ID || got[1].Created {
		t.Errorf("repeat reported %+v", got)
	}
	noDeadLetters(t, f.conn)
}

// An existing contact keeps what it has; only missing properties are filled.
func TestExistingContactOnlyFilled(t *testing.T) {
	f := setup(t)
	id := f.sb.AddContact("ada@example.com", map[string]string{"firstname": "Augusta", "hubspot_owner_id": "5"})
	if err := f.h(context.Background(), consumer.Event{Envelope: reply(2, "ada@example.com")}); err != nil {
		t.Fatal(err)
	}
	cs := f.sb.Contacts()
	if len(cs) != 1 || cs[0].ID != id {
		t.Fatalf("contacts: %+v", cs)
	}
	if p := cs[0].Properties; p["firstname"] != "Augusta" || p["hubspot_owner_id"] != "5" || p["lastname"] != "Lovelace" {
		t.Errorf("contact properties: %v", p)
	}
}

// The classification updates the reply's own note: one activity per reply, the
// label's owner, and a repeat changes nothing.
func TestClassifiedUpdatesTheSameNote(t *testing.T) {
	f := setup(t)
	f.run(t)
	r := reply(3, "ada@example.com")
	cl := classified(r, "interested")
	f.publish(t, r)
	f.waitDone(t, r.ID)
	f.publish(t, cl)
	f.waitDone(t, cl.ID)

	n := noteOf(t, f.sb, r.ID)
	if len(f.sb.Notes()) != 1 {
		t.Fatalf("%d notes, want 1", len(f.sb.Notes()))
	}
	body := n.Properties["hs_note_body"]
	if strings.Contains(body, "pending") || strings.Count(body, "Exacto classification:") != 1 ||
		!strings.Contains(body, "interested (confidence 0.92, suggested action book_meeting, language en, by rules/1)") ||
		!strings.Contains(body, "Evidence: “sounds good”; “call me”") || !strings.Contains(body, "Re: hello") {
		t.Errorf("body: %s", body)
	}
	if n.Properties["hubspot_owner_id"] != "88" {
		t.Errorf("owner %q, want the label's 88", n.Properties["hubspot_owner_id"])
	}
	updates := f.sb.Requests(sandbox.RouteHubSpotNoteUpdate)
	if updates != 1 {
		t.Errorf("%d updates, want 1", updates)
	}
	if err := f.h(context.Background(), consumer.Event{Envelope: cl}); err != nil {
		t.Fatal(err)
	}
	if f.sb.Requests(sandbox.RouteHubSpotNoteUpdate) != updates || noteOf(t, f.sb, r.ID).Properties["hs_note_body"] != body {
		t.Error("a repeated classification changed the note")
	}
	got := f.out.get()
	if len(got) < 2 || got[1].NoteID != n.ID || got[1].ExternalID != r.ID || got[1].EventID != cl.ID {
		t.Errorf("OnWritten heard %+v", got)
	}
	noDeadLetters(t, f.conn)
}

// A classification that overtakes its reply waits for the reply's note (transient
// failures), then updates it.
func TestClassifiedBeforeReceived(t *testing.T) {
	f := setup(t)
	f.run(t)
	r := reply(4, "ada@example.com")
	cl := classified(r, "not_interested")
	f.publish(t, cl)
	waitFor(t, "a failed attempt", func() bool {
		rec := f.status(t, cl.ID)
		return rec.Attempts >= 1 && rec.Status != guard.Processing && rec.Status != ""
	})
	if rec := f.status(t, cl.ID); rec.Status == guard.Completed || rec.Status == guard.DeadLetter || !strings.Contains(rec.LastError, "not in HubSpot yet") {
		t.Fatalf("classification without its note: %+v", rec)
	}
	if len(f.sb.Notes()) != 0 {
		t.Fatal("a note was written before the reply")
	}
	f.publish(t, r)
	f.waitDone(t, r.ID, cl.ID)
	if rec := f.status(t, cl.ID); rec.Attempts < 2 {
		t.Errorf("attempts %d", rec.Attempts)
	}
	n := noteOf(t, f.sb, r.ID)
	if body := n.Properties["hs_note_body"]; !strings.Contains(body, "not_interested") || strings.Contains(body, "pending") {
		t.Errorf("body: %s", body)
	}
	// no label rule: the reply's owner stays.
	if n.Properties["hubspot_owner_id"] != "77" {
		t.Errorf("owner %q", n.Properties["hubspot_owner_id"])
	}
	noDeadLetters(t, f.conn)
}

// A create that commits and then times out is retried without a second note or
// contact, whether or not search already sees the first: the retry reads by the
// unique keys (the note's event id, the contact's e-mail) and never searches.
func TestTimeoutAfterCommitStillOne(t *testing.T) {
	for _, lag := range []time.Duration{0, time.Minute} {
		t.Run("searchLag="+lag.String(), func(t *testing.T) {
			f := setup(t)
			f.run(t)
			f.sb.SetSearchLag(lag)
			f.sb.SetFault(sandbox.RouteHubSpotContactCreate, sandbox.Fault{TimeoutAfterCommit: 2 * time.Second, Count: 1})
			f.sb.SetFault(sandbox.RouteHubSpotNoteUpsert, sandbox.Fault{TimeoutAfterCommit: 2 * time.Second, Count: 1})
			r := reply(5, "ada@example.com")
			f.publish(t, r)
			f.waitDone(t, r.ID)
			n := noteOf(t, f.sb, r.ID)
			if cs := f.sb.Contacts(); len(cs) != 1 || n.Associations[0].ToID != cs[0].ID {
				t.Fatalf("contacts %+v, note on %+v", cs, n.Associations)
			}
			if rec := f.status(t, r.ID); rec.Attempts != 3 {
				t.Errorf("attempts %d, want 3 (two timeouts)", rec.Attempts)
			}
			if got := f.sb.Requests(sandbox.RouteHubSpotNoteUpsert); got != 1 {
				t.Errorf("note upserts %d, want 1: the retry read the committed note by its key", got)
			}
			if got := f.sb.Requests(sandbox.RouteHubSpotNoteSearch) + f.sb.Requests(sandbox.RouteHubSpotContactSearch); got != 0 {
				t.Errorf("%d searches", got)
			}
			if got := f.out.get(); len(got) != 1 || got[0].NoteID != n.ID {
				t.Errorf("OnWritten heard %+v", got)
			}
			noDeadLetters(t, f.conn)
		})
	}
}

// HubSpot refusing the note (400) is dead-lettered after one attempt, with the reason
// and the owner.
func TestRejectedNoteDeadLettered(t *testing.T) {
	f := setup(t)
	f.run(t)
	f.sb.SetNoteWriteFault(sandbox.Fault{Status: http.StatusBadRequest})
	r := reply(6, "ada@example.com")
	f.publish(t, r)
	waitFor(t, "the dead letter", func() bool { return brokertest.Count(t, f.conn, stream.DLQ) == 1 })
	s, _ := f.conn.JS.Stream(context.Background(), stream.DLQ)
	m, err := s.GetLastMsgForSubject(context.Background(), "dlq.crmwriter.>")
	if err != nil {
		t.Fatal(err)
	}
	var dl consumer.DeadLetter
	if err := json.Unmarshal(m.Data, &dl); err != nil {
		t.Fatal(err)
	}
	if dl.EventID != r.ID || dl.Consumer != stream.CRMWriter || dl.Class != "permanent" || dl.Attempts != 1 ||
		dl.Owner != "sales-ops@acme" || !strings.Contains(dl.Error, " note: ") || !strings.Contains(dl.Error, "400") {
		t.Fatalf("dead letter: %+v", dl)
	}
	time.Sleep(300 * time.Millisecond) // several backoffs: no retry follows
	if n := f.sb.NoteWrites(); n != 1 {
		t.Errorf("%d writes of the note, want 1", n)
	}
	if st := f.status(t, r.ID).Status; st != guard.DeadLetter {
		t.Errorf("status %s", st)
	}
}

// hit is one request seen by the recording proxy.
type hit struct {
	start, end time.Time
	path       string
	status     int
}

type recorder struct {
	mu   sync.Mutex
	hits []hit
}

func (r *recorder) snapshot() []hit {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]hit(nil), r.hits...)
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) { w.status = code; w.ResponseWriter.WriteHeader(code) }

// proxy forwards to target and records when each request started and ended.
func proxy(t *testing.T, target string) (*recorder, string) {
	u, _ := url.Parse(target)
	rp := httputil.NewSingleHostReverseProxy(u)
	rec := &recorder{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := hit{start: time.Now(), path: r.Method + " " + r.URL.Path}
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		rp.ServeHTTP(sw, r)
		h.end, h.status = time.Now(), sw.status
		rec.mu.Lock()
		rec.hits = append(rec.hits, h)
		rec.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	return rec, srv.URL
}

// A 429 with Retry-After holds every event's HubSpot requests for that long; then all
// complete, none dead-lettered.
func TestRetryAfterHoldsHubSpot(t *testing.T) {
	sb := sandbox.Start(t)
	rec, via := proxy(t, sb.URL)
	f := setup(t, via)
	f.sb = sb // the proxied sandbox is the one to inspect
	f.run(t)
	// The first request of every reply: whether its note is then created (a New event)
	// or upserted, the 429 comes.
	f.sb.SetFault(sandbox.RouteHubSpotContactGet, sandbox.Fault{Status: http.StatusTooManyRequests, RetryAfter: time.Second, Count: 1})
	var ids []string
	for i := range 6 {
		r := reply(10+i, fmt.Sprintf("lead%d@example.com", i))
		ids = append(ids, r.ID)
		f.publish(t, r)
	}
	f.waitDone(t, ids...)
	for _, id := range ids {
		noteOf(t, f.sb, id)
	}
	noDeadLetters(t, f.conn)

	hits := rec.snapshot()
	var limited time.Time
	for _, h := range hits {
		if h.status == http.StatusTooManyRequests {
			limited = h.end
		}
	}
	if limited.IsZero() {
		t.Fatal("no 429 was answered")
	}
	// Requests already sent when the 429 came back may finish; none may start inside
	// the second that follows.
	for _, h := range hits {
		if d := h.start.Sub(limited); d > 50*time.Millisecond && d < time.Second {
			t.Fatalf("%s started %v after the 429, inside its Retry-After", h.path, d)
		}
	}
	if last := hits[len(hits)-1].start; last.Sub(limited) < time.Second {
		t.Fatalf("work finished %v after the 429: the pause was not observed", last.Sub(limited))
	}
}

// metrics installs one reader for the process: the counter binds to the first global
// meter provider, so a second one (go test -count=2) would see nothing.
var metrics = sync.OnceValue(func() *sdkmetric.ManualReader {
	reader := sdkmetric.NewManualReader()
	otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	return reader
})

// unowned sums exacto_replies_without_owner by "tenant/provider".
func unowned(t *testing.T) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := metrics().Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok || m.Name != "exacto_replies_without_owner" {
				continue
			}
			for _, dp := range sum.DataPoints {
				tenant, _ := dp.Attributes.Value("tenant")
				provider, _ := dp.Attributes.Value("provider")
				out[tenant.AsString()+"/"+provider.AsString()] += dp.Value
			}
		}
	}
	return out
}

// A reply no routing rule gives an owner is counted; a routed one is not.
func TestReplyWithoutOwnerCounted(t *testing.T) {
	before := unowned(t)
	f := setup(t)
	ctx := context.Background()
	unrouted := reply(20, "grace@example.com")
	unrouted.Provider = "smartlead"
	for _, env := range []envelope.Envelope{unrouted, reply(21, "ada@example.com")} {
		if err := f.h(ctx, consumer.Event{Envelope: env}); err != nil {
			t.Fatal(err)
		}
	}
	if owner := noteOf(t, f.sb, unrouted.ID).Properties["hubspot_owner_id"]; owner != "" {
		t.Fatalf("unrouted reply owned by %q", owner)
	}
	after := unowned(t)
	if d := after["acme/smartlead"] - before["acme/smartlead"]; d != 1 {
		t.Fatalf("exacto_replies_without_owner{acme,smartlead} grew by %d, want 1", d)
	}
	if d := after["acme/instantly"] - before["acme/instantly"]; d != 0 {
		t.Fatalf("a routed reply was counted: %d", d)
	}
}

// Meetings and opportunities are one note each on the named contact; one that names
// nobody completes without effect.
func TestMeetingAndOpportunity(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	meeting := envelope.Envelope{ID: "ev_meeting", Tenant: "acme", Provider: "calendly", Type: envelope.TypeMeetingBooked,
		Time: time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC),
		Data: envelope.Data{Meeting: &envelope.Meeting{ID: "m1", Invitee: "Ada@Example.com", EventType: "Intro call",
			Start: time.Date(2026, 12, 5, 14, 0, 0, 0, time.UTC), End: time.Date(2026, 12, 5, 14, 30, 0, 0, time.UTC)}}}
	opp := envelope.Envelope{ID: "ev_opp", Tenant: "acme", Provider: "instantly", Type: envelope.TypeOpportunityCreated,
		Time: time.Date(2026, 12, 4, 9, 0, 0, 0, time.UTC),
		Data: envelope.Data{Contact: &envelope.Contact{Email: "ada@example.com"}, Opportunity: &envelope.Opportunity{ID: "o1", Name: "Acme pilot", Amount: "12000"}}}
	nobody := envelope.Envelope{ID: "ev_nobody", Tenant: "acme", Provider: "instantly", Type: envelope.TypeOpportunityCreated,
		Data: envelope.Data{Opportunity: &envelope.Opportunity{ID: "o2"}}}
	for _, env := range []envelope.Envelope{meeting, opp, nobody, meeting} {
		if err := f.h(ctx, consumer.Event{Envelope: env}); err != nil {
			t.Fatalf("%s: %v", env.ID, err)
		}
	}
	cs := f.sb.Contacts()
	if len(cs) != 1 {
		t.Fatalf("%d contacts", len(cs))
	}
	if len(f.sb.Notes()) != 2 {
		t.Fatalf("%d notes, want 2", len(f.sb.Notes()))
	}
	m := noteOf(t, f.sb, "ev_meeting")
	if b := m.Properties["hs_note_body"]; !strings.Contains(b, "Meeting booked") || !strings.Contains(b, "Intro call") || !strings.Contains(b, "2026-12-05 14:00 UTC – 14:30 UTC") {
		t.Errorf("meeting body: %s", b)
	}
	o := noteOf(t, f.sb, "ev_opp")
	if b := o.Properties["hs_note_body"]; !strings.Contains(b, "Opportunity created") || !strings.Contains(b, "Acme pilot") || o.Associations[0].ToID != cs[0].ID {
		t.Errorf("opportunity note: %+v", o)
	}
}

// Events HubSpot cannot take are permanent errors, classified as such.
func TestPermanentErrors(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	unknown := reply(30, "ada@example.com")
	unknown.Tenant = "nobody"
	noEmail := reply(31, "")
	noEmail.Data.Contact = &envelope.Contact{Phone: "+4912345"}
	before := f.sb.TotalRequests() // the property made at start-up
	for _, env := range []envelope.Envelope{unknown, noEmail, {ID: "ev_x", Tenant: "acme", Type: envelope.TypeReplyClassified}} {
		if err := f.h(ctx, consumer.Event{Envelope: env}); retry.Of(err).Class != retry.Permanent {
			t.Errorf("%s: %v, want permanent", env.ID, err)
		}
	}
	if n := f.sb.TotalRequests() - before; n != 0 {
		t.Errorf("%d requests to HubSpot for events it cannot take", n)
	}
}

func TestBodies(t *testing.T) {
	cl := &envelope.Classification{Label: "interested", Confidence: 0.5, Evidence: []string{"<x>"}}
	body := replyBody(reply(40, "ada@example.com"))
	once := withClassification(body, cl)
	if twice := withClassification(once, cl); twice != once {
		t.Errorf("not idempotent:\n%s\n%s", once, twice)
	}
	if !strings.Contains(once, "&lt;x&gt;") || strings.Contains(once, "pending") || !strings.HasPrefix(once, body[:strings.Index(body, classMarker)]) {
		t.Errorf("classified body: %s", once)
	}
	if other := withClassification(once, &envelope.Classification{Label: "not_interested"}); strings.Contains(other, "“&lt;x&gt;”") || !strings.Contains(other, "not_interested") {
		t.Errorf("reclassified body: %s", other)
	}

	// HubSpot may hand the body back re-serialised: the classification still replaces
	// the pending paragraph.
	reserialised := `<div><p style="margin:0">Hello</p><p style="margin:0"><strong>Exacto classification:</strong> pending</p></div>`
	if got := withClassification(reserialised, cl); strings.Contains(got, "pending") || strings.Count(got, classLabel) != 1 || !strings.HasPrefix(got, `<div><p style="margin:0">Hello</p>`) {
		t.Errorf("re-serialised body: %s", got)
	}

	// A huge reply is cut to fit HubSpot's limit, without splitting an entity.
	long := reply(41, "ada@example.com")
	long.Data.Message.Text = strings.Repeat("a&", 70000)
	b := withClassification(replyBody(long), &envelope.Classification{Label: "x", Evidence: []string{strings.Repeat("é", 9000)}})
	if n := len([]rune(b)); n > hubspot.MaxNoteBody {
		t.Fatalf("body of %d characters", n)
	}
	cut := b[:strings.Index(b, "… [truncated]")]
	if i := strings.LastIndexByte(cut, '&'); !strings.HasSuffix(cut[i:], "&amp;") && !strings.HasSuffix(cut, "a") {
		t.Errorf("entity split at the cut: %q", cut[len(cut)-10:])
	}
}

// What HubSpot tells of who a contact is goes on the stream, once: a reply's note names
// the contact it was written on (e-mail ↔ HubSpot id); an id-only HubSpot event is
// asked of HubSpot (its e-mail and phone). Once the directory links them, nothing more
// is published; Known reads the id back by any spelling of the e-mail.
func TestLinksWhatHubSpotKnows(t *testing.T) {
	ctx := context.Background()
	conn := brokertest.Start(t, "")
	dir, err := contacts.Open(ctx, conn.JS)
	if err != nil {
		t.Fatal(err)
	}
	sb := sandbox.Start(t)
	hs := hubspot.New(hubspot.Config{BaseURL: sb.URL, Token: sandbox.HubSpotToken})
	notePropertyMade(t, hs)
	var published []envelope.Envelope
	h := New(Options{
		HubSpot: func(string) (*hubspot.Client, bool) { return hs, true },
		Known:   Known(dir), Linked: Linked(dir),
		Publish: func(_ context.Context, env envelope.Envelope) error {
			published = append(published, env)
			// The projector records the link from the stream.
			_, err := dir.Record(ctx, env.Tenant, contacts.Seen{Email: env.Data.Contact.Email, Phone: env.Data.Contact.Phone,
				External: map[string]string{contacts.CRMContactID: "hubspot:" + env.Data.Contact.ExternalID}})
			return err
		},
	})
	r := reply(7, "Ada@Example.com")
	for range 2 {
		if err := h(ctx, consumer.Event{Envelope: r}); err != nil {
			t.Fatal(err)
		}
	}
	contact := sb.Contacts()[0].ID
	if len(published) != 1 {
		t.Fatalf("%d contact.identified for one reply handled twice", len(published))
	}
	id := published[0]
	if id.Type != envelope.TypeContactIdentified || id.Provider != "hubspot" || id.Data.Cause != r.ID ||
		id.Data.Contact.ExternalID != contact || id.Data.Contact.Email != "ada@example.com" || !envelope.Complete(id.Type, id.Data) {
		t.Fatalf("contact.identified: %+v %+v", id, id.Data.Contact)
	}
	if got, err := Known(dir)(ctx, "acme", " ADA@example.com"); err != nil || got != contact {
		t.Fatalf("known: %q %v", got, err)
	}
	if got, err := Known(dir)(ctx, "acme", "nobody@example.com"); err != nil || got != "" {
		t.Fatalf("known for a stranger: %q %v", got, err)
	}

	// HubSpot's webhook of a contact it knows by id alone: asked once, linked once.
	grace := sb.AddContact("grace@example.com", map[string]string{"phone": "+1 555 0100"})
	upd := envelope.Envelope{ID: "ev_hs_1", Tenant: "acme", Provider: "hubspot", Type: envelope.TypeContactUpdated,
		Data: envelope.Data{Contact: &envelope.Contact{ExternalID: grace}, Property: &envelope.Property{Name: "lifecyclestage", Value: "lead"}}}
	for range 2 {
		if err := h(ctx, consumer.Event{Envelope: upd}); err != nil {
			t.Fatal(err)
		}
	}
	if len(published) != 2 || published[1].Data.Contact.Email != "grace@example.com" || published[1].Data.Contact.Phone != "+1 555 0100" ||
		published[1].Data.Contact.ExternalID != grace {
		t.Fatalf("published %+v", published)
	}
	// The reply's contact read by e-mail, then (linked) by its id; grace by id once.
	if n := sb.Requests(sandbox.RouteHubSpotContactGet); n != 3 {
		t.Fatalf("%d contact reads, want 3", n)
	}
	// An id HubSpot no longer has: nothing to link, no error.
	gone := upd
	gone.ID, gone.Data.Contact = "ev_hs_2", &envelope.Contact{ExternalID: "424242"}
	if err := h(ctx, consumer.Event{Envelope: gone}); err != nil || len(published) != 2 {
		t.Fatalf("a deleted contact: %v, %d published", err, len(published))
	}
	// A reply from a contact HubSpot holds with a phone links the phone too, so the same
	// person writing on WhatsApp is the same contact.
	lin := sb.AddContact("lin@example.com", map[string]string{"phone": "+1 (555) 0199"})
	if err := h(ctx, consumer.Event{Envelope: reply(8, "lin@example.com")}); err != nil {
		t.Fatal(err)
	}
	if len(published) != 3 || published[2].Data.Contact.Phone != "+1 (555) 0199" || published[2].Data.Contact.ExternalID != lin {
		t.Fatalf("the reply of a contact with a phone published %+v", published[len(published)-1].Data.Contact)
	}
}

// A contact whose HubSpot id is recorded is read by that id, even after its e-mail
// changed in HubSpot: no search, no second contact. A recorded id HubSpot no longer
// has falls back to the e-mail.
func TestKnownContactByID(t *testing.T) {
	ctx := context.Background()
	sb := sandbox.Start(t)
	moved := sb.AddContact("ada.lovelace@newjob.example", map[string]string{"firstname": "Ada"})
	known := map[string]string{"ada@example.com": moved, "ben@example.com": "999999"}
	hs := hubspot.New(hubspot.Config{BaseURL: sb.URL, Token: sandbox.HubSpotToken})
	notePropertyMade(t, hs)
	h := New(Options{
		HubSpot: func(string) (*hubspot.Client, bool) { return hs, true },
		Known:   func(_ context.Context, _, email string) (string, error) { return known[email], nil },
	})
	r := reply(11, "Ada@Example.com")
	if err := h(ctx, consumer.Event{Envelope: r}); err != nil {
		t.Fatal(err)
	}
	if n := sb.Requests(sandbox.RouteHubSpotContactSearch); n != 0 {
		t.Fatalf("%d contact searches for a contact known by id", n)
	}
	if n := noteOf(t, sb, r.ID); len(n.Associations) != 1 || n.Associations[0].ToID != moved {
		t.Fatalf("the note is on %+v, want the known contact %s", n.Associations, moved)
	}
	if cs := sb.Contacts(); len(cs) != 1 {
		t.Fatalf("%d contacts: a second was created", len(cs))
	}
	stale := reply(12, "ben@example.com")
	if err := h(ctx, consumer.Event{Envelope: stale}); err != nil {
		t.Fatal(err)
	}
	if n := sb.Requests(sandbox.RouteHubSpotContactSearch); n != 0 {
		t.Fatalf("%d contact searches after a stale id: the e-mail is read, not searched", n)
	}
	if cs := sb.Contacts(); len(cs) != 2 {
		t.Fatalf("%d contacts after a stale id, want the new one created", len(cs))
	}
}

// The classification of a WhatsApp message (a phone, no e-mail: its message has no
// note) completes at once without a HubSpot call, instead of waiting for a note that
// will never come.
func TestClassifiedChatMessageNeedsNoNote(t *testing.T) {
	f := setup(t)
	f.run(t)
	msg := reply(6, "")
	msg.Type, msg.Provider, msg.Channel = envelope.TypeMessageReceived, "meta", "whatsapp"
	msg.Data.Contact = &envelope.Contact{Phone: "+5511999990000"}
	cl := classified(msg, "interested")
	before := f.sb.TotalRequests() // the property made at start-up
	f.publish(t, cl)
	f.waitDone(t, cl.ID)
	if rec := f.status(t, cl.ID); rec.Attempts != 1 {
		t.Fatalf("attempts %d, want 1", rec.Attempts)
	}
	if n := f.sb.TotalRequests() - before; n != 0 || len(f.sb.Notes()) != 0 {
		t.Fatalf("%d HubSpot calls, %d notes", n, len(f.sb.Notes()))
	}
	noDeadLetters(t, f.conn)
}

// The crmwriter does not start against a portal that refuses the unique note
// property (the error names the tenant and HubSpot's words), nor one that holds the
// property without unique values; a portal that does not answer is asked again until
// it does.
func TestStartNeedsTheUniqueNoteProperty(t *testing.T) {
	ctx := context.Background()
	refusing := sandbox.Start(t)
	refusing.RefuseUniqueNoteProperties(true)
	hs := hubspot.New(hubspot.Config{BaseURL: refusing.URL, Token: sandbox.HubSpotToken})
	err := EnsureProperty(ctx, []string{"acme"}, func(string) *hubspot.Client { return hs }, nil)
	if !errors.Is(err, hubspot.ErrNoUniqueProperty) || !strings.Contains(err.Error(), "tenant acme") ||
		!strings.Contains(err.Error(), "not supported for object type notes") {
		t.Fatalf("refused: %v", err)
	}

	down := sandbox.Start(t)
	down.SetFault(sandbox.RouteHubSpotPropertyGet, sandbox.Fault{Status: http.StatusServiceUnavailable, Count: 2})
	propertyRetry = 50 * time.Millisecond
	t.Cleanup(func() { propertyRetry = 5 * time.Second })
	hs = hubspot.New(hubspot.Config{BaseURL: down.URL, Token: sandbox.HubSpotToken})
	if err := EnsureProperty(ctx, []string{"acme"}, func(string) *hubspot.Client { return hs }, nil); err != nil {
		t.Fatalf("after two 503s: %v", err)
	}
	if exists, unique := down.NoteProperty(hubspot.ExternalIDProperty); !exists || !unique || down.Requests(sandbox.RouteHubSpotPropertyGet) != 3 {
		t.Fatalf("exists=%v unique=%v after %d reads", exists, unique, down.Requests(sandbox.RouteHubSpotPropertyGet))
	}
}

// A New event (no attempt can have come before) creates its note with the association
// in one request, nothing read first; any other attempt reads first, finds it and
// associates it again (one association).
func TestNewReplyCreatesItsNoteInOneRequest(t *testing.T) {
	f := setup(t)
	r := reply(7, "grace@example.com")
	if err := f.h(context.Background(), consumer.Event{Envelope: r, Attempt: 1, New: true}); err != nil {
		t.Fatal(err)
	}
	if creates, reads, upserts, associates := f.sb.Requests(sandbox.RouteHubSpotNoteCreate), f.sb.Requests(sandbox.RouteHubSpotNoteRead),
		f.sb.Requests(sandbox.RouteHubSpotNoteUpsert), f.sb.Requests(sandbox.RouteHubSpotNoteAssociate); creates != 1 || reads+upserts+associates != 0 {
		t.Fatalf("a new reply: %d creates, %d reads, %d upserts, %d associations of its note; want one create", creates, reads, upserts, associates)
	}
	n := noteOf(t, f.sb, r.ID)
	if len(n.Associations) != 1 || n.Associations[0].TypeID != hubspot.NoteToContact {
		t.Fatalf("the new note's associations: %+v", n.Associations)
	}
	if got, err := f.hs.NotesOfContact(context.Background(), n.Associations[0].ToID); err != nil || len(got) != 1 || got[0].ID != n.ID {
		t.Fatalf("the contact's notes: %+v %v", got, err)
	}
	if err := f.h(context.Background(), consumer.Event{Envelope: r, Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	if reads, upserts, associates := f.sb.Requests(sandbox.RouteHubSpotNoteRead), f.sb.Requests(sandbox.RouteHubSpotNoteUpsert),
		f.sb.Requests(sandbox.RouteHubSpotNoteAssociate); reads != 1 || upserts != 0 || associates != 1 {
		t.Fatalf("the same reply again, not new: %d reads, %d upserts, %d associations", reads, upserts, associates)
	}
	if n := noteOf(t, f.sb, r.ID); len(n.Associations) != 1 {
		t.Fatalf("associations after the repeat: %+v", n.Associations)
	}
}

// The create's answer is lost after HubSpot committed it: the next attempt (not New)
// finds the note by its key. A New attempt that finds its key taken all the same (409)
// goes on as a retry would. One note each, associated once, no error left.
func TestNewReplyCreateAnswerLost(t *testing.T) {
	f := setup(t)
	r := reply(8, "lin@example.com")
	f.sb.SetFault(sandbox.RouteHubSpotNoteCreate, sandbox.Fault{TimeoutAfterCommit: time.Second, Count: 1})
	if err := f.h(context.Background(), consumer.Event{Envelope: r, Attempt: 1, New: true}); err == nil {
		t.Fatal("the attempt whose answer was lost succeeded")
	}
	if err := f.h(context.Background(), consumer.Event{Envelope: r, Attempt: 2}); err != nil {
		t.Fatal(err)
	}
	if n := noteOf(t, f.sb, r.ID); len(n.Associations) != 1 {
		t.Fatalf("associations: %+v", n.Associations)
	}

	taken := reply(9, "lin@example.com")
	if err := f.h(context.Background(), consumer.Event{Envelope: taken, Attempt: 1, New: true}); err != nil {
		t.Fatal(err)
	}
	if err := f.h(context.Background(), consumer.Event{Envelope: taken, Attempt: 1, New: true}); err != nil {
		t.Fatalf("a New attempt whose note is there: %v", err)
	}
	if creates, reads := f.sb.Requests(sandbox.RouteHubSpotNoteCreate), f.sb.Requests(sandbox.RouteHubSpotNoteRead); creates != 3 || reads != 2 {
		t.Fatalf("%d creates, %d reads; want 3 and 2", creates, reads)
	}
	if n := noteOf(t, f.sb, taken.ID); len(n.Associations) != 1 {
		t.Fatalf("associations of the note found by its 409: %+v", n.Associations)
	}
}

// A reply's classification updates the note this process just wrote for the reply
// without reading it back (one request); remembered too long, or by another replica, or
// gone from HubSpot since (404), it is read by its key first. Every way the note ends
// with the classification and the label's owner, once.
func TestClassifiedUpdatesTheNoteItWrote(t *testing.T) {
	ctx := context.Background()
	check := func(t *testing.T, f *fixture, r envelope.Envelope, reads, updates int) {
		t.Helper()
		if got := f.sb.Requests(sandbox.RouteHubSpotNoteRead); got != reads {
			t.Errorf("%d reads of a note, want %d", got, reads)
		}
		if got := f.sb.Requests(sandbox.RouteHubSpotNoteUpdate); got != updates {
			t.Errorf("%d updates of a note, want %d", got, updates)
		}
		n := noteOf(t, f.sb, r.ID)
		if body := n.Properties["hs_note_body"]; strings.Contains(body, "pending") || strings.Count(body, "Exacto classification:") != 1 ||
			!strings.Contains(body, "interested (confidence 0.92") || !strings.Contains(body, "Re: hello") {
			t.Errorf("body: %s", body)
		}
		if n.Properties["hubspot_owner_id"] != "88" {
			t.Errorf("owner %q, want the label's 88", n.Properties["hubspot_owner_id"])
		}
	}
	classify := func(t *testing.T, f *fixture, h consumer.Handler, r envelope.Envelope) {
		t.Helper()
		if err := f.h(ctx, consumer.Event{Envelope: r, Attempt: 1, New: true}); err != nil {
			t.Fatal(err)
		}
		if err := h(ctx, consumer.Event{Envelope: classified(r, "interested"), Attempt: 1, New: true}); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("remembered", func(t *testing.T) {
		f := setup(t)
		r := reply(20, "ada@example.com")
		classify(t, f, f.h, r)
		check(t, f, r, 0, 1)
		// Its repeat reads the note (the memory is taken once) and changes nothing.
		if err := f.h(ctx, consumer.Event{Envelope: classified(r, "interested"), Attempt: 2}); err != nil {
			t.Fatal(err)
		}
		check(t, f, r, 1, 1)
	})
	t.Run("another replica", func(t *testing.T) {
		f := setup(t)
		r := reply(21, "ada@example.com")
		other := New(Options{HubSpot: func(string) (*hubspot.Client, bool) { return f.hs, true }, Route: route})
		classify(t, f, other, r)
		check(t, f, r, 1, 1)
	})
	t.Run("remembered too long", func(t *testing.T) {
		f := setup(t)
		was := noteMemoryFor
		noteMemoryFor = 0
		t.Cleanup(func() { noteMemoryFor = was })
		r := reply(22, "ada@example.com")
		classify(t, f, f.h, r)
		check(t, f, r, 1, 1)
	})
	t.Run("found as a person left it", func(t *testing.T) {
		// An earlier attempt's note, edited in HubSpot since: the reply's attempt finds
		// it, and the classification keeps the edit.
		f := setup(t)
		r := reply(24, "ada@example.com")
		f.sb.AddNote(map[string]string{hubspot.ExternalIDProperty: r.ID, "hs_note_body": "<p>Re: hello, edited by Jo</p>" + classMarker + " pending</p>"})
		if err := f.h(ctx, consumer.Event{Envelope: r, Attempt: 2}); err != nil {
			t.Fatal(err)
		}
		if err := f.h(ctx, consumer.Event{Envelope: classified(r, "interested"), Attempt: 1, New: true}); err != nil {
			t.Fatal(err)
		}
		check(t, f, r, 1, 1)
		if body := noteOf(t, f.sb, r.ID).Properties["hs_note_body"]; !strings.HasPrefix(body, "<p>Re: hello, edited by Jo</p>") {
			t.Errorf("the edit was lost: %s", body)
		}
	})
	t.Run("gone since", func(t *testing.T) {
		f := setup(t)
		r := reply(23, "ada@example.com")
		f.sb.SetFault(sandbox.RouteHubSpotNoteUpdate, sandbox.Fault{Status: http.StatusNotFound, Count: 1})
		classify(t, f, f.h, r)
		check(t, f, r, 1, 2)
	})
}

// The memory keeps a note until it is taken or too old, takes it once, and holds at
// most noteMemoryBytes of bodies, forgetting the oldest first.
func TestRecentNotesBounded(t *testing.T) {
	r := newRecentNotes()
	at := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	r.put("acme", "a", hubspot.Note{ID: "1", Body: "body a", OwnerID: "7"}, at)
	if n, ok := r.take("beta", "a", at); ok {
		t.Fatalf("another tenant's reply took %+v", n)
	}
	if n, ok := r.take("acme", "a", at.Add(time.Second)); !ok || n.ID != "1" || n.Body != "body a" || n.OwnerID != "7" {
		t.Fatalf("took %+v, %v", n, ok)
	}
	if _, ok := r.take("acme", "a", at.Add(time.Second)); ok {
		t.Fatal("taken twice")
	}
	r.put("acme", "b", hubspot.Note{ID: "2"}, at)
	if _, ok := r.take("acme", "b", at.Add(noteMemoryFor)); ok {
		t.Fatal("a note remembered for noteMemoryFor was taken")
	}
	big := strings.Repeat("x", noteMemoryBytes/4+1)
	for i := range 4 {
		r.put("acme", fmt.Sprint("big", i), hubspot.Note{ID: fmt.Sprint(i), Body: big}, at)
	}
	if r.bytes > noteMemoryBytes || len(r.by) != 3 {
		t.Fatalf("%d bytes in %d notes, want at most %d in 3", r.bytes, len(r.by), noteMemoryBytes)
	}
	if _, ok := r.take("acme", "big0", at); ok {
		t.Fatal("the oldest note was kept past the bound")
	}
	if n, ok := r.take("acme", "big3", at); !ok || n.ID != "3" {
		t.Fatal("the newest note was not kept")
	}
	// Notes put long ago are dropped by the next put.
	r.put("acme", "c", hubspot.Note{ID: "c"}, at.Add(time.Hour))
	if len(r.by) != 1 || r.bytes != 0 {
		t.Fatalf("%d notes, %d bytes after an hour", len(r.by), r.bytes)
	}
}
