package reconcile

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"exacto.dev/pkg/broker"
	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/contacts"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/kvstore"
	"exacto.dev/pkg/platform/accounts"
	"exacto.dev/pkg/platform/hubspot"
	"exacto.dev/pkg/platform/instantly"
	"exacto.dev/pkg/platform/sandbox"
	"exacto.dev/pkg/platform/smartlead"
	"exacto.dev/pkg/projection"
	"exacto.dev/pkg/providers/providertest"
	"exacto.dev/pkg/stream"
	"exacto.dev/pkg/suppression"
)

const (
	tenant = "acme"
	camp   = "3c6e0b8a-9c0b-4f1e-8b2a-7d5e4f3a2b1c"
)

var (
	readerOnce sync.Once
	reader     *sdkmetric.ManualReader
)

func metricReader() *sdkmetric.ManualReader {
	readerOnce.Do(func() {
		reader = sdkmetric.NewManualReader()
		otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	})
	return reader
}

// counted is exacto_reconcile_findings for kind and tenant.
func counted(t *testing.T, kind string) int64 {
	t.Helper()
	return countedBy(t, kind, "")
}

// countedBy is exacto_reconcile_findings for kind, tenant and provider ("" any).
func countedBy(t *testing.T, kind, provider string) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := metricReader().Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "exacto_reconcile_findings" {
				for _, dp := range sum.DataPoints {
					k, _ := dp.Attributes.Value("kind")
					tn, _ := dp.Attributes.Value("tenant")
					pr, _ := dp.Attributes.Value("provider")
					if k.AsString() == kind && tn.AsString() == tenant && (provider == "" || pr.AsString() == provider) {
						n += dp.Value
					}
				}
			}
		}
	}
	return n
}

// fixture is an embedded JetStream with the topology, the sandbox, and a pass whose
// publisher records what it would store (and projects it, as the projector would).
type fixture struct {
	t         *testing.T
	conn      *broker.Conn
	sb        *sandbox.Server
	deps      *Deps
	dir       *contacts.Directory
	mu        sync.Mutex
	published []envelope.Envelope
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	metricReader()
	ctx := context.Background()
	conn := brokertest.Start(t, "")
	stores, err := projection.Open(ctx, conn.JS, "", 1)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := contacts.Open(ctx, conn.JS)
	if err != nil {
		t.Fatal(err)
	}
	skv, err := conn.JS.KeyValue(ctx, stream.Suppression)
	if err != nil {
		t.Fatal(err)
	}
	q, err := OpenQueue(ctx, conn.JS)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, conn: conn, sb: sandbox.Start(t), dir: dir}
	f.deps = &Deps{Reader: projection.Reader{Stores: stores, Dir: dir}, Suppression: suppression.New(skv), Queue: q, Publish: f.publish}
	q.Publish, q.Fresh = f.publish, func(string) time.Duration { return 72 * time.Hour }
	return f
}

func (f *fixture) publish(ctx context.Context, env envelope.Envelope) error {
	b, _ := json.Marshal(env)
	if err := providertest.Validate(b); err != nil {
		f.t.Errorf("published envelope does not match schemas/: %v\n%s", err, b)
	}
	f.mu.Lock()
	for _, e := range f.published {
		if e.ID == env.ID {
			f.mu.Unlock()
			return nil // stored once, as the Deriver does
		}
	}
	f.published = append(f.published, env)
	f.mu.Unlock()
	_, err := projection.Apply(ctx, f.deps.Reader.Stores, f.dir, env)
	return err
}

func (f *fixture) clients() accounts.Clients {
	return accounts.Clients{
		Instantly: instantly.New(instantly.Config{BaseURL: f.sb.URL, APIKey: sandbox.InstantlyKey}),
		Smartlead: smartlead.New(smartlead.Config{BaseURL: f.sb.URL, APIKey: sandbox.SmartleadKey}),
		HubSpot:   hubspot.New(hubspot.Config{BaseURL: f.sb.URL, Token: sandbox.HubSpotToken}),
	}
}

func (f *fixture) run(dryRun bool) Report {
	f.t.Helper()
	rep, err := f.deps.RunTenant(context.Background(), tenant, f.clients(), nil, dryRun)
	if err != nil {
		f.t.Fatal(err)
	}
	if err := rep.Err(); err != nil {
		f.t.Fatal(err)
	}
	return rep
}

