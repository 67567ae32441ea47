package consumer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/stream"
)

// Pause stops delivery to a service's durable consumer until until (JetStream consumer
// pause): events are held in the stream, and on resume they drain at the consumer's
// own pace. Every replica pauses at once, since they share the consumer. The service's
// consumer of dead letters sent back to it (EXACTO_REPLAYS), when it has one, pauses
// with it: a paused worker makes no effect at all.
func Pause(ctx context.Context, js jetstream.JetStream, durable string, until time.Time) error {
	resp, err := js.PauseConsumer(ctx, stream.Events, durable, until)
	if err != nil {
		return fmt.Errorf("pause %s: %w", durable, err)
	}
	if !resp.Paused {
		return fmt.Errorf("pause %s: the server did not pause it (until %v is past?)", durable, until)
	}
	if _, err := js.PauseConsumer(ctx, stream.Replays, replays(durable), until); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("pause %s: %w (%s is paused until %s; resume it or pause again)", replays(durable), err, durable, until.Format(time.RFC3339))
	}
	return nil
}

// Resume resumes delivery to a paused consumer (and its replays).
func Resume(ctx context.Context, js jetstream.JetStream, durable string) error {
	if _, err := js.ResumeConsumer(ctx, stream.Events, durable); err != nil {
		return fmt.Errorf("resume %s: %w", durable, err)
	}
	if _, err := js.ResumeConsumer(ctx, stream.Replays, replays(durable)); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("resume %s: %w", replays(durable), err)
	}
	return nil
}

// replays is the durable of a service's replays (stream.Subscription.Replays).
func replays(durable string) string {
	return stream.Subscription{Durable: durable}.Replays().Durable
}
