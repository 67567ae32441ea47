package privacy

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/projection"
	"exacto.dev/pkg/stream"
)

// Retained is what one application of a tenant's retention changed.
type Retained struct {
	Tenant string `json:"tenant"`
	// Compacted events were stored again without their raw payload and free texts;
	// Removed ones, which the projections do not need, erased.
	Compacted int `json:"compacted"`
	Removed   int `json:"removed"`
	// Waiting: events old enough, left for now because a consumer has not handled them.
	Waiting int `json:"waiting,omitempty"`
	// Deleted: quarantined deliveries and dead letters erased, by stream.
	Deleted map[string]int `json:"deleted,omitempty"`
}

// Retain applies tenant's retention at now: an event stored before now-payloads (0:
// never) is compacted (Compact); one stored before now-events (0: never) is removed if
// the projections do not need it (projection.Needs), else compacted; quarantined
// deliveries, dead letters and replays of dead letters stored before now-payloads are
// erased. An event a consumer has not handled yet is left for a later run. What goes
// is erased from disk as an erasure's (rewriteHistory), so a replay after it equals the
// live projection: the projector counted every compacted event's copy alike, and a
// removed event counted for nothing.
func Retain(ctx context.Context, js jetstream.JetStream, tenant string, payloads, events time.Duration, now time.Time) (Retained, error) {
	r := Retained{Tenant: tenant, Deleted: map[string]int{}}
	if payloads <= 0 && events <= 0 {
		return r, nil
	}
	handled, err := handledBy(ctx, js, stream.Events)
	if err != nil {
		return r, err
	}
	// A forgotten person's event the history still holds (one an erasure running now
	// has not reached) is compacted anonymized, never stored again in clear.
	forgotten, err := WatchForgotten(ctx, js)
	if err != nil {
		return r, err
	}
	older := func(t time.Time, age time.Duration) bool { return age > 0 && t.Before(now.Add(-age)) }
	if _, err := rewriteHistory(ctx, js, tenant, 0, 0, func(env *envelope.Envelope, md *jetstream.MsgMetadata, _ []byte) verdict {
		stored := env.ReceivedAt // a copy's own time is the rewrite's
		if stored.IsZero() {
			stored = md.Timestamp
		}
		if !older(stored, payloads) && !older(stored, events) {
			return keep
		}
		if !handled(env.StreamSubject(), md.Sequence.Stream) {
			r.Waiting++
			return keep
		}
		if older(stored, events) && !projection.Needs(*env) {
			r.Removed++
			return removed
		}
		anonymized := forgotten.Anonymize(env)
		if compacted := Compact(env); !compacted && !anonymized {
			return keep
		}
		r.Compacted++
		return rewritten
	}); err != nil {
		return r, err
	}
	if payloads <= 0 {
		return r, nil
	}
	for _, s := range []struct{ name, filter string }{
		{stream.Quarantine, "quarantine." + tenant + ".>"},
		{stream.DLQ, "dlq.*." + tenant + ".>"},
		{stream.Replays, "replay.*." + tenant + ".>"},
	} {
		st, err := js.Stream(ctx, s.name)
		if err != nil {
			return r, err
		}
		// A dead letter sent back to a consumer that has not taken it yet stays.
		sent, err := handledBy(ctx, js, stream.Replays)
		if err != nil {
			return r, err
		}
		if _, err := each(ctx, js, s.name, s.filter, 0, func(m jetstream.Msg) error {
			md, err := m.Metadata()
			if err != nil || !older(md.Timestamp, payloads) {
				return err
			}
			if s.name == stream.Replays && !sent(m.Subject(), md.Sequence.Stream) {
				return nil
			}
			if err := st.SecureDeleteMsg(ctx, md.Sequence.Stream); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
				return fmt.Errorf("erase %s %d: %w", s.name, md.Sequence.Stream, err)
			}
			r.Deleted[s.name]++
			return nil
		}); err != nil {
			return r, err
		}
	}
	return r, nil
}

// Compact removes env's raw payload and free texts (dropTexts) and keeps what the
// projections count. It reports whether env changed.
func Compact(env *envelope.Envelope) bool {
	if env.Compacted {
		return false
	}
	dropTexts(env)
	env.Compacted = true
	return true
}

// handledBy says whether every durable consumer of stream name that takes subject has
// handled the event at seq: its ack floor is past it, or it holds nothing at all. A
// consumer service that ran but is not bound now (its state in the server's memory,
// the server restarted) has handled what its checkpoint says, no more.
func handledBy(ctx context.Context, js jetstream.JetStream, name string) (func(subject string, seq uint64) bool, error) {
	st, err := js.Stream(ctx, name)
	if err != nil {
		return nil, err
	}
	type floor struct {
		takes stream.Subscription
		seq   uint64
	}
	var floors []floor
	bound := map[string]bool{}
	list := st.ListConsumers(ctx)
	for info := range list.Info() {
		if info.Config.Durable == "" {
			continue // an ordered reader's: it acts on nothing
		}
		bound[info.Config.Durable] = true
		f := floor{takes: stream.Subscription{Subjects: info.Config.FilterSubjects}, seq: info.AckFloor.Stream}
		if info.Config.FilterSubject != "" {
			f.takes.Subjects = append(f.takes.Subjects, info.Config.FilterSubject)
		}
		if len(f.takes.Subjects) == 0 {
			f.takes.Subjects = []string{">"}
		}
		if info.NumPending == 0 && info.NumAckPending == 0 {
			f.seq = math.MaxUint64
		}
		floors = append(floors, f)
	}
	if err := list.Err(); err != nil {
		return nil, err
	}
	if name == stream.Events {
		if kv, err := js.KeyValue(ctx, stream.ConsumerCheckpoints); err == nil {
			for _, sub := range stream.Subscriptions {
				if bound[sub.Durable] {
					continue
				}
				seq, err := stream.Checkpoint(ctx, kv, sub.Durable)
				if err != nil {
					return nil, err
				}
				if seq > 0 {
					floors = append(floors, floor{takes: sub, seq: seq})
				}
			}
		} else if !errors.Is(err, jetstream.ErrBucketNotFound) {
			return nil, err
		}
	}
	return func(subject string, seq uint64) bool {
		for _, f := range floors {
			if seq > f.seq && f.takes.Takes(subject) {
				return false
			}
		}
		return true
	}, nil
}
