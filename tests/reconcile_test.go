package tests

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/platform/sandbox"
	"exacto.dev/pkg/reconcile"
	"exacto.dev/pkg/stream"
	"exacto.dev/pkg/suppression"
	crmwriter "exacto.dev/services/crmwriter/handler"
	projector "exacto.dev/services/projector/handler"
	stopper "exacto.dev/services/stopper/handler"
	suppressor "exacto.dev/services/suppressor/handler"
)

var (
	reconcileMetricsOnce sync.Once
	reconcileMetrics     *sdkmetric.ManualReader
)

// reconcileFindings is exacto_reconcile_findings of kind in tenant acme from instantly.
func reconcileFindings(t *testing.T, kind string) int64 {
	t.Helper()
	return reconcileFindingsBy(t, kind, "instantly")
}

// reconcileFindingsBy is exacto_reconcile_findings of kind in tenant acme from provider.
func reconcileFindingsBy(t *testing.T, kind, provider string) int64 {
	t.Helper()
	reconcileMetricsOnce.Do(func() {
		reconcileMetrics = sdkmetric.NewManualReader()
		otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reconcileMetrics)))
	})
	var rm metricdata.ResourceMetrics
	if err := reconcileMetrics.Collect(context.Background(), &rm); err != nil {
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
					if k.AsString() == kind && tn.AsString() == "acme" && pr.AsString() == provider {
						n += dp.Value
					}
				}
			}
		}
	}
	return n
}

// reconcilePass runs one pass of tenant acme against the pipeline's NATS and sandbox.
func (p *pipeline) reconcilePass(dryRun bool) reconcile.Report {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	deps, err := reconcile.Open(ctx, p.conn.JS, p.env.Config)
	if err != nil {
		p.t.Fatal(err)
	}
	clients, _ := p.env.Platforms.For("acme")
	rep, err := deps.RunTenant(ctx, "acme", clients, p.env.Log, dryRun)
	if err != nil {
		p.t.Fatal(err)
	}
	if err := rep.Err(); err != nil {
		p.t.Fatal(err)
	}
	return rep
}

func (p *pipeline) diffQueue() []reconcile.Finding {
	p.t.Helper()
	q, err := reconcile.OpenQueue(context.Background(), p.conn.JS)
	if err != nil {
		p.t.Fatal(err)
	}
	all, err := q.List(context.Background(), reconcile.Filter{Tenant: "acme"})
	if err != nil {
		p.t.Fatal(err)
	}
	return all
}

// The case: a contact unsubscribed at the platform while our webhook was lost
// is found by reconciliation, suppressed and stopped at once, and its finding is in the
// diff queue. A dry run before changes nothing; a second pass adds nothing.
func TestReconcileLostUnsubscribe(t *testing.T) {
	t.Parallel()
	reconcileFindings(t, reconcile.MissedUnsubscribe) // the reader is in place before any count
	p := startPipeline(t)
	p.start(stream.Projector, projector.Run)
	p.start(stream.Stopper, stopper.Run)
	p.start(stream.Suppressor, suppressor.Run)
	const email = "lena@northwind.example"
	leadID := p.sb.AddInstantlyLead(campaign, email)
	sent := p.post(instantlyEvent("email_sent", email, campaign, "em-1", "", time.Now().Add(-time.Hour)))[0]
	p.completedIn(30*time.Second, sent, stream.Projector)
	if rep := p.reconcilePass(false); len(rep.Findings) != 0 {
		t.Fatalf("findings while the platform and Exacto agree: %+v", rep.Findings)
	}

	// The lead unsubscribes through Instantly's link; the webhook never arrives.
	p.sb.UpdateInstantlyLead(leadID, func(l *sandbox.InstantlyLead) { l.Status = sandbox.InstantlyUnsubscribed })
	kv, _ := p.conn.JS.KeyValue(context.Background(), stream.Suppression)
	list := suppression.New(kv)

	events := brokertest.Count(t, p.conn, stream.Events)
	counted := reconcileFindings(t, reconcile.MissedUnsubscribe)
	dry := p.reconcilePass(true)
	if dry.ByKind[reconcile.MissedUnsubscribe] != 1 || !strings.HasPrefix(dry.Findings[0].Would(), "would publish lead.unsubscribed") {
		t.Fatalf("dry run: %+v", dry.Findings)
	}
	time.Sleep(300 * time.Millisecond)
	if n := brokertest.Count(t, p.conn, stream.Events); n != events || len(p.diffQueue()) != 0 {
		t.Fatalf("the dry run changed something: %d events (was %d), %d findings", n, events, len(p.diffQueue()))
	}

	rep := p.reconcilePass(false)
	if rep.ByKind[reconcile.MissedUnsubscribe] != 1 || rep.Applied != 1 {
		t.Fatalf("pass: %+v", rep)
	}
	fd := rep.Findings[0]
	queued := p.diffQueue()
	if len(queued) != 1 || queued[0].ID != fd.ID || !queued[0].Applied || queued[0].Status != reconcile.StatusApplied ||
		queued[0].Event == "" || !strings.Contains(queued[0].Where, leadID) {
		t.Fatalf("diff queue: %+v", queued)
	}
	// The suppressor and the stopper acted on the published event.
	p.completedIn(30*time.Second, fd.Event, stream.Suppressor, stream.Stopper, stream.Projector)
	if e, ok, err := list.Lookup(context.Background(), "acme", "email:"+email); err != nil || !ok || e.EventID != fd.Event {
		t.Fatalf("suppression %+v %v %v", e, ok, err)
	}
	if l, _ := p.sb.InstantlyLeadState(leadID); l.Status == sandbox.InstantlyActive {
		t.Fatalf("the lead is still active: %+v", l)
	}
	if s := p.derived("sequence.stopped", fd.Event); len(s) != 1 {
		t.Fatalf("%d sequence.stopped for the reconciled unsubscribe", len(s))
	}
	eventually(t, 10*time.Second, "the suppressor told Instantly", func() bool { return slices.Contains(p.sb.Blocklist(), email) })
	if n := reconcileFindings(t, reconcile.MissedUnsubscribe) - counted; n != 1 {
		t.Fatalf("exacto_reconcile_findings counted %d", n)
	}

	// A second pass: nothing new found, nothing published.
	time.Sleep(300 * time.Millisecond)
	events = brokertest.Count(t, p.conn, stream.Events)
	again := p.reconcilePass(false)
	if again.New != 0 || again.Applied != 0 || len(again.Findings) != 0 {
		t.Fatalf("second pass: %+v", again)
	}
	time.Sleep(300 * time.Millisecond)
	if n := brokertest.Count(t, p.conn, stream.Events); n != events || len(p.diffQueue()) != 1 {
		t.Fatalf("second pass: %d events (was %d), %d findings", n, events, len(p.diffQueue()))
	}
	if n := reconcileFindings(t, reconcile.MissedUnsubscribe) - counted; n != 1 {
		t.Fatalf("exacto_reconcile_findings counted %d after two passes", n)
	}
}

