package consumer

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/stream"
)

// Deriver stores derived events (a classification, a stop) on EXACTO_EVENTS, once:
// their ids are deterministic, the index of stored ids catches a republish after the
// duplicate window (a worker resumed after a crash), and Nats-Msg-Id one within it.
type Deriver struct {
	js    jetstream.JetStream
	index jetstream.KeyValue
}

// NewDeriver binds the index once, so publishing costs no lookup of the bucket.
func NewDeriver(ctx context.Context, js jetstream.JetStream) (*Deriver, error) {
	index, err := js.KeyValue(ctx, stream.EventIndex)
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", stream.EventIndex, err)
	}
	return &Deriver{js: js, index: index}, nil
}

// Publish stores env unless it is stored already.
func (d *Deriver) Publish(ctx context.Context, env envelope.Envelope) error {
	if stored, err := stream.Stored(ctx, d.index, env.ID); err != nil || stored {
		return err
	}
	msg, err := stream.EventMessage(ctx, env)
	if err != nil {
		return err
	}
	_, err = d.js.PublishMsg(ctx, msg, jetstream.WithExpectStream(stream.Events))
	return err
}
