package handler

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/config"
	"exacto.dev/pkg/contacts"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/platform/accounts"
	"exacto.dev/pkg/platform/sandbox"
	"exacto.dev/pkg/projection"
	"exacto.dev/pkg/reconcile"
	"exacto.dev/pkg/service"
)

// The schedule runs a first pass soon after start for a tenant with reconcile.every,
// and none for a tenant with it off.
func TestSchedule(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	conn := brokertest.Start(t, "")
	sb := sandbox.Start(t)
	cfg, err := config.Parse([]byte(`
tenants:
  - id: acme
    reconcile: {every: 1m}
    endpoints: [{id: instantly, provider: instantly, path_token: tok-instantly-0123456789}]
  - id: quiet
    reconcile: {every: "off"}
    endpoints: [{id: instantly-q, provider: instantly, path_token: tok-instantly-9876543210}]
`), "test", func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	const camp = "3c6e0b8a-9c0b-4f1e-8b2a-7d5e4f3a2b1c"
	stores, _ := projection.Open(ctx, conn.JS, "", 1)
	dir, _ := contacts.Open(ctx, conn.JS)
	for _, tenant := range []string{"acme", "quiet"} {
		env := envelope.Envelope{ID: envelope.ID(tenant, "instantly", "em-1"), Type: envelope.TypeEmailSent, Time: time.Now(), Tenant: tenant,
			Provider: "instantly", Data: envelope.Data{Contact: &envelope.Contact{Email: "ana@northwind.example"}, Campaign: &envelope.Campaign{ID: camp}}}
		if _, err := projection.Apply(ctx, stores, dir, env); err != nil {
			t.Fatal(err)
		}
	}
	lead := sb.AddInstantlyLead(camp, "ana@northwind.example")
	sb.UpdateInstantlyLead(lead, func(l *sandbox.InstantlyLead) { l.Status = sandbox.InstantlyUnsubscribed })

	FirstDelay = 50 * time.Millisecond
	env := &service.Env{Config: cfg, Conn: conn, Log: slog.New(slog.DiscardHandler), Platforms: accounts.New(cfg, sb.URL, accounts.Pacing{})}
	up := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- Run(ctx, env, func() { close(up) }) }()
	select {
	case <-up:
	case <-time.After(10 * time.Second):
		t.Fatal("not up")
	}
	q, _ := reconcile.OpenQueue(ctx, conn.JS)
	deadline := time.Now().Add(10 * time.Second)
	for {
		acme, _ := q.List(ctx, reconcile.Filter{Tenant: "acme"})
		if len(acme) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no pass for acme: %+v", acme)
		}
		time.Sleep(25 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	if quiet, _ := q.List(ctx, reconcile.Filter{Tenant: "quiet"}); len(quiet) != 0 {
		t.Fatalf("a tenant with reconcile off was reconciled: %+v", quiet)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
