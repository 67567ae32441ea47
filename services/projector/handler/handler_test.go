package handler

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/consumer"
	"exacto.dev/pkg/contacts"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/lifecycle"
	"exacto.dev/pkg/platform/accounts"
	"exacto.dev/pkg/platform/hubspot"
	"exacto.dev/pkg/platform/instantly"
	"exacto.dev/pkg/platform/sandbox"
	"exacto.dev/pkg/platform/smartlead"
	"exacto.dev/pkg/projection"
)

type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
func (l *logBuffer) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

func event(id, typ string, at time.Time) envelope.Envelope {
	return envelope.Envelope{SpecVersion: "1.0", ID: id, Type: typ, Tenant: "acme", Provider: "instantly", Endpoint: "ep",
		Time: at, ReceivedAt: at, Data: envelope.Data{ProviderType: typ, Contact: &envelope.Contact{Email: "ana@northwind.example"},
			Campaign: &envelope.Campaign{ID: "camp-1"}}}
}

// A send and an unsubscribe at the same second with no version cannot be ordered from
// the events: the projector asks Instantly and logs what it found beside the pair. A
// send timed after the unsubscribe is a discrepancy, logged and kept in the view.
func TestUndecidedAsksTheSourceAndDiscrepanciesAreLogged(t *testing.T) {
	ctx := context.Background()
	sb := sandbox.Start(t)
	sb.AddInstantlyLead("camp-1", "ana@northwind.example")
	f := newFixture(t, func(string) (accounts.Clients, bool) {
		return accounts.Clients{Instantly: instantly.New(instantly.Config{BaseURL: sb.URL, APIKey: sandbox.InstantlyKey})}, true
	})
	h, logs, dir, stores := f.h, f.logs, f.dir, f.stores
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for _, env := range []envelope.Envelope{event("ev_unsub", envelope.TypeLeadUnsubscribed, at), event("ev_sent", envelope.TypeEmailSent, at)} {
		if err := h(ctx, consumer.Event{Envelope: env}); err != nil {
			t.Fatal(err)
		}
	}
	if n := sb.Requests(sandbox.RouteInstantlyLeadList); n != 1 {
		t.Fatalf("%d lookups at Instantly for one undecided pair", n)
	}
	if l := logs.String(); !strings.Contains(l, "asking the source") || !strings.Contains(l, `instantly: \"campaign camp-1 status`) {
		t.Fatalf("log:\n%s", l)
	}
	// A follow-up timed after the opt-out: a discrepancy, logged, in the view.
	if err := h(ctx, consumer.Event{Envelope: event("ev_follow_up", envelope.TypeEmailSent, at.Add(time.Hour))}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), `"msg":"lifecycle discrepancy"`) || !strings.Contains(logs.String(), "ev_follow_up") {
		t.Fatalf("no discrepancy logged:\n%s", logs.String())
	}
	// The crmwriter recorded the contact's HubSpot ids in the directory: the read API
	// shows them beside the ids the stream named.
	if _, err := dir.Record(ctx, "acme", contacts.Seen{Email: "ana@northwind.example", External: map[string]string{contacts.CRMContactID: "hubspot:501"}}); err != nil {
		t.Fatal(err)
	}
	c, ok, err := (projection.Reader{Stores: stores, Dir: dir}).ContactByEmail(ctx, "acme", "ana@northwind.example")
	if err != nil || !ok {
		t.Fatalf("contact: %v %v", ok, err)
	}
	if ids := c.External[contacts.CRMContactID]; len(ids) != 1 || ids[0] != "hubspot:501" || len(c.External[contacts.CampaignID]) != 1 {
		t.Fatalf("external ids %v", c.External)
	}
	if v := c.InCampaign("camp-1"); v.Status != lifecycle.Unsubscribed || len(v.Discrepancies) != 1 || v.Discrepancies[0].Event != "ev_follow_up" {
		t.Fatalf("view %+v", v)
	}
	// The same events again change nothing and ask nobody.
	for _, id := range []string{"ev_unsub", "ev_sent"} {
		typ := envelope.TypeEmailSent
		if id == "ev_unsub" {
			typ = envelope.TypeLeadUnsubscribed
		}
		if err := h(ctx, consumer.Event{Envelope: event(id, typ, at)}); err != nil {
			t.Fatal(err)
		}
	}
	if n := sb.Requests(sandbox.RouteInstantlyLeadList); n != 1 {
		t.Fatalf("a redelivery asked the source again (%d lookups)", n)
	}
}