// The case: a duplicate CRM activity made outside Exacto is reported, not
// silently deleted.
func TestReconcileDuplicateActivity(t *testing.T) {
	t.Parallel()
	p := startPipeline(t)
	p.start(stream.Projector, projector.Run)
	p.start(stream.CRMWriter, crmwriter.Run)
	const text = "Can you send pricing for the team plan? We are twelve people."
	id := p.post(instantlyEvent("reply_received", "omar@contoso.example", campaign, "em-7", text, time.Now()))[0]
	p.completedIn(30*time.Second, id, stream.CRMWriter, stream.Projector)
	notes := p.notesFor(id)
	if len(notes) != 1 || len(notes[0].Associations) != 1 {
		t.Fatalf("notes %+v", notes)
	}
	contactID := notes[0].Associations[0].ToID
	// The pass reads the contact's HubSpot id from the projection: wait until the
	// projector has folded the link the crmwriter put on the stream.
	var linked []map[string]any
	eventually(t, 10*time.Second, "the crmwriter's contact.identified", func() bool {
		linked = p.derived("contact.identified", id)
		return len(linked) == 1
	})
	p.completedIn(10*time.Second, linked[0]["id"].(string), stream.Projector)
	// Someone pastes the reply into HubSpot by hand: same text, no exacto_event_id.
	copyID := p.sb.AddNoteFor(contactID, map[string]string{"hs_note_body": "<p>Omar wrote: " + text + "</p>"})

	rep := p.reconcilePass(false)
	var dups []reconcile.Finding
	for _, f := range rep.Findings {
		if f.Kind == reconcile.DuplicateActivity {
			dups = append(dups, f)
		}
	}
	if len(dups) != 1 || !strings.Contains(dups[0].Where, copyID) || !strings.Contains(dups[0].Found, id) ||
		dups[0].Status != reconcile.StatusOpen || dups[0].Applied || !strings.Contains(dups[0].Repair, "review") {
		t.Fatalf("findings %+v", rep.Findings)
	}
	if len(p.sb.Notes()) != 2 || len(p.notesFor(id)) != 1 {
		t.Fatalf("%d notes in HubSpot, want both kept", len(p.sb.Notes()))
	}
	queued := p.diffQueue()
	if !slices.ContainsFunc(queued, func(f reconcile.Finding) bool { return f.ID == dups[0].ID && f.Status == reconcile.StatusOpen }) {
		t.Fatalf("diff queue %+v", queued)
	}
	if again := p.reconcilePass(false); again.New != 0 || len(p.diffQueue()) != len(queued) {
		t.Fatalf("second pass: %+v", again)
	}
}

