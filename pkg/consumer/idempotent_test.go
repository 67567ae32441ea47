package consumer

import (
	"context"
	"errors"
	"testing"

	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/guard"
	"exacto.dev/pkg/retry"
	"exacto.dev/pkg/stream"
)

// An idempotent subscription claims nothing and records only what is not plain
// success: a first success writes no guard record, no contact lease and no outcome,
// and is completed in consumer.Status once the ack floor passes it; a failure is
// recorded, and so is the success after it; a dead letter is recorded as one.
func TestIdempotentSubscriptionRecordsOnlyWhatIsNotPlainSuccess(t *testing.T) {
	conn := brokertest.Start(t, "")
	ctx := context.Background()
	isub := sub
	isub.Durable, isub.Idempotent = "idempotent", true
	ids := publishFor(t, conn, 3, func(int) string { return "lead@example.com" })
	plain, flaky, broken := ids[0], ids[1], ids[2]
	var fx effects
	run(t, conn, func(ctx context.Context, ev Event) error {
		n := fx.add(ev.Envelope.ID)
		switch {
		case ev.Envelope.ID == flaky && n < 2:
			return retry.Transiently("hubspot", errors.New("503"))
		case ev.Envelope.ID == broken:
			return retry.Permanently("hubspot", errors.New("400"))
		}
		return nil
	}, func(o *Options) { o.Sub = isub })
	guards, err := conn.JS.KeyValue(ctx, stream.Guards)
	if err != nil {
		t.Fatal(err)
	}
	statusOf := func(id string, seq uint64) (guard.Record, bool) {
		rec, ok, err := Status(ctx, conn.JS, guards, isub, id, seq)
		if err != nil {
			t.Fatal(err)
		}
		return rec, ok
	}
	waitFor(t, "every event settled", func() bool {
		rec, _ := statusOf(broken, 3)
		c, err := conn.JS.Consumer(ctx, stream.Events, isub.Durable)
		return err == nil && rec.Status == guard.DeadLetter && c.CachedInfo().AckFloor.Stream == 3
	})
	if _, ok, _ := guard.Status(ctx, guards, isub.Durable, plain); ok {
		t.Fatal("a first success wrote a guard record")
	}
	if rec, ok := statusOf(plain, 1); !ok || rec.Status != guard.Completed {
		t.Fatalf("the plain success: %+v %v", rec, ok)
	}
	if rec, ok, _ := guard.Status(ctx, guards, isub.Durable, flaky); !ok || rec.Status != guard.Completed || rec.Attempts != 2 {
		t.Fatalf("the success after a failure is recorded as %+v %v", rec, ok)
	}
	if n := brokertest.Count(t, conn, stream.DLQ); n != 1 {
		t.Fatalf("%d dead letters", n)
	}
	// Nothing of the plain success in the outcomes; no lease was ever taken.
	for _, o := range outcomesOf(t, conn, plain) {
		t.Fatalf("outcome of the plain success: %+v", o)
	}
	if n := brokertest.Count(t, conn, "KV_"+stream.ContactLocks); n != 0 {
		t.Fatalf("%d contact lease writes", n)
	}
	// Before its consumer's ack floor passes it, an event it holds no record of is
	// received (not attempted yet).
	if _, ok := statusOf("ev_not_yet", 4); ok {
		t.Fatal("an event past the ack floor is told done")
	}
}