// An event that leaves two pairs undecided (a send at the same second as an unsubscribe
// and a bounce) asks the source once, counts one answer, and logs both pairs with it.
func TestOneEventTwoUndecidedPairsOneQuestion(t *testing.T) {
	metrics()
	ctx := context.Background()
	sb := sandbox.Start(t)
	sb.AddInstantlyLead("camp-1", "ana@northwind.example")
	f := newFixture(t, func(string) (accounts.Clients, bool) {
		return accounts.Clients{Instantly: instantly.New(instantly.Config{BaseURL: sb.URL, APIKey: sandbox.InstantlyKey})}, true
	})
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for _, env := range []envelope.Envelope{event("ev_unsub", envelope.TypeLeadUnsubscribed, at), event("ev_bounce", envelope.TypeEmailBounced, at)} {
		if err := f.h(ctx, consumer.Event{Envelope: env}); err != nil {
			t.Fatal(err)
		}
	}
	requests := sb.Requests(sandbox.RouteInstantlyLeadList)
	answers := counted(t, "exacto_projector_source_answers", "platform")["instantly"]
	pairs := counted(t, "exacto_projector_undecided", "provider")["instantly"]
	logged := strings.Count(f.logs.String(), "asking the source")
	if err := f.h(ctx, consumer.Event{Envelope: event("ev_sent", envelope.TypeEmailSent, at)}); err != nil {
		t.Fatal(err)
	}
	if d := counted(t, "exacto_projector_undecided", "provider")["instantly"] - pairs; d != 2 {
		t.Fatalf("the send left %d pairs undecided, want 2 (unsubscribe, bounce):\n%s", d, f.logs.String())
	}
	if n := sb.Requests(sandbox.RouteInstantlyLeadList) - requests; n != 1 {
		t.Fatalf("%d lookups at Instantly for one event with two undecided pairs, want 1", n)
	}
	if d := counted(t, "exacto_projector_source_answers", "platform")["instantly"] - answers; d != 1 {
		t.Fatalf("exacto_projector_source_answers{instantly} went up by %d, want 1", d)
	}
	l := f.logs.String()
	if n := strings.Count(l, "asking the source") - logged; n != 2 || strings.Count(l, `instantly: \"campaign camp-1 status`) < 2 {
		t.Fatalf("%d pairs logged with the answer, want 2:\n%s", n, l)
	}
}

// metrics installs one reader for the process: the counters bind to the first global
// meter provider, so a second one (go test -count=2) would see nothing.
var metrics = sync.OnceValue(func() *sdkmetric.ManualReader {
	reader := sdkmetric.NewManualReader()
	otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	return reader
})

// counted sums counter name by the values of attrs, joined with "/".
func counted(t *testing.T, name string, attrs ...string) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := metrics().Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok || m.Name != name {
				continue
			}
			for _, dp := range sum.DataPoints {
				var key []string
				for _, a := range attrs {
					v, _ := dp.Attributes.Value(attribute.Key(a))
					key = append(key, v.AsString())
				}
				out[strings.Join(key, "/")] += dp.Value
			}
		}
	}
	return out
}

// fixture is a projector's handler over fresh projections, its log in logs.
type fixture struct {
	h      consumer.Handler
	logs   *logBuffer
	dir    *contacts.Directory
	stores projection.Stores
}

