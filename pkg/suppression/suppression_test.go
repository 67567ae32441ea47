package suppression

import (
	"context"
	"testing"
	"time"

	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/stream"
)

func TestFirstReasonStaysAndTenantsAreApart(t *testing.T) {
	ctx := context.Background()
	conn := brokertest.Start(t, "")
	kv, err := conn.JS.KeyValue(ctx, stream.Suppression)
	if err != nil {
		t.Fatal(err)
	}
	l := New(kv)
	first := Entry{Contact: "email:ana@example.com", Reason: "unsubscribed", EventID: "ev_1", Since: time.Now().UTC()}
	if added, err := l.Add(ctx, "acme", first); err != nil || !added {
		t.Fatalf("add: %v %v", added, err)
	}
	if added, err := l.Add(ctx, "acme", Entry{Contact: first.Contact, Reason: "bounced", EventID: "ev_2"}); err != nil || added {
		t.Fatalf("second add: %v %v", added, err)
	}
	e, ok, err := l.Lookup(ctx, "acme", first.Contact)
	if err != nil || !ok || e.Reason != "unsubscribed" || e.EventID != "ev_1" {
		t.Fatalf("lookup: %+v %v %v", e, ok, err)
	}
	if _, ok, _ := l.Lookup(ctx, "globex", first.Contact); ok {
		t.Fatal("a suppression leaked to another tenant")
	}
	if _, err := l.Add(ctx, "acme", Entry{Reason: "bounced"}); err == nil {
		t.Fatal("added an entry without a contact")
	}
}
