package consumer

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/guard"
	"exacto.dev/pkg/stream"
)

// Status is what sub's service has done with event id, stored at stream sequence
// seq: its guard record, ok false when it has none (received: not attempted yet). An
// idempotent subscription records only what is not plain success, so past its
// consumer's ack floor an event it holds no record of — or a failure record since
// followed by a success — is completed.
func Status(ctx context.Context, js jetstream.JetStream, guards jetstream.KeyValue, sub stream.Subscription, id string, seq uint64) (guard.Record, bool, error) {
	rec, ok, err := guard.Status(ctx, guards, sub.Name(), id)
	if err != nil || !sub.Idempotent || rec.Status == guard.Completed || rec.Status == guard.DeadLetter {
		return rec, ok, err
	}
	c, err := js.Consumer(ctx, sub.StreamName(), sub.Durable)
	if err != nil {
		return rec, ok, nil // not bound now: the record is all there is to tell
	}
	if seq > 0 && seq <= c.CachedInfo().AckFloor.Stream {
		rec.Status, rec.LeaseUntil, rec.NextAttemptAt, rec.LastError = guard.Completed, time.Time{}, time.Time{}, ""
		return rec, true, nil
	}
	return rec, ok, nil
}