func newFixture(t *testing.T, platforms func(string) (accounts.Clients, bool)) fixture {
	t.Helper()
	ctx := context.Background()
	conn := brokertest.Start(t, "")
	f := fixture{logs: &logBuffer{}}
	var err error
	if f.dir, err = contacts.Open(ctx, conn.JS); err != nil {
		t.Fatal(err)
	}
	if f.stores, err = projection.Open(ctx, conn.JS, "", 1); err != nil {
		t.Fatal(err)
	}
	f.h = New(Options{Stores: f.stores, Dir: f.dir, Log: slog.New(slog.NewJSONHandler(f.logs, nil)), Platforms: platforms})
	return f
}

// Undecided pairs from Smartlead ask Smartlead, from HubSpot ask HubSpot (by the
// contact's HubSpot id, for its lifecycle stage, lead status and the property the
// events changed); each answer is logged and counted by platform and answer: found,
// not found, the platform failing, and a provider no source is asked for.
func TestUndecidedAsksSmartleadAndHubSpot(t *testing.T) {
	metrics()
	ctx := context.Background()
	sb := sandbox.Start(t)
	slID := sb.AddSmartleadLead(9181, "ana@northwind.example")
	hsID := sb.AddContact("ana@northwind.example", map[string]string{"lifecyclestage": "opportunity", "hs_lead_status": "OPEN"})
	hs := hubspot.New(hubspot.Config{BaseURL: sb.URL, Token: sandbox.HubSpotToken})
	// HubSpot keeps every contact's id as its hs_object_id property.
	if _, err := hs.UpdateContact(ctx, hsID, map[string]string{"hs_object_id": hsID}); err != nil {
		t.Fatal(err)
	}
	clients := func(string) (accounts.Clients, bool) {
		return accounts.Clients{Smartlead: smartlead.New(smartlead.Config{BaseURL: sb.URL, APIKey: sandbox.SmartleadKey}), HubSpot: hs}, true
	}
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	smartleadPair := func(email string) []envelope.Envelope {
		var out []envelope.Envelope
		for _, typ := range []string{envelope.TypeLeadUnsubscribed, envelope.TypeEmailSent} {
			env := event("ev_sl_"+typ+email, typ, at)
			env.Provider, env.Data.Contact.Email, env.Data.Campaign.ID = "smartlead", email, "9181"
			out = append(out, env)
		}
		return out
	}
	hubspotPair := func(id string) []envelope.Envelope {
		var out []envelope.Envelope
		for _, stage := range []string{"lead", "opportunity"} {
			env := event("ev_hs_"+stage+id, envelope.TypeContactUpdated, at)
			env.Provider, env.Data.Contact, env.Data.Campaign = "hubspot", &envelope.Contact{ExternalID: id}, nil
			env.Data.Property = &envelope.Property{Name: "lifecyclestage", Value: stage}
			out = append(out, env)
		}
		return out
	}
	phoneOnly := func(evs []envelope.Envelope) []envelope.Envelope {
		for i := range evs {
			evs[i].Data.Contact = &envelope.Contact{Phone: "+1 555 010 0000"}
		}
		return evs
	}
	stripePair := func() []envelope.Envelope {
		out := smartleadPair("bo@northwind.example")
		for i := range out {
			out[i].Provider, out[i].ID = "stripe", out[i].ID+"_stripe"
		}
		return out
	}
	for _, tc := range []struct {
		name      string
		events    []envelope.Envelope
		fault     string // a sandbox route answering 500
		route     string
		asked     int
		platform  string
		answer    string
		logged    string
		platforms func(string) (accounts.Clients, bool)
	}{
		{"smartlead found", smartleadPair("ana@northwind.example"), "", sandbox.RouteSmartleadLeadByEmail, 1, "smartlead", Found,
			fmt.Sprintf(`"source":"smartlead: lead %d unsubscribed=false"`, slID), clients},
		{"smartlead not a lead", smartleadPair("cy@northwind.example"), "", sandbox.RouteSmartleadLeadByEmail, 1, "smartlead", NotFound,
			`"source":"smartlead: not a lead"`, clients},
		{"hubspot found", hubspotPair(hsID), "", sandbox.RouteHubSpotContactSearch, 1, "hubspot", Found,
			`"source":"hubspot: contact ` + hsID + ` lifecyclestage=\"opportunity\" hs_lead_status=\"OPEN\""`, clients},
		{"hubspot no contact", hubspotPair("999999"), "", sandbox.RouteHubSpotContactSearch, 1, "hubspot", NotFound,
			`"source":"hubspot: no contact"`, clients},
		{"hubspot failing", hubspotPair("888888"), sandbox.RouteHubSpotContactSearch, sandbox.RouteHubSpotContactSearch, 1, "hubspot", Failed,
			`"source":"hubspot: `, clients},
		{"no source for the provider", stripePair(), "", sandbox.RouteSmartleadLeadByEmail, 0, "stripe", NotAsked,
			`"source":"not asked: stripe is not a source the projector asks"`, clients},
		{"smartlead without an e-mail", phoneOnly(smartleadPair("")), "", sandbox.RouteSmartleadLeadByEmail, 0, "smartlead", NotAsked,
			`"source":"not asked: the event names the contact by nothing smartlead can find it by"`, clients},
		{"no platforms", smartleadPair("di@northwind.example"), "", sandbox.RouteSmartleadLeadByEmail, 0, "smartlead", NotAsked,
			`"source":"not asked: tenant has no platforms"`, func(string) (accounts.Clients, bool) { return accounts.Clients{}, false }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.platforms)
			h, logs := f.h, f.logs
			if tc.fault != "" {
				sb.SetFault(tc.fault, sandbox.Fault{Status: 500, Count: 100})
				defer sb.ClearFault(tc.fault)
			}
			answers := counted(t, "exacto_projector_source_answers", "platform", "answer")
			pairs := counted(t, "exacto_projector_undecided", "provider")
			requests := sb.Requests(tc.route)
			for _, env := range tc.events {
				if err := h(ctx, consumer.Event{Envelope: env}); err != nil {
					t.Fatal(err)
				}
			}
			if n := sb.Requests(tc.route) - requests; tc.fault == "" && n != tc.asked {
				t.Fatalf("%d requests to %s, want %d", n, tc.route, tc.asked)
			}
			if l := logs.String(); !strings.Contains(l, "asking the source") || !strings.Contains(l, tc.logged) || !strings.Contains(l, `"answer":"`+tc.answer+`"`) {
				t.Fatalf("want %s in the log:\n%s", tc.logged, l)
			}
			key := tc.platform + "/" + tc.answer
			if d := counted(t, "exacto_projector_source_answers", "platform", "answer")[key] - answers[key]; d != 1 {
				t.Fatalf("exacto_projector_source_answers{%s} went up by %d, want 1", key, d)
			}
			if d := counted(t, "exacto_projector_undecided", "provider")[tc.events[0].Provider] - pairs[tc.events[0].Provider]; d != 1 {
				t.Fatalf("exacto_projector_undecided went up by %d, want 1", d)
			}
		})
	}
}

// A transition the table forbids is counted by rule.
func TestDiscrepanciesAreCounted(t *testing.T) {
	metrics()
	ctx := context.Background()
	f := newFixture(t, nil)
	h, logs := f.h, f.logs
	before := counted(t, "exacto_projector_discrepancies", "tenant", "type")
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for _, env := range []envelope.Envelope{event("ev_unsub", envelope.TypeLeadUnsubscribed, at),
		event("ev_follow_up", envelope.TypeEmailSent, at.Add(time.Hour)), event("ev_follow_up_2", envelope.TypeEmailSent, at.Add(2*time.Hour))} {
		if err := h(ctx, consumer.Event{Envelope: env}); err != nil {
			t.Fatal(err)
		}
	}
	// A redelivery reveals nothing new: not counted again.
	if err := h(ctx, consumer.Event{Envelope: event("ev_follow_up", envelope.TypeEmailSent, at.Add(time.Hour))}); err != nil {
		t.Fatal(err)
	}
	if d := counted(t, "exacto_projector_discrepancies", "tenant", "type")["acme/email.sent"] - before["acme/email.sent"]; d != 2 {
		t.Fatalf("exacto_projector_discrepancies{acme, email.sent} went up by %d, want 2\n%s", d, logs.String())
	}
}