// providerEvent is a provider event of typ for email in campaign, of id.
func providerEvent(provider, typ, email, campaign, id string, at time.Time) envelope.Envelope {
	return envelope.Envelope{SpecVersion: "1.0", ID: envelope.ID(tenant, provider, id), Type: typ, Time: at, Tenant: tenant, Provider: provider,
		Data: envelope.Data{Contact: &envelope.Contact{Email: email}, Campaign: &envelope.Campaign{ID: campaign}, Message: &envelope.Message{ID: id}}}
}

// project applies a provider event of typ for email in campaign to the projection.
func (f *fixture) project(provider, typ, email, campaign, id string, at time.Time) {
	f.t.Helper()
	env := providerEvent(provider, typ, email, campaign, id, at)
	if _, err := projection.Apply(context.Background(), f.deps.Reader.Stores, f.dir, env); err != nil {
		f.t.Fatal(err)
	}
}

func only(t *testing.T, rep Report, kind string) Finding {
	t.Helper()
	var out []Finding
	for _, f := range rep.Findings {
		if f.Kind == kind {
			out = append(out, f)
		}
	}
	if len(out) != 1 {
		t.Fatalf("%d %s findings, want 1: %+v", len(out), kind, rep.Findings)
	}
	return out[0]
}

func TestMissedUnsubscribeAppliedOnceAndDryRun(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	id := f.sb.AddInstantlyLead(camp, "ana@northwind.example")
	f.project("instantly", envelope.TypeEmailSent, "ana@northwind.example", camp, "em-1", time.Now().Add(-time.Hour))
	if rep := f.run(false); len(rep.Findings) != 0 {
		t.Fatalf("findings while everything agrees: %+v", rep.Findings)
	}
	f.sb.UpdateInstantlyLead(id, func(l *sandbox.InstantlyLead) { l.Status = sandbox.InstantlyUnsubscribed })
	before := counted(t, MissedUnsubscribe)

	// A dry run says what it would do, and does nothing.
	rep := f.run(true)
	fd := only(t, rep, MissedUnsubscribe)
	if fd.Applied || !strings.HasPrefix(fd.Would(), "would publish lead.unsubscribed") || len(f.published) != 0 {
		t.Fatalf("dry run: %+v, would %q, published %d", fd, fd.Would(), len(f.published))
	}
	if all, _ := f.deps.Queue.List(ctx, Filter{Tenant: tenant}); len(all) != 0 {
		t.Fatalf("a dry run wrote %d findings", len(all))
	}

	rep = f.run(false)
	fd = only(t, rep, MissedUnsubscribe)
	if !fd.Applied || fd.Status != StatusApplied || rep.New != 1 || rep.Applied != 1 || len(f.published) != 1 {
		t.Fatalf("finding %+v, report %+v, published %d", fd, rep, len(f.published))
	}
	ev := f.published[0]
	if ev.Type != envelope.TypeLeadUnsubscribed || ev.ID != fd.Event || ev.Provider != "instantly" || ev.Source != "/tenants/acme/workers/reconciler" ||
		ev.Data.Contact.Email != "ana@northwind.example" || ev.Data.Contact.ExternalID != id || ev.Data.Campaign.ID != camp {
		t.Fatalf("event %+v", ev)
	}
	got, ok, err := f.deps.Queue.Get(ctx, tenant, fd.ID)
	if err != nil || !ok || got.Kind != MissedUnsubscribe || !got.Applied || !strings.Contains(got.Where, id) || got.Repair == "" {
		t.Fatalf("diff queue: %+v %v %v", got, ok, err)
	}
	if n := counted(t, MissedUnsubscribe) - before; n != 1 {
		t.Fatalf("metric counted %d", n)
	}
	// The suppressor has not acted here: the second pass sees the same difference, and
	// updates the finding without a new one, a new event or a new count.
	rep = f.run(false)
	fd2 := only(t, rep, MissedUnsubscribe)
	if fd2.ID != fd.ID || rep.New != 0 || rep.Applied != 0 || len(f.published) != 1 || fd2.Passes != 2 || !fd2.FirstSeen.Equal(got.FirstSeen) {
		t.Fatalf("second pass: %+v %+v, published %d", fd2, rep, len(f.published))
	}
	if n := counted(t, MissedUnsubscribe) - before; n != 1 {
		t.Fatalf("metric counted %d after two passes", n)
	}
	// Once suppressed, the lead is no finding any more.
	f.deps.Suppression.Add(ctx, tenant, suppression.Entry{Contact: "email:ana@northwind.example", Reason: "unsubscribed", EventID: ev.ID})
	if rep := f.run(false); len(rep.Findings) != 0 {
		t.Fatalf("findings after the suppression: %+v", rep.Findings)
	}
}

