package consumer

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/guard"
	"exacto.dev/pkg/stream"
)

// Status is what sub's service has done with tenant's event id, stored at stream
// sequence seq: its guard record, ok false when it has none (received: not attempted
// yet). An idempotent subscription records only what is not plain success, and no
// subscription records the events its handler does nothing with (Options.Acts), so
// past its consumer's ack floor an event it holds no record of — or, idempotent, a
// failure record since followed by a success — is completed; above the floor (held by
// an event still being retried) one whose derived event an idempotent subscription
// stored is completed too, and so is one that Statuses.OfEvent knows the handler does
// nothing with.
func Status(ctx context.Context, js jetstream.JetStream, guards jetstream.KeyValue, sub stream.Subscription, tenant, id string, seq uint64) (guard.Record, bool, error) {
	return NewStatuses(js, guards).Of(ctx, sub, tenant, id, seq)
}

// Statuses tells the statuses of many events (a page of a list), asking for each
// consumer's ack floor once.
type Statuses struct {
	js     jetstream.JetStream
	guards jetstream.KeyValue
	floors map[string]uint64  // by durable; absent: not asked yet
	index  jetstream.KeyValue // the event index, once asked
}

// NewStatuses reads guard records from guards and ack floors from js.
func NewStatuses(js jetstream.JetStream, guards jetstream.KeyValue) *Statuses {
	return &Statuses{js: js, guards: guards, floors: map[string]uint64{}}
}

// Of is Status, the consumer's ack floor read once per Statuses.
func (s *Statuses) Of(ctx context.Context, sub stream.Subscription, tenant, id string, seq uint64) (guard.Record, bool, error) {
	rec, ok, err := guard.Status(ctx, s.guards, sub.Name(), id)
	if err != nil || (!sub.Idempotent && ok) || rec.Status == guard.Completed || rec.Status == guard.DeadLetter {
		return rec, ok, err
	}
	floor, asked := s.floors[sub.Durable]
	if !asked {
		if c, err := s.js.Consumer(ctx, sub.StreamName(), sub.Durable); err == nil {
			floor = c.CachedInfo().AckFloor.Stream
		} // not bound now: the record is all there is to tell (floor 0)
		s.floors[sub.Durable] = floor
	}
	done := seq > 0 && seq <= floor
	if !done && !ok && sub.Idempotent {
		if done, err = s.derived(ctx, sub, tenant, id); err != nil {
			return rec, ok, err
		}
	}
	if done {
		rec.Status, rec.LeaseUntil, rec.NextAttemptAt, rec.LastError = guard.Completed, time.Time{}, time.Time{}, ""
		return rec, true, nil
	}
	return rec, ok, nil
}

// OfEvent is Of for env, completed at once where the handler declared (DeclareActs)
// that it does nothing with env: such an event has no guard record.
func (s *Statuses) OfEvent(ctx context.Context, sub stream.Subscription, env envelope.Envelope, seq uint64) (guard.Record, bool, error) {
	rec, ok, err := s.Of(ctx, sub, env.Tenant, env.ID, seq)
	if err != nil || ok {
		return rec, ok, err
	}
	if f, declared := acts.Load(sub.Name()); declared && !f.(func(envelope.Envelope) bool)(env) {
		return guard.Record{Status: guard.Completed}, true, nil
	}
	return rec, ok, nil
}

// acts are the services' Options.Acts by consumer name (DeclareActs), for OfEvent.
var acts sync.Map

// DeclareActs tells OfEvent which events consumer name's handler acts on (the Options.Acts
// its service runs with): a service's package declares it when it is linked in, so
// that whatever shows statuses in the same binary (the console, `exacto events show`)
// knows it without running the service.
func DeclareActs(name string, f func(envelope.Envelope) bool) { acts.Store(name, f) }

// derived says whether sub's service stored the event it derives from tenant's event
// id: its effect, made.
func (s *Statuses) derived(ctx context.Context, sub stream.Subscription, tenant, id string) (bool, error) {
	for _, d := range stream.Derivations {
		if d.Worker != sub.Durable || d.Type == "" {
			continue
		}
		if s.index == nil {
			kv, err := s.js.KeyValue(ctx, stream.EventIndex)
			if err != nil {
				return false, err
			}
			s.index = kv
		}
		_, err := s.index.Get(ctx, stream.DerivedID(tenant, d.Worker, d.Type, id))
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, jetstream.ErrKeyNotFound) {
			return false, err
		}
	}
	return false, nil
}
