package consumer

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/stream"
)

// Pause stops delivery to a service's durable consumer until until (JetStream consumer
// pause): events are held in the stream, and on resume they drain at the consumer's
// own pace. Every replica pauses at once, since they share the consumer.
func Pause(ctx context.Context, js jetstream.JetStream, durable string, until time.Time) error {
	resp, err := js.PauseConsumer(ctx, stream.Events, durable, until)
	if err != nil {
		return fmt.Errorf("pause %s: %w", durable, err)
	}
	if !resp.Paused {
		return fmt.Errorf("pause %s: the server did not pause it (until %v is past?)", durable, until)
	}
	return nil
}

// Resume resumes delivery to a paused consumer.
func Resume(ctx context.Context, js jetstream.JetStream, durable string) error {
	if _, err := js.ResumeConsumer(ctx, stream.Events, durable); err != nil {
		return fmt.Errorf("resume %s: %w", durable, err)
	}
	return nil
}