func TestBouncedAndSmartleadUnsubscribe(t *testing.T) {
	f := newFixture(t)
	id := f.sb.AddInstantlyLead(camp, "bo@northwind.example")
	f.project("instantly", envelope.TypeEmailSent, "bo@northwind.example", camp, "em-1", time.Now())
	f.sb.UpdateInstantlyLead(id, func(l *sandbox.InstantlyLead) { l.Status = sandbox.InstantlyBounced })
	lid := f.sb.AddSmartleadLead(4242, "sam@contoso.example")
	f.project("smartlead", envelope.TypeEmailSent, "sam@contoso.example", "4242", "sl-1", time.Now())
	f.sb.UpdateSmartleadLead(4242, lid, func(l *sandbox.SmartleadLead) { l.Unsubscribed = true })
	rep := f.run(false)
	if len(rep.Findings) != 2 || len(f.published) != 2 {
		t.Fatalf("findings %+v, published %d", rep.Findings, len(f.published))
	}
	types := map[string]string{}
	for _, ev := range f.published {
		types[ev.Provider] = ev.Type
		if ev.Provider == "instantly" && (ev.Data.Bounce == nil || ev.Data.Bounce.Kind == "soft") {
			t.Fatalf("bounce %+v: a soft bounce would stop nothing", ev.Data.Bounce)
		}
	}
	if types["instantly"] != envelope.TypeEmailBounced || types["smartlead"] != envelope.TypeLeadUnsubscribed {
		t.Fatalf("types %v", types)
	}
}

func TestActiveButSuppressed(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	id := f.sb.AddInstantlyLead(camp, "cy@northwind.example")
	f.project("instantly", envelope.TypeEmailSent, "cy@northwind.example", camp, "em-1", time.Now())
	f.deps.Suppression.Add(ctx, tenant, suppression.Entry{Contact: "email:cy@northwind.example", Reason: "bounced", EventID: "ev_x"})
	rep := f.run(false)
	fd := only(t, rep, ActiveButSuppressed)
	if !fd.Applied || len(f.published) != 1 || f.published[0].Type != envelope.TypeEmailBounced || f.published[0].Data.Contact.ExternalID != id {
		t.Fatalf("finding %+v, published %+v", fd, f.published)
	}
	if rep := f.run(false); rep.New != 0 || rep.Applied != 0 || len(f.published) != 1 {
		t.Fatalf("second pass: %+v", rep)
	}
}