// Every webhook of two campaigns was lost: an Instantly campaign and a Smartlead one
// (the tenant has no Smartlead endpoint at all). Both are active at their platforms:
// each is reported as missed_campaign for review, and their leads are compared like any
// campaign's. The Smartlead lead is BLOCKED: an opt-out, so it is suppressed and stopped
// at once (Smartlead's global unsubscribe) through the published lead.unsubscribed. A
// second pass adds nothing.
func TestReconcileMissedCampaignAndBlockedLead(t *testing.T) {
	t.Parallel()
	reconcileFindings(t, reconcile.MissedCampaign)
	p := startPipeline(t)
	p.start(stream.Projector, projector.Run)
	p.start(stream.Stopper, stopper.Run)
	p.start(stream.Suppressor, suppressor.Run)
	const lostCampaign = "5d2c1b0a-7e6f-4a3b-9c8d-1e2f3a4b5c6d"
	p.sb.AddInstantlyCampaign(lostCampaign, "Lost webhooks", 1)
	p.sb.AddInstantlyLead(lostCampaign, "nia@northwind.example")
	p.sb.AddInstantlyLead(lostCampaign, "oli@northwind.example")
	p.sb.AddSmartleadCampaign(8181, "Smartlead Q1", "ACTIVE")
	const email = "pam@contoso.example"
	lid := p.sb.AddSmartleadLead(8181, email)
	p.sb.UpdateSmartleadLead(8181, lid, func(l *sandbox.SmartleadLead) { l.Status = "BLOCKED" })
	counted := map[string]int64{}
	for _, k := range []string{"instantly", "smartlead"} {
		counted[k] = reconcileFindingsBy(t, reconcile.MissedCampaign, k)
	}
	unsubs := reconcileFindingsBy(t, reconcile.MissedUnsubscribe, "smartlead")

	rep := p.reconcilePass(false)
	if rep.ByKind[reconcile.MissedCampaign] != 2 || rep.ByKind[reconcile.MissedUnsubscribe] != 1 || len(rep.Findings) != 3 || rep.Applied != 1 {
		t.Fatalf("pass: %+v", rep)
	}
	var unsub reconcile.Finding
	for _, f := range rep.Findings {
		switch f.Kind {
		case reconcile.MissedCampaign:
			n := map[string]string{"instantly": "with 2 lead(s)", "smartlead": "with 1 lead(s)"}[f.Provider]
			if f.Applied || f.Status != reconcile.StatusOpen || n == "" || !strings.Contains(f.Found, n) {
				t.Fatalf("missed campaign %+v", f)
			}
		case reconcile.MissedUnsubscribe:
			unsub = f
		}
	}
	if unsub.Provider != "smartlead" || !unsub.Applied || unsub.Contact != email || !strings.Contains(unsub.Found, "unsubscribed") {
		t.Fatalf("missed unsubscribe %+v", unsub)
	}
	queued := p.diffQueue()
	if len(queued) != 3 {
		t.Fatalf("diff queue %+v", queued)
	}
	for _, f := range queued {
		if f.Repair == "" || f.Where == "" {
			t.Fatalf("queued without its repair: %+v", f)
		}
	}
	// Suppressed and stopped at once.
	p.completedIn(30*time.Second, unsub.Event, stream.Suppressor, stream.Stopper, stream.Projector)
	kv, _ := p.conn.JS.KeyValue(context.Background(), stream.Suppression)
	if e, ok, err := suppression.New(kv).Lookup(context.Background(), "acme", "email:"+email); err != nil || !ok || e.EventID != unsub.Event {
		t.Fatalf("suppression %+v %v %v", e, ok, err)
	}
	if !p.sb.SmartleadUnsubscribedAll(lid) {
		t.Fatal("the stopper did not unsubscribe the blocked lead at Smartlead")
	}
	for k, before := range counted {
		if n := reconcileFindingsBy(t, reconcile.MissedCampaign, k) - before; n != 1 {
			t.Fatalf("missed_campaign %s counted %d", k, n)
		}
	}
	if n := reconcileFindingsBy(t, reconcile.MissedUnsubscribe, "smartlead") - unsubs; n != 1 {
		t.Fatalf("missed_unsubscribe smartlead counted %d", n)
	}

	// A second pass: the Smartlead campaign is known now (the repair named it), the
	// Instantly one is still missed; nothing new found, published or counted.
	events := brokertest.Count(t, p.conn, stream.Events)
	again := p.reconcilePass(false)
	if again.New != 0 || again.Applied != 0 || again.ByKind[reconcile.MissedCampaign] != 1 {
		t.Fatalf("second pass: %+v", again)
	}
	if n := brokertest.Count(t, p.conn, stream.Events); n != events || len(p.diffQueue()) != 3 {
		t.Fatalf("second pass: %d events (was %d), %d findings", n, events, len(p.diffQueue()))
	}
	if n := reconcileFindingsBy(t, reconcile.MissedCampaign, "instantly") - counted["instantly"]; n != 1 {
		t.Fatalf("missed_campaign counted %d after two passes", n)
	}
}
