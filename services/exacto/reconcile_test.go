package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/contacts"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/platform/sandbox"
	"exacto.dev/pkg/projection"
	"exacto.dev/pkg/reconcile"
)

// `exacto reconcile --dry-run` prints the lost unsubscribe and what it would publish,
// and writes nothing; without --dry-run it applies and records it.
func TestReconcileCommand(t *testing.T) {
	ctx := context.Background()
	conn := brokertest.Start(t, "")
	sb := sandbox.Start(t)
	const camp = "3c6e0b8a-9c0b-4f1e-8b2a-7d5e4f3a2b1c"
	lead := sb.AddInstantlyLead(camp, "ana@northwind.example")
	stores, err := projection.Open(ctx, conn.JS, "", 1)
	if err != nil {
		t.Fatal(err)
	}
	dir, _ := contacts.Open(ctx, conn.JS)
	sent := envelope.Envelope{ID: envelope.ID("acme", "instantly", "em-1"), Type: envelope.TypeEmailSent, Time: time.Now(), Tenant: "acme",
		Provider: "instantly", Data: envelope.Data{Contact: &envelope.Contact{Email: "ana@northwind.example"}, Campaign: &envelope.Campaign{ID: camp}}}
	if _, err := projection.Apply(ctx, stores, dir, sent); err != nil {
		t.Fatal(err)
	}
	sb.UpdateInstantlyLead(lead, func(l *sandbox.InstantlyLead) { l.Status = sandbox.InstantlyUnsubscribed })
	cfg := filepath.Join(t.TempDir(), "exacto.yaml")
	os.WriteFile(cfg, []byte("tenants:\n  - id: acme\n    endpoints:\n      - {id: instantly, provider: instantly, path_token: tok-instantly-0123456789}\n"), 0o600)
	t.Setenv("EXACTO_SANDBOX_URL", sb.URL)

	run := func(args ...string) string {
		t.Helper()
		cmd := reconcileCmd()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(append([]string{"--config", cfg, "--nats-url", conn.Embedded.ClientURL()}, args...))
		if err := cmd.ExecuteContext(ctx); err != nil {
			t.Fatalf("reconcile %v: %v\n%s", args, err, out.String())
		}
		return out.String()
	}
	out := run("--dry-run")
	if !strings.Contains(out, "missed_unsubscribe") || !strings.Contains(out, "would publish lead.unsubscribed") || !strings.Contains(out, lead) {
		t.Fatalf("dry run printed:\n%s", out)
	}
	q, _ := reconcile.OpenQueue(ctx, conn.JS)
	if all, _ := q.List(ctx, reconcile.Filter{}); len(all) != 0 {
		t.Fatalf("the dry run wrote %d findings", len(all))
	}
	out = run("--tenant", "acme")
	if !strings.Contains(out, "applied: event ev_") || !strings.Contains(out, "missed_unsubscribe       1") {
		t.Fatalf("pass printed:\n%s", out)
	}
	if all, _ := q.List(ctx, reconcile.Filter{Tenant: "acme"}); len(all) != 1 || !all[0].Applied {
		t.Fatalf("diff queue %+v", all)
	}
}