func TestMissedReplyProposedAndDecided(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	fresh := f.sb.AddInstantlyLead(camp, "di@northwind.example")
	stale := f.sb.AddInstantlyLead(camp, "ed@northwind.example")
	// A reply of a minute ago may still be on its way: not judged on this pass.
	recent := f.sb.AddInstantlyLead(camp, "fay@northwind.example")
	f.sb.UpdateInstantlyLead(recent, func(l *sandbox.InstantlyLead) {
		l.EmailReplyCount, l.TimestampLastReply = 1, time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
	})
	for _, e := range []string{"di@northwind.example", "ed@northwind.example", "fay@northwind.example"} {
		f.project("instantly", envelope.TypeEmailSent, e, camp, "em-"+e, time.Now().Add(-200*time.Hour))
	}
	won := instantly.MeetingBooked
	f.sb.UpdateInstantlyLead(fresh, func(l *sandbox.InstantlyLead) {
		l.EmailReplyCount, l.TimestampLastReply, l.InterestStatus = 1, time.Now().Add(-time.Hour).UTC().Format(time.RFC3339), &won
	})
	f.sb.UpdateInstantlyLead(stale, func(l *sandbox.InstantlyLead) {
		l.EmailReplyCount, l.TimestampLastReply = 2, time.Now().Add(-100*time.Hour).UTC().Format(time.RFC3339)
	})
	rep := f.run(false)
	if rep.ByKind[MissedReply] != 2 || rep.ByKind[MissedMeeting] != 1 || len(f.published) != 0 {
		t.Fatalf("report %+v, published %d", rep, len(f.published))
	}
	for _, fd := range rep.Findings {
		if fd.Status != StatusOpen || fd.Applied {
			t.Fatalf("a reviewed kind was applied: %+v", fd)
		}
	}
	var freshF, staleF Finding
	for _, fd := range rep.Findings {
		if fd.Kind == MissedReply && fd.Contact == "di@northwind.example" {
			freshF = fd
		}
		if fd.Kind == MissedReply && fd.Contact == "ed@northwind.example" {
			staleF = fd
		}
	}
	if freshF.Proposed == nil || freshF.Proposed.Type != envelope.TypeReplyReceived {
		t.Fatalf("proposed %+v", freshF.Proposed)
	}
	if _, err := f.deps.Queue.Decide(ctx, tenant, staleF.ID, true, "ops@acme", "looks right"); !errors.Is(err, ErrStale) {
		t.Fatalf("a 100h-old reply was approved: %v", err)
	}
	if got, _, _ := f.deps.Queue.Get(ctx, tenant, staleF.ID); got.Status != StatusOpen {
		t.Fatalf("stale finding %s", got.Status)
	}
	got, err := f.deps.Queue.Decide(ctx, tenant, freshF.ID, true, "ops@acme", "the reply is in the inbox")
	if err != nil || got.Status != StatusApproved || got.Event != freshF.Proposed.ID || len(f.published) != 1 || got.Decision.By != "ops@acme" {
		t.Fatalf("decide: %+v %v, published %d", got, err, len(f.published))
	}
	if _, err := f.deps.Queue.Decide(ctx, tenant, freshF.ID, false, "ops@acme", ""); err == nil {
		t.Fatal("a decided finding was decided again")
	}
	// The published reply is in the projection now: no missed reply for it, and the
	// decision stays. No stopper ran here, so the lead that replied is still active at
	// Instantly: an impossible state across systems, open for review.
	rep = f.run(false)
	if rep.ByKind[MissedReply] != 1 {
		t.Fatalf("after approval: %+v", rep.Findings)
	}
	if fd := only(t, rep, ImpossibleState); fd.Provider != "instantly" || fd.Contact != "di@northwind.example" ||
		!strings.Contains(fd.Found, "replied") || !strings.Contains(fd.Repair, "stop the lead at instantly") || fd.Applied {
		t.Fatalf("impossible state %+v", fd)
	}
	open, _ := f.deps.Queue.List(ctx, Filter{Tenant: tenant, Status: StatusOpen})
	approved, _ := f.deps.Queue.List(ctx, Filter{Tenant: tenant, Status: StatusApproved})
	if len(open) != 3 || len(approved) != 1 {
		t.Fatalf("open %d approved %d", len(open), len(approved))
	}
}

func TestDuplicatesReportedNotDeleted(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	email := "fay@northwind.example"
	f.project("instantly", envelope.TypeReplyReceived, email, camp, "em-1", time.Now())
	cid := f.sb.AddContact(email, nil)
	if _, err := f.dir.Record(ctx, tenant, contacts.Seen{Email: email, External: map[string]string{contacts.CRMContactID: "hubspot:" + cid}}); err != nil {
		t.Fatal(err)
	}
	ours := f.sb.AddNoteFor(cid, map[string]string{"exacto_event_id": "ev_0123456789abcdef0123456789abcdef",
		"hs_note_body": "<p><strong>Reply received</strong> via instantly</p><p>Yes, send me the pricing for ten seats &amp; the SLA.</p>" +
			"<p>Exacto event ev_0123456789abcdef0123456789abcdef</p><p><strong>Exacto classification:</strong> interested</p>"})
	copyID := f.sb.AddNoteFor(cid, map[string]string{"hs_note_body": "Fay replied: yes, send me the pricing for ten seats & the SLA."})
	f.sb.AddNoteFor(cid, map[string]string{"hs_note_body": "Called Fay, left a voicemail."})
	rep := f.run(false)
	fd := only(t, rep, DuplicateActivity)
	if fd.Status != StatusOpen || fd.Applied || !strings.Contains(fd.Where, copyID) || !strings.Contains(fd.Found, ours) {
		t.Fatalf("finding %+v", fd)
	}
	if len(f.sb.Notes()) != 3 || len(f.published) != 0 {
		t.Fatalf("%d notes left, %d events published", len(f.sb.Notes()), len(f.published))
	}
	// A second HubSpot contact for the same person, with the e-mail in other case.
	f.sb.AddContact(strings.ToUpper(email), nil)
	rep = f.run(false)
	dc := only(t, rep, DuplicateContact)
	if dc.Provider != "hubspot" || dc.Contact != email || len(f.sb.Contacts()) != 2 {
		t.Fatalf("finding %+v, contacts %d", dc, len(f.sb.Contacts()))
	}
	if rep.New != 1 {
		t.Fatalf("second pass: %d new findings, want 1 (the duplicate contact)", rep.New)
	}
}

