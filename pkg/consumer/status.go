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
	return NewStatuses(js, guards).Of(ctx, sub, id, seq)
}

// Statuses tells the statuses of many events (a page of a list), asking for each
// consumer's ack floor once.
type Statuses struct {
	js     jetstream.JetStream
	guards jetstream.KeyValue
	floors map[string]uint64 // by durable; absent: not asked yet
}

// NewStatuses reads guard records from guards and ack floors from js.
func NewStatuses(js jetstream.JetStream, guards jetstream.KeyValue) *Statuses {
	return &Statuses{js: js, guards: guards, floors: map[string]uint64{}}
}

// Of is Status, the consumer's ack floor read once per Statuses.
func (s *Statuses) Of(ctx context.Context, sub stream.Subscription, id string, seq uint64) (guard.Record, bool, error) {
	rec, ok, err := guard.Status(ctx, s.guards, sub.Name(), id)
	if err != nil || !sub.Idempotent || rec.Status == guard.Completed || rec.Status == guard.DeadLetter {
		return rec, ok, err
	}
	floor, asked := s.floors[sub.Durable]
	if !asked {
		if c, err := s.js.Consumer(ctx, sub.StreamName(), sub.Durable); err == nil {
			floor = c.CachedInfo().AckFloor.Stream
		} // not bound now: the record is all there is to tell (floor 0)
		s.floors[sub.Durable] = floor
	}
	if seq > 0 && seq <= floor {
		rec.Status, rec.LeaseUntil, rec.NextAttemptAt, rec.LastError = guard.Completed, time.Time{}, time.Time{}, ""
		return rec, true, nil
	}
	return rec, ok, nil
}
