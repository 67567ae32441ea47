package handler

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/broker"
	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/config"
	"exacto.dev/pkg/contacts"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/platform/accounts"
	"exacto.dev/pkg/platform/sandbox"
	"exacto.dev/pkg/projection"
	"exacto.dev/pkg/reconcile"
	"exacto.dev/pkg/service"
	"exacto.dev/pkg/stream"
)

// reconciled is a reconciler for tenant acme (reconcile.every 1m) and tenant quiet
// (reconcile off), each with one lead the sandbox holds unsubscribed and the
// projection does not: a pass for a tenant leaves one finding in the queue.
type reconciled struct {
	conn *broker.Conn
	env  *service.Env
	q    *reconcile.Queue
}

func newReconciled(t *testing.T) reconciled {
	ctx := context.Background()
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
	q, err := reconcile.OpenQueue(ctx, conn.JS)
	if err != nil {
		t.Fatal(err)
	}
	FirstDelay = 50 * time.Millisecond
	env := &service.Env{Config: cfg, Conn: conn, Log: slog.New(slog.DiscardHandler), Platforms: accounts.New(cfg, sb.URL, accounts.Pacing{})}
	return reconciled{conn, env, q}
}

// run starts the schedule until the test ends.
func (r reconciled) run(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	up := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- Run(ctx, r.env, func() { close(up) }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	select {
	case <-up:
	case <-time.After(10 * time.Second):
		t.Fatal("not up")
	}
}

// passes is how many findings tenant has in the queue (one per pass here).
func (r reconciled) passes(t *testing.T, tenant string) int {
	found, err := r.q.List(context.Background(), reconcile.Filter{Tenant: tenant})
	if err != nil {
		t.Fatal(err)
	}
	return len(found)
}

// waitPass waits (at most 10 s) for a pass of tenant.
func (r reconciled) waitPass(t *testing.T, tenant string) {
	for deadline := time.Now().Add(10 * time.Second); r.passes(t, tenant) == 0; time.Sleep(25 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no pass for %s", tenant)
		}
	}
}

// The schedule runs a first pass soon after start for a tenant with reconcile.every,
// and none for a tenant with it off.
func TestSchedule(t *testing.T) {
	r := newReconciled(t)
	r.run(t)
	r.waitPass(t, "acme")
	time.Sleep(200 * time.Millisecond)
	if n := r.passes(t, "quiet"); n != 0 {
		t.Fatalf("a tenant with reconcile off was reconciled: %d findings", n)
	}
}

// A scheduled pass waits while the projector has more than QuietBacklog events it has
// not acked, and runs once it has caught up; after MaxQuietWait it runs anyway.
func TestPassWaitsForTheProjector(t *testing.T) {
	defer func(b uint64, e, w time.Duration) { QuietBacklog, QuietEvery, MaxQuietWait = b, e, w }(QuietBacklog, QuietEvery, MaxQuietWait)
	QuietBacklog, QuietEvery = 2, 20*time.Millisecond
	for _, wait := range []time.Duration{time.Minute, 700 * time.Millisecond} {
		MaxQuietWait = wait
		r := newReconciled(t)
		ctx := context.Background()
		projector, err := r.conn.JS.CreateOrUpdateConsumer(ctx, stream.Events, jetstream.ConsumerConfig{Durable: stream.Projector,
			AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: "events.>"})
		if err != nil {
			t.Fatal(err)
		}
		for range 5 { // the projector's backlog: 5 events, more than QuietBacklog
			if _, err := r.conn.JS.Publish(ctx, "events.acme.instantly.email.opened", []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
		}
		began := time.Now()
		r.run(t)
		time.Sleep(400 * time.Millisecond)
		if n := r.passes(t, "acme"); n != 0 {
			t.Fatalf("max wait %v: a pass ran while the projector was 5 events behind", wait)
		}
		if wait < time.Minute { // it runs anyway, not before its wait is up
			r.waitPass(t, "acme")
			if took := time.Since(began); took < wait {
				t.Fatalf("a pass ran %v after start, before the projector caught up or %v passed", took, wait)
			}
			continue
		}
		batch, err := projector.Fetch(5, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		acked := 0
		for m := range batch.Messages() {
			if err := m.DoubleAck(ctx); err != nil {
				t.Fatal(err)
			}
			acked++
		}
		if acked != 5 {
			t.Fatalf("the projector acked %d of 5", acked)
		}
		r.waitPass(t, "acme")
	}
}

// A tenant's retention is applied soon after start (and every RetentionEvery): an
// event stored longer ago than retention.payloads is compacted; the other tenant's,
// with no retention, is kept whole.
func TestRetentionIsScheduled(t *testing.T) {
	r := newReconciled(t)
	r.env.Config.Tenants[0].Retention.Payloads.Duration = 30 * 24 * time.Hour
	ctx := context.Background()
	old := time.Now().Add(-40 * 24 * time.Hour)
	for _, tenant := range []string{"acme", "quiet"} {
		env := envelope.Envelope{SpecVersion: "1.0", ID: envelope.ID(tenant, "instantly", "old"), Type: envelope.TypeReplyReceived, Time: old, ReceivedAt: old,
			Tenant: tenant, Provider: "instantly", Data: envelope.Data{Contact: &envelope.Contact{Email: "ana@northwind.example"}, Message: &envelope.Message{Text: "an old reply"}, Raw: []byte(`{"reply_text":"an old reply"}`)}}
		msg, err := stream.EventMessage(ctx, env)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.conn.JS.PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
	r.run(t)
	st, err := r.conn.JS.Stream(ctx, stream.Events)
	if err != nil {
		t.Fatal(err)
	}
	load := func(tenant string) envelope.Envelope {
		m, err := st.GetLastMsgForSubject(ctx, stream.EventSubject(tenant, "instantly", envelope.TypeReplyReceived))
		if err != nil {
			t.Fatalf("%s's old reply: %v", tenant, err)
		}
		var env envelope.Envelope
		if err := json.Unmarshal(m.Data, &env); err != nil {
			t.Fatal(err)
		}
		return env
	}
	for deadline := time.Now().Add(10 * time.Second); !load("acme").Compacted; time.Sleep(25 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("acme's retention was not applied")
		}
	}
	if env := load("quiet"); env.Compacted || env.Data.Message.Text == "" {
		t.Fatalf("a tenant without retention was compacted: %+v", env.Data)
	}
}