func TestImpossibleState(t *testing.T) {
	f := newFixture(t)
	email := "gus@northwind.example"
	now := time.Now()
	f.project("instantly", envelope.TypeLeadUnsubscribed, email, camp, "u-1", now.Add(-time.Hour))
	f.project("instantly", envelope.TypeEmailSent, email, camp, "em-2", now)
	rep := f.run(false)
	if rep.ByKind[ImpossibleState] == 0 {
		t.Fatalf("no impossible state: %+v", rep.Findings)
	}
	for _, fd := range rep.Findings {
		if fd.Kind == ImpossibleState && (!strings.Contains(fd.Found, "after unsubscribed") || fd.Contact != email) {
			t.Fatalf("finding %+v", fd)
		}
	}
}

// A pass reads the contacts projection and the contact directory in one go each (a
// consumer of its own), not a Get or more per contact and per lead: a Get of a key whose block the
// server has not cached loads the whole block, and a pass of Gets over every contact
// held most of both buckets' blocks in memory at once (docs/performance.md, Memory).
func TestPassReadsTheContactsInOneGo(t *testing.T) {
	f := newFixture(t)
	const n = 40
	for i := range n {
		email := fmt.Sprintf("lead%d@northwind.example", i)
		id := f.sb.AddInstantlyLead(camp, email)
		f.sb.UpdateInstantlyLead(id, func(l *sandbox.InstantlyLead) {
			l.Status, l.EmailReplyCount, l.TimestampLastReply = sandbox.InstantlyCompleted, 1, time.Now().Add(-time.Hour).Format(time.RFC3339)
		})
		f.project("instantly", envelope.TypeReplyReceived, email, camp, fmt.Sprint("re-", i), time.Now().Add(-time.Hour))
	}
	gets := map[string]int{} // direct gets by stream
	var mu sync.Mutex
	sub, err := f.conn.NC.Subscribe("$JS.API.DIRECT.GET.>", func(m *nats.Msg) {
		mu.Lock()
		gets[strings.Split(m.Subject, ".")[4]]++
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.conn.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	rep := f.run(true)
	if len(rep.Findings) != 0 {
		t.Fatalf("%d findings while the projection agrees with Instantly, the first %+v", len(rep.Findings), rep.Findings[0])
	}
	if err := f.conn.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	sub.Unsubscribe()
	mu.Lock()
	defer mu.Unlock()
	for _, bucket := range []string{stream.ProjectionBucket("contacts", "", 1).Bucket, stream.ContactIDs} {
		t.Logf("%s: %d Gets", bucket, gets["KV_"+bucket])
		if got := gets["KV_"+bucket]; got >= n/4 {
			t.Errorf("a pass over %d contacts, each with a reply, made %d Gets in %s: want them read in one go", n, got, bucket)
		}
	}
}

// unscannable is a bucket whose name leads to no stream: its Gets work, a scan of it
// (a consumer on its stream) fails.
type unscannable struct{ jetstream.KeyValue }

func (unscannable) Bucket() string { return "EXACTO_NO_SUCH_BUCKET" }

// A directory that cannot be copied for the pass is read key by key, with a warning:
// the pass still finds what it would.
func TestPassGoesOnWhenTheDirectoryCannotBeCopied(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	kv, err := f.conn.JS.KeyValue(ctx, stream.ContactIDs)
	if err != nil {
		t.Fatal(err)
	}
	f.deps.Reader.Dir = contacts.New(kvstore.KV{KV: unscannable{kv}, JS: f.conn.JS})
	id := f.sb.AddInstantlyLead(camp, "ana@northwind.example")
	f.project("instantly", envelope.TypeEmailSent, "ana@northwind.example", camp, "em-1", time.Now().Add(-time.Hour))
	f.sb.UpdateInstantlyLead(id, func(l *sandbox.InstantlyLead) { l.Status = sandbox.InstantlyUnsubscribed })
	var logged bytes.Buffer
	rep, err := f.deps.RunTenant(ctx, tenant, f.clients(), slog.New(slog.NewTextHandler(&logged, nil)), true)
	if err != nil || rep.Err() != nil {
		t.Fatalf("pass: %v %v", err, rep.Err())
	}
	only(t, rep, MissedUnsubscribe)
	if !strings.Contains(logged.String(), "read key by key") || !strings.Contains(logged.String(), "EXACTO_NO_SUCH_BUCKET") {
		t.Errorf("no warning naming the directory's error: %s", logged.String())
	}
}
