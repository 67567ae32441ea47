package consumer

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/stream"
)

// PublishDerived stores a derived event (a classification, a stop) on EXACTO_EVENTS,
// once: its id is deterministic, the index of stored ids catches a republish after the
// duplicate window (a worker resumed after a crash), and Nats-Msg-Id catches one
// within it.
func PublishDerived(ctx context.Context, js jetstream.JetStream, env envelope.Envelope) error {
	index, err := js.KeyValue(ctx, stream.EventIndex)
	if err != nil {
		return err
	}
	if _, err := index.Get(ctx, env.ID); err == nil {
		return nil // already stored
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("index lookup: %w", err)
	}
	msg, err := stream.EventMessage(ctx, env)
	if err != nil {
		return err
	}
	_, err = js.PublishMsg(ctx, msg, jetstream.WithExpectStream(stream.Events))
	return err
}
