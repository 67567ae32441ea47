package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/stream"
)

// HistoryScanned bounds how many outcomes History reads: an old event's outcomes may
// lie among many others of its tenant, provider and type.
const HistoryScanned = 20000

// History is what every consumer did with env, attempt by attempt (completed, failed
// and retried, dead-lettered; not the starts, which are not published), oldest first:
// the outcomes of its tenant, provider and type stored since it was (stored). Cut is
// true when HistoryScanned outcomes were read before the stream's end.
func History(ctx context.Context, js jetstream.JetStream, env envelope.Envelope, stored time.Time) (out []Outcome, cut bool, err error) {
	st, err := js.Stream(ctx, stream.Outcomes)
	if err != nil {
		return nil, false, err
	}
	from := stored.Add(-time.Second) // the clocks of one server; a second of slack
	scanned := 0
	err = stream.Scan(ctx, st, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{stream.OutcomeSubject("*", token(env.Tenant), token(env.Provider), token(env.Type))},
		DeliverPolicy:  jetstream.DeliverByStartTimePolicy, OptStartTime: &from,
	}, func(m jetstream.Msg) error {
		if scanned++; scanned > HistoryScanned {
			cut = true
			return errHistoryCut
		}
		var o Outcome
		if json.Unmarshal(m.Data(), &o) == nil && o.EventID == env.ID {
			out = append(out, o)
		}
		return nil
	})
	if errors.Is(err, errHistoryCut) {
		err = nil
	}
	return out, cut, err
}

var errHistoryCut = errors.New("history cut")
