package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
// subscription records an event its handler does nothing with, so past its consumer's
// ack floor an event it holds no record of — or, idempotent, a failure record since
// followed by a success — is completed; above the floor (held by an event still being
// retried) one whose derived event an idempotent subscription stored is completed too.
// A record reset for a replay from the DLQ (its key deleted) is received wherever the
// floor is. sub must take the event (Statuses.OfEvent asks).
func Status(ctx context.Context, js jetstream.JetStream, guards jetstream.KeyValue, sub stream.Subscription, tenant, id string, seq uint64) (guard.Record, bool, error) {
	return NewStatuses(js, guards).Of(ctx, sub, tenant, id, seq)
}

// Statuses tells the statuses of many events (a page of a list), asking for each
// consumer's ack floor once.
type Statuses struct {
	js     jetstream.JetStream
	guards jetstream.KeyValue
	store  jetstream.Stream        // the guards bucket's stream, once asked
	seqs   map[string]consumerSeqs // by durable; absent: not asked yet
	index  jetstream.KeyValue      // the event index, once asked
}

// consumerSeqs are a consumer's ack floor and the last stream sequence it delivered.
type consumerSeqs struct{ floor, delivered uint64 }

// NewStatuses reads guard records from guards and ack floors from js.
func NewStatuses(js jetstream.JetStream, guards jetstream.KeyValue) *Statuses {
	return &Statuses{js: js, guards: guards, seqs: map[string]consumerSeqs{}}
}

// seqsOf are sub's consumer's sequences, asked once (zero when it is not bound now).
func (s *Statuses) seqsOf(ctx context.Context, sub stream.Subscription) consumerSeqs {
	cs, asked := s.seqs[sub.Durable]
	if !asked {
		if c, err := s.js.Consumer(ctx, sub.StreamName(), sub.Durable); err == nil {
			info := c.CachedInfo()
			cs = consumerSeqs{info.AckFloor.Stream, info.Delivered.Stream}
		}
		s.seqs[sub.Durable] = cs
	}
	return cs
}

// record is consumer name's guard record of id (ok false when there is none), and
// whether its key was deleted: a record reset for a replay from the DLQ. One read, as
// guard.Status's, of the key's last message, which a delete leaves as a marker.
func (s *Statuses) record(ctx context.Context, name, id string) (rec guard.Record, ok, reset bool, err error) {
	if s.store == nil {
		if s.store, err = s.js.Stream(ctx, "KV_"+s.guards.Bucket()); err != nil {
			return rec, false, false, err
		}
	}
	key := guard.Key(name, id)
	m, err := s.store.GetLastMsgForSubject(ctx, "$KV."+s.guards.Bucket()+"."+key)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return rec, false, false, nil
	}
	if err != nil {
		return rec, false, false, err
	}
	if op := m.Header.Get("KV-Operation"); op == "DEL" || op == "PURGE" {
		return rec, false, true, nil
	}
	if err := json.Unmarshal(m.Data, &rec); err != nil {
		return rec, false, false, fmt.Errorf("guard record %s: %w", key, err)
	}
	return rec, true, false, nil
}

// Of is Status, the consumer's ack floor read once per Statuses.
func (s *Statuses) Of(ctx context.Context, sub stream.Subscription, tenant, id string, seq uint64) (guard.Record, bool, error) {
	rec, ok, _, err := s.of(ctx, sub, tenant, id, seq)
	return rec, ok, err
}

// of is Of, and whether the record was reset.
func (s *Statuses) of(ctx context.Context, sub stream.Subscription, tenant, id string, seq uint64) (rec guard.Record, ok, reset bool, err error) {
	rec, ok, reset, err = s.record(ctx, sub.Name(), id)
	if err != nil || reset || rec.Status == guard.Completed || rec.Status == guard.DeadLetter || (ok && !sub.Idempotent) {
		return rec, ok, reset, err
	}
	done := seq > 0 && seq <= s.seqsOf(ctx, sub).floor
	if !done && !ok && sub.Idempotent {
		if done, err = s.derived(ctx, sub, tenant, id); err != nil {
			return rec, ok, false, err
		}
	}
	if done {
		rec.Status, rec.LeaseUntil, rec.NextAttemptAt, rec.LastError = guard.Completed, time.Time{}, time.Time{}, ""
		return rec, true, false, nil
	}
	return rec, ok, false, nil
}

// OfEvent is Of for env, which sub must take (else: received). An event the handler
// does nothing with (by the Acts its service declared in this binary: DeclareActs), or
// one an erasure rewrote that sub leaves alone, has no guard record: it is completed
// once the consumer delivered it (such an attempt ends at once, without a call to
// anyone), before the ack floor passes it.
func (s *Statuses) OfEvent(ctx context.Context, sub stream.Subscription, env envelope.Envelope, seq uint64) (guard.Record, bool, error) {
	if !sub.Takes(env.StreamSubject()) {
		return guard.Record{}, false, nil
	}
	rec, ok, reset, err := s.of(ctx, sub, env.Tenant, env.ID, seq)
	if err != nil || ok || reset || sub.Idempotent {
		return rec, ok, err
	}
	if !leavesAlone(sub, env) {
		f, declared := acts.Load(sub.Name())
		if !declared || f.(func(envelope.Envelope) bool)(env) {
			return rec, ok, nil
		}
	}
	if seq > 0 && seq <= s.seqsOf(ctx, sub).delivered {
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
